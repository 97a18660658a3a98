"""The built-in tool catalog: five families, six tools each, and their sandboxes.

Imported tools (BFCL functions, JSON Schema corpus entries) have no backend; their family's
sandbox records the call, and their cases are scored offline by the source's own oracle.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, lru_cache
from typing import Any

from ..errors import ConfigError
from .spec import ExecResult, Sandbox, ToolSpec
from .tools import calendar, code_edit, database, files, http

TOOL_FAMILIES: tuple[str, ...] = ("file", "calendar", "database", "http", "code")

_SANDBOXES: dict[str, Callable[[int], Sandbox]] = {
    "file": files.FilesSandbox,
    "calendar": calendar.CalendarSandbox,
    "database": database.DatabaseSandbox,
    "http": http.HttpSandbox,
    "code": code_edit.CodeEditSandbox,
}
_MODULES = (files, calendar, database, http, code_edit)


class RecordingSandbox:
    """The sandbox of imported tools: executes nothing and returns the call it was given."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def execute(self, tool: str, args: dict[str, Any]) -> ExecResult:
        return ExecResult(True, {"tool": tool, "arguments": args})

    def clone(self) -> RecordingSandbox:
        return RecordingSandbox(self.seed)


IMPORTED_TOOL_FAMILIES: tuple[str, ...] = ("bfcl", "jsonschema", "gate")  # gate: calls a RepairGate guards
_SANDBOXES.update({family: RecordingSandbox for family in IMPORTED_TOOL_FAMILIES})


@cache
def all_tools() -> tuple[ToolSpec, ...]:
    tools = tuple(t for module in _MODULES for t in module.TOOLS)
    names = [t.name for t in tools]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"duplicate tool names in the catalog: {duplicates}")
    return tools


def tools_of(families: tuple[str, ...] | list[str]) -> tuple[ToolSpec, ...]:
    unknown = set(families) - set(TOOL_FAMILIES)
    if unknown:
        raise ConfigError(f"unknown tool families {sorted(unknown)}; choose from {', '.join(TOOL_FAMILIES)}")
    return tuple(t for t in all_tools() if t.family in families)


def get_tool(name: str) -> ToolSpec:
    for spec in all_tools():
        if spec.name == name:
            return spec
    raise ConfigError(f"unknown tool {name!r}")


# built worlds kept per process; every dispatch gets a copy, so no episode sees another's writes
WORLD_CACHE_SIZE = 256


@lru_cache(maxsize=WORLD_CACHE_SIZE)
def _built_world(family: str, seed: int) -> Sandbox:
    return _SANDBOXES[family](seed)


def make_sandbox(family: str, seed: int) -> Sandbox:
    """A fresh sandbox of ``family`` in the state ``seed`` determines: a copy of the world built
    once per process and seed (building it is most of a dispatch's cost: an SQLite database per
    database call), identical to building it again."""
    if family not in _SANDBOXES:
        raise ConfigError(f"unknown tool family {family!r}")
    return _built_world(family, seed).clone()
