"""What every tool of the catalog keeps, whatever its family: its shape, a bounded schema, valid samples
on both backends, deterministic execution, typed refusals and a previous schema version that compiles.

Family-specific behaviour (path safety, injection, idempotency, ...) lives in ``test_tools_<family>.py``.
"""

from __future__ import annotations

import copy
import functools
import json
import random
import re
from collections.abc import Iterator
from typing import Any

import pytest

from contractrl.tasks.catalog import TOOL_FAMILIES, all_tools, get_tool, make_sandbox
from contractrl.tasks.spec import ExecResult, ToolSpec
from contractrl.validators import Verifier, load_contract
from contractrl.validators.jsonvalue import canonical_json

TOOLS = all_tools()
RENAMED = [spec for spec in TOOLS if spec.renamed]
SEEDS = range(30)
BACKENDS = ("rs", "python")
# the identity argument every tool of a family names first (its first immutable path)
OWNER = {"file": "workspace_id", "calendar": "calendar_id", "database": "database_id", "http": "account_id", "code": "repo_id"}
EFFECT_PREFIX = {"file": "file.", "calendar": "calendar.", "database": "db.", "http": "http.", "code": "code."}
READS = frozenset({"list_dir", "search_files", "list_events", "select_rows", "aggregate", "http_get"})  # no side effects
SINGLE_EFFECT = frozenset({"insert_row", "create_index"})
# the only objects open to unknown keys: string-keyed maps, bounded by key pattern, size and value schema
OPEN_MAPS = frozenset({"http_get/properties/query", "http_post/properties/body"})
UNKNOWN_TOOLS = ("format_disk", "push", "drop_table", "http_patch", "execute", "__init__", "__class__", "", "read_file ")


@functools.cache
def verifier(name: str, backend: str) -> Verifier:
    spec = get_tool(name)
    return Verifier.build(spec.schema, load_contract(spec.contract), backend=backend)


def sample(name: str, seed: int) -> tuple[Any, dict[str, Any]]:
    """A fresh sandbox of the tool's family and a valid call drawn for it (the family tests use it too)."""
    spec = get_tool(name)
    box = make_sandbox(spec.family, seed)
    return box, spec.sample(random.Random(f"sample:{name}:{seed}"), box)


def family_tools(family: str) -> list[ToolSpec]:
    return [spec for spec in TOOLS if spec.family == family]


def walk(schema: object, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(schema, dict):
        yield where, schema
        for key, value in schema.items():
            yield from walk(value, f"{where}/{key}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            yield from walk(value, f"{where}/{i}")


def test_catalog_covers_every_family() -> None:
    assert {spec.family for spec in TOOLS} == set(TOOL_FAMILIES) == set(OWNER) == set(EFFECT_PREFIX)
    assert len(TOOLS) == 6 * len(TOOL_FAMILIES)
    assert {spec.name for spec in TOOLS} >= READS | SINGLE_EFFECT
    open_objects = {
        f"{spec.name}{where}"
        for spec in TOOLS
        for where, node in walk(spec.schema)
        if node.get("type") == "object" and node.get("additionalProperties") is not False
    }
    assert open_objects == OPEN_MAPS


@pytest.mark.parametrize("family", TOOL_FAMILIES)
def test_family_shape(family: str) -> None:
    tools = family_tools(family)
    assert len(tools) == 6
    assert len({spec.name for spec in tools}) == 6
    assert any(spec.renamed for spec in tools)
    for spec in tools:
        assert spec.immutable[0] == f"/{OWNER[family]}", spec.name
        assert OWNER[family] in spec.schema["required"], spec.name


@pytest.mark.parametrize("spec", TOOLS, ids=lambda s: s.name)
def test_tool_shape(spec: ToolSpec) -> None:
    props = spec.schema["properties"]
    assert spec.schema["additionalProperties"] is False
    assert len(spec.intros) == 3
    assert set(spec.labels) <= set(props)
    assert all(p.count("/") == 1 and p[1:] in props for p in spec.immutable)
    for old, new in spec.renamed:
        assert new in props and new in spec.schema["required"] and old not in props
        assert f"/{new}" not in spec.immutable  # the stale-schema repair moves it


@pytest.mark.parametrize("spec", TOOLS, ids=lambda s: s.name)
def test_schema_is_bounded(spec: ToolSpec) -> None:
    for where, node in walk(spec.schema):
        if node.get("type") == "string":
            assert {"maxLength", "pattern", "format"} & node.keys(), f"{spec.name}{where}"
        if node.get("type") == "integer":
            assert "minimum" in node and "maximum" in node, f"{spec.name}{where}"
        if node.get("type") == "object" and f"{spec.name}{where}" in OPEN_MAPS:
            assert isinstance(node["additionalProperties"], dict) and "maxProperties" in node, f"{spec.name}{where}"
            assert {"maxLength", "pattern"} & node["propertyNames"].keys(), f"{spec.name}{where}"
        elif node.get("type") == "object":
            assert node.get("additionalProperties") is False, f"{spec.name}{where}"
        if node.get("type") == "array":
            assert "maxItems" in node, f"{spec.name}{where}"


@pytest.mark.parametrize("family", TOOL_FAMILIES)
def test_family_has_nested_objects_and_a_discriminated_union(family: str) -> None:
    tools = family_tools(family)
    assert any(node.get("type") == "object" for spec in tools for _, node in walk(spec.schema["properties"]))
    unions = [node["oneOf"] for spec in tools for _, node in walk(spec.schema) if "oneOf" in node]
    discriminated = [
        options
        for options in unions
        if all(option.get("type") == "object" for option in options)
        and any(
            len({canonical_json(option["properties"].get(key, {}).get("const")) for option in options}) == len(options)
            for key in set.intersection(*(set(option["properties"]) for option in options))
        )
    ]
    assert discriminated, family


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", TOOLS, ids=lambda s: s.name)
def test_samples_are_valid(spec: ToolSpec, backend: str) -> None:
    for seed in SEEDS:
        _, args = sample(spec.name, seed)
        report = verifier(spec.name, backend).verify(args)
        assert report.accepted, (spec.name, seed, args, report.to_dict())


@pytest.mark.parametrize("spec", TOOLS, ids=lambda s: s.name)
def test_samples_execute_deterministically(spec: ToolSpec) -> None:
    for seed in SEEDS:
        _, args = sample(spec.name, seed)
        assert args == sample(spec.name, seed)[1]
        first = make_sandbox(spec.family, seed).execute(spec.name, copy.deepcopy(args))
        second = make_sandbox(spec.family, seed).execute(spec.name, copy.deepcopy(args))
        assert first.ok, (spec.name, seed, args, first)
        assert first.to_dict() == second.to_dict()
        assert first.same_as(second)
        assert json.loads(json.dumps(first.to_dict(), allow_nan=False)) == first.to_dict()
        canonical_json(first.to_dict())
        assert ExecResult.from_dict(first.to_dict()).same_as(first)
        assert (first.effects == ()) == (spec.name in READS), (spec.name, seed, args, first)
        assert all(effect.startswith(EFFECT_PREFIX[spec.family]) for effect in first.effects), first.effects
        if spec.name in SINGLE_EFFECT:
            assert len(first.effects) == 1, (spec.name, seed, first.effects)


@pytest.mark.parametrize("spec", TOOLS, ids=lambda s: s.name)
def test_unknown_owner_is_not_found(spec: ToolSpec) -> None:
    key = OWNER[spec.family]
    prefix = re.fullmatch(r"\^([a-z]+)_\[0-9a-f\]\{6\}\$", spec.schema["properties"][key]["pattern"])
    assert prefix, spec.schema["properties"][key]
    missing = f"{prefix.group(1)}_ffffff"
    for seed in range(10):
        box, args = sample(spec.name, seed)
        assert box.execute(spec.name, {**args, key: missing}) == ExecResult(False, None, (), "not_found"), (spec.name, seed)


@pytest.mark.parametrize("family", TOOL_FAMILIES)
def test_unknown_tools_and_non_object_arguments_are_typed_errors(family: str) -> None:
    box = make_sandbox(family, 0)
    names = {spec.name for spec in family_tools(family)}
    # every attribute of the sandbox, with and without its leading underscores, is no tool unless it names one
    attributes = {spelling for attr in dir(box) for spelling in (attr, attr.lstrip("_"))} - names
    for name in [*UNKNOWN_TOOLS, *sorted(attributes), *(f"_{name}" for name in sorted(names))]:
        assert box.execute(name, {}) == ExecResult(False, None, (), "unknown_tool"), name
    assert box.execute(None, {}).error == "unknown_tool"  # type: ignore[arg-type]
    for name in sorted(names):
        for args in (None, [], "{}", 7):
            assert box.execute(name, args) == ExecResult(False, None, (), "bad_arguments"), (name, args)  # type: ignore[arg-type]


@pytest.mark.parametrize("spec", RENAMED, ids=lambda s: s.name)
def test_previous_schema_compiles(spec: ToolSpec) -> None:
    previous = spec.previous_schema()
    for old, new in spec.renamed:
        assert old in previous["properties"] and new not in previous["properties"]
        assert old in previous["required"]
        assert (old in previous["required"]) == (new in spec.schema["required"])
    _, args = sample(spec.name, 0)
    old_args = {next((o for o, n in spec.renamed if n == k), k): v for k, v in args.items()}
    for backend in BACKENDS:
        check = Verifier.build(previous, backend=backend)
        assert check.verify(old_args).accepted
        assert not check.verify(args).accepted


def _world(box: Any) -> Any:
    """Everything a sandbox holds, as comparable data (SQLite databases as their full dumps)."""
    if hasattr(box, "databases"):
        return {db_id: list(conn.iterdump()) for db_id, conn in box.databases.items()}
    return copy.deepcopy(vars(box))


def test_dispatches_get_copies_of_one_built_world_and_never_see_each_others_writes() -> None:
    """make_sandbox copies a world built once per (family, seed); a copy must equal a world built
    from the seed again, and a write to one copy must reach neither the built world nor a later copy."""
    from contractrl.tasks.catalog import _SANDBOXES

    wrote = set()
    for spec in TOOLS:
        for seed in SEEDS[:3]:
            _, args = sample(spec.name, seed)
            built = _world(_SANDBOXES[spec.family](seed))
            first = make_sandbox(spec.family, seed)
            assert _world(first) == built  # a copy is the world the seed builds
            result = first.execute(spec.name, copy.deepcopy(args))
            if _world(first) != built:
                wrote.add(spec.name)
            second = make_sandbox(spec.family, seed)
            assert _world(second) == built, spec.name  # the write stayed in `first`
            assert second.execute(spec.name, copy.deepcopy(args)).to_dict() == result.to_dict()
    assert len(wrote) >= 12 and not wrote & READS, sorted(wrote)  # the check saw real writes
