"""What a tool is to ContractRL: a schema, its contract, a sampler of valid calls and a sandbox.

A :class:`ToolSpec` is pure data plus two functions: ``sample`` draws a valid argument object from
a seeded RNG and the sandbox's initial state, and the family's :class:`Sandbox` executes a call
deterministically in memory, returning a result and a side-effect trace. Nothing touches the real
filesystem or network.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..validators.jsonvalue import canonical_json


class SandboxError(Exception):
    """A call the sandbox refuses: typed ``code`` (e.g. ``path_traversal``), never a crash."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class ExecResult:
    """The observable outcome of one call: what the tool returned and what it changed."""

    ok: bool
    result: Any
    effects: tuple[str, ...] = ()
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "result": self.result, "effects": list(self.effects), "error": self.error}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecResult:
        return cls(bool(data["ok"]), data["result"], tuple(data["effects"]), data.get("error"))

    def same_as(self, other: ExecResult) -> bool:
        """Semantic equality: same status, same result (type-exact), same ordered side effects."""
        return (
            self.ok == other.ok
            and self.error == other.error
            and self.effects == other.effects
            and canonical_json(self.result) == canonical_json(other.result)
        )


# Exceptions a handler raises when called directly with arguments the schema would have refused.
_BAD_ARGUMENTS = (KeyError, TypeError, ValueError, AttributeError, IndexError)


def run_handler(
    handler: Callable[[dict[str, Any]], ExecResult] | None,
    args: Any,
    errors: tuple[tuple[type[BaseException], str], ...] = (),
) -> ExecResult:
    """Run one tool handler so that no input can crash the sandbox.

    Refusals (:class:`SandboxError`), family-specific exceptions mapped by ``errors`` (checked in
    order) and arguments the schema would have refused all become a failed :class:`ExecResult`
    with a typed error code.
    """
    if handler is None:
        return ExecResult(False, None, (), "unknown_tool")
    if not isinstance(args, dict):
        return ExecResult(False, None, (), "bad_arguments")
    try:
        return handler(args)
    except SandboxError as err:
        return ExecResult(False, None, (), err.code)
    except Exception as exc:
        for kind, code in (*errors, (_BAD_ARGUMENTS, "bad_arguments")):
            if isinstance(exc, kind):
                return ExecResult(False, None, (), code)
        raise


class Sandbox(Protocol):
    """An in-memory world for one tool family, built from a seed; every execution gets a clone."""

    def execute(self, tool: str, args: dict[str, Any]) -> ExecResult: ...

    def clone(self) -> Sandbox:
        """An independent copy in the same state: writes to either never reach the other."""
        ...


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its JSON Schema (Draft 2020-12), cross-field rules and immutable identity paths.

    ``labels`` name each top-level argument in requests ("the reminder in minutes"); ``renamed``
    records the argument renames of the previous schema version, used by the stale-version
    corruption; ``sample`` draws a valid call given the sandbox the call will run in.
    """

    name: str
    family: str
    description: str
    schema: dict[str, Any]
    sample: Callable[[random.Random, Any], dict[str, Any]]
    intros: tuple[str, ...]
    labels: dict[str, str] = field(default_factory=dict)
    contract: dict[str, Any] = field(default_factory=lambda: {"rules": []})
    immutable: tuple[str, ...] = ()
    version: int = 2
    renamed: tuple[tuple[str, str], ...] = ()
    # what an injected instruction asks to change when the tool has no immutable path (BFCL tools)
    injection_targets: tuple[str, ...] = ()

    def label(self, key: str) -> str:
        return self.labels.get(key, key.replace("_", " "))

    def previous_schema(self) -> dict[str, Any]:
        """The schema of version ``version - 1``: renamed arguments under their old names."""
        schema = {**self.schema, "properties": dict(self.schema["properties"])}
        required = list(schema.get("required", []))
        for old, new in self.renamed:
            schema["properties"][old] = schema["properties"].pop(new)
            required = [old if r == new else r for r in required]
        schema["required"] = required
        return schema
