"""The fuzz harness of the contract core: generated schemas, contracts, candidates and answers.

One seed gives one case: a schema (Draft 2020-12, or a draft-07 / 2020-12 mix), a cross-field
contract, a candidate object, immutable paths, and an answer text (a patch, hostile text, ABSTAIN,
or a whole object). :func:`check` runs the case through both backends' transitions and reports
every way it can go wrong, judged by references that share no code with the verifier:

- ``uncaught``: anything but a typed outcome (a schema or contract may be refused at build time
  with :class:`ContractRLError`; nothing else may raise);
- ``hang``: a transition that takes more than :data:`TIME_BOUND_S` of CPU time;
- ``schema``: an accepted object python-jsonschema (Draft 2020-12) rejects, with ECMA-262 patterns
  (``regress``), exact-decimal ``multipleOf`` and, for a mixed-dialect schema, draft-07
  ``dependencies`` read as draft 7 defines them;
- ``contract``: an accepted object :func:`reference_contract` (an independent reading of the rule
  language) rejects;
- ``immutable``: an accepted object whose immutable paths differ in type or value from the candidate's;
- ``bounds``: an accepted object whose canonical text the strict parser refuses under the same limits.

The schema and contract references run in one persistent child process under address-space and
CPU limits (:class:`tests.ecma_reference.BoundedChild`): ``regress`` once asked for 24 GB inside the
test run, and a reference must never be what kills it. A child that dies on a case is an
inconclusive judgement (counted in ``outcomes["reference_inconclusive"]``), not a finding.

``hang`` is measured in CPU time (:func:`time.process_time`), so a loaded machine does not report
one; ``slowest_s`` stays wall time, the figure ``benchmarks/fuzz_contract.py`` reports.

``tests/test_fuzz.py`` runs it under hypothesis and replays ``tests/fixtures/hostile_corpus.json``;
``benchmarks/fuzz_contract.py`` runs it for 100,000 seeds.
"""

from __future__ import annotations

import functools
import json
import random
import sys
import time
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

from .ecma_reference import INCONCLUSIVE, BoundedChild

TIME_BOUND_S = 5.0
BACKENDS = ("rs", "python")
NAMES = ["a", "b", "start", "end", "n", "items", "enum", "const", "default", "$ref", "0", "x/y", "~"]
DATES = [
    "2026-11-30T09:00:00Z", "2026-11-30t09:00:00z", "2026-12-01T10:00:00+01:00", "2016-12-31T23:59:60Z",
    "2016-12-31T12:00:60Z", "2026-12-01T10:00:00", "2026-02-29T00:00:00Z", "2026-12-01T10:00:00.123456789-00:00",
    "2026-12-01", "2026-13-01", "not a date", "2026-12-01 10:00:00Z", "2026-12-01T10:00:00Z\n", "0000-01-01T00:00:00Z",
]  # fmt: skip
NUMBERS = [0, 1, -1, 2, 0.1, 0.3, 0.30000000000000004, 1.5, 10**20, -(10**30), 1e-300, 2.5, 7, 1.0, True, None]
STRINGS = [
    "",
    "a",
    "abc",
    "a" * 40 + "!",
    "abc\n",
    "١٢",
    "é",
    "éfoo",
    "a b",
    "x@y.z",
    "john doe@example.com",
    '"q"@x.io',
    "a..b@c.d",
    "AbC1_",
]
PATTERNS = ["^[a-z]+$", "^\\d+$", "^\\w+$", "\\s", "^.$", "\\bfoo", "é\\Bfoo", "^(a+)+$", "^(a|aa)+$", "a{2,}", "[^\\d]", "^$"]
HOSTILE_TEXTS = [
    "ABSTAIN", "ABSTAIN: unclear", "I'm sorry, I can't.", '{"refusal": "no"}', "", "[", "[]", "NaN", "[1e400]",
    '[{"op": "replace", "path": "/a", "value": 1e-400}]', '[{"op": "replace", "path": "/a", "value": 1, "value": 2}]',
    "[" * 100 + "]" * 100, '[{"op": "replace", "path": "/a/' + "9" * 5000 + '", "value": 1}]',
    '[{"op": "add", "path": "/' + "1" * 4400 + '", "value": 1}]', '[{"op": "move", "from": "/a", "path": "/a/b"}]',
    '[{"op": "replace", "path": "", "value": {}}]', '```json\n[]\n```', "\ufeff[]",
    '[{"op": "test", "path": "/n", "value": true}]',
    '[{"op": "copy", "from": "", "path": "/a"}]', '[{"op": "replace", "path": "/a", "value": "\\ud800"}]',
]  # fmt: skip


@dataclass
class Case:
    seed: int
    dialect: str
    schema: Any
    contract: dict[str, Any]
    candidate: Any
    immutable: tuple[str, ...]
    text: str | bytes
    whole: str
    max_ops: int


@dataclass
class Report:
    """What one case did: counts per outcome and every finding (a finding is a bug)."""

    transitions: int = 0
    accepted: int = 0
    refused_schemas: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    findings: list[dict[str, Any]] = field(default_factory=list)
    slowest_s: float = 0.0  # wall time of the slowest transition
    slowest_cpu_s: float = 0.0  # CPU time of the most expensive one (what ``hang`` is judged on)


# --- generation ------------------------------------------------------------------------------


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if roll < 0.3:
        return rng.choice(NUMBERS)
    if roll < 0.55:
        return rng.choice(STRINGS)
    if roll < 0.7:
        return rng.choice(DATES)
    if depth > 2 or roll < 0.8:
        return rng.choice([None, True, False, []])
    if roll < 0.9:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(NAMES): _value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def _subschema(rng: random.Random, depth: int, dialect: str, defs: list[str]) -> Any:
    if depth > 2 or rng.random() < 0.25:
        leaf = rng.choice(
            [
                {"type": rng.choice(["string", "integer", "number", "boolean", "null", "array", "object"])},
                {"type": "string", "pattern": rng.choice(PATTERNS)},
                {"type": "string", "format": rng.choice(["date-time", "date", "email", "uuid", "ipv4", "regex"])},
                {"maximum": rng.choice([0, 1, 2.5])},
                {"exclusiveMinimum": rng.choice([0, 1])},
                {"multipleOf": rng.choice([0.1, 0.25, 2, 3])},
                {"maxLength": rng.randint(0, 3)},
                {"enum": [rng.choice(NUMBERS + STRINGS) for _ in range(rng.randint(1, 3))]},
                {"const": rng.choice(NUMBERS + STRINGS)},
                {"$ref": "#/" + rng.choice(defs)} if defs else {},
                True,
                False,
            ]
        )
        return leaf
    kind = rng.choice(["object", "object", "array", "anyOf", "oneOf", "not", "allOf"])
    if kind == "object":
        names = rng.sample(NAMES, rng.randint(1, 4))
        out: dict[str, Any] = {"type": "object", "properties": {n: _subschema(rng, depth + 1, dialect, defs) for n in names}}
        if rng.random() < 0.5:
            out["required"] = rng.sample(names, rng.randint(1, len(names)))
        if rng.random() < 0.4:
            out["additionalProperties"] = rng.choice([False, {"type": "string"}])
        if rng.random() < 0.2:
            out["patternProperties"] = {rng.choice(PATTERNS): _subschema(rng, depth + 1, dialect, defs)}
        if rng.random() < 0.2:
            key = "dependencies" if dialect == "mixed" and rng.random() < 0.6 else "dependentRequired"
            out[key] = {names[0]: rng.sample(NAMES, 2)}
        return out
    if kind == "array":
        out = {"type": "array", "items": _subschema(rng, depth + 1, dialect, defs), "maxItems": rng.randint(0, 6)}
        if rng.random() < 0.3:
            out["uniqueItems"] = True
        return out
    if kind == "not":
        return {"not": _subschema(rng, depth + 1, dialect, defs)}
    return {kind: [_subschema(rng, depth + 1, dialect, defs) for _ in range(rng.randint(1, 3))]}


def _schema(rng: random.Random, dialect: str) -> Any:
    names = rng.sample(["x", "enum", "default", "y"], rng.randint(0, 2))
    where = {n: "definitions" if dialect == "mixed" and rng.random() < 0.5 else "$defs" for n in names}
    defs = [f"{where[n]}/{n}" for n in names]
    root = _subschema(rng, 0, dialect, defs)
    if not isinstance(root, dict):
        return root
    for name in names:
        root.setdefault(where[name], {})[name] = _subschema(rng, 2, dialect, [])
    if names and dialect == "mixed" and rng.random() < 0.3:  # the same name under both keywords
        root.setdefault("definitions", {})[names[0]] = _subschema(rng, 2, dialect, [])
        root.setdefault("$defs", {})[names[0]] = _subschema(rng, 2, dialect, [])
    return root


def _contract(rng: random.Random) -> dict[str, Any]:
    rules: list[dict[str, Any]] = []
    for i in range(rng.randint(0, 3)):
        kind = rng.choice(["compare", "compare", "aggregate", "unique", "required_if"])
        if kind == "compare":
            as_ = rng.choice(["number", "string", "date", "date-time"])
            op = rng.choice(["<", "<=", ">", ">=", "==", "!="])
            rule: dict[str, Any] = {"kind": "compare", "left": "/" + rng.choice(NAMES[:5]), "op": op, "as": as_}
            if rng.random() < 0.7:
                rule["right"] = "/" + rng.choice(NAMES[:5])
            else:
                rule["value"] = {"number": 1, "string": "m", "date": "2026-12-01", "date-time": "2026-12-01T00:00:00Z"}[as_]
        elif kind == "aggregate":
            rule = {
                "kind": "aggregate",
                "array": "/items",
                "field": rng.choice(["", "/n"]),
                "agg": rng.choice(["sum", "count", "min", "max"]),
                "op": rng.choice(["<=", "==", ">"]),
                "limit": rng.choice([1, 2.5, "/n"]),
            }
        elif kind == "unique":
            rule = {"kind": "unique", "array": "/items", "field": rng.choice(["", "/n"])}
        else:
            rule = {"kind": "required_if", "when": "/" + rng.choice(NAMES[:5]), "then_required": ["/" + rng.choice(NAMES[:5])]}
        rule["id"] = f"r{i}"
        rules.append(rule)
    return {"rules": rules}


def _pointers(value: Any, prefix: str = "") -> list[str]:
    from contractrl.validators.pointer import escape_token

    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            out += _pointers(child, f"{prefix}/{escape_token(key)}")
    elif isinstance(value, list):
        for index, child in enumerate(value):
            out += _pointers(child, f"{prefix}/{index}")
    return out


def _patch(rng: random.Random, candidate: Any) -> str | bytes:
    if rng.random() < 0.15:
        text = rng.choice(HOSTILE_TEXTS)
        return text.encode() if rng.random() < 0.3 else text
    paths = [*_pointers(candidate), "/new", "/a/-", "/items/-", "/items/0", "/a/" + "9" * 30]
    ops = []
    for _ in range(rng.randint(1, 5)):
        op = rng.choice(["add", "remove", "replace", "move", "copy", "test", "replace", "add"])
        item: dict[str, Any] = {"op": op, "path": rng.choice(paths)}
        if op in ("move", "copy"):
            item["from"] = rng.choice(paths)
        if op in ("add", "replace", "test"):
            item["value"] = _value(rng)
        ops.append(item)
    return json.dumps(ops)


def generate(seed: int) -> Case:
    """The case of one seed; the same seed gives the same case on every machine."""
    rng = random.Random(seed)
    dialect = rng.choice(["2020", "2020", "mixed"])
    schema = _schema(rng, dialect)
    candidate = {n: _value(rng) for n in rng.sample(NAMES, rng.randint(0, 5))}
    if rng.random() < 0.4:
        candidate["items"] = [{"n": rng.choice(NUMBERS)} for _ in range(rng.randint(0, 3))]
    pointers = [p for p in _pointers(candidate) if p]
    immutable = tuple(rng.sample(pointers, min(len(pointers), rng.randint(0, 2))))
    whole = dict(candidate)
    for name in rng.sample(NAMES, rng.randint(0, 3)):
        whole[name] = _value(rng)
    return Case(
        seed, dialect, schema, _contract(rng), candidate, immutable, _patch(rng, candidate), json.dumps(whole), rng.randint(1, 6)
    )


# --- references ------------------------------------------------------------------------------


def _reference_validator(schema: Any, draft: str) -> Any:
    """python-jsonschema with ECMA-262 patterns (regress) and exact-decimal multipleOf."""
    import jsonschema
    import regress
    from jsonschema.exceptions import ValidationError

    def _search(pattern: str, text: str) -> bool:
        return regress.Regex(pattern, "u").find(text) is not None

    def pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Any:
        if validator.is_type(instance, "string") and not _search(patrn, instance):
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    def pattern_properties(validator: Any, value: dict[str, Any], instance: Any, schema: Any) -> Any:
        if validator.is_type(instance, "object"):
            for patrn, sub in value.items():
                for key, child in instance.items():
                    if _search(patrn, key):
                        yield from validator.descend(child, sub, path=key, schema_path=patrn)

    def additional_properties(validator: Any, ap: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "object"):
            return
        props, patterns = schema.get("properties", {}), list(schema.get("patternProperties", {}))
        extras = [k for k in instance if k not in props and not any(_search(p, k) for p in patterns)]
        if validator.is_type(ap, "object"):
            for extra in extras:
                yield from validator.descend(instance[extra], ap, path=extra)
        elif ap is False and extras:
            yield ValidationError(f"additional properties {extras}")

    def multiple_of(validator: Any, divisor: Any, instance: Any, schema: Any) -> Any:
        if validator.is_type(instance, "number"):
            exact = Fraction(repr(instance) if isinstance(instance, float) else instance)
            if (exact / Fraction(repr(divisor) if isinstance(divisor, float) else divisor)).denominator != 1:
                yield ValidationError(f"{instance} is not a multiple of {divisor}")

    from jsonschema._legacy_keywords import dependencies_draft4_draft6_draft7

    keywords = {
        "pattern": pattern,
        "patternProperties": pattern_properties,
        "additionalProperties": additional_properties,
        "multipleOf": multiple_of,
    }
    if draft == "mixed":  # a draft-07 keyword means what draft 7 says, beside the 2020-12 ones
        keywords["dependencies"] = dependencies_draft4_draft6_draft7
    base = jsonschema.Draft202012Validator
    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = {
        **base.FORMAT_CHECKER.checkers,
        "date-time": (_reference_date_time, ()),
        "email": (_reference_email, ()),
        "regex": (_reference_regex, ()),
    }
    return jsonschema.validators.extend(base, keywords)(schema, format_checker=checker)


def _reference_email(value: Any) -> bool:
    """RFC 5321 mailboxes as jsonschema-rs' format checker reads them. python-jsonschema's own
    checker asks only for an ``@``, and under ``oneOf`` or ``not`` a laxer format accepts what the
    standard refuses: ``"a..b@c.d"`` (an empty atom) matched two branches of a ``oneOf`` for it and
    one for both backends, so the fuzz test reported the backends' correct verdict as a finding
    (seed 617632230)."""
    return not isinstance(value, str) or _rs_email().is_valid(value)


@functools.cache
def _rs_email() -> Any:
    import jsonschema_rs

    return jsonschema_rs.validator_for({"format": "email"}, validate_formats=True)


def _reference_regex(value: Any) -> bool:
    """ECMA-262 syntax (unicode mode) by ``regress``, the reference's regex engine: python-jsonschema's
    own checker compiles with Python's ``re``, whose syntax differs both ways (``(?i)a`` is Python
    only, ``\\p{L}`` ECMA only), and under ``oneOf`` or ``not`` either difference flips a verdict."""
    import regress

    if not isinstance(value, str):
        return True
    try:
        regress.Regex(value, "u")
    except Exception:  # regress raises its own error type for a syntax error
        return False
    return True


def _reference_date_time(value: Any) -> bool:
    """RFC 3339 by ``rfc3339_validator`` (python-jsonschema's own checker), with what it lacks:
    leap seconds (valid at 23:59:60 UTC), year 0000, and no trailing newline before its ``$``."""
    from rfc3339_validator import validate_rfc3339

    if not isinstance(value, str):
        return True
    text = value.upper()
    if "\n" in text or len(text) < 20:
        return False
    if text.startswith("0000"):
        text = "2000" + text[4:]  # both leap years in the proleptic Gregorian calendar
    if text[17:19] != "60":
        return validate_rfc3339(text)
    base = text[:17] + "59" + text[19:]
    if not validate_rfc3339(base):
        return False
    moment = _instant(base, "date-time")
    return moment is not _ABSENT and moment[0] % 86400 == 86399


def _schema_accepts_here(schema: Any, dialect: str, instance: Any) -> bool:
    """Draft 2020-12 (for a mixed schema: with draft-07 ``dependencies``; ``#/definitions/...``
    references resolve as JSON Pointers either way), in this process: the bounded child's side."""
    return bool(_reference_validator(schema, dialect).is_valid(instance))


class ReferenceInconclusive(Exception):
    """The reference child died (a resource limit) or stalled: it could not judge this case."""


class ReferenceFailed(Exception):
    """The reference raised while judging (in the child); the message names the exception."""


# The child imports this module and answers [name, args] with {"value": ...} or {"error": ...}.
_REFERENCE_CHILD = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[1])
from tests import fuzzing
for line in sys.stdin:
    name, args = json.loads(line)
    try:
        answer = {"value": fuzzing.REFERENCES_HERE[name](*args)}
    except Exception as exc:  # the parent raises it as ReferenceFailed
        answer = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    used = resource.getrusage(resource.RUSAGE_SELF)
    sys.stdout.write(json.dumps([answer, used.ru_utime + used.ru_stime]) + "\n")
    sys.stdout.flush()
"""


@functools.cache
def _reference_child() -> BoundedChild:
    import atexit

    root = str(Path(__file__).resolve().parents[1])
    child = BoundedChild([sys.executable, "-c", _REFERENCE_CHILD, root], cpu_s=10.0, cwd=root)
    atexit.register(child.close)
    return child


def _ask(name: str, *args: Any) -> bool:
    answer = _reference_child().call([name, list(args)])
    if answer == INCONCLUSIVE:
        raise ReferenceInconclusive(f"the {name} reference died or stalled")
    if "error" in answer:
        raise ReferenceFailed(answer["error"])
    return bool(answer["value"])


def reference_schema_accepts(schema: Any, dialect: str, instance: Any) -> bool:
    """Whether python-jsonschema (see :func:`_schema_accepts_here`) accepts ``instance``, judged in
    the bounded child; raises :class:`ReferenceInconclusive` when the child could not judge."""
    return _ask("schema", schema, dialect, instance)


_ABSENT = object()


def _at(doc: Any, pointer: str) -> Any:
    from contractrl.validators.pointer import parse_pointer

    node = doc
    for token in parse_pointer(pointer):
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and (token == "0" or token[0] != "0") and int(token) < len(node):
            node = node[int(token)]
        else:
            return _ABSENT
    return node


def _instant(text: Any, as_: str) -> Any:
    """An independent reading of dates: jsonschema-rs' format checker decides validity; the order is
    (UTC seconds, leap second, fraction), the days counted by :class:`datetime.date` within the
    400-year Gregorian cycle (so year 0000 and year 9999 with an offset are fine)."""
    import jsonschema_rs

    if not isinstance(text, str) or not jsonschema_rs.validator_for({"format": as_}, validate_formats=True).is_valid(text):
        return _ABSENT
    if as_ == "date":
        return (int(text[:4]), int(text[5:7]), int(text[8:10]))
    upper = text.upper()
    year = int(upper[:4])
    days = (year // 400) * 146097 + date(2000 + year % 400, int(upper[5:7]), int(upper[8:10])).toordinal()
    leap = upper[17:19] == "60"
    seconds = days * 86400 + int(upper[11:13]) * 3600 + int(upper[14:16]) * 60 + (59 if leap else int(upper[17:19]))
    rest, frac = upper[19:], Decimal(0)
    if rest.startswith("."):
        end = 1
        while rest[end].isdigit():
            end += 1
        frac, rest = Decimal("0." + rest[1:end]), rest[end:]
    if rest != "Z":
        seconds -= (1 if rest[0] == "+" else -1) * (int(rest[1:3]) * 3600 + int(rest[4:6]) * 60)
    return (seconds, 1 if leap else 0, frac)


def _number(value: Any) -> Any:
    if type(value) is int:
        return Fraction(value)
    if type(value) is float:
        return Fraction(repr(value))
    return _ABSENT


_CMP = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
        "==": lambda a, b: a == b, "!=": lambda a, b: a != b}  # fmt: skip


def _canon(value: Any) -> str:
    def norm(v: Any) -> Any:
        if type(v) is float and v.is_integer():
            return int(v)
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, list):
            return [norm(x) for x in v]
        return v

    return json.dumps(norm(value), sort_keys=True, ensure_ascii=False)


def _operand(value: Any, as_: str) -> Any:
    if as_ == "number":
        return _number(value)
    if as_ == "string":
        return value if isinstance(value, str) else _ABSENT
    return _instant(value, as_)


def reference_contract(contract: dict[str, Any], obj: Any) -> bool:
    """Whether ``obj`` satisfies every rule (:func:`_contract_holds_here`), judged in the bounded child;
    raises :class:`ReferenceInconclusive` when the child could not judge."""
    return _ask("contract", contract, obj)


def _contract_holds_here(contract: dict[str, Any], obj: Any) -> bool:
    """Whether ``obj`` satisfies every rule, read independently of :mod:`contractrl.validators.contracts`."""
    for rule in contract["rules"]:
        kind = rule["kind"]
        if kind == "compare":
            left = _at(obj, rule["left"])
            right = _at(obj, rule["right"]) if "right" in rule else rule["value"]
            if left is _ABSENT or right is _ABSENT:
                continue
            as_, op = rule["as"], rule["op"]
            if as_ == "number" and op in ("==", "!=") and (_number(left) is _ABSENT or _number(right) is _ABSENT):
                same = type(left) is type(right) and _canon(left) == _canon(right)
                if same != (op == "=="):
                    return False
                continue
            a, b = _operand(left, as_), _operand(right, as_)
            if a is _ABSENT or b is _ABSENT or not _CMP[op](a, b):
                return False
        elif kind == "aggregate":
            items = _at(obj, rule["array"])
            if items is _ABSENT:
                continue
            limit = _at(obj, rule["limit"]) if isinstance(rule["limit"], str) else rule["limit"]
            if limit is _ABSENT:
                continue
            if not isinstance(items, list) or _number(limit) is _ABSENT:
                return False
            if rule["agg"] == "count":
                total: Any = Fraction(len(items))
            else:
                values = [_number(_at(item, rule.get("field", ""))) for item in items]
                if any(v is _ABSENT for v in values):
                    return False
                if not values and rule["agg"] != "sum":
                    continue
                total = (
                    sum(values, Fraction(0)) if rule["agg"] == "sum" else (min(values) if rule["agg"] == "min" else max(values))
                )
            if not _CMP[rule["op"]](total, _number(limit)):
                return False
        elif kind == "unique":
            items = _at(obj, rule["array"])
            if items is _ABSENT:
                continue
            if not isinstance(items, list):
                return False
            seen = [_canon(v) for v in (_at(i, rule.get("field", "")) for i in items) if v is not _ABSENT]
            if len(seen) != len(set(seen)):
                return False
        elif _at(obj, rule["when"]) is not _ABSENT and any(_at(obj, p) is _ABSENT for p in rule["then_required"]):
            return False
    return True


REFERENCES_HERE = {"schema": _schema_accepts_here, "contract": _contract_holds_here}  # what the child runs


# --- the check -------------------------------------------------------------------------------


def check(case: Case, report: Report | None = None) -> Report:
    """Run one case through both backends (patch and whole-object transitions) and judge it."""
    import dataclasses

    from contractrl.errors import ContractRLError
    from contractrl.validators import Budgets, RepairContract, Verifier, load_contract, parse_json_text
    from contractrl.validators.jsonvalue import canonical_json

    report = report or Report()

    def finding(kind: str, backend: str, detail: Any) -> None:
        report.findings.append({"kind": kind, "seed": case.seed, "backend": backend, "detail": str(detail)[:500]})

    for backend in BACKENDS:
        try:
            verifier = Verifier.build(case.schema, load_contract(case.contract), backend=backend)
            env = RepairContract(verifier, Budgets(max_attempts=2, max_ops=case.max_ops), case.immutable)
            state = dataclasses.replace(env.initial_state(case.candidate), done=False, outcome=None)
        except ContractRLError:
            report.refused_schemas += 1
            continue
        except Exception as exc:  # the harness counts every escape
            finding("uncaught", backend, f"build: {type(exc).__name__}: {exc}")
            continue
        for how, text in (("patch", case.text), ("whole", case.whole)):
            start, start_cpu = time.perf_counter(), time.process_time()
            try:
                result = env.step(state, text) if how == "patch" else env.step_object(state, text)
            except Exception as exc:  # every escape is a finding
                finding("uncaught", backend, f"{how}: {type(exc).__name__}: {exc}")
                continue
            elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
            report.transitions += 1
            report.slowest_s = max(report.slowest_s, elapsed)
            report.slowest_cpu_s = max(report.slowest_cpu_s, cpu)
            report.outcomes[result.outcome.value] = report.outcomes.get(result.outcome.value, 0) + 1
            if cpu > TIME_BOUND_S:  # CPU time: waiting for a core on a loaded machine is no hang
                finding("hang", backend, f"{how} took {cpu:.1f} s of CPU ({elapsed:.1f} s wall)")
            accepted = result.accepted_object
            if accepted is None:
                continue
            report.accepted += 1
            try:
                if not reference_schema_accepts(case.schema, case.dialect, accepted):
                    finding("schema", backend, f"{how}: {canonical_json(accepted)[:300]}")
            except ReferenceInconclusive:  # the child died at a limit: no verdict, no finding
                report.outcomes["reference_inconclusive"] = report.outcomes.get("reference_inconclusive", 0) + 1
            except ReferenceFailed:  # a reference that cannot judge (e.g. a $ref it cannot resolve)
                report.outcomes["reference_error"] = report.outcomes.get("reference_error", 0) + 1
            try:
                if not reference_contract(case.contract, accepted):
                    finding("contract", backend, f"{how}: {canonical_json(accepted)[:300]}")
            except ReferenceInconclusive:
                report.outcomes["reference_inconclusive"] = report.outcomes.get("reference_inconclusive", 0) + 1
            except ReferenceFailed as exc:  # a reference that cannot judge is counted, never a crash of the run
                report.outcomes["reference_error"] = report.outcomes.get("reference_error", 0) + 1
                finding("reference", backend, f"{how}: contract reference failed: {exc}")
            for pointer in case.immutable:
                before, after = _at(case.candidate, pointer), _at(accepted, pointer)
                if (before is _ABSENT) != (after is _ABSENT) or (
                    before is not _ABSENT and canonical_json(before) != canonical_json(after)
                ):
                    finding("immutable", backend, f"{how}: {pointer}")
            if not parse_json_text(canonical_json(accepted), verifier.limits).is_value:
                finding("bounds", backend, f"{how}: accepted object exceeds the parser limits")
    return report
