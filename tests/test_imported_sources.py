"""Imported sources on data shaped like the public sets that broke them: MCP-style schemas whose root
is a ``$ref``, BFCL calls the source must skip (and say so), and the screen on such calls.

The data is written here, in the shapes of the public files (the MCP specification's
``{"$ref": "#/definitions/X", "definitions": ...}``; BFCL's JSON Lines), so these run without
../shared/data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from contractrl.cli import main
from contractrl.tasks import screen
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.tasks.sources import JsonSchemaSource, root_resolved, source_families
from contractrl.validators import Verifier

D7 = "http://json-schema.org/draft-07/schema#"
ROOT_FAMILIES = ("missing_required", "constraint_violation", "unrepairable")

META = {"type": "object", "additionalProperties": {}, "description": "reserved for clients and servers"}
DEFINITIONS: dict[str, dict[str, Any]] = {
    "CallToolRequest": {
        "type": "object",
        "properties": {
            "method": {"type": "string", "const": "tools/call"},
            "params": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 64},
                    "arguments": {"type": "object", "additionalProperties": {}},
                    "_meta": {"$ref": "#/definitions/Meta"},
                },
                "required": ["name"],
            },
        },
        "required": ["method", "params"],
    },
    "Resource": {
        "description": "A known resource the server can read.",
        "type": "object",
        "properties": {
            "uri": {"type": "string", "format": "uri"},
            "name": {"type": "string", "minLength": 1, "maxLength": 80},
            "mimeType": {"type": "string", "maxLength": 100},
            "size": {"type": "integer", "minimum": 0},
        },
        "required": ["uri", "name", "mimeType"],
    },
}
INSTANCES: dict[str, list[Any]] = {
    "CallToolRequest": [
        {"method": "tools/call", "params": {"name": "weather_lookup", "arguments": {"city": "Lisbon"}}},
        {"method": "tools/call", "params": {"name": "currency_convert", "arguments": {"from": "EUR", "to": "JPY"}}},
    ],
    "Resource": [
        {"uri": "file:///srv/reports/q3.pdf", "name": "third quarter report", "mimeType": "application/pdf", "size": 48213},
        {"uri": "https://example.org/data/cities.csv", "name": "cities table", "mimeType": "text/csv", "size": 912},
    ],
}
INVALID: dict[str, list[Any]] = {
    "CallToolRequest": [{"method": "tools/list", "params": {"name": "x"}}, {"method": "tools/call", "params": {}}, {}],
    "Resource": [{"uri": "file:///a", "name": "", "mimeType": "text/csv"}, {"uri": "file:///a", "name": "a", "size": -1}],
}


def _mcp_schema(name: str) -> dict[str, Any]:
    return {"$schema": D7, "$ref": f"#/definitions/{name}", "definitions": {**DEFINITIONS, "Meta": META}}


@pytest.fixture
def mcp_corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "mcp"
    folder.mkdir()
    for name, valid in INSTANCES.items():
        tests = [{"valid": True, "data": d} for d in valid] + [{"valid": False, "data": d} for d in INVALID[name]]
        (folder / f"mcp---{name}.json").write_text(json.dumps({"schema": _mcp_schema(name), "tests": tests}))
    return folder


def test_a_root_ref_is_resolved_to_the_same_constraints() -> None:
    for name in INSTANCES:
        normalised = Verifier.build(_mcp_schema(name)).schema.normalized.schema
        assert isinstance(normalised, dict) and set(normalised) == {"$schema", "$ref", "$defs"}
        resolved = root_resolved(normalised)
        assert resolved["required"] == DEFINITIONS[name]["required"] and "$ref" not in resolved
        assert resolved["$defs"] == normalised["$defs"]  # every #/$defs/... reference still resolves
        before, after = Verifier.build(normalised), Verifier.build(resolved)
        for instance in [*INSTANCES[name], *INVALID[name]]:
            assert before.verify(instance).to_dict() == after.verify(instance).to_dict(), instance
    # a root that constrains beside its $ref is left alone: moving the target up would change it
    guarded = {"$ref": "#/$defs/a", "$defs": {"a": {"required": ["x"]}}, "minProperties": 2}
    assert root_resolved(guarded) is guarded


def test_schemas_whose_root_is_a_ref_host_the_root_families(mcp_corpus: Path) -> None:
    """Every MCP specification schema is a root $ref: none of these families could be built from them."""
    source = f"jsonschema:{mcp_corpus}"
    assert set(ROOT_FAMILIES) <= set(source_families(source))
    calls = JsonSchemaSource(mcp_corpus).calls
    assert {c.spec.name for c in calls} == {"CallToolRequest", "Resource"}
    assert all("$ref" not in c.spec.schema and c.spec.schema["required"] for c in calls)
    cases = generate_cases(GenerateConfig(seed=4, n=12, families=ROOT_FAMILIES, source=source))
    assert {c.public.family for c in cases} == set(ROOT_FAMILIES)
    for case in cases:
        verifier = Verifier.build(case.public.schema)
        assert not verifier.verify(case.public.candidate).accepted
        if case.offline.should_abstain:
            continue
        repaired = jsonpatch.apply_patch(case.public.candidate, case.offline.target_patch)
        assert verifier.verify(repaired).accepted and repaired == case.offline.target


def _bfcl_dir(folder: Path, entries: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> Path:
    """A BFCL data directory: (id, function, ground truth) per entry, one question file."""
    (folder / "possible_answer").mkdir(parents=True)
    questions = [
        {"id": entry_id, "question": [[{"role": "user", "content": f"Please run {fn['name']} for me."}]], "function": [fn]}
        for entry_id, fn, _ in entries
    ]
    answers = [{"id": entry_id, "ground_truth": [gt]} for entry_id, _, gt in entries]
    name = "BFCL_v4_simple_python.json"
    (folder / name).write_text("".join(json.dumps(q) + "\n" for q in questions))
    (folder / "possible_answer" / name).write_text("".join(json.dumps(a) + "\n" for a in answers))
    return folder


def _forecast(i: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
    fn = {
        "name": f"weather.forecast_{i}",
        "description": "Forecast for a city.",
        "parameters": {
            "type": "dict",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    }
    return f"simple_{i}", fn, {fn["name"]: {"city": [f"City number {i}"], "days": [i + 2]}}


REFUSED = (
    "simple_refused",
    {
        "name": "count",
        "description": "",
        "parameters": {"type": "dict", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    },
    {"count": {"n": ["many"]}},  # a string where the schema declares an integer
)
EMPTY = (
    "simple_empty",
    {"name": "now", "description": "The time.", "parameters": {"type": "dict", "properties": {}, "required": []}},
    {"now": {}},
)


def test_bfcl_calls_the_source_skips_are_reported_in_the_output_and_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _bfcl_dir(tmp_path / "bfcl", [_forecast(0), _forecast(1), REFUSED, EMPTY])
    out = tmp_path / "cases"
    argv = ["cases", "generate", "--seed", "1", "--n", "2", "--source", f"bfcl:{data}", "--families", "missing_required"]
    assert main([*argv, "--out", str(out)]) == 0
    expected = {"used": 2, "skipped": {"not an object call": 1, "target refused by its schema": 1}}
    assert json.loads(capsys.readouterr().out)["source_calls"] == expected
    assert json.loads((out / "manifest.json").read_text())["source_calls"] == expected


def test_builtin_manifests_have_no_source_calls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cases", "generate", "--seed", "1", "--n", "2", "--out", str(tmp_path / "cases")]) == 0
    assert "source_calls" not in json.loads(capsys.readouterr().out)
    assert "source_calls" not in json.loads((tmp_path / "cases" / "manifest.json").read_text())


def test_the_screen_passes_over_a_ground_truth_its_schema_refuses(tmp_path: Path) -> None:
    """It was replayed, could never end schema-valid, and failed the screen without a name."""
    data = _bfcl_dir(tmp_path / "bfcl", [REFUSED, *(_forecast(i) for i in range(6))])
    result = screen.run_screen(data, seed=13, per_family=3)
    assert result["skipped"] == {"ground truth refused by its own schema": ["simple_refused"]}
    assert result["cases"] == result["schema_valid"] == result["object_match"] == result["bfcl_accepted"] == 6
    assert result["failures"] == []


def test_a_failing_screen_case_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _bfcl_dir(tmp_path / "bfcl", [_forecast(i) for i in range(4)])
    monkeypatch.setattr(screen, "bfcl_accepts", lambda *args: (False, "argument 'city' matches none of 1 acceptable values"))
    result = screen.run_screen(data, seed=13, per_family=2)
    assert result["bfcl_accepted"] == 0
    assert sorted(f["case"] for f in result["failures"]) == [f"simple_{i}" for i in range(4)]
    assert all("BFCL's checker refuses it: argument 'city'" in f["reason"] for f in result["failures"])
    monkeypatch.setattr(screen, "run_screen", lambda *args, **kwargs: result)
    main(["screen", "--bfcl", str(data)])
    printed = capsys.readouterr().out
    assert "failures: 4" in printed and "simple_2 weather.forecast_2" in printed
