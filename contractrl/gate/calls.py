"""A tool call as agent frameworks hand it over, read into one shape.

OpenAI chat completions send ``{"id", "type": "function", "function": {"name", "arguments"}}``
with the arguments as JSON *text*; MCP ``tools/call`` sends ``{"name", "arguments"}`` with an
object. The text is parsed by the project's strict parser at the gate (no duplicate keys, no NaN,
bounded size and depth), so what the verifier judges is exactly what the executor would receive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError


@dataclass(frozen=True)
class ToolCall:
    """One call: the tool's name, its arguments (a JSON value, or the raw text a model emitted)
    and the caller's id for it, which a dispatch carries back unchanged."""

    name: str
    arguments: Any
    id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments, **({"id": self.id} if self.id is not None else {})}


def parse_call(call: Any) -> ToolCall:
    """A :class:`ToolCall` from a ToolCall, an OpenAI tool call or an MCP call; a call without a
    tool name is a typed one-line error (there is nothing to check it against)."""
    if isinstance(call, ToolCall):
        found = call
    elif isinstance(call, dict):
        body = call.get("function") if isinstance(call.get("function"), dict) else call
        found = ToolCall(body.get("name"), body.get("arguments"), call.get("id"))  # type: ignore[arg-type]
    else:
        raise ConfigError(f"a tool call must be an object or a ToolCall, got {type(call).__name__}")
    if not isinstance(found.name, str) or not found.name:
        raise ConfigError("a tool call needs a tool name (a non-empty string)")
    if found.id is not None and not isinstance(found.id, str):
        raise ConfigError(f"a tool call's id must be a string, got {type(found.id).__name__}")
    return found


__all__ = ["ToolCall", "parse_call"]
