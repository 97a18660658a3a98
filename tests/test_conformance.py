"""Conformance on real public data: JSONSchemaBench maskbench labels and BFCL ground truth.

The labelled instances come from real validators, so they pin both backends to the standard.
Every known difference lives in tests/fixtures/maskbench_conformance.json with its reason; the
tests fail when a new difference appears and when a listed one disappears.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from contractrl.errors import SchemaCompileError
from contractrl.tasks.bfcl import ground_truth_call, load_bfcl
from contractrl.validators import Verifier, normalize_schema

from .conftest import FIXTURES, shared_path

SUBSETS = ("Github_easy", "Glaiveai2K", "Snowplow")
KNOWN = json.loads((FIXTURES / "maskbench_conformance.json").read_text())


@cache
def _maskbench(subset: str) -> list[tuple[str, dict[str, Any]]]:
    folder = shared_path("jsonschemabench", "maskbench", subset)
    return [(p.name, json.loads(p.read_text())) for p in sorted(Path(folder).glob("*.json"))]


@pytest.mark.shared_data
@pytest.mark.parametrize("subset", SUBSETS)
def test_both_backends_agree_with_maskbench_labels(subset: str) -> None:
    cases = _maskbench(subset)
    assert cases, f"no maskbench files for {subset}"
    disagreements = []
    checked = 0
    for name, doc in cases:
        verifiers = {b: Verifier.build(doc["schema"], backend=b, lenient=True) for b in ("rs", "python")}
        for index, test in enumerate(doc["tests"]):
            for backend, verifier in verifiers.items():
                checked += 1
                verdict = verifier.verify(test["data"]).accepted
                if verdict != test["valid"]:
                    disagreements.append({"file": name, "test": index, "backend": backend, "label": test["valid"]})
    known = [d for d in KNOWN["label_disagreements"] if d["file"].startswith(subset)]
    assert sorted(disagreements, key=json.dumps) == sorted(
        [{k: d[k] for k in ("file", "test", "backend", "label")} for d in known], key=json.dumps
    )
    assert checked > 100


@pytest.mark.shared_data
@pytest.mark.parametrize("subset", SUBSETS)
def test_backends_give_identical_reports(subset: str) -> None:
    """Ledgers must not depend on the backend: codes, pointers, expected and actual all match."""
    differences = []
    for name, doc in _maskbench(subset):
        rs = Verifier.build(doc["schema"], backend="rs", lenient=True)
        py = Verifier.build(doc["schema"], backend="python", lenient=True)
        for index, test in enumerate(doc["tests"]):
            if rs.verify(test["data"]).to_dict() != py.verify(test["data"]).to_dict():
                differences.append({"file": name, "test": index})
    known = [{"file": d["file"], "test": d["test"]} for d in KNOWN["backend_report_differences"] if d["file"].startswith(subset)]
    assert differences == known


@pytest.mark.shared_data
@pytest.mark.parametrize("subset", SUBSETS)
def test_strict_mode_refuses_exactly_the_schemas_with_unknown_keywords(subset: str) -> None:
    refused = {}
    for name, doc in _maskbench(subset):
        try:
            normalize_schema(doc["schema"])
        except SchemaCompileError as exc:
            refused[name] = str(exc)
    assert refused == KNOWN["strict_compile_refusals"].get(subset, {})


JSON_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}


def _declared_types(node: Any) -> set[str]:
    """Every type name a schema declares anywhere (BFCL's dict/float/tuple must all be gone)."""
    found: set[str] = set()
    if isinstance(node, dict):
        declared = node.get("type")
        if isinstance(declared, str):
            found.add(declared)
        elif isinstance(declared, list):
            found.update(declared)
        for key, value in node.items():
            if key not in ("enum", "const", "default", "examples"):
                found |= _declared_types(value)
    elif isinstance(node, list):
        for value in node:
            found |= _declared_types(value)
    return found


BFCL_FILES = ("BFCL_v4_simple_python.json", "BFCL_v4_multiple.json")


@pytest.mark.shared_data
@pytest.mark.parametrize("filename", BFCL_FILES)
def test_every_bfcl_schema_normalises_and_every_ground_truth_call_is_accepted(filename: str) -> None:
    entries = load_bfcl(shared_path("bfcl", filename), shared_path("bfcl", "possible_answer", filename))
    assert len(entries) >= 200
    functions = 0
    for entry in entries:
        for fn in entry.functions:
            functions += 1
            normalized = normalize_schema(fn.parameters)
            assert normalized.source_dialect == "bfcl"
            assert _declared_types(normalized.schema) <= JSON_TYPES, (entry.id, fn.name)
        for index in range(len(entry.ground_truth)):
            name, call = ground_truth_call(entry, index)
            for backend in ("rs", "python"):
                report = Verifier.build(entry.function(name).parameters, backend=backend).verify(call)
                assert report.accepted, (entry.id, backend, report.to_dict())
    assert functions >= len(entries)


@pytest.mark.shared_data
def test_bfcl_corrupted_calls_are_rejected_with_the_intended_code() -> None:
    """The verifier sees what a corruption did: drop a required argument, or change a value's type."""
    filename = "BFCL_v4_simple_python.json"
    entries = load_bfcl(shared_path("bfcl", filename), shared_path("bfcl", "possible_answer", filename))
    missing = wrong_type = 0
    for entry in entries[:120]:
        name, call = ground_truth_call(entry)
        params = entry.function(name).parameters
        verifier = Verifier.build(params)
        for arg in params.get("required", []):
            if arg in call:
                broken = {k: v for k, v in call.items() if k != arg}
                report = verifier.verify(broken)
                assert ("missing_required", f"/{arg}") in [(e.code.value, e.pointer) for e in report.errors]
                missing += 1
                break
        for arg, value in call.items():
            if isinstance(value, int) and not isinstance(value, bool):
                report = verifier.verify({**call, arg: str(value)})
                assert ("wrong_type", f"/{arg}") in [(e.code.value, e.pointer) for e in report.errors], entry.id
                wrong_type += 1
                break
    assert missing > 50 and wrong_type > 30
