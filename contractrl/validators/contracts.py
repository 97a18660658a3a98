"""Declarative cross-field contracts, checked after the schema.

JSON Schema cannot say "end after start" or "line amounts sum to the total". Tools declare such
rules as data (so they can be audited, hashed and shipped with a case) in four kinds: ``compare``
(ordering or equality of two fields), ``required_if`` (a field needed or forbidden when another has
a value), ``aggregate`` (sum/count/min/max over an array against a limit) and ``unique`` (a field
unique across array elements). ``compare`` and ``required_if`` may be evaluated for ``each``
element of an array, with pointers relative to the element. A rule whose operands are absent or
of the wrong type is skipped: the schema already reports those.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from ..errors import ContractSpecError
from .codes import Code
from .jsonvalue import canonical_json, json_equal
from .pointer import PointerSyntaxError, Tokens, format_pointer, parse_pointer, resolve
from .report import VerifierError, truncate_actual

_ABSENT = object()
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


def _coerce(value: Any, as_: str) -> Any:
    """The comparable form of a value, or _ABSENT when it has the wrong type for ``as_``."""
    if as_ == "number":
        return value if type(value) in (int, float) else _ABSENT
    if not isinstance(value, str):
        return _ABSENT
    if as_ == "string":
        return value
    try:
        if as_ == "date":
            return date.fromisoformat(value)
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return _ABSENT
    return parsed if parsed.tzinfo is not None else _ABSENT  # naive vs aware never compares


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

    def check(self, instance: Any) -> list[VerifierError]:
        errors: list[VerifierError] = []
        for rule in self.rules:
            errors.extend(_CHECKS[type(rule)](rule, instance))
        return errors

    def __bool__(self) -> bool:
        return bool(self.rules)


EMPTY_CONTRACT = ContractSet()


def _scopes(instance: Any, each: Tokens | None) -> Iterator[tuple[Tokens, Any]]:
    """The (base pointer, node) pairs a rule is evaluated on: the root, or each array element."""
    if each is None:
        yield (), instance
        return
    items = resolve(instance, each, None)
    if isinstance(items, list):
        for i, item in enumerate(items):
            yield (*each, str(i)), item


def _error(rule_id: str, where: Tokens, expected: str, actual: Any, message: str) -> VerifierError:
    return VerifierError(
        Code.CROSS_FIELD, format_pointer(where), expected, truncate_actual(actual), f"cross_field [{rule_id}]: {message}"
    )


def _check_compare(rule: Compare, instance: Any) -> Iterator[VerifierError]:
    for base, node in _scopes(instance, rule.each):
        left_raw = resolve(node, rule.left, _ABSENT)
        right_raw = resolve(node, rule.right, _ABSENT) if rule.right is not None else rule.value
        if left_raw is _ABSENT or right_raw is _ABSENT:
            continue
        if (
            rule.op in ("==", "!=")
            and rule.as_ == "number"
            and not (type(left_raw) in (int, float) and type(right_raw) in (int, float))
        ):
            ok = json_equal(left_raw, right_raw) == (rule.op == "==")
        else:
            left, right = _coerce(left_raw, rule.as_), _coerce(right_raw, rule.as_)
            if left is _ABSENT or right is _ABSENT:
                continue
            ok = _OPS[rule.op](left, right)
        if not ok:
            other = format_pointer((*base, *rule.right)) if rule.right is not None else canonical_json(rule.value)
            yield _error(
                rule.id,
                (*base, *rule.left),
                f"{rule.op} {other}",
                left_raw,
                f"{format_pointer((*base, *rule.left))} must be {rule.op} {other}",
            )


def _check_required_if(rule: RequiredIf, instance: Any) -> Iterator[VerifierError]:
    for base, node in _scopes(instance, rule.each):
        trigger = resolve(node, rule.when, _ABSENT)
        if trigger is _ABSENT or (rule.equals is not _ABSENT and not json_equal(trigger, rule.equals)):
            continue
        cond = format_pointer((*base, *rule.when))
        for need in rule.then_required:
            if resolve(node, need, _ABSENT) is _ABSENT:
                where = format_pointer((*base, *need))
                message = f"cross_field [{rule.id}]: required when {cond} is {canonical_json(trigger)}"
                yield VerifierError(Code.CROSS_FIELD, where, "present", "absent", message)
        for banned in rule.then_forbidden:
            value = resolve(node, banned, _ABSENT)
            if value is not _ABSENT:
                yield _error(rule.id, (*base, *banned), "absent", value, f"forbidden when {cond} is {canonical_json(trigger)}")


def _check_aggregate(rule: Aggregate, instance: Any) -> Iterator[VerifierError]:
    items = resolve(instance, rule.array, _ABSENT)
    if not isinstance(items, list):
        return
    limit = rule.limit if rule.limit_ptr is None else resolve(instance, rule.limit_ptr, _ABSENT)
    if type(limit) not in (int, float):
        return
    if rule.agg == "count":
        total: float = len(items)
    else:
        values = [resolve(item, rule.field, _ABSENT) for item in items]
        numbers = [v for v in values if type(v) in (int, float)]
        if len(numbers) != len(values) or (not numbers and rule.agg != "sum"):
            return
        total = sum(numbers) if rule.agg == "sum" else (min(numbers) if rule.agg == "min" else max(numbers))
    if rule.agg == "sum" and rule.op in ("==", "!="):
        ok = (abs(total - limit) <= 1e-9 * max(1.0, abs(limit))) == (rule.op == "==")
    else:
        ok = _OPS[rule.op](total, limit)
    if not ok:
        target = canonical_json(limit) if rule.limit_ptr is None else format_pointer(rule.limit_ptr)
        yield _error(
            rule.id,
            rule.array,
            f"{rule.agg} {rule.op} {target}",
            total,
            f"{rule.agg} over {format_pointer(rule.array)} is {total}, must be {rule.op} {target}",
        )


def _check_unique(rule: Unique, instance: Any) -> Iterator[VerifierError]:
    items = resolve(instance, rule.array, _ABSENT)
    if not isinstance(items, list):
        return
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        value = resolve(item, rule.field, _ABSENT)
        if value is _ABSENT:
            continue
        key = canonical_json(value)
        if key in seen:
            yield _error(rule.id, (*rule.array, str(i), *rule.field), "unique", value, f"duplicates element {seen[key]}")
        else:
            seen[key] = i


_CHECKS: dict[type, Callable[[Any, Any], Iterator[VerifierError]]] = {
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
        if as_ != "number" and op not in ("==", "!=") and "value" in raw and _coerce(raw["value"], as_) is _ABSENT:
            raise ContractSpecError(f"{where}: constant {raw['value']!r} is not a {as_}")
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
