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
from typing import Any, ClassVar, Protocol

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


def _need(raw: dict[str, Any], key: str, where: str) -> Any:
    if key not in raw:
        raise ContractSpecError(f"{where}: missing field {key!r}")
    return raw[key]


def _op(raw: dict[str, Any], where: str) -> str:
    op = _need(raw, "op", where)
    if op not in _OPS:
        raise ContractSpecError(f"{where}: op must be one of {list(_OPS)}, got {op!r}")
    return op


def _each(raw: dict[str, Any], where: str) -> Tokens | None:
    return _ptr(raw["each"], where) if "each" in raw else None


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


def _not_an_array(rule_id: str, where: Tokens, value: Any) -> Found:
    """Nothing when the operand is absent (the rule does not apply), else its uncomparable error."""
    if value is not _ABSENT:
        yield _uncomparable(rule_id, where, value, "an array")


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


class Rule(Protocol):
    """A rule kind: its ``kind`` keyword, the spec keys it takes besides ``id`` and ``kind``, its
    parser (the spec's errors, in the order they are checked) and its check of an instance."""

    KIND: ClassVar[str]
    KEYS: ClassVar[frozenset[str]]

    @property
    def id(self) -> str: ...

    @classmethod
    def parse(cls, rule_id: str, raw: dict[str, Any], where: str) -> Rule: ...

    def check(self, instance: Any) -> Found: ...


# Each rule kind is defined once, as one class (a :class:`Rule`), and listed once, in RULE_KINDS
# (python-jsonschema's shape: one keyword, one class, one table).


@dataclass(frozen=True, slots=True)
class Compare:
    """``left <op> right`` where right is another field or a constant."""

    KIND: ClassVar[str] = "compare"
    KEYS: ClassVar[frozenset[str]] = frozenset({"left", "op", "right", "value", "as", "each"})

    id: str
    left: Tokens
    op: str
    right: Tokens | None = None
    value: Any = None
    as_: str = "number"
    each: Tokens | None = None

    @classmethod
    def parse(cls, rule_id: str, raw: dict[str, Any], where: str) -> Compare:
        each = _each(raw, where)
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
        return cls(rule_id, _ptr(_need(raw, "left", where), where), op, right, raw.get("value"), as_, each)

    def check(self, instance: Any) -> Found:
        bad: list[tuple[VerifierError, bool]] = []
        for base, node in _scopes(instance, self.each, self.id, bad):
            left_raw = resolve(node, self.left, _ABSENT)
            right_raw = resolve(node, self.right, _ABSENT) if self.right is not None else self.value
            if left_raw is _ABSENT or right_raw is _ABSENT:
                continue
            if self.op in ("==", "!=") and self.as_ == "number" and (_number(left_raw) is None or _number(right_raw) is None):
                ok = json_equal(left_raw, right_raw) == (self.op == "==")
            else:
                left, right = _coerce(left_raw, self.as_), _coerce(right_raw, self.as_)
                if left is _UNCOMPARABLE or right is _UNCOMPARABLE:
                    if left is _UNCOMPARABLE:
                        yield _uncomparable(self.id, (*base, *self.left), left_raw, _WHAT[self.as_])
                    if right is _UNCOMPARABLE:
                        where = (*base, *self.right) if self.right is not None else (*base, *self.left)
                        yield _uncomparable(self.id, where, right_raw, _WHAT[self.as_])
                    continue
                ok = _OPS[self.op](left, right)
            if not ok:
                other = format_pointer((*base, *self.right)) if self.right is not None else canonical_json(self.value)
                yield (
                    _error(
                        self.id,
                        (*base, *self.left),
                        f"{self.op} {other}",
                        left_raw,
                        f"{format_pointer((*base, *self.left))} must be {self.op} {other}",
                    ),
                    False,
                )
        yield from bad


@dataclass(frozen=True, slots=True)
class RequiredIf:
    """When ``when`` equals ``equals`` (or merely exists), ``then_required`` must exist and
    ``then_forbidden`` must not."""

    KIND: ClassVar[str] = "required_if"
    KEYS: ClassVar[frozenset[str]] = frozenset({"when", "equals", "then_required", "then_forbidden", "each"})

    id: str
    when: Tokens
    equals: Any = _ABSENT
    then_required: tuple[Tokens, ...] = ()
    then_forbidden: tuple[Tokens, ...] = ()
    each: Tokens | None = None

    @classmethod
    def parse(cls, rule_id: str, raw: dict[str, Any], where: str) -> RequiredIf:
        each = _each(raw, where)
        required = tuple(_ptr(p, where) for p in raw.get("then_required", []))
        forbidden = tuple(_ptr(p, where) for p in raw.get("then_forbidden", []))
        if not required and not forbidden:
            raise ContractSpecError(f"{where}: give then_required or then_forbidden")
        return cls(rule_id, _ptr(_need(raw, "when", where), where), raw.get("equals", _ABSENT), required, forbidden, each)

    def check(self, instance: Any) -> Found:
        bad: list[tuple[VerifierError, bool]] = []
        for base, node in _scopes(instance, self.each, self.id, bad):
            trigger = resolve(node, self.when, _ABSENT)
            if trigger is _ABSENT or (self.equals is not _ABSENT and not json_equal(trigger, self.equals)):
                continue
            cond = format_pointer((*base, *self.when))
            for need in self.then_required:
                if resolve(node, need, _ABSENT) is _ABSENT:
                    where = format_pointer((*base, *need))
                    message = f"cross_field [{self.id}]: required when {cond} is {canonical_json(trigger)}"
                    yield VerifierError(Code.CROSS_FIELD, where, "present", "absent", message), False
            for banned in self.then_forbidden:
                value = resolve(node, banned, _ABSENT)
                if value is not _ABSENT:
                    yield (
                        _error(self.id, (*base, *banned), "absent", value, f"forbidden when {cond} is {canonical_json(trigger)}"),
                        False,
                    )
        yield from bad


@dataclass(frozen=True, slots=True)
class Aggregate:
    """``agg(field over array) <op> limit`` with ``limit`` a constant or another field."""

    KIND: ClassVar[str] = "aggregate"
    KEYS: ClassVar[frozenset[str]] = frozenset({"array", "agg", "op", "field", "limit"})

    id: str
    array: Tokens
    agg: str
    op: str
    field: Tokens = ()
    limit: float | None = None
    limit_ptr: Tokens | None = None

    @classmethod
    def parse(cls, rule_id: str, raw: dict[str, Any], where: str) -> Aggregate:
        agg = _need(raw, "agg", where)
        if agg not in _AGGS:
            raise ContractSpecError(f"{where}: agg must be one of {list(_AGGS)}")
        limit = _need(raw, "limit", where)
        field_ptr = _ptr(raw.get("field", ""), where)
        if isinstance(limit, str):
            return cls(
                rule_id, _ptr(_need(raw, "array", where), where), agg, _op(raw, where), field_ptr, None, _ptr(limit, where)
            )
        if type(limit) not in (int, float):
            raise ContractSpecError(f"{where}: limit must be a number or a pointer")
        return cls(rule_id, _ptr(_need(raw, "array", where), where), agg, _op(raw, where), field_ptr, limit)

    def check(self, instance: Any) -> Found:
        items = resolve(instance, self.array, _ABSENT)
        if not isinstance(items, list):
            yield from _not_an_array(self.id, self.array, items)
            return
        limit_raw: Any = self.limit if self.limit_ptr is None else resolve(instance, self.limit_ptr, _ABSENT)
        if limit_raw is _ABSENT:
            return
        limit = _number(limit_raw)
        if limit is None:
            yield _uncomparable(self.id, self.limit_ptr or self.array, limit_raw, "a number")
            return
        if self.agg == "count":
            total = Fraction(len(items))
        else:
            numbers: list[Fraction] = []
            broken = False
            for i, item in enumerate(items):
                value = resolve(item, self.field, _ABSENT)
                number = _number(value)
                if number is None:
                    broken = True
                    where = (*self.array, str(i), *self.field)
                    yield _uncomparable(self.id, where, None if value is _ABSENT else value, "a number")
                else:
                    numbers.append(number)
            if broken:
                return
            if not numbers and self.agg != "sum":
                return  # min/max of nothing: the rule has nothing to bound
            total = sum(numbers, Fraction(0)) if self.agg == "sum" else (min(numbers) if self.agg == "min" else max(numbers))
        if not _OPS[self.op](total, limit):
            target = canonical_json(limit_raw) if self.limit_ptr is None else format_pointer(self.limit_ptr)
            shown = _shown(total)
            yield (
                _error(
                    self.id,
                    self.array,
                    f"{self.agg} {self.op} {target}",
                    shown,
                    f"{self.agg} over {format_pointer(self.array)} is {shown}, must be {self.op} {target}",
                ),
                False,
            )


@dataclass(frozen=True, slots=True)
class Unique:
    """``field`` takes distinct values across the elements of ``array``."""

    KIND: ClassVar[str] = "unique"
    KEYS: ClassVar[frozenset[str]] = frozenset({"array", "field"})

    id: str
    array: Tokens
    field: Tokens = ()

    @classmethod
    def parse(cls, rule_id: str, raw: dict[str, Any], where: str) -> Unique:
        return cls(rule_id, _ptr(_need(raw, "array", where), where), _ptr(raw.get("field", ""), where))

    def check(self, instance: Any) -> Found:
        items = resolve(instance, self.array, _ABSENT)
        if not isinstance(items, list):
            yield from _not_an_array(self.id, self.array, items)
            return
        seen: dict[str, int] = {}
        for i, item in enumerate(items):
            value = resolve(item, self.field, _ABSENT)
            if value is _ABSENT:
                continue
            key = _unique_key(value)
            if key in seen:
                yield (
                    _error(self.id, (*self.array, str(i), *self.field), "unique", value, f"duplicates element {seen[key]}"),
                    False,
                )
            else:
                seen[key] = i


# the one table of rule kinds, by the ``kind`` keyword of a rule spec
RULE_KINDS: dict[str, type[Rule]] = {kind.KIND: kind for kind in (Compare, RequiredIf, Aggregate, Unique)}
_COMMON_KEYS = frozenset({"id", "kind"})


@dataclass(frozen=True, slots=True)
class ContractSet:
    """The cross-field rules of one tool."""

    rules: tuple[Rule, ...] = field(default=())

    def check(self, instance: Any, reported: Collection[str] = ()) -> list[VerifierError]:
        """Every violated rule. ``reported`` holds pointers the schema already rejected: an operand
        that cannot be compared at or under one of them is not reported a second time."""
        errors: list[VerifierError] = []
        for rule in self.rules:
            for error, uncomparable in rule.check(instance):
                if not (uncomparable and reported and _under_any(error.pointer, reported)):
                    errors.append(error)
        return errors

    def __bool__(self) -> bool:
        return bool(self.rules)


EMPTY_CONTRACT = ContractSet()


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
        if kind not in RULE_KINDS:
            raise ContractSpecError(f"{where}: kind must be one of {sorted(RULE_KINDS)}, got {kind!r}")
        unknown = set(raw) - RULE_KINDS[kind].KEYS - _COMMON_KEYS
        if unknown:
            raise ContractSpecError(f"{where}: unknown fields {sorted(unknown)} for kind {kind!r}")
        rule_id = str(raw.get("id", f"{kind}-{i}"))
        if rule_id in ids:
            raise ContractSpecError(f"{where}: duplicate rule id {rule_id!r}")
        ids.add(rule_id)
        rules.append(RULE_KINDS[kind].parse(rule_id, raw, f"{where} ({rule_id})"))
    return ContractSet(tuple(rules))
