"""Property tests of the contract core: parser totality, fail-closed acceptance, atomic apply.

The contract core sits between a policy that may emit anything and an executor that must only
ever see objects the schema accepts. Example-based tests pin single cases; these properties state
the invariants that must hold for *every* input, and let hypothesis search for the counterexample:

(a) parsing and the transition are total: no text, however broken, makes them raise;
(b) whatever a transition returns as ``accepted_object`` passes both reference validators;
(c) apply is copy-on-write: the input document is never mutated, whether the patch fails or not;
(d) a patched document never aliases values from the patch;
(e) add/remove/replace agree with the ``jsonpatch`` library (RFC 6902) whenever both succeed;
(f) reports are deterministic and the same whichever backend produced them;
(g) a patch that replaces exactly what changed has no collateral edits;
(h) immutable paths survive every admitted patch unchanged.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import re
from typing import Any

import jsonpatch
import jsonschema
import jsonschema_rs
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from contractrl.validators import (
    AbstainAction,
    Budgets,
    Code,
    InvalidAction,
    PatchAction,
    RefusalAction,
    RepairContract,
    Verifier,
    apply_patch,
    changed_leaves,
    collateral_edits,
    parse_action,
)
from contractrl.validators.jsonvalue import json_equal
from contractrl.validators.patch import OP_KINDS
from contractrl.validators.pointer import format_pointer, parse_pointer, resolve

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# generation of a document plus an aimed patch costs most of the time; fewer examples suffice there
APPLY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
FEW = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --------------------------------------------------------------------------------------------
# Fixed schemas. (Patterns once avoided `$`, `\d`, `\w` and `\s`, on which python-jsonschema
# and jsonschema-rs disagreed; the python backend now reads them as ECMA-262, see the agreement
# tests at the end of this file.)
# --------------------------------------------------------------------------------------------

NESTED = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[a-z][a-z0-9_]*", "maxLength": 12},
        "name": {"type": "string", "maxLength": 8},
        "count": {"type": "integer", "minimum": 0, "maximum": 100},
        "ratio": {"type": "number", "minimum": 0},
        "status": {"enum": ["open", "closed", None]},
        "flag": {"type": "boolean"},
        "items": {
            "type": "array",
            "maxItems": 5,
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string", "minLength": 1}, "qty": {"type": "integer", "minimum": 1}},
                "required": ["sku", "qty"],
                "additionalProperties": False,
            },
        },
        "meta": {"type": "object", "additionalProperties": {"type": ["string", "integer", "null"], "maxLength": 4}},
    },
    "required": ["id", "count", "items"],
    "additionalProperties": False,
}
ARRAY = {"type": "array", "minItems": 1, "items": {"type": ["integer", "string"], "minimum": -5, "maxLength": 3}}
LOOSE = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "array"}}, "required": ["a"]}
TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            "required": ["value"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}
SCHEMAS = {"nested": NESTED, "array": ARRAY, "loose": LOOSE, "tree": TREE}
BACKENDS = ("rs", "python")


def contract(schema_name: str, backend: str, immutable: tuple[str, ...] = ()) -> RepairContract:
    verifier = Verifier.build(SCHEMAS[schema_name], backend=backend)  # compiled once, then cached
    return RepairContract(verifier, Budgets(max_attempts=3, max_ops=6), immutable)


# --------------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------------

KEYS = st.one_of(
    st.sampled_from(["a", "b", "id", "items", "~", "/", "~0", "~1", "-", "0", "1", "00", "", "a/b"]), st.text(max_size=5)
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
JSON = st.recursive(
    SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(KEYS, children, max_size=4)),
    max_leaves=12,
)
CONTAINERS = st.one_of(st.lists(JSON, max_size=4), st.dictionaries(KEYS, JSON, max_size=5))

# Tokens that stress RFC 6901: escapes, invalid escapes, '-', leading zeros, the empty token.
TOKENS = ["0", "1", "2", "-", "00", "01", "10", "a", "b", "id", "items", "~0", "~1", "~", "~2", "", "x~1y", "é", " "]
JUNK_OPS = ["", "ADD", "delete", "merge", " add", None, 1, True, ["add"], {"op": "add"}]


def all_pointers(doc: Any, prefix: tuple[str, ...] = ()) -> list[str]:
    """Every existing location in ``doc`` (the root included), as escaped pointers."""
    out = [format_pointer(prefix)]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out.extend(all_pointers(value, (*prefix, key)))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            out.extend(all_pointers(value, (*prefix, str(index))))
    return out


@st.composite
def pointers(draw: st.DrawFn, doc: Any) -> str:
    """Mostly real paths of ``doc`` (so operations hit something), else hostile pointer text."""
    existing = all_pointers(doc)
    kind = draw(st.integers(0, 9))
    if kind < 5:
        return draw(st.sampled_from(existing))
    if kind < 7:
        return draw(st.sampled_from(existing)) + "/" + draw(st.sampled_from(TOKENS))
    if kind < 9:
        return "".join("/" + t for t in draw(st.lists(st.sampled_from(TOKENS), max_size=4)))
    return draw(st.text(max_size=6))


@st.composite
def raw_ops(draw: st.DrawFn, doc: Any, kinds: tuple[Any, ...] = (*OP_KINDS, *JUNK_OPS)) -> Any:
    """One operation as the policy would write it, including missing, extra and mistyped fields."""
    if draw(st.integers(0, 19)) == 0:
        return draw(st.one_of(SCALARS, st.lists(SCALARS, max_size=2)))
    op: dict[str, Any] = {"op": draw(st.sampled_from(kinds))}
    if draw(st.integers(0, 19)):
        op["path"] = draw(pointers(doc))
    else:
        op["path"] = draw(SCALARS)
    if draw(st.integers(0, 9)):
        op["value"] = draw(JSON)
    if op["op"] in ("move", "copy") or draw(st.integers(0, 9)) == 0:
        op["from"] = draw(pointers(doc))
    return op


@st.composite
def doc_and_patch(draw: st.DrawFn, docs: st.SearchStrategy[Any] = CONTAINERS) -> tuple[Any, list[Any]]:
    doc = draw(docs)
    return doc, draw(st.lists(raw_ops(doc), min_size=1, max_size=5))


def _container_pointers(doc: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    if isinstance(doc, (dict, list)):
        out.append((format_pointer(prefix), doc))
        items = doc.items() if isinstance(doc, dict) else ((str(i), v) for i, v in enumerate(doc))
        for key, value in items:
            out.extend(_container_pointers(value, (*prefix, key)))
    return out


@st.composite
def target_pointers(draw: st.DrawFn, doc: Any, kind: str) -> str:
    """A pointer likely to succeed for ``kind`` (a new child for add, an existing path otherwise)."""
    if draw(st.integers(0, 7)) == 0:
        return draw(pointers(doc).filter(_valid_pointer))
    if kind == "add":
        where, container = draw(st.sampled_from(_container_pointers(doc)))
        if isinstance(container, list):
            token = draw(st.one_of(st.just("-"), st.integers(0, len(container)).map(str)))
        else:
            token = draw(KEYS)
        return where + "/" + token.replace("~", "~0").replace("/", "~1")
    existing = [p for p in all_pointers(doc) if p]
    return draw(st.sampled_from(existing)) if existing else draw(pointers(doc).filter(_valid_pointer))


@st.composite
def aimed_op(draw: st.DrawFn, doc: Any, kinds: tuple[str, ...] = OP_KINDS, values: Any = None, root_from: bool = True) -> Any:
    """A well-formed operation of one of ``kinds`` aimed at ``doc`` (see target_pointers)."""
    kind = draw(st.sampled_from(kinds))
    op: dict[str, Any] = {"op": kind, "path": draw(target_pointers(doc, kind))}
    if kind in ("add", "replace", "test"):
        op["value"] = draw(values if values is not None else JSON)
    if kind in ("move", "copy"):
        op["from"] = draw(target_pointers(doc, "remove").filter(lambda p: root_from or kind == "copy" or p != ""))
    return op


@st.composite
def clean_patch(draw: st.DrawFn, kinds: tuple[str, ...]) -> tuple[Any, list[dict[str, Any]]]:
    """A well-formed patch of only ``kinds``, aimed at real paths of a random container document.

    A ``move`` whose ``from`` is the root is left out here: apply_patch crashes on it (see
    test_apply_move_from_root_is_a_typed_failure), and one bug should fail one test. step()
    masks that move before applying, so the step-level strategies keep it.
    """
    doc = draw(CONTAINERS)
    return doc, draw(st.lists(aimed_op(doc, kinds, root_from=False), min_size=1, max_size=3))


def _valid_pointer(text: str) -> bool:
    try:
        parse_pointer(text)
    except ValueError:
        return False
    return True


# Valid instances of NESTED, so that corrupting one field and repairing it exercises acceptance.
NESTED_VALID = st.fixed_dictionaries(
    {
        "id": st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True),
        "count": st.integers(0, 100),
        "items": st.lists(st.fixed_dictionaries({"sku": st.text(min_size=1, max_size=4), "qty": st.integers(1, 50)}), max_size=5),
    },
    optional={
        "name": st.text(max_size=8),
        "ratio": st.one_of(st.integers(0, 1000), st.floats(min_value=0, allow_nan=False, allow_infinity=False)),
        "status": st.sampled_from(["open", "closed", None]),
        "flag": st.booleans(),
        "meta": st.dictionaries(st.text(max_size=3), st.one_of(st.text(max_size=4), st.integers(), st.none()), max_size=3),
    },
)


@st.composite
def corrupted_nested(draw: st.DrawFn) -> tuple[Any, Any, list[dict[str, Any]]]:
    """A valid NESTED instance, a corrupted copy, and the one-operation patch that undoes it."""
    good = draw(NESTED_VALID)
    bad = copy.deepcopy(good)
    kind = draw(st.sampled_from(["replace", "drop", "extra"]))
    if kind == "replace":
        path = draw(st.sampled_from([p for p in all_pointers(good) if p]))
        tokens = parse_pointer(path)
        parent = resolve(bad, tokens[:-1])
        key: Any = int(tokens[-1]) if isinstance(parent, list) else tokens[-1]
        parent[key] = draw(JSON)
        fix = [{"op": "replace", "path": path, "value": resolve(good, tokens)}]
    elif kind == "drop":
        name = draw(st.sampled_from(sorted(good)))
        del bad[name]
        fix = [{"op": "add", "path": "/" + name, "value": good[name]}]
    else:
        name = draw(st.text(max_size=4).filter(lambda k: k not in good))
        bad[name] = draw(JSON)
        fix = [{"op": "remove", "path": format_pointer((name,))}]
    return good, bad, fix


NESTED_NEAR = st.one_of(
    NESTED_VALID,
    corrupted_nested().map(lambda case: case[1]),
    st.fixed_dictionaries({}, optional={k: JSON for k in ("id", "count", "items", "meta", "status", "zz")}),
    JSON,
)
TREE_NEAR = st.recursive(
    st.fixed_dictionaries({"value": st.one_of(st.integers(-3, 3), SCALARS)}),
    lambda kids: st.fixed_dictionaries(
        {"value": st.integers(-3, 3)}, optional={"children": st.lists(kids, max_size=3), "extra": SCALARS}
    ),
    max_leaves=8,
)
TREE_VALID = st.recursive(
    st.fixed_dictionaries({"value": st.integers(-3, 3)}),
    lambda kids: st.fixed_dictionaries({"value": st.integers(-3, 3)}, optional={"children": st.lists(kids, max_size=3)}),
    max_leaves=8,
)
VALID = {
    "nested": NESTED_VALID,
    "array": st.lists(st.one_of(st.integers(-5, 50), st.text(max_size=3)), min_size=1, max_size=4),
    "loose": st.fixed_dictionaries({"a": st.integers()}, optional={"b": st.lists(JSON, max_size=3), "c": JSON}),
    "tree": TREE_VALID,
}
INSTANCES = {
    "nested": NESTED_NEAR,
    "array": st.one_of(st.lists(st.one_of(st.integers(-10, 10), st.text(max_size=5), SCALARS), max_size=5), JSON),
    "loose": st.one_of(st.fixed_dictionaries({}, optional={"a": JSON, "b": JSON, "c": JSON}), JSON),
    "tree": st.one_of(TREE_NEAR, JSON),
}


# Values a repair would plausibly write: small numbers and short strings more often than deep trees.
VALUES = st.one_of(st.integers(-2, 5), st.text(max_size=3), st.booleans(), st.none(), JSON)

TEXTS = st.one_of(
    st.text(max_size=60),
    st.text(alphabet=st.sampled_from('[]{}",:0123456789.eE+-\\ntrufalsABSTAIN/~ '), max_size=80),
    st.sampled_from(["ABSTAIN", "abstain: no idea", "I'm sorry, I can't", '{"refusal": "no"}', "[]", "{}", "null", "[{}]"]),
)


def _dumps(patch: Any, indent: bool) -> str:
    return json.dumps(patch, indent=2 if indent else None)


@st.composite
def action_texts(draw: st.DrawFn, doc: Any) -> str | bytes:
    """Random text, random bytes, or a serialised random patch (sometimes cut short, or as bytes)."""
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return draw(TEXTS)
    if kind == 1:
        return draw(st.binary(max_size=80))
    ops = st.one_of(raw_ops(doc), aimed_op(doc, values=VALUES)) if isinstance(doc, (dict, list)) else raw_ops(doc)
    text = _dumps(draw(st.lists(ops, min_size=1, max_size=4)), draw(st.booleans()))
    if kind == 2:
        text = text[: draw(st.integers(0, len(text)))]
    return text.encode("utf-8") if kind == 3 else text


def canonical(value: Any) -> str:
    """Exact text of a document: key order, 1 vs 1.0 vs true all visible."""
    return json.dumps(value, allow_nan=False)


def strict_same(a: Any, b: Any) -> bool:
    """Type-exact equality (Python's == says True == 1 and 1 == 1.0; JSON documents do not)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(strict_same(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(strict_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def ops_of(patch: list[Any], max_ops: int = 100) -> PatchAction | InvalidAction:
    action = parse_action(json.dumps(patch), max_ops=max_ops)
    assert isinstance(action, (PatchAction, InvalidAction))
    return action


# --------------------------------------------------------------------------------------------
# (a) totality
# --------------------------------------------------------------------------------------------


@SETTINGS
@given(
    text=st.one_of(TEXTS, st.binary(max_size=100)), max_ops=st.integers(0, 5), finish=st.sampled_from([None, "stop", "length"])
)
def test_parse_action_is_total_on_any_text(text: str | bytes, max_ops: int, finish: str | None) -> None:
    """parse_action is the first thing hostile output meets; an exception there would crash a rollout."""
    action = parse_action(text, max_ops=max_ops, finish_reason=finish)
    if isinstance(action, InvalidAction):
        assert isinstance(action.code, Code)
        assert isinstance(action.raw, str)
    if isinstance(action, PatchAction):
        assert 1 <= len(action.ops) <= max_ops


@SETTINGS
@given(data=doc_and_patch(), max_ops=st.integers(0, 6), indent=st.booleans())
def test_parse_action_is_total_on_random_patches(data: tuple[Any, list[Any]], max_ops: int, indent: bool) -> None:
    """Well-formed JSON of ill-formed patches must end in a typed outcome, never an exception."""
    _, patch = data
    action = parse_action(_dumps(patch, indent), max_ops=max_ops)
    if isinstance(action, PatchAction):
        assert len(action.ops) == len(patch) <= max_ops
        assert all(op.op in OP_KINDS for op in action.ops)
    else:
        assert isinstance(action, (InvalidAction, AbstainAction, RefusalAction))


@SETTINGS
@given(
    schema_name=st.sampled_from(sorted(SCHEMAS)),
    backend=st.sampled_from(BACKENDS),
    data=st.data(),
)
def test_step_is_total_and_fail_closed(schema_name: str, backend: str, data: st.DataObject) -> None:
    """step never raises, every outcome is typed, and only `accepted` carries an object.

    Runs up to four steps in a row so that states after failures and after budget exhaustion are
    exercised too, and checks (c) on the way: a non-accepted step leaves the candidate untouched.
    """
    env = contract(schema_name, backend)
    candidate = data.draw(JSON if schema_name != "nested" else st.one_of(JSON, NESTED_VALID), label="candidate")
    state = env.initial_state(candidate)
    for _ in range(data.draw(st.integers(1, 4), label="steps")):
        before = canonical(state.candidate)
        text = data.draw(action_texts(state.candidate), label="text")
        result = env.step(state, text)
        event(f"outcome={result.outcome.value}")
        assert isinstance(result.outcome, Code)
        assert isinstance(result.record.raw, str)
        if result.outcome is Code.ACCEPTED:
            assert result.accepted_object is not None or result.state.candidate is None
            assert result.state.done
            assert_valid_under_references(schema_name, result.accepted_object)  # (b)
        else:
            assert result.accepted_object is None
        # (c) whatever happened, the previous state's candidate was not mutated
        assert canonical(state.candidate) == before
        if result.patched is None:  # nothing was applied: the state keeps the very same candidate
            assert result.state.candidate is state.candidate
        state = result.state


# --------------------------------------------------------------------------------------------
# (b) acceptance is sound
# --------------------------------------------------------------------------------------------


def assert_valid_under_references(schema_name: str, instance: Any) -> None:
    normalized = Verifier.build(SCHEMAS[schema_name]).schema.schema
    python_errors = [e.message for e in jsonschema.Draft202012Validator(normalized).iter_errors(instance)]
    assert python_errors == [], python_errors
    assert jsonschema_rs.validator_for(normalized).is_valid(instance)


@SETTINGS
@given(backend=st.sampled_from(BACKENDS), case=corrupted_nested(), noise=st.data())
def test_accepted_objects_pass_both_reference_validators(backend: str, case: Any, noise: st.DataObject) -> None:
    """The one promise that matters to the executor: an accepted object is schema-valid.

    The repair that undoes a corruption is accepted, equals the original, has no collateral edits
    (g), and passes python-jsonschema and jsonschema-rs on the *normalised* schema. A random extra
    operation is sometimes prepended, so rejections and odd acceptances are checked too.
    """
    good, bad, fix = case
    env = contract("nested", backend)
    state = env.initial_state(bad)
    if state.done:  # the corruption happened to be valid: nothing to repair
        assert_valid_under_references("nested", bad)
        return
    extra = noise.draw(st.lists(raw_ops(bad, kinds=OP_KINDS), max_size=1), label="extra")
    result = env.step(state, json.dumps(extra + fix))
    event(f"outcome={result.outcome.value}")
    if result.outcome is Code.ACCEPTED:
        assert_valid_under_references("nested", result.accepted_object)
        assert strict_same(result.accepted_object, result.state.candidate)
    if not extra:
        assert result.outcome is Code.ACCEPTED, result.record.message
        assert strict_same(result.accepted_object, good)
        assert result.collateral == ()


@APPLY
@given(schema_name=st.sampled_from(sorted(SCHEMAS)), backend=st.sampled_from(BACKENDS), data=st.data())
def test_every_accepted_object_is_valid(schema_name: str, backend: str, data: st.DataObject) -> None:
    """Random patches on broken documents: any acceptance must survive both reference validators.

    A valid instance is broken by one random operation, then repaired by 1-3 random operations
    whose values are often pieces of the original, so acceptances are frequent enough to matter
    (including odd ones: moves, copies, tests, several operations at once).
    """
    env = contract(schema_name, backend)
    good = data.draw(VALID[schema_name], label="good")
    if data.draw(st.integers(0, 4), label="near") == 0:
        doc = data.draw(INSTANCES[schema_name], label="doc")
    else:
        broken = ops_of([data.draw(aimed_op(good, values=JSON, root_from=False), label="break")])
        applied = apply_patch(good, broken.ops) if isinstance(broken, PatchAction) else None
        doc = applied.document if applied is not None and applied.ok else good
    state = env.initial_state(doc)
    if state.done:
        assert_valid_under_references(schema_name, doc)
    assume(not state.done)
    pieces = st.sampled_from([resolve(good, parse_pointer(p)) for p in all_pointers(good)])
    op = (
        aimed_op(doc, ("replace", "add", "remove", "move", "copy", "test"), values=st.one_of(pieces, pieces, VALUES))
        if isinstance(doc, (dict, list))
        else raw_ops(doc, kinds=OP_KINDS)
    )
    patch = data.draw(st.lists(op, min_size=1, max_size=3), label="patch")
    result = env.step(state, json.dumps(patch))
    event(f"outcome={result.outcome.value}")
    if result.outcome is Code.ACCEPTED:
        assert_valid_under_references(schema_name, result.accepted_object)


# --------------------------------------------------------------------------------------------
# (c) atomicity and (d) no aliasing
# --------------------------------------------------------------------------------------------


@APPLY
@given(data=clean_patch(OP_KINDS))
def test_apply_never_mutates_the_input(data: tuple[Any, list[Any]]) -> None:
    """Copy-on-write: a failed patch leaves the document as it was, and so does a successful one.

    The transition keeps the previous candidate in its state and the ledger; an in-place write
    would corrupt history, and a half-applied failed patch would break all-or-nothing semantics.
    """
    doc, patch = data
    action = ops_of(patch)
    assert isinstance(action, PatchAction)
    snapshot, deep = canonical(doc), copy.deepcopy(doc)
    result = apply_patch(doc, action.ops)
    assert canonical(doc) == snapshot
    assert strict_same(doc, deep)
    if not result.ok:
        assert result.document is None
        assert isinstance(result.code, Code)
        assert result.op_index is not None and 0 <= result.op_index < len(action.ops)


def _mutate_everything(value: Any) -> None:
    """Scribble into every container of ``value`` in place."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
            node["__mutated__"] = "!"
        elif isinstance(node, list):
            stack.extend(node)
            node.append("__mutated__")


@APPLY
@given(data=clean_patch(OP_KINDS))
def test_patched_document_does_not_alias_patch_values(data: tuple[Any, list[Any]]) -> None:
    """A caller may reuse or mutate the parsed patch; the accepted object must not change with it."""
    doc, patch = data
    action = ops_of(patch)
    assert isinstance(action, PatchAction)
    result = apply_patch(doc, action.ops)
    assume(result.ok)
    snapshot = canonical(result.document)
    for op in action.ops:
        if op.op in ("add", "replace", "test"):
            _mutate_everything(op.value)
    assert canonical(result.document) == snapshot


def test_apply_move_from_root_is_a_typed_failure() -> None:
    """BUG: apply_patch must refuse a move of the whole document, not raise IndexError.

    apply_patch is public and re-checks root writes itself ("refuse again rather than trust the
    caller"), but `move` with ``from: ""`` reaches ``_CowDocument.remove(())`` and indexes ``()[-1]``.
    step() masks it first (move_source_invalid), so only direct callers of apply_patch crash.
    """
    action = parse_action('[{"op": "move", "from": "", "path": "/0"}]', max_ops=2)
    assert isinstance(action, PatchAction)
    doc = [None]
    result = apply_patch(doc, action.ops)
    assert not result.ok
    assert result.code in (Code.MOVE_SOURCE_INVALID, Code.ROOT_WRITE_FORBIDDEN)
    assert doc == [None]


# --------------------------------------------------------------------------------------------
# (e) agreement with the jsonpatch library
# --------------------------------------------------------------------------------------------


@APPLY
@given(data=clean_patch(("add", "remove", "replace")))
def test_add_remove_replace_agree_with_jsonpatch(data: tuple[Any, list[dict[str, Any]]]) -> None:
    """RFC 6902 semantics: where both implementations succeed they must produce the same document.

    `test` is excluded on purpose: jsonpatch compares with Python ==, so it passes `1 == true`.
    Root writes are excluded by the contract (root_write_forbidden), so they never both succeed.
    """
    doc, patch = data
    action = ops_of(patch)
    assert isinstance(action, PatchAction), action
    ours = apply_patch(doc, action.ops)
    assume(ours.ok)
    try:
        theirs = jsonpatch.apply_patch(copy.deepcopy(doc), copy.deepcopy(patch))
    except Exception:  # the reference failed: nothing to compare
        assume(False)
    assert strict_same(ours.document, theirs)
    assert json.dumps(ours.document, sort_keys=True) == json.dumps(theirs, sort_keys=True)


@APPLY
@given(data=clean_patch(("add", "remove", "replace", "move", "copy")))
def test_failures_are_the_same_as_jsonpatch_failures(data: tuple[Any, list[dict[str, Any]]]) -> None:
    """A patch jsonpatch rejects on a non-root path must not be applied by us either (fail-closed).

    Root-path operations are excluded (the contract refuses them outright, jsonpatch allows them),
    and so is an object key ``-`` outside an add: jsonpatch wrongly refuses ``replace /obj/-``.
    """
    doc, patch = data
    assume(all(op["path"] != "" and op.get("from", "/") != "" for op in patch))
    assume(all("-" not in parse_pointer(op["path"])[:-1] and "-" not in parse_pointer(op.get("from", "")) for op in patch))
    assume(all(op["op"] == "add" or not op["path"].endswith("/-") for op in patch))
    action = ops_of(patch)
    assert isinstance(action, PatchAction)
    ours = apply_patch(doc, action.ops)
    try:
        theirs: Any = jsonpatch.apply_patch(copy.deepcopy(doc), copy.deepcopy(patch))
        theirs_ok = True
    except Exception:
        theirs_ok = False
    if ours.ok and theirs_ok:
        assert strict_same(ours.document, theirs)
    if not theirs_ok:
        assert not ours.ok, f"jsonpatch rejects {patch} on {doc}, we produced {ours.document}"


# --------------------------------------------------------------------------------------------
# (f) deterministic, backend-independent reports
# --------------------------------------------------------------------------------------------


_RUST_USIZE = re.compile(r"\+?[0-9]+")


def _has_rs_mangled_key(value: Any) -> bool:
    """Whether jsonschema-rs would mangle an object key in an instance path ("00" -> 0, "" dropped)."""
    if isinstance(value, dict):
        bad = any(k == "" or (_RUST_USIZE.fullmatch(k) and k != str(int(k))) for k in value)
        return bad or any(_has_rs_mangled_key(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_rs_mangled_key(v) for v in value)
    return False


@SETTINGS
@given(schema_name=st.sampled_from(sorted(SCHEMAS)), data=st.data())
def test_reports_are_deterministic_and_backend_independent(schema_name: str, data: st.DataObject) -> None:
    """Ledgers, prompts and metrics key on the report; it must be a pure function of the instance.

    Verifying twice (and a deep copy) gives the same report, both backends give identical reports,
    and verify_text on the serialised instance gives the same report as verify.
    """
    instance = data.draw(INSTANCES[schema_name], label="instance")
    assume(not _has_rs_mangled_key(instance))  # pinned separately: test_rs_pointer_keeps_odd_object_keys
    reports = {}
    for backend in BACKENDS:
        verifier = Verifier.build(SCHEMAS[schema_name], backend=backend)
        first = verifier.verify(instance).to_dict()
        assert verifier.verify(instance).to_dict() == first
        assert verifier.verify(copy.deepcopy(instance)).to_dict() == first
        text_report, parsed = verifier.verify_text(json.dumps(instance))
        assert text_report.to_dict() == first
        assert strict_same(parsed, instance)
        reports[backend] = first
    assert reports["rs"] == reports["python"]


@pytest.mark.parametrize("key", ["00", "01", "007", "+1", ""])
@pytest.mark.parametrize("backend", BACKENDS)
def test_rs_pointer_keeps_odd_object_keys(key: str, backend: str) -> None:
    """BUG (rs backend): an object key such as "00", "007", "+1" or "" is reported at the wrong pointer.

    jsonschema-rs's Python binding turns every instance-path segment that parses as an unsigned
    integer into an int, so RsBackend sees ``["meta", 0]`` for the key "00"; the report then points
    at ``/meta/0`` (which may be another, valid key) with ``actual: null``. An empty key is dropped
    from the path altogether, so the error lands on the parent ``/meta``. The policy is told to
    repair the wrong place, and reports differ between backends. Found by the property above.
    """
    schema = {"type": "object", "properties": {"meta": {"type": "object", "additionalProperties": {"type": "string"}}}}
    instance = {"meta": {"0": "fine", key: False}}
    report = Verifier.build(schema, backend=backend).verify(instance)
    assert [(e.code, e.pointer, e.actual) for e in report.errors] == [(Code.WRONG_TYPE, "/meta/" + key, "false")]


# --------------------------------------------------------------------------------------------
# (g) collateral edits
# --------------------------------------------------------------------------------------------


@SETTINGS
@given(doc=CONTAINERS, data=st.data())
def test_replacing_the_changed_path_has_no_collateral(doc: Any, data: st.DataObject) -> None:
    """A repair that rewrites exactly one location must not be charged with collateral edits.

    Collateral edits are the penalty for touching what the verifier did not point at; a false
    positive here would punish the ideal minimal repair.
    """
    paths = [p for p in all_pointers(doc) if p]
    assume(paths)
    path = data.draw(st.sampled_from(paths), label="path")
    value = data.draw(JSON, label="value")
    action = ops_of([{"op": "replace", "path": path, "value": value}])
    assert isinstance(action, PatchAction)
    result = apply_patch(doc, action.ops)
    assert result.ok, result.message
    assert strict_same(resolve(result.document, parse_pointer(path)), value)
    assert collateral_edits(doc, result.document, result.touched) == []


@APPLY
@given(data=clean_patch(OP_KINDS))
def test_collateral_is_only_outside_touched_paths(data: tuple[Any, list[Any]]) -> None:
    """Every reported collateral edit lies outside every touched subtree (the definition of C(p))."""
    doc, patch = data
    action = ops_of(patch)
    assert isinstance(action, PatchAction)
    result = apply_patch(doc, action.ops)
    assume(result.ok)
    touched = [format_pointer(t) for t in result.touched]
    for edit in collateral_edits(doc, result.document, result.touched):
        assert not any(edit == t or edit.startswith(t + "/") for t in touched)


@pytest.mark.parametrize(
    ("doc", "op"),
    [
        pytest.param(
            {"filters": {}, "q": "x"}, {"op": "add", "path": "/filters/city", "value": "Oslo"}, id="add-into-empty-object"
        ),
        pytest.param({"tags": [], "q": "x"}, {"op": "add", "path": "/tags/-", "value": "a"}, id="append-to-empty-array"),
        pytest.param({"filters": {"city": 1}, "q": "x"}, {"op": "remove", "path": "/filters/city"}, id="remove-last-key"),
        pytest.param({"tags": ["a"], "q": "x"}, {"op": "remove", "path": "/tags/0"}, id="remove-only-element"),
    ],
)
def test_filling_or_emptying_a_container_is_not_collateral(doc: dict[str, Any], op: dict[str, Any]) -> None:
    """BUG: the parent of the one key a patch adds or removes is reported as a collateral edit.

    Empty containers count as leaves, so ``{"filters": {}}`` -> ``{"filters": {"city": ...}}``
    removes the leaf ``/filters``; it is not under the touched ``/filters/city``, so the minimal
    repair of a missing required field in an empty object is charged with collateral ``["/filters"]``.
    """
    action = ops_of([op])
    assert isinstance(action, PatchAction)
    result = apply_patch(doc, action.ops)
    assert result.ok
    assert collateral_edits(doc, result.document, result.touched) == []


def _typed_leaves(value: Any, path: tuple[tuple[str, str], ...] = ()) -> dict[tuple[tuple[str, str], ...], Any]:
    """Leaves keyed by their path *and* the kind of each container on it, so an object key "0" and
    an array index 0 stay apart even though they flatten to the same pointer."""
    if isinstance(value, dict) and value:
        return {p: v for key, child in value.items() for p, v in _typed_leaves(child, (*path, ("object", key))).items()}
    if isinstance(value, list) and value:
        return {p: v for i, child in enumerate(value) for p, v in _typed_leaves(child, (*path, ("array", str(i)))).items()}
    return {path: value}


def _naive_changed_leaves(before: Any, after: Any) -> list[str]:
    """The definition, without the shared-subtree shortcut: flatten both, compare every leaf. A
    container that changed kind changes every leaf under it."""
    a, b = _typed_leaves(before), _typed_leaves(after)
    changed = a.keys() ^ b.keys()
    changed |= {p for p in a.keys() & b.keys() if not json_equal(a[p], b[p])}
    return sorted({format_pointer(tuple(token for _, token in path)) for path in changed})


@APPLY
@given(data=clean_patch(OP_KINDS))
def test_changed_leaves_matches_the_flattening_definition(data: tuple[Any, list[Any]]) -> None:
    """changed_leaves skips subtrees shared by identity; that shortcut must not change the answer.

    Checked on a patched document (which shares untouched subtrees with its input, the case the
    shortcut is for) and on an unshared deep copy of it.
    """
    doc, patch = data
    action = ops_of(patch)
    assert isinstance(action, PatchAction)
    result = apply_patch(doc, action.ops)
    assume(result.ok)
    expected = _naive_changed_leaves(doc, result.document)
    assert changed_leaves(doc, result.document) == expected
    assert changed_leaves(doc, copy.deepcopy(result.document)) == expected
    assert changed_leaves(copy.deepcopy(doc), result.document) == expected


def test_changed_leaves_sees_an_object_turned_into_an_array() -> None:
    """BUG (minor): ``{"0": 1}`` and ``[1]`` flatten to the same leaf ``/0``, so the change is invisible.

    collateral_edits is not affected in practice (the change happens at a touched path), but
    changed_leaves is public and documented as listing every changed leaf.
    """
    assert changed_leaves({"x": {"0": 1}}, {"x": [1]}) != []


# --------------------------------------------------------------------------------------------
# (h) immutable paths
# --------------------------------------------------------------------------------------------


def created_pointers(doc: Any) -> list[str]:
    """Paths ``doc`` lacks that appends would create: ``<array>/<len>``, ``<array>/<len+1>``, and a
    member under the next element (named as a member of the array's first element, if any)."""
    out: list[str] = []
    for where, container in _container_pointers(doc):
        if isinstance(container, list):
            n = len(container)
            out += [f"{where}/{n}", f"{where}/{n + 1}"]
            first = container[0] if container and isinstance(container[0], dict) else {"x": 0}
            out += [f"{where}/{n}/" + key.replace("~", "~0").replace("/", "~1") for key in list(first)[:2]]
    return out


@st.composite
def appends(draw: st.DrawFn, doc: Any) -> dict[str, Any]:
    """An ``add``, ``copy`` or ``move`` whose target ends in ``-`` (a new last element of an array)."""
    arrays = [where for where, c in _container_pointers(doc) if isinstance(c, list)]
    kind = draw(st.sampled_from(["add", "copy", "move"]))
    op: dict[str, Any] = {"op": kind, "path": draw(st.sampled_from(arrays)) + "/-"}
    if kind == "add":
        op["value"] = draw(
            st.one_of(JSON, st.sampled_from([p for p in all_pointers(doc) if p]).map(lambda p: resolve(doc, parse_pointer(p))))
        )
    else:
        op["from"] = draw(st.sampled_from([p for p in all_pointers(doc) if p]))
    return op


def _frozen_values(doc: Any, frozen: list[str]) -> dict[str, Any]:
    """Each immutable path's value in ``doc``, or the marker ``ABSENT_MARK``; the reference's view."""
    missing = object()
    out = {}
    for path in frozen:
        value = resolve(doc, parse_pointer(path), missing)
        out[path] = ABSENT_MARK if value is missing else value
    return out


ABSENT_MARK = ("absent",)  # a tuple is no JSON value, so it never equals a resolved one


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(backend=st.sampled_from(BACKENDS), doc=NESTED_VALID, data=st.data())
def test_immutable_paths_never_change(backend: str, doc: Any, data: st.DataObject) -> None:
    """Identity fields (ids, accounts, array elements holding them) must survive any admitted patch,
    including fields the candidate lacks, which an append (``/items/-``) would create.

    The reference shares no pointer logic with the mask: it applies the admitted patch with the
    ``jsonpatch`` library (which resolves ``-`` itself) and diffs the immutable paths' values, a
    path that appears counting as changed, as the whole-object arm's comparison counts it.
    """
    existing = [p for p in all_pointers(doc) if p]
    created = created_pointers(doc)
    frozen = data.draw(st.lists(st.sampled_from(existing), min_size=0, max_size=2, unique=True))
    frozen += data.draw(st.lists(st.sampled_from(created), min_size=0 if frozen else 1, max_size=2, unique=True))
    frozen = list(dict.fromkeys(frozen))
    env = RepairContract(Verifier.build({"type": "object"}, backend=backend), Budgets(max_attempts=3, max_ops=6), frozen)
    # The verifier accepts any object, so the initial state would be terminal; reopen it so the
    # patch is admitted, applied and verified like a real repair.
    state = dataclasses.replace(env.initial_state(doc), done=False, outcome=None)
    ops = st.one_of(appends(doc), appends(doc), aimed_op(doc), raw_ops(doc, kinds=OP_KINDS))
    patch = data.draw(st.lists(ops, min_size=1, max_size=4))
    result = env.step(state, json.dumps(patch))
    event(f"outcome: {result.outcome.value}")  # how often the mask refuses, and what
    if result.patched is None:
        return
    before = _frozen_values(doc, frozen)
    documents = {"ours": result.patched}
    with contextlib.suppress(Exception):  # the library refuses a patch we admitted: no second view
        documents["jsonpatch"] = jsonpatch.apply_patch(copy.deepcopy(doc), copy.deepcopy(patch))
    for name, patched in documents.items():
        after = _frozen_values(patched, frozen)
        for path in frozen:
            b, a = before[path], after[path]
            same = (b is ABSENT_MARK) == (a is ABSENT_MARK) and (b is ABSENT_MARK or (json_equal(b, a) and strict_same(b, a)))
            assert same, (name, path, patch, b, a)


# --------------------------------------------------------------------------------------------
# Former backend divergences. python-jsonschema used Python's `re`, float division and an `@`
# check for email; the python backend now reads patterns as ECMA-262, multipleOf on exact decimals
# and email as RFC 5321, so both backends give the standard's verdict on each of these.
# --------------------------------------------------------------------------------------------

AGREEMENTS = [
    pytest.param({"type": "string", "pattern": "^[a-z]+$"}, "abc\n", False, id="dollar-before-trailing-newline"),
    pytest.param({"type": "string", "pattern": "^[0-9a-z]+$"}, "a\n", False, id="dollar-class-trailing-newline"),
    pytest.param({"type": "string", "pattern": "^\\d+$"}, "١٢", False, id="unicode-digit"),
    pytest.param({"type": "string", "pattern": "^\\w+$"}, "é", False, id="unicode-word"),
    pytest.param({"type": "string", "pattern": "\\s"}, "\x1c", False, id="whitespace-x1c"),
    pytest.param({"type": "string", "pattern": "\\s"}, "\ufeff", True, id="whitespace-bom"),
    pytest.param({"type": "string", "pattern": "^.$"}, "\r", False, id="dot-carriage-return"),
    pytest.param({"type": "string", "pattern": "\\bfoo"}, "éfoo", True, id="ascii-word-boundary"),
    pytest.param({"type": "string", "pattern": "é\\Bfoo"}, "éfoo", False, id="ascii-non-boundary"),
    pytest.param({"type": "number", "multipleOf": 0.1}, 0.3, True, id="float-multipleOf"),
    pytest.param({"type": "number", "multipleOf": 0.1}, 0.30000000000000004, False, id="float-multipleOf-off"),
    pytest.param({"type": "string", "format": "email"}, "john doe@example.com", False, id="email-unquoted-space"),
    pytest.param({"type": "string", "format": "email"}, '"john doe"@example.com', True, id="email-quoted-space"),
    pytest.param({"type": "string", "format": "email"}, "a..b@example.com", False, id="email-double-dot"),
    pytest.param({"type": "string", "format": "regex"}, "(?i)abc", False, id="regex-format-inline-flag"),
    pytest.param({"type": "string", "format": "date-time"}, "2016-12-31T23:59:60Z", True, id="date-time-leap-second"),
    pytest.param({"type": "string", "format": "date-time"}, "2016-12-31T12:00:60Z", False, id="date-time-misplaced-leap"),
    pytest.param({"type": "string", "format": "date-time"}, "2026-12-01T10:00:00Z\n", False, id="date-time-trailing-newline"),
    pytest.param({"type": "string", "format": "date-time"}, "0000-01-01T00:00:00Z", True, id="date-time-year-zero"),
    pytest.param({"type": "string", "format": "time"}, "15:59:60-08:00", True, id="time-leap-second-with-offset"),
]


@pytest.mark.parametrize(("schema", "instance", "valid"), AGREEMENTS)
def test_both_backends_give_the_standards_verdict(schema: dict[str, Any], instance: Any, valid: bool) -> None:
    rs = Verifier.build(schema, backend="rs").verify(instance)
    py = Verifier.build(schema, backend="python").verify(instance)
    assert rs.to_dict() == py.to_dict()
    assert rs.accepted == valid
