"""Hostile input: every one must end in a typed outcome, in bounded time, never a crash or a hang.

A policy under training emits whatever it emits, and tool schemas come from datasets nobody
audited. The contract core is the layer that must not fall over on either: an exception kills a
rollout worker, a hang stalls a whole batch, and a silently accepted bad value reaches the
executor. Each test below feeds one kind of hostile input and pins the typed outcome.

Timing asserts appear only as hang detectors with generous bounds (seconds where milliseconds are
expected); they are not performance targets. Inputs that hang in-process are run in a child
process with a timeout, so a regression fails the test instead of stalling the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from contractrl.errors import SchemaCompileError
from contractrl.validators import (
    AbstainAction,
    Budgets,
    Code,
    InvalidAction,
    ParseLimits,
    RefusalAction,
    RepairContract,
    Verifier,
    compile_schema,
    normalize_schema,
    parse_action,
    parse_json_text,
    parse_response,
)

ROOT = Path(__file__).resolve().parents[1]
HANG_S = 10.0  # hang detector only, in CPU seconds (wall time flakes under load): inputs take milliseconds

SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["a"],
    "additionalProperties": False,
}
BIG = "x" * 10_000_000  # 10 MB, ten times ParseLimits().max_bytes


def env(backend: str = "rs", limits: ParseLimits | None = None) -> RepairContract:
    verifier = Verifier.build(SCHEMA, backend=backend, limits=limits or ParseLimits())
    return RepairContract(verifier, Budgets(max_attempts=3, max_ops=4))


def start(contract: RepairContract) -> Any:
    state = contract.initial_state({"a": 1})  # wrong type: a repair episode is open
    assert not state.done
    return state


def assert_rejected_untouched(contract: RepairContract, text: str | bytes, expected: Code) -> None:
    """step gives ``expected``, spends one attempt, no operations, and leaves the candidate as it was."""
    state = start(contract)
    began = time.process_time()
    result = contract.step(state, text)
    assert time.process_time() - began < HANG_S
    assert result.outcome is expected, result.record.message
    assert result.accepted_object is None and result.patched is None
    assert result.state.candidate is state.candidate and state.candidate == {"a": 1}
    assert result.state.attempts_left == state.attempts_left - 1
    assert result.state.ops_left == state.ops_left
    assert isinstance(result.record.raw, str)


def run_isolated(code: str, timeout: float) -> str:
    """Run ``code`` in a fresh interpreter; a timeout means the input hung (the child is killed)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, cwd=ROOT
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"hang: no answer within {timeout} s")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


# --------------------------------------------------------------------------------------------
# Operation budget
# --------------------------------------------------------------------------------------------


def test_100k_operations_exceed_the_budget_with_one_length_check() -> None:
    """100,000 operations cost one length check, not 100,000 parses (patch.py's promise)."""
    text = "[" + ",".join(["{}"] * 100_000) + "]"  # 300 KB: under the byte limit, far over the op budget
    action = parse_action(text, max_ops=2)
    assert isinstance(action, InvalidAction)
    assert action.code is Code.OP_BUDGET_EXCEEDED
    assert action.op_index is None
    assert_rejected_untouched(env(), text, Code.OP_BUDGET_EXCEEDED)
    assert_rejected_untouched(env(), text.encode(), Code.OP_BUDGET_EXCEEDED)


def test_100k_real_operations() -> None:
    """Real operations are 3.2 MB: over the default byte limit, and over budget with a larger limit."""
    text = json.dumps([{"op": "replace", "path": "/a", "value": "b"}] * 100_000)
    action = parse_action(text, max_ops=2)
    assert isinstance(action, InvalidAction) and action.code is Code.TOO_LARGE
    assert_rejected_untouched(env(), text, Code.TOO_LARGE)
    assert_rejected_untouched(env(limits=ParseLimits(max_bytes=10_000_000)), text, Code.OP_BUDGET_EXCEEDED)


# --------------------------------------------------------------------------------------------
# Size
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
def test_10mb_string_in_a_call_is_too_large(as_bytes: bool) -> None:
    """A 10 MB argument is refused before parsing, and the report does not carry 10 MB along."""
    text: str | bytes = json.dumps({"a": BIG})
    if as_bytes:
        text = text.encode()
    assert parse_json_text(text).code is Code.TOO_LARGE
    assert parse_response(text).code is Code.TOO_LARGE
    for backend in ("rs", "python"):
        report, value = Verifier.build(SCHEMA, backend=backend).verify_text(text)
        assert value is None
        assert report.codes == (Code.TOO_LARGE,)
        assert len(json.dumps(report.to_dict())) < 10_000


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
def test_10mb_string_in_a_patch_is_too_large(as_bytes: bool) -> None:
    text: str | bytes = json.dumps([{"op": "replace", "path": "/a", "value": BIG}])
    if as_bytes:
        text = text.encode()
    action = parse_action(text, max_ops=2)
    assert isinstance(action, InvalidAction) and action.code is Code.TOO_LARGE
    assert_rejected_untouched(env(), text, Code.TOO_LARGE)


def test_10mb_abstain_is_too_large_not_abstain() -> None:
    """The ABSTAIN/refusal regexes are not run on oversized text (they would be the slow path)."""
    assert_rejected_untouched(env(), "ABSTAIN: " + BIG, Code.TOO_LARGE)
    assert_rejected_untouched(env(), "I'm sorry, " + BIG, Code.TOO_LARGE)


def test_10mb_of_invalid_utf8_is_too_large() -> None:
    """The byte limit applies before decoding, so garbage costs no decode."""
    assert_rejected_untouched(env(), b"\xff" * 10_000_000, Code.TOO_LARGE)


# --------------------------------------------------------------------------------------------
# Depth
# --------------------------------------------------------------------------------------------

DEEP_LIST = "[" * 10_000 + "]" * 10_000
DEEP_OBJECT = '{"a":' * 10_000 + "1" + "}" * 10_000
DEEP = [
    pytest.param(DEEP_LIST, id="list"),
    pytest.param(DEEP_OBJECT, id="object"),
    pytest.param(DEEP_LIST.encode(), id="list-bytes"),
    pytest.param(DEEP_OBJECT.encode(), id="object-bytes"),
    pytest.param("[" * 999_999, id="unclosed-1M"),
    pytest.param('[{"op":"replace","path":"/a","value":' + DEEP_LIST + "}]", id="inside-a-patch"),
    pytest.param('["' + "[" * 100 + '", ' + "[" * 65 + "]" * 65 + "]", id="deep-with-brackets-in-strings"),
]


@pytest.mark.parametrize("text", DEEP)
def test_deep_nesting_is_too_deep(text: str | bytes) -> None:
    """The stdlib parser would recurse until RecursionError (or worse); the bound is checked first."""
    began = time.process_time()
    assert parse_json_text(text).code is Code.TOO_DEEP
    assert time.process_time() - began < HANG_S
    action = parse_action(text, max_ops=2)
    assert isinstance(action, InvalidAction) and action.code is Code.TOO_DEEP
    report, value = Verifier.build(SCHEMA).verify_text(text)
    assert value is None and report.codes == (Code.TOO_DEEP,)
    assert_rejected_untouched(env(), text, Code.TOO_DEEP)


def test_nesting_at_the_limit_is_accepted() -> None:
    """64 levels is allowed by default; 65 is not (the bound is exact, not approximate)."""
    assert parse_json_text("[" * 64 + "]" * 64).code is Code.ACCEPTED
    assert parse_json_text("[" * 65 + "]" * 65).code is Code.TOO_DEEP
    # brackets inside strings are text, not nesting
    assert parse_json_text('["' + "[" * 100 + '", "' + "{" * 100 + '"]').code is Code.ACCEPTED


# --------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------

INVALID_UTF8 = [
    pytest.param(b'{"a": "\xff"}', id="0xff"),
    pytest.param(b'{"a": "\xe2\x82"}', id="truncated-multibyte"),
    pytest.param(b'{"a": "\xc0\xaf"}', id="overlong"),
    pytest.param(b'{"a": "\xed\xa0\x80"}', id="cesu-surrogate"),
    pytest.param(b'{"a": "\xf4\x90\x80\x80"}', id="above-u10ffff"),
    pytest.param(b"\x80", id="lone-continuation"),
]


@pytest.mark.parametrize("raw", INVALID_UTF8)
def test_invalid_utf8_is_malformed(raw: bytes) -> None:
    """Undecodable bytes are malformed JSON, and the ledger keeps them visibly escaped."""
    parsed = parse_json_text(raw)
    assert parsed.code is Code.MALFORMED_JSON
    assert "\\x" in parsed.raw
    report, value = Verifier.build(SCHEMA).verify_text(raw)
    assert value is None and report.codes == (Code.MALFORMED_JSON,)
    patch = b'[{"op": "replace", "path": "/a", "value": "' + raw + b'"}]'
    assert_rejected_untouched(env(), patch, Code.MALFORMED_JSON)


LONE_SURROGATE_ESCAPES = [
    pytest.param('"\\ud800"', id="high"),
    pytest.param('"\\udc00"', id="low"),
    pytest.param('"\\uDBFF x"', id="high-upper-case"),
    pytest.param('"\\ud800\\u0041"', id="high-then-not-low"),
    pytest.param('{"\\ud800": 1}', id="in-a-key"),
    pytest.param('["ok", ["\\udfff"]]', id="nested"),
]


@pytest.mark.parametrize("value", LONE_SURROGATE_ESCAPES)
@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
def test_lone_surrogate_escape_is_malformed(value: str, as_bytes: bool) -> None:
    """``\\ud800`` parses in the stdlib but is no Unicode text: it cannot be encoded downstream."""
    text = '[{"op": "replace", "path": "/a", "value": ' + value + "}]"
    raw: str | bytes = text.encode() if as_bytes else text
    inner: str | bytes = value.encode() if as_bytes else value
    assert parse_json_text(inner).code is Code.MALFORMED_JSON
    assert_rejected_untouched(env(), raw, Code.MALFORMED_JSON)


def test_paired_surrogate_escape_is_accepted() -> None:
    """A proper UTF-16 pair is one character and must stay accepted."""
    contract = env()
    result = contract.step(start(contract), '[{"op": "replace", "path": "/a", "value": "\\ud83d\\ude00"}]')
    assert result.outcome is Code.ACCEPTED
    assert result.accepted_object == {"a": "\U0001f600"}


RAW_LONE_SURROGATES = [
    pytest.param('[{"op": "replace", "path": "/a", "value": "\ud800"}]', id="in-a-value"),
    pytest.param('[{"op": "add", "path": "/\ud800", "value": 1}]', id="as-a-new-key"),
    pytest.param(
        '[{"op": "replace", "path": "/a", "value": "ok"}, {"op": "add", "path": "/\udc00", "value": 1}]', id="second-op"
    ),
]


def test_raw_lone_surrogate_in_str_text_is_malformed() -> None:
    """BUG: a lone surrogate passed as a *character* of a str (not as a ``\\u`` escape) is accepted.

    parse_json_text only looks for unpaired surrogates when the text contains a ``\\uD8..`` escape,
    so ``'"\\ud800"'`` written with a real U+D800 code point parses to an unencodable string, which
    the escaped form correctly refuses as malformed_json.
    """
    assert parse_json_text('"\\ud800"').code is Code.MALFORMED_JSON  # the escape: refused
    assert parse_json_text('"\ud800"').code is Code.MALFORMED_JSON  # the character: accepted today
    assert parse_json_text('{"\udc00": 1}').code is Code.MALFORMED_JSON


@pytest.mark.parametrize("backend", ["rs", "python"])
@pytest.mark.parametrize("text", RAW_LONE_SURROGATES)
def test_raw_lone_surrogate_in_a_patch_is_refused_by_step(text: str, backend: str) -> None:
    """BUG: the same through step(): a crash (rs backend, surrogate key) or an unencodable acceptance.

    With the rs backend, a surrogate object key makes jsonschema-rs raise UnicodeEncodeError out of
    step() (via Verifier.verify -> CompiledSchema.errors). As a value, it is returned as
    ``accepted_object``, which cannot be written as UTF-8 or hashed (sha256_json raises).
    """
    assert_rejected_untouched(env(backend), text, Code.MALFORMED_JSON)


# --------------------------------------------------------------------------------------------
# Numbers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("number", ["9" * 5000, "-" + "9" * 5000], ids=["positive", "negative"])
def test_5000_digit_integer_is_too_large(number: str) -> None:
    """int() refuses more than 4300 digits with ValueError; that must become a typed outcome."""
    assert parse_json_text(number).code is Code.TOO_LARGE
    report, value = Verifier.build(SCHEMA).verify_text('{"a": "x", "n": ' + number + "}")
    assert value is None and report.codes == (Code.TOO_LARGE,)
    assert_rejected_untouched(env(), '[{"op": "replace", "path": "/a", "value": ' + number + "}]", Code.TOO_LARGE)


def test_5000_digit_float_overflows_to_non_finite() -> None:
    assert parse_json_text("9" * 5000 + ".5").code is Code.NON_FINITE_NUMBER
    # long but exact is a number; long and rounded (to 1.0, which would pass {"minimum": 1}) is not
    assert parse_json_text("0.5" + "0" * 5000).value == 0.5
    rounded = parse_json_text("0." + "9" * 5000)
    assert rounded.code is Code.NON_FINITE_NUMBER and "rounded to 1.0" in rounded.message


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1E+400", "123e99999"])
def test_non_finite_numbers_are_refused(number: str) -> None:
    """The stdlib accepts NaN/Infinity and turns 1e400 into inf; none of them is a JSON number."""
    assert parse_json_text(number).code is Code.NON_FINITE_NUMBER
    for backend in ("rs", "python"):
        report, value = Verifier.build(SCHEMA, backend=backend).verify_text('{"a": "x", "n": ' + number + "}")
        assert value is None and report.codes == (Code.NON_FINITE_NUMBER,)
    assert_rejected_untouched(env(), '[{"op": "replace", "path": "/a", "value": ' + number + "}]", Code.NON_FINITE_NUMBER)


def test_big_but_finite_numbers_verify_on_both_backends() -> None:
    """30-digit integers and 1e308 are valid JSON numbers; both backends must judge them alike."""
    schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 10**40}, "x": {"type": "number"}}}
    for instance in ({"n": 10**30, "x": 1e308}, {"n": -(10**30), "x": -1e308}, {"n": 10**41}, {"n": 1.5}):
        reports = [Verifier.build(schema, backend=b).verify(instance).to_dict() for b in ("rs", "python")]
        assert reports[0] == reports[1]


# --------------------------------------------------------------------------------------------
# Hostile schemas
# --------------------------------------------------------------------------------------------


def _nested_schema(depth: int, keyword: str = "properties") -> dict[str, Any]:
    node: dict[str, Any] = {"type": "object"}
    for _ in range(depth):
        node = {"properties": {"a": node}} if keyword == "properties" else {keyword: node}
    return node


def _both_refuse(schema: Any) -> None:
    with pytest.raises(SchemaCompileError):
        normalize_schema(schema)
    for backend in ("rs", "python"):
        with pytest.raises(SchemaCompileError):
            compile_schema(schema, backend)
        with pytest.raises(SchemaCompileError):
            Verifier.build(schema, backend=backend)


OVERSIZED = [
    pytest.param({"enum": ["x" * 100] * 30_000}, id="3MB-enum"),
    pytest.param({"description": "x" * 3_000_000}, id="3MB-description"),
    pytest.param({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(25_000)}}, id="25k-properties"),
    pytest.param({"anyOf": [{"type": "string"}] * 25_000}, id="25k-anyOf"),
    pytest.param(_nested_schema(100), id="100-deep"),
    pytest.param(_nested_schema(10_000), id="10000-deep-properties"),
    pytest.param(_nested_schema(10_000, "not"), id="10000-deep-not"),
    pytest.param(_nested_schema(10_000, "items"), id="10000-deep-items"),
    pytest.param({"minimum": float("inf")}, id="inf-bound"),
    pytest.param({"minimum": float("nan")}, id="nan-bound"),
]


@pytest.mark.parametrize("schema", OVERSIZED)
def test_oversized_or_degenerate_schemas_are_refused(schema: dict[str, Any]) -> None:
    """A schema over the limits is a SchemaCompileError, checked before any backend compiles it."""
    began = time.process_time()
    _both_refuse(schema)
    assert time.process_time() - began < HANG_S


def test_schema_with_a_10000_deep_const_is_refused() -> None:
    """Value keywords are not subschemas, but they are still part of the document that is bounded."""
    deep: Any = 1
    for _ in range(10_000):
        deep = [deep]
    _both_refuse({"const": deep})


REF_LOOPS = [
    pytest.param({"$ref": "#"}, id="self"),
    pytest.param(
        {"$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"},
        id="two-node-allOf",
    ),
    pytest.param({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, id="ref-to-ref"),
    pytest.param({"anyOf": [{"type": "null"}, {"$ref": "#"}]}, id="anyOf-self"),
    pytest.param({"not": {"$ref": "#"}}, id="not-self"),
    pytest.param({"if": {"$ref": "#"}, "then": {}}, id="if-self"),
    pytest.param({"dependentSchemas": {"k": {"$ref": "#"}}}, id="dependentSchemas-self"),
    pytest.param({"definitions": {"a": {"oneOf": [{"$ref": "#/definitions/a"}]}}, "$ref": "#/definitions/a"}, id="draft07-oneOf"),
    pytest.param({"$ref": "#/$defs/missing"}, id="dangling"),
    pytest.param({"$ref": "http://example.com/schema.json"}, id="remote"),
]


@pytest.mark.parametrize("schema", REF_LOOPS)
def test_ref_loops_and_bad_refs_are_refused(schema: dict[str, Any]) -> None:
    """A $ref cycle that re-checks the same instance never terminates in a backend: refuse it."""
    _both_refuse(schema)


def _ref_chain(length: int) -> dict[str, Any]:
    defs: dict[str, Any] = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(length)}
    defs[f"d{length}"] = {"type": "integer"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def test_long_ref_chain_is_refused_or_compiled_not_a_recursion_error() -> None:
    """BUG: a 2000-link chain of $refs (4,001 subschemas, well under max_nodes) raises RecursionError.

    _check_refs/_find_cycle follow each $ref by recursion, so the chain length, not the nesting
    depth that SchemaLimits bounds, sets the Python stack depth. Expected: SchemaCompileError (or a
    compiled schema); actual: RecursionError from contractrl/validators/pointer.py via _find_cycle.
    """
    schema = _ref_chain(2000)
    try:
        compiled = compile_schema(schema, "rs")
    except SchemaCompileError:
        return
    assert compiled.is_valid(1)


def test_ref_chain_on_the_python_backend_verifies_or_is_refused() -> None:
    """BUG: a 700-link $ref chain compiles for the python backend, then verify() raises RecursionError.

    python-jsonschema resolves each $ref recursively while validating. A schema the compiler accepts
    must be usable; the fail-closed fix is a bound on $ref chain length at compile time.
    """
    schema = _ref_chain(700)
    try:
        verifier = Verifier.build(schema, backend="python")
    except SchemaCompileError:
        return
    assert verifier.verify(1).accepted
    assert verifier.verify("x").codes == (Code.WRONG_TYPE,)


TREE = {
    "type": "object",
    "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#"}}},
    "required": ["value"],
    "additionalProperties": False,
}


def _tree(depth: int, leaf_value: Any = 0) -> dict[str, Any]:
    node: dict[str, Any] = {"value": leaf_value}
    for level in range(depth):
        node = {"value": level, "children": [{"value": -1}, node]}
    return node


@pytest.mark.parametrize("backend", ["rs", "python"])
def test_recursive_tree_schema_compiles_and_validates(backend: str) -> None:
    """Recursion through `properties`/`items` makes progress into the instance: it is legitimate."""
    verifier = Verifier.build(TREE, backend=backend)
    assert verifier.verify(_tree(30)).accepted
    report = verifier.verify(_tree(30, leaf_value="bad"))
    assert report.codes == (Code.WRONG_TYPE,)
    assert report.primary is not None and report.primary.pointer == "/children/1" * 30 + "/value"
    # the same through the strict parser: 30 levels of object+array is 61 deep, under the limit of 64
    text_report, value = verifier.verify_text(json.dumps(_tree(30)))
    assert text_report.accepted and value == _tree(30)


def test_recursive_tree_reports_agree_across_backends() -> None:
    bad = _tree(20, leaf_value="bad")
    bad["extra"] = 1
    reports = [Verifier.build(TREE, backend=b).verify(bad).to_dict() for b in ("rs", "python")]
    assert reports[0] == reports[1]


# --------------------------------------------------------------------------------------------
# Large but allowed
# --------------------------------------------------------------------------------------------

ARRAY_SCHEMA = {"type": "array", "items": {"type": "integer", "minimum": 0}}


@pytest.mark.parametrize("backend", ["rs", "python"])
def test_50k_element_array_is_verified(backend: str) -> None:
    """Big is not hostile: a 50,000-element array within the byte limit is simply verified."""
    verifier = Verifier.build(ARRAY_SCHEMA, backend=backend)
    began = time.process_time()
    assert verifier.verify(list(range(50_000))).accepted
    text = json.dumps(list(range(50_000)))
    assert len(text) < ParseLimits().max_bytes
    report, value = verifier.verify_text(text)
    assert report.accepted and value == list(range(50_000))
    assert time.process_time() - began < HANG_S


def test_50k_errors_are_all_reported_in_bounded_time() -> None:
    """Every element wrong: 50,000 typed errors, sorted by pointer, each with a short `actual`."""
    began = time.process_time()
    report = Verifier.build(ARRAY_SCHEMA).verify([-1] * 50_000)
    assert time.process_time() - began < 3 * HANG_S
    assert len(report.errors) == 50_000
    assert {e.code for e in report.errors} == {Code.OUT_OF_RANGE}
    assert [e.pointer for e in report.errors] == sorted(f"/{i}" for i in range(50_000))


def test_huge_string_value_in_a_report_is_truncated() -> None:
    """A 900 KB wrong value (accepted by the parser) must not be copied whole into the report."""
    verifier = Verifier.build({"type": "object", "properties": {"a": {"type": "string", "maxLength": 10}}})
    report, _ = verifier.verify_text(json.dumps({"a": "y" * 900_000}))
    assert report.codes == (Code.LENGTH_VIOLATION,)
    assert len(json.dumps(report.to_dict())) < 2_000


# --------------------------------------------------------------------------------------------
# Pathological text for the parser's own pre-scans
# --------------------------------------------------------------------------------------------


def test_truncated_text_full_of_escaped_quotes_is_linear() -> None:
    """BUG (hang): the depth pre-scan strips strings with a regex that is quadratic on unterminated ones.

    `_max_depth_exceeded` runs ``_STRING_RE.sub`` when the text has more than 64 brackets. On
    ``"\\"\\"\\"...`` with no closing quote, every escaped quote starts a new match attempt that scans
    to the end of the text: 16,000 escaped quotes take ~7 s, 100,000 (200 KB) take minutes, and a
    1 MB response (the default limit) takes hours. Expected: a typed outcome (truncated or
    too_deep) in milliseconds, as for any other 200 KB text.
    """
    code = """
        import time
        from contractrl.validators import parse_json_text
        text = "[" * 65 + '"' + '\\\\"' * 100_000
        began = time.perf_counter()
        print(parse_json_text(text).code.value, time.perf_counter() - began)
    """
    out = run_isolated(code, timeout=HANG_S)
    assert out.split()[0] in ("truncated", "too_deep")


def test_many_strings_and_brackets_are_fast() -> None:
    """Well-formed strings and brackets are scanned linearly (control for the test above)."""
    text = json.dumps([['a\\"b' * 10] for _ in range(10_000)])
    began = time.process_time()
    assert parse_json_text(text).code is Code.ACCEPTED
    assert time.process_time() - began < HANG_S


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("ABSTAIN" + " " * 500_000 + "x", id="abstain-then-spaces"),
        pytest.param(" " * 500_000 + "ABSTAIN", id="spaces-then-abstain"),
        pytest.param("\x00" * 500_000, id="nul-bytes"),
        pytest.param('"' * 500_001, id="quotes"),
        pytest.param("\\" * 500_000, id="backslashes"),
        pytest.param("{" * 70 + '"' + "\\\\" * 200_000, id="escaped-backslashes-unterminated"),
    ],
)
def test_other_pathological_texts_end_typed(text: str) -> None:
    began = time.process_time()
    action = parse_action(text, max_ops=2)
    assert time.process_time() - began < HANG_S
    assert isinstance(action, (InvalidAction, AbstainAction, RefusalAction))


# --------------------------------------------------------------------------------------------
# Duplicate keys and trailing data: lenient stdlib behaviour that must not leak through
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ('[{"op": "replace", "path": "/a", "path": "/n", "value": 1}]', Code.DUPLICATE_KEY),
        ('[{"op": "replace", "path": "/a", "value": "x"}] [1]', Code.MALFORMED_JSON),
        ('[{"op": "replace", "path": "/a", "value": "x"}', Code.TRUNCATED),
        ("\ufeff[]", Code.MALFORMED_JSON),
        ("", Code.MALFORMED_JSON),
        ("  \n\t", Code.MALFORMED_JSON),
    ],
)
def test_lenient_stdlib_behaviour_is_refused(text: str, code: Code) -> None:
    assert_rejected_untouched(env(), text, code)
