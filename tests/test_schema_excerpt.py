"""The schema excerpt of repair prompts: it shows what governs each reported path (and nothing a
prompt variant withholds), follows $ref and unions, and stays short."""

from __future__ import annotations

import json

import jsonschema
import pytest

from contractrl.rollout.env import RepairEnv
from contractrl.rollout.prompts import FEEDBACK, render_blocks
from contractrl.rollout.schema_excerpt import (
    ELIDED,
    closest_branch_errors,
    closest_branches,
    compact_subschema,
    schema_excerpt,
    subschemas_at,
)
from contractrl.tasks.arms import ARMS
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.validators import Code, Verifier
from contractrl.validators.jsonvalue import canonical_json
from contractrl.validators.pointer import parse_pointer, resolve

# codes whose value at the pointer is itself what breaks the subschema shown for that pointer
_VALUE_CODES = {
    Code.WRONG_TYPE,
    Code.ENUM_MISMATCH,
    Code.CONST_MISMATCH,
    Code.OUT_OF_RANGE,
    Code.LENGTH_VIOLATION,
    Code.PATTERN_MISMATCH,
    Code.UNION_MISMATCH,
}


@pytest.fixture(scope="module")
def cases() -> list:
    return generate_cases(GenerateConfig(seed=5, n=400))


def test_every_value_error_is_rejected_by_a_subschema_the_excerpt_shows(cases: list) -> None:
    """Against python-jsonschema: the excerpt's subschemas for a path are the ones that govern it."""
    checked = 0
    for case in cases:
        report = Verifier.build(case.public.schema).verify(case.public.candidate)
        for error in report.errors:
            if error.code not in _VALUE_CODES:
                continue
            tokens = parse_pointer(error.pointer)
            value = resolve(case.public.candidate, tokens)
            shown = subschemas_at(case.public.schema, tokens)
            assert shown, (case.public.case_id, error.pointer)
            assert any(not jsonschema.Draft202012Validator(s).is_valid(value) for s in shown), (error.pointer, shown)
            checked += 1
    assert checked > 100


def test_missing_and_unexpected_properties_show_required_and_allowed_names(cases: list) -> None:
    seen = set()
    for case in cases:
        report = Verifier.build(case.public.schema).verify(case.public.candidate)
        pointers = [e.pointer for e in report.errors]
        unexpected = [e.pointer for e in report.errors if e.code is Code.ADDITIONAL_PROPERTY]
        text = schema_excerpt(case.public.schema, pointers, case.public.immutable, unexpected)
        for error in report.errors:
            tokens = parse_pointer(error.pointer)
            parent = "".join("/" + t for t in tokens[:-1]) or "/"
            if error.code is Code.MISSING_REQUIRED:
                line = next(line for line in text.splitlines() if line.startswith(f"{parent}: required "))
                assert tokens[-1] in json.loads(line.split(" required ", 1)[1])
                seen.add(error.code)
            if error.code is Code.ADDITIONAL_PROPERTY:
                assert f"{parent}: allowed properties " in text
                seen.add(error.code)
    assert seen == {Code.MISSING_REQUIRED, Code.ADDITIONAL_PROPERTY}


def test_immutable_paths_on_the_way_are_marked() -> None:
    schema = {"type": "object", "properties": {"id": {"type": "string"}, "meta": {"type": "object", "properties": {"x": {}}}}}
    text = schema_excerpt(schema, ["/id", "/meta/x"], immutable=["/id", "/meta"])
    assert '/id (immutable): {"type":"string"}' in text
    assert "/meta/x (immutable): {}" in text


def test_refs_unions_and_arrays_are_followed() -> None:
    schema = {
        "$defs": {
            "tag": {"type": "string", "maxLength": 4},
            "node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}},
        },
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}},
            "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "boolean"}]},
            "shape": {"oneOf": [{"properties": {"r": {"type": "number"}}}, {"properties": {"r": {"type": "integer"}, "w": {}}}]},
            "loop": {"$ref": "#/$defs/node"},
            "map": {"type": "object", "additionalProperties": {"enum": [1, 2]}},
        },
    }
    assert subschemas_at(schema, ("tags", "3")) == [{"type": "string", "maxLength": 4}]
    assert subschemas_at(schema, ("pair", "1")) == [{"type": "boolean"}]
    assert subschemas_at(schema, ("shape", "r")) == [{"type": "number"}, {"type": "integer"}]
    assert subschemas_at(schema, ("shape", "w")) == [{}]
    assert subschemas_at(schema, ("map", "anything")) == [{"enum": [1, 2]}]
    assert subschemas_at(schema, ("nowhere",)) == []
    # a recursive $ref resolves lazily, one level per token: no unbounded expansion
    deep = subschemas_at(schema, ("loop", "next", "next", "next"))
    assert deep and deep[0]["properties"]["next"] == {"$ref": "#/$defs/node"}
    assert "/nowhere: not in the schema" in schema_excerpt(schema, ["/nowhere"])
    assert "one of 2 branches" in schema_excerpt(schema, ["/shape/r"])


def test_a_self_referencing_ref_terminates() -> None:
    schema = {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "properties": {"x": {"$ref": "#/$defs/a"}}}
    assert schema_excerpt(schema, ["/x", "/x/y"])  # returns; the ref loop is cut after a bounded number of hops


def test_long_subschemas_are_elided_from_the_bottom_up() -> None:
    wide = {
        "type": "object",
        "properties": {f"p{i}": {"type": "object", "properties": {"q": {"enum": list(range(20))}}} for i in range(30)},
    }
    text = compact_subschema(wide, limit=480)
    assert ELIDED in text and len(text) < len(canonical_json(wide))
    assert json.loads(text)["type"] == "object"  # the top keywords survive
    assert compact_subschema({"type": "string"}) == '{"type":"string"}'


def test_the_excerpt_is_shown_only_where_the_pointers_are() -> None:
    case = next(c for c in generate_cases(GenerateConfig(seed=1, n=40)) if c.public.family == "nested_field")
    state = RepairEnv(case.public).reset()
    full = canonical_json(case.public.schema)
    for arm in ARMS:
        for feedback in FEEDBACK:
            blocks = render_blocks(case.public, state, arm, "same_information", feedback)
            assert (blocks["schema"] == full) is (feedback in ("code_only", "text", "context_only")), (arm, feedback)
    for arm in ("full_regen", "constrained"):
        assert render_blocks(case.public, state, arm, "case_matched")["schema"] == full  # no errors block: no excerpt
    for arm in ("patch_sft", "contractrl"):
        assert render_blocks(case.public, state, arm, "case_matched")["schema"] != full


def test_excerpts_are_much_shorter_than_the_schemas(cases: list) -> None:
    full = excerpt = 0
    for case in cases:
        state = RepairEnv(case.public).reset()
        full += len(canonical_json(case.public.schema))
        excerpt += len(render_blocks(case.public, state, "contractrl")["schema"])
    assert excerpt < full / 4, (excerpt, full)


def test_a_wide_union_shows_the_branches_the_value_comes_closest_to() -> None:
    ops = ("eq", "ne", "lt", "between")
    branches = [
        {
            "type": "object",
            "properties": {
                "op": {"const": op},
                **({"low": {"type": "number"}, "high": {"type": "number"}} if op == "between" else {"value": {}}),
            },
            "required": ["op", "low", "high"] if op == "between" else ["op", "value"],
            "additionalProperties": False,
        }
        for op in ops
    ]
    schema = {"type": "object", "properties": {"where": {"type": "array", "items": {"oneOf": branches}}}}
    value = {"where": [{"op": "between", "low": 1, "high": "12"}]}
    assert closest_branches({"oneOf": branches}, value["where"][0], schema) == ("oneOf", [branches[3]], 4)
    line = schema_excerpt(schema, ["/where/0"], instance=value)
    assert "oneOf of 4 branches, the 1 closest to the value" in line and '"const":"between"' in line
    assert '"const":"eq"' not in line
    # a tie keeps at most three, in schema order; without the instance every branch is shown
    tied = closest_branches({"oneOf": branches}, {"op": ["eq"], "value": 1}, schema)
    assert tied is not None and [b["properties"]["op"]["const"] for b in tied[1]] == ["eq", "ne", "lt"]
    whole = schema_excerpt(schema, ["/where/0"])
    assert whole.startswith('/where/0: {"oneOf":[') and whole.count('"required"') == 4 and "closest" not in whole
    assert closest_branches({"oneOf": branches[:3]}, {}, schema) is None  # three or fewer: shown whole


def test_a_union_line_names_where_the_value_breaks_its_closest_branch() -> None:
    """``union_mismatch at /where/0`` does not say which member is wrong; the closest branch does."""

    def branch(op: str, **members: dict) -> dict:
        properties = {"op": {"const": op}, **members}
        return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}

    branches = [
        branch("eq", value={}),
        branch("between", low={"type": "number"}, high={"type": "number"}),
        branch("in", values={"enum": ["a", "b"]}),
    ]
    schema = {"type": "object", "properties": {"where": {"type": "array", "items": {"oneOf": branches}}}}
    value = {"where": [{"op": "between", "low": 1, "high": "12"}]}
    errors = closest_branch_errors({"oneOf": branches}, value["where"][0], schema)
    assert [(e.code, e.pointer) for e in errors] == [(Code.WRONG_TYPE, "/high")]
    # a branch no value fits is never the closest one
    assert closest_branch_errors({"oneOf": [False, branches[1]]}, value["where"][0], schema) == errors
    text = schema_excerpt(schema, ["/where/0"], instance=value)
    assert "/where/0/high (closest branch): wrong_type: expected number, got string" in text.splitlines()
    # an allowed-values miss names the value (the allowed ones are in the branch above it)
    missed = {"where": [{"op": "in", "values": "c"}]}
    assert '/where/0/values (closest branch): enum_mismatch: got "c"' in schema_excerpt(schema, ["/where/0"], instance=missed)
    # two equally close branches, a value that fits, or no union: no such line
    assert closest_branch_errors({"oneOf": branches[:2]}, {"op": "eq", "low": 1}, schema) == []  # 2 and 2
    assert closest_branch_errors({"oneOf": branches}, {"op": "eq", "value": 3}, schema) == []
    assert closest_branch_errors({"type": "object"}, {}, schema) == []
    assert "closest branch" not in schema_excerpt(schema, ["/where/0"])  # without the call, nothing to compare


def test_closest_branch_lines_name_a_path_the_gold_patch_edits(cases: list) -> None:
    """Against the hidden targets: each such line points at a member the repair must change, never
    at one it must keep (the hint is derived from public data only, so this is its precision)."""
    hinted = 0
    for case in cases:
        if not isinstance(case.offline.target_patch, list):
            continue
        state = RepairEnv(case.public).reset()
        lines = [
            line for line in render_blocks(case.public, state, "contractrl")["schema"].splitlines() if "(closest branch)" in line
        ]
        if not lines:
            continue
        edited = {op["path"] for op in case.offline.target_patch}
        for line in lines:
            pointer = line.split(" (closest branch)")[0]
            assert pointer in edited or any(p.startswith(pointer + "/") for p in edited), (case.public.case_id, line, edited)
            hinted += 1
    assert hinted >= 20, hinted
