"""One test per schema code, on both backends, with identical reports."""

from __future__ import annotations

from typing import Any

import pytest

from contractrl.validators import Code, Verifier, VerifierReport
from contractrl.validators.report import ACTUAL_MAX_CHARS

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 8, "pattern": "^[a-z]+$"},
        "count": {"type": "integer", "minimum": 1, "maximum": 10, "multipleOf": 1},
        "mode": {"enum": ["fast", "slow"]},
        "kind": {"const": "event"},
        "when": {"type": "string", "format": "date"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2, "uniqueItems": True},
        "target": {
            "oneOf": [
                {"type": "object", "properties": {"t": {"const": "file"}, "path": {"type": "string"}}, "required": ["t", "path"]},
                {"type": "object", "properties": {"t": {"const": "url"}, "url": {"type": "string"}}, "required": ["t", "url"]},
            ]
        },
        "card": {"type": "string"},
        "a/b~c": {"type": "boolean"},
    },
    "required": ["name", "count"],
    "dependentRequired": {"card": ["billing"]},
    "additionalProperties": False,
}
BASE = {"name": "abc", "count": 3}


def _report(instance: Any, backend: str) -> VerifierReport:
    return Verifier.build(SCHEMA, backend=backend).verify(instance)


CASES = [
    ({"count": 3}, Code.MISSING_REQUIRED, "/name"),
    ({**BASE, "count": "3"}, Code.WRONG_TYPE, "/count"),
    ({**BASE, "count": True}, Code.WRONG_TYPE, "/count"),
    ({**BASE, "mode": "medium"}, Code.ENUM_MISMATCH, "/mode"),
    ({**BASE, "kind": "task"}, Code.CONST_MISMATCH, "/kind"),
    ({**BASE, "count": 11}, Code.OUT_OF_RANGE, "/count"),
    ({**BASE, "count": 0}, Code.OUT_OF_RANGE, "/count"),
    ({**BASE, "name": "a"}, Code.LENGTH_VIOLATION, "/name"),
    ({**BASE, "tags": ["a", "b", "c"]}, Code.LENGTH_VIOLATION, "/tags"),
    ({**BASE, "name": "ABC"}, Code.PATTERN_MISMATCH, "/name"),
    ({**BASE, "when": "2024-02-31"}, Code.FORMAT_MISMATCH, "/when"),
    ({**BASE, "extra": 1}, Code.ADDITIONAL_PROPERTY, "/extra"),
    ({**BASE, "tags": ["a", "a"]}, Code.ITEMS_VIOLATION, "/tags"),
    ({**BASE, "tags": ["a", 2]}, Code.WRONG_TYPE, "/tags/1"),
    ({**BASE, "target": {"t": "ftp"}}, Code.UNION_MISMATCH, "/target"),
    ({**BASE, "card": "visa"}, Code.DEPENDENCY_VIOLATION, "/billing"),
    ({**BASE, "a/b~c": "yes"}, Code.WRONG_TYPE, "/a~1b~0c"),
]


@pytest.mark.parametrize("backend", ["rs", "python"])
@pytest.mark.parametrize(("instance", "code", "pointer"), CASES, ids=[f"{c.value}{p}" for _, c, p in CASES])
def test_each_schema_code(instance: dict, code: Code, pointer: str, backend: str) -> None:
    report = _report(instance, backend)
    assert not report.accepted
    assert (code, pointer) in [(e.code, e.pointer) for e in report.errors], report.to_dict()
    assert all(e.message for e in report.errors)


@pytest.mark.parametrize(("instance", "code", "pointer"), CASES, ids=[f"{c.value}{p}" for _, c, p in CASES])
def test_backends_give_identical_reports(instance: dict, code: Code, pointer: str) -> None:
    assert _report(instance, "rs").to_dict() == _report(instance, "python").to_dict()


def test_every_error_is_reported_in_deterministic_order() -> None:
    instance = {"count": "x", "mode": "no", "zzz": 1, "aaa": 2}
    report = _report(instance, "rs")
    keys = [(e.pointer, e.code.value) for e in report.errors]
    assert keys == sorted(keys)
    assert {("/aaa", "additional_property"), ("/zzz", "additional_property"), ("/name", "missing_required")} <= set(keys)
    assert report.primary == report.errors[0]
    reordered = dict(reversed(list(instance.items())))
    assert _report(reordered, "python").to_dict() == report.to_dict()


def test_valid_object_is_accepted() -> None:
    ok = {
        **BASE,
        "mode": "fast",
        "when": "2024-02-29",
        "tags": ["x"],
        "target": {"t": "url", "url": "u"},
        "card": "v",
        "billing": 1,
    }
    schema = {**SCHEMA, "properties": {**SCHEMA["properties"], "billing": {"type": "integer"}}}
    for backend in ("rs", "python"):
        assert Verifier.build(schema, backend=backend).verify(ok).accepted


def test_actual_values_are_truncated() -> None:
    report = _report({**BASE, "count": "9" * 10_000}, "rs")
    actual = report.errors[0].actual
    assert len(actual) < ACTUAL_MAX_CHARS + 30
    assert actual.endswith("<10002 chars>")


def test_report_round_trips_through_dict() -> None:
    report = _report({"count": "x"}, "rs")
    assert VerifierReport.from_dict(report.to_dict()) == report


def test_verify_text_reports_parse_codes() -> None:
    verifier = Verifier.build(SCHEMA)
    report, value = verifier.verify_text('{"name": "abc", "count": 3, "count": 4}')
    assert value is None and report.codes == (Code.DUPLICATE_KEY,)
    report, value = verifier.verify_text('{"name": "abc", "count": NaN}')
    assert report.codes == (Code.NON_FINITE_NUMBER,)
    report, value = verifier.verify_text('{"name": "abc", "count": 3}')
    assert report.accepted and value == BASE


def test_compiled_schemas_are_cached() -> None:
    a = Verifier.build(SCHEMA).schema
    b = Verifier.build({k: SCHEMA[k] for k in reversed(list(SCHEMA))}).schema
    assert a is b
    assert Verifier.build(SCHEMA, backend="python").schema is not a
