"""Declarative cross-field contracts, checked after the schema.

JSON Schema cannot say "end after start" or "line amounts sum to the total". Tools declare such
rules as data (so they can be audited, hashed and shipped with a case) in four kinds: ``compare``
(ordering or equality of two fields), ``required_if`` (a field needed or forbidden when another has
a value), ``aggregate`` (sum/count/min/max over an array against a limit) and ``unique`` (a field
unique across array elements). ``compare`` and ``required_if`` may be evaluated for ``each``
element of an array, with pointers relative to the element.

Fail-closed: a rule whose operand is absent does not apply (presence is the schema's or a
``required_if`` rule's job), but an operand that is present and cannot be compared (the wrong
type, a date that is not RFC 3339, naive and zone-aware times) is a ``cross_field`` error, never a
pass. Where the schema already reported an error at or above that operand, the verifier drops the
duplicate (see :meth:`ContractSet.check`), so a report still leads with the schema's code.
Numbers compare exactly (integers and the shortest decimal of a float, as fractions), dates and
date-times by their RFC 3339 instants (:mod:`.rfc3339`).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ..errors import ContractSpecError
from .codes import Code
from .jsonvalue import canonical_json, json_equal
from .pointer import PointerSyntaxError, Tokens, format_pointer, parse_pointer, resolve
from .report import VerifierError, truncate_actual
from .rfc3339 import parse_date, parse_date_time

_ABSENT = object()
_UNCOMPARABLE = object()
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}
_AS = ("number", "string", "date", "date-time")
_AGGS = ("sum", "count", "min", "max")


def _ptr(value: Any, where: str) -> Tokens:
    try:
        return parse_pointer(value)
    except PointerSyntaxError as exc:
        raise ContractSpecError(f"{where}: {exc}") from exc


def _number(value: Any) -> Fraction | None:
    """A JSON number as an exact fraction (a float as its shortest decimal); None for anything else."""
    t = type(value)
    if t is int:
        return Fraction(value)
    if t is float and math.isfinite(value):
        return Fraction(repr(value))
    return None


def _coerce(value: Any, as_: str) -> Any:
    """The exactly comparable form of a value, or _UNCOMPARABLE when it is not a valid ``as_``."""
    if as_ == "number":
        number = _number(value)
        return _UNCOMPARABLE if number is None else number
    if not isinstance(value, str):
        return _UNCOMPARABLE
    if as_ == "string":
        return value
    key = parse_date(value) if as_ == "date" else parse_date_time(value)
    return _UNCOMPARABLE if key is None else key


@dataclass(frozen=True, slots=True)
class Compare:
    """``left <op> right`` where right is another field or a constant."""

    id: str
    left: Tokens
    op: str
    right: Tokens | None = None
    value: Any = None
    as_: str = "number"
    each: Tokens | None = None


@dataclass(frozen=True, slots=True)
class RequiredIf:
    """When ``when`` equals ``equals`` (or merely exists), ``then_required`` must exist and
    ``then_forbidden`` must not."""

    id: str
    when: Tokens
    equals: Any = _ABSENT
    then_required: tuple[Tokens, ...] = ()
    then_forbidden: tuple[Tokens, ...] = ()
    each: Tokens | None = None


@dataclass(frozen=True, slots=True)
class Aggregate:
    """``agg(field over array) <op> limit`` with ``limit`` a constant or another field."""

    id: str
    array: Tokens
    agg: str
    op: str
    field: Tokens = ()
    limit: float | None = None
    limit_ptr: Tokens | None = None


@dataclass(frozen=True, slots=True)
class Unique:
    """``field`` takes distinct values across the elements of ``array``."""

    id: str
    array: Tokens
    field: Tokens = ()


Rule = Compare | RequiredIf | Aggregate | Unique


@dataclass(frozen=True, slots=True)
class ContractSet:
    """The cross-field rules of one tool."""

    rules: tuple[Rule, ...] = field(default=())

    def check(self, instance: Any, reported: Collection[str] = ()) -> list[VerifierError]:
        """Every violated rule. ``reported`` holds pointers the schema already rejected: an operand
        that cannot be compared at or under one of them is not reported a second time."""
        errors: list[VerifierError] = []
        for rule in self.rules:
            for error, uncomparable in _CHECKS[type(rule)](rule, instance):
                if not (uncomparable and reported and _under_any(error.pointer, reported)):
                    errors.append(error)
        return errors

    def __bool__(self) -> bool:
        return bool(self.rules)


EMPTY_CONTRACT = ContractSet()
Found = Iterator[tuple[VerifierError, bool]]  # (error, whether it is an operand that cannot be compared)


def _under_any(pointer: str, prefixes: Collection[str]) -> bool:
    return any(pointer == p or pointer.startswith(p + "/") or p == "" for p in prefixes)


def _uncomparable(rule_id: str, where: Tokens, value: Any, what: str) -> tuple[VerifierError, bool]:
    pointer = format_pointer(where)
    return (
        VerifierError(
            Code.CROSS_FIELD,
            pointer,
            what,
            truncate_actual(value),
            f"cross_field [{rule_id}]: {pointer or '/'} is not {what}, so the rule cannot be checked",
        ),
        True,
    )


_WHAT = {"number": "a number", "string": "a string", "date": "an RFC 3339 date", "date-time": "an RFC 3339 date-time"}


def _scopes(
    instance: Any, each: Tokens | None, rule_id: str, errors: list[tuple[VerifierError, bool]]
) -> Iterator[tuple[Tokens, Any]]:
    """The (base pointer, node) pairs a rule is evaluated on: the root, or each array element.

    ``each`` naming something that is present but not an array is recorded in ``errors``."""
    if each is None:
        yield (), instance
        return
    items = resolve(instance, each, _ABSENT)
    if isinstance(items, list):
        for i, item in enumerate(items):
            yield (*each, str(i)), item
    elif items is not _ABSENT:
        errors.append(_uncomparable(rule_id, each, items, "an array"))


def _error(rule_id: str, where: Tokens, expected: str, actual: Any, message: str) -> VerifierError:
    return VerifierError(
        Code.CROSS_FIELD, format_pointer(where), expected, truncate_actual(actual), f"cross_field [{rule_id}]: {message}"
    )


def _check_compare(rule: Compare, instance: Any) -> Found:
    bad: list[tuple[VerifierError, bool]] = []
    for base, node in _scopes(instance, rule.each, rule.id, bad):
        left_raw = resolve(node, rule.left, _ABSENT)
        right_raw = resolve(node, rule.right, _ABSENT) if rule.right is not None else rule.value
        if left_raw is _ABSENT or right_raw is _ABSENT:
            continue
        if rule.op in ("==", "!=") and rule.as_ == "number" and (_number(left_raw) is None or _number(right_raw) is None):
            ok = json_equal(left_raw, right_raw) == (rule.op == "==")
        else:
            left, right = _coerce(left_raw, rule.as_), _coerce(right_raw, rule.as_)
            if left is _UNCOMPARABLE or right is _UNCOMPARABLE:
                if left is _UNCOMPARABLE:
                    yield _uncomparable(rule.id, (*base, *rule.left), left_raw, _WHAT[rule.as_])
                if right is _UNCOMPARABLE:
                    where = (*base, *rule.right) if rule.right is not None else (*base, *rule.left)
                    yield _uncomparable(rule.id, where, right_raw, _WHAT[rule.as_])
                continue
            ok = _OPS[rule.op](left, right)
        if not ok:
            other = format_pointer((*base, *rule.right)) if rule.right is not None else canonical_json(rule.value)
            yield (
                _error(
                    rule.id,
                    (*base, *rule.left),
                    f"{rule.op} {other}",
                    left_raw,
                    f"{format_pointer((*base, *rule.left))} must be {rule.op} {other}",
                ),
                False,
            )
    yield from bad


def _check_required_if(rule: RequiredIf, instance: Any) -> Found:
    bad: list[tuple[VerifierError, bool]] = []
    for base, node in _scopes(instance, rule.each, rule.id, bad):
        trigger = resolve(node, rule.when, _ABSENT)
        if trigger is _ABSENT or (rule.equals is not _ABSENT and not json_equal(trigger, rule.equals)):
            continue
        cond = format_pointer((*base, *rule.when))
        for need in rule.then_required:
            if resolve(node, need, _ABSENT) is _ABSENT:
                where = format_pointer((*base, *need))
                message = f"cross_field [{rule.id}]: required when {cond} is {canonical_json(trigger)}"
                yield VerifierError(Code.CROSS_FIELD, where, "present", "absent", message), False
        for banned in rule.then_forbidden:
            value = resolve(node, banned, _ABSENT)
            if value is not _ABSENT:
                yield (
                    _error(rule.id, (*base, *banned), "absent", value, f"forbidden when {cond} is {canonical_json(trigger)}"),
                    False,
                )
    yield from bad


def _not_an_array(rule_id: str, where: Tokens, value: Any) -> Found:
    """Nothing when the operand is absent (the rule does not apply), else its uncomparable error."""
    if value is not _ABSENT:
        yield _uncomparable(rule_id, where, value, "an array")


def _check_aggregate(rule: Aggregate, instance: Any) -> Found:
    items = resolve(instance, rule.array, _ABSENT)
    if not isinstance(items, list):
        yield from _not_an_array(rule.id, rule.array, items)
        return
    limit_raw: Any = rule.limit if rule.limit_ptr is None else resolve(instance, rule.limit_ptr, _ABSENT)
    if limit_raw is _ABSENT:
        return
    limit = _number(limit_raw)
    if limit is None:
        yield _uncomparable(rule.id, rule.limit_ptr or rule.array, limit_raw, "a number")
        return
    if rule.agg == "count":
        total = Fraction(len(items))
    else:
        numbers: list[Fraction] = []
        broken = False
        for i, item in enumerate(items):
            value = resolve(item, rule.field, _ABSENT)
            number = _number(value)
            if number is None:
                broken = True
                yield _uncomparable(rule.id, (*rule.array, str(i), *rule.field), None if value is _ABSENT else value, "a number")
            else:
                numbers.append(number)
        if broken:
            return
        if not numbers and rule.agg != "sum":
            return  # min/max of nothing: the rule has nothing to bound
        total = sum(numbers, Fraction(0)) if rule.agg == "sum" else (min(numbers) if rule.agg == "min" else max(numbers))
    if not _OPS[rule.op](total, limit):
        target = canonical_json(limit_raw) if rule.limit_ptr is None else format_pointer(rule.limit_ptr)
        shown = _shown(total)
        yield (
            _error(
                rule.id,
                rule.array,
                f"{rule.agg} {rule.op} {target}",
                shown,
                f"{rule.agg} over {format_pointer(rule.array)} is {shown}, must be {rule.op} {target}",
            ),
            False,
        )


def _shown(total: Fraction) -> Any:
    """An aggregate for a report: exact when it is a modest integer, else its nearest float."""
    if total.denominator == 1 and total.numerator.bit_length() < 1000:
        return int(total)
    try:
        return float(total)
    except OverflowError:
        return "beyond the float range"


def _unique_key(value: Any) -> str:
    """Canonical text under which JSON-equal values collide (``1`` and ``1.0`` are one number)."""
    return canonical_json(_integral(value))


def _integral(value: Any) -> Any:
    t = type(value)
    if t is float and value.is_integer():
        return int(value)
    if t is dict:
        return {k: _integral(v) for k, v in value.items()}
    if t is list:
        return [_integral(v) for v in value]
    return value


def _check_unique(rule: Unique, instance: Any) -> Found:
    items = resolve(instance, rule.array, _ABSENT)
    if not isinstance(items, list):
        yield from _not_an_array(rule.id, rule.array, items)
        return
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        value = resolve(item, rule.field, _ABSENT)
        if value is _ABSENT:
            continue
        key = _unique_key(value)
        if key in seen:
            yield _error(rule.id, (*rule.array, str(i), *rule.field), "unique", value, f"duplicates element {seen[key]}"), False
        else:
            seen[key] = i


_CHECKS: dict[type, Callable[[Any, Any], Found]] = {
    Compare: _check_compare,
    RequiredIf: _check_required_if,
    Aggregate: _check_aggregate,
    Unique: _check_unique,
}

_FIELDS = {
    "compare": {"id", "kind", "left", "op", "right", "value", "as", "each"},
    "required_if": {"id", "kind", "when", "equals", "then_required", "then_forbidden", "each"},
    "aggregate": {"id", "kind", "array", "agg", "op", "field", "limit"},
    "unique": {"id", "kind", "array", "field"},
}


def load_contract(spec: Any) -> ContractSet:
    """Build a ContractSet from ``{"rules": [...]}`` (or a bare list), rejecting unknown fields."""
    rules_spec = spec.get("rules") if isinstance(spec, dict) else spec
    if isinstance(spec, dict) and set(spec) - {"rules", "description"}:
        raise ContractSpecError(f"unknown contract fields {sorted(set(spec) - {'rules', 'description'})}")
    if not isinstance(rules_spec, list):
        raise ContractSpecError("a contract is {'rules': [...]} or a list of rules")
    rules: list[Rule] = []
    ids: set[str] = set()
    for i, raw in enumerate(rules_spec):
        where = f"rule {i}"
        if not isinstance(raw, dict):
            raise ContractSpecError(f"{where}: a rule must be an object")
        kind = raw.get("kind")
        if kind not in _FIELDS:
            raise ContractSpecError(f"{where}: kind must be one of {sorted(_FIELDS)}, got {kind!r}")
        unknown = set(raw) - _FIELDS[kind]
        if unknown:
            raise ContractSpecError(f"{where}: unknown fields {sorted(unknown)} for kind {kind!r}")
        rule_id = str(raw.get("id", f"{kind}-{i}"))
        if rule_id in ids:
            raise ContractSpecError(f"{where}: duplicate rule id {rule_id!r}")
        ids.add(rule_id)
        rules.append(_build(kind, rule_id, raw, f"{where} ({rule_id})"))
    return ContractSet(tuple(rules))


def _need(raw: dict[str, Any], key: str, where: str) -> Any:
    if key not in raw:
        raise ContractSpecError(f"{where}: missing field {key!r}")
    return raw[key]


def _op(raw: dict[str, Any], where: str) -> str:
    op = _need(raw, "op", where)
    if op not in _OPS:
        raise ContractSpecError(f"{where}: op must be one of {list(_OPS)}, got {op!r}")
    return op


def _build(kind: str, rule_id: str, raw: dict[str, Any], where: str) -> Rule:
    each = _ptr(raw["each"], where) if "each" in raw else None
    if kind == "compare":
        as_ = raw.get("as", "number")
        if as_ not in _AS:
            raise ContractSpecError(f"{where}: 'as' must be one of {list(_AS)}")
        if ("right" in raw) == ("value" in raw):
            raise ContractSpecError(f"{where}: give exactly one of 'right' (a pointer) or 'value' (a constant)")
        op = _op(raw, where)
        equality_of_any = as_ == "number" and op in ("==", "!=")  # numbers' == is JSON equality of any values
        if "value" in raw and not equality_of_any and _coerce(raw["value"], as_) is _UNCOMPARABLE:
            raise ContractSpecError(f"{where}: constant {raw['value']!r} is not {_WHAT[as_]}")
        right = _ptr(raw["right"], where) if "right" in raw else None
        return Compare(rule_id, _ptr(_need(raw, "left", where), where), op, right, raw.get("value"), as_, each)
    if kind == "required_if":
        required = tuple(_ptr(p, where) for p in raw.get("then_required", []))
        forbidden = tuple(_ptr(p, where) for p in raw.get("then_forbidden", []))
        if not required and not forbidden:
            raise ContractSpecError(f"{where}: give then_required or then_forbidden")
        return RequiredIf(rule_id, _ptr(_need(raw, "when", where), where), raw.get("equals", _ABSENT), required, forbidden, each)
    if kind == "aggregate":
        agg = _need(raw, "agg", where)
        if agg not in _AGGS:
            raise ContractSpecError(f"{where}: agg must be one of {list(_AGGS)}")
        limit = _need(raw, "limit", where)
        field_ptr = _ptr(raw.get("field", ""), where)
        if isinstance(limit, str):
            return Aggregate(
                rule_id, _ptr(_need(raw, "array", where), where), agg, _op(raw, where), field_ptr, None, _ptr(limit, where)
            )
        if type(limit) not in (int, float):
            raise ContractSpecError(f"{where}: limit must be a number or a pointer")
        return Aggregate(rule_id, _ptr(_need(raw, "array", where), where), agg, _op(raw, where), field_ptr, limit)
    return Unique(rule_id, _ptr(_need(raw, "array", where), where), _ptr(raw.get("field", ""), where))
