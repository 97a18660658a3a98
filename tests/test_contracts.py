"""Cross-field rules: each kind, per-element scopes, and clear errors for bad rule files."""

from __future__ import annotations

import re

import pytest

from contractrl.errors import ContractSpecError
from contractrl.validators import Code, Verifier, load_contract
from contractrl.validators.contracts import RULE_KINDS

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


def test_rules_with_absent_operands_do_not_apply() -> None:
    assert RULES.check({"count": 3}) == []


@pytest.mark.parametrize(
    ("instance", "pointer"),
    [
        ({"start": 5, "end": "2026-01-01T10:00:00Z"}, "/start"),
        # a naive time is not RFC 3339: refused, never guessed and never skipped
        ({"start": "2026-01-01T11:00:00", "end": "2026-01-01T10:00:00Z"}, "/start"),
        ({"start": "2026-01-01T09:00:00Z", "end": "tomorrow"}, "/end"),
        ({"count": "11"}, "/count"),
        ({"lines": "nope", "total": 4}, "/lines"),
        ({"lines": [{"sku": "a", "amount": "1"}], "total": 1}, "/lines/0/amount"),
        ({"lines": [{"sku": "a"}], "total": 1}, "/lines/0/amount"),
        ({"lines": [{"sku": "a", "amount": 1}], "total": "1"}, "/total"),
        ({"lines": [{"sku": "a", "amount": True}], "total": 1}, "/lines/0/amount"),
    ],
)
def test_operands_that_cannot_be_compared_are_refused(instance: dict, pointer: str) -> None:
    found = RULES.check(instance)
    assert (pointer, "cannot be checked") in [(e.pointer, e.message[-17:]) for e in found], found
    assert all(e.code is Code.CROSS_FIELD for e in found)


def test_lower_case_rfc3339_separators_are_compared_not_skipped() -> None:
    """The reported instance: a valid RFC 3339 end before start, written in lower case."""
    window = load_contract([{"kind": "compare", "left": "/start", "op": "<", "right": "/end", "as": "date-time"}])
    assert window.check({"start": "2026-12-01t10:00:00z", "end": "2026-11-30t09:00:00z"})
    assert window.check({"start": "2026-11-30t09:00:00z", "end": "2026-12-01T10:00:00+01:00"}) == []
    # a leap second orders after :59 and before the next day
    assert window.check({"start": "2016-12-31T23:59:59.9Z", "end": "2016-12-31T23:59:60Z"}) == []
    assert window.check({"start": "2016-12-31T23:59:60.5Z", "end": "2017-01-01T00:00:00Z"}) == []
    assert window.check({"start": "2017-01-01T00:00:00Z", "end": "2016-12-31T23:59:60Z"})
    # a leap second anywhere but 23:59:60 UTC does not exist
    assert window.check({"start": "2016-12-31T12:00:60Z", "end": "2017-01-01T00:00:00Z"})[0].expected.startswith("an RFC")


def test_schema_errors_are_not_repeated_as_uncomparable_operands() -> None:
    verifier = Verifier.build({"type": "object", "properties": {"count": {"type": "integer"}}}, RULES)
    report = verifier.verify({"count": "x"})
    assert [(e.code.value, e.pointer) for e in report.errors] == [("wrong_type", "/count")]
    # without a schema error at the operand the contract itself refuses it
    assert Verifier.build({"type": "object"}, RULES).verify({"count": "x"}).codes == (Code.CROSS_FIELD,)


def test_sums_and_uniqueness_are_exact() -> None:
    rules = load_contract(
        [
            {"kind": "aggregate", "array": "/l", "field": "/a", "agg": "sum", "op": "==", "limit": "/t"},
            {"kind": "unique", "array": "/u"},
        ]
    )
    assert rules.check({"l": [{"a": 0.1}, {"a": 0.2}], "t": 0.3, "u": [1, 2]}) == []
    assert rules.check({"l": [{"a": 10**30}, {"a": 1}], "t": 10**30, "u": []})  # no tolerance hides the 1
    assert [e.pointer for e in rules.check({"l": [], "t": 0, "u": [1, 1.0]})] == ["/u/1"]


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


def test_each_rule_kind_is_one_entry_of_the_table() -> None:
    """A kind's keyword, keys, parser and check are one class listed once: the kinds a bad rule is
    told about are the table's, and a key only another kind takes is refused naming this kind."""
    assert {type(rule).KIND for rule in RULES.rules} == set(RULE_KINDS)
    with pytest.raises(
        ContractSpecError, match=re.escape("rule 0: kind must be one of ['aggregate', 'compare', 'required_if', 'unique']")
    ):
        load_contract([{"kind": "magic"}])
    every_key = set().union(*(kind.KEYS for kind in RULE_KINDS.values()))
    for name, kind in RULE_KINDS.items():
        for key in sorted(every_key - kind.KEYS):
            with pytest.raises(ContractSpecError, match=re.escape(f"unknown fields [{key!r}] for kind {name!r}")):
                load_contract([{"kind": name, key: "/x"}])
