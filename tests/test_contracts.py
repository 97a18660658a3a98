"""Cross-field rules: each kind, per-element scopes, and clear errors for bad rule files."""

from __future__ import annotations

import pytest

from contractrl.errors import ContractSpecError
from contractrl.validators import Code, Verifier, load_contract

RULES = load_contract(
    {
        "rules": [
            {"id": "window", "kind": "compare", "left": "/start", "op": "<", "right": "/end", "as": "date-time"},
            {"id": "cap", "kind": "compare", "left": "/count", "op": "<=", "value": 10},
            {"id": "rrule", "kind": "required_if", "when": "/repeat", "equals": True, "then_required": ["/rule"]},
            {"id": "no_cc", "kind": "required_if", "when": "/private", "then_forbidden": ["/cc"]},
            {
                "id": "total",
                "kind": "aggregate",
                "array": "/lines",
                "field": "/amount",
                "agg": "sum",
                "op": "==",
                "limit": "/total",
            },
            {"id": "few", "kind": "aggregate", "array": "/lines", "agg": "count", "op": "<=", "limit": 3},
            {"id": "sku", "kind": "unique", "array": "/lines", "field": "/sku"},
            {"id": "qty", "kind": "compare", "each": "/lines", "left": "/amount", "op": ">", "value": 0},
        ]
    }
)
GOOD = {
    "start": "2026-01-01T09:00:00Z",
    "end": "2026-01-01T10:00:00+00:00",
    "count": 3,
    "repeat": True,
    "rule": "weekly",
    "lines": [{"sku": "a", "amount": 1.5}, {"sku": "b", "amount": 2.5}],
    "total": 4,
}


def _errors(instance: dict) -> list[tuple[str, str]]:
    return [(e.pointer, e.message.split("]")[0] + "]") for e in RULES.check(instance)]


def test_good_instance_passes() -> None:
    assert RULES.check(GOOD) == []


@pytest.mark.parametrize(
    ("change", "pointer", "rule"),
    [
        ({"end": "2026-01-01T08:00:00Z"}, "/start", "window"),
        ({"count": 11}, "/count", "cap"),
        ({"rule": None, "_drop": "rule"}, "/rule", "rrule"),
        ({"private": "yes", "cc": ["x"]}, "/cc", "no_cc"),
        ({"total": 5}, "/lines", "total"),
        ({"lines": [{"sku": "a", "amount": 1}, {"sku": "a", "amount": 3}]}, "/lines/1/sku", "sku"),
        ({"lines": [{"sku": "a", "amount": 5}, {"sku": "b", "amount": -1}]}, "/lines/1/amount", "qty"),
        ({"lines": [{"sku": str(i), "amount": 1} for i in range(4)]}, "/lines", "few"),
    ],
)
def test_each_rule_kind_reports_cross_field_with_pointer(change: dict, pointer: str, rule: str) -> None:
    instance = {**GOOD, **{k: v for k, v in change.items() if k != "_drop"}}
    if "_drop" in change:
        del instance[change["_drop"]]
    found = RULES.check(instance)
    assert all(e.code is Code.CROSS_FIELD for e in found)
    assert (pointer, f"cross_field [{rule}]") in _errors(instance)


def test_rules_skip_absent_or_mistyped_operands() -> None:
    assert RULES.check({"start": 5, "end": "2026-01-01T10:00:00Z", "lines": "nope"}) == []
    # naive and aware date-times never compare: skipped rather than guessed
    assert RULES.check({"start": "2026-01-01T11:00:00", "end": "2026-01-01T10:00:00Z"}) == []


def test_equality_is_type_strict() -> None:
    rules = load_contract([{"kind": "compare", "left": "/a", "op": "==", "right": "/b"}])
    assert rules.check({"a": 1, "b": 1.0}) == []
    assert len(rules.check({"a": 1, "b": True})) == 1


def test_verifier_runs_contracts_after_schema() -> None:
    verifier = Verifier.build({"type": "object", "properties": {"count": {"type": "integer"}}}, RULES)
    report = verifier.verify({**GOOD, "count": 12})
    assert report.codes == (Code.CROSS_FIELD,)
    report = verifier.verify({**GOOD, "count": "x", "total": 9})
    assert set(report.codes) == {Code.CROSS_FIELD, Code.WRONG_TYPE}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"rules": [{"kind": "compare", "left": "/a", "op": "~", "value": 1}]}, "op must be one of"),
        ({"rules": [{"kind": "compare", "left": "/a", "op": "<", "value": 1, "right": "/b"}]}, "exactly one of"),
        ({"rules": [{"kind": "magic"}]}, "kind must be one of"),
        ({"rules": [{"kind": "unique", "array": "/a", "colour": "red"}]}, "unknown fields"),
        ({"rules": [{"kind": "unique", "array": "a"}]}, "must be empty or start with"),
        ({"rules": [{"kind": "required_if", "when": "/a"}]}, "then_required or then_forbidden"),
        ({"rules": [{"kind": "aggregate", "array": "/a", "agg": "median", "op": "<", "limit": 1}]}, "agg must be"),
        ({"rules": [{"id": "x", "kind": "unique", "array": "/a"}, {"id": "x", "kind": "unique", "array": "/b"}]}, "duplicate"),
        ({"rule": []}, "unknown contract fields"),
        ("rules", "a contract is"),
    ],
)
def test_bad_rule_files_are_clear_errors(spec: object, message: str) -> None:
    with pytest.raises(ContractSpecError, match=message):
        load_contract(spec)
