"""OpenAI Agents SDK: the gate inside a ``FunctionTool``'s ``on_invoke_tool``, before the function.

The SDK hands ``on_invoke_tool`` the model's arguments as JSON text and parses and validates them
there; a failure goes to the tool's ``failure_error_function`` (by default a generic "An error
occurred while running the tool" sent to the model) or, with none, raises and ends the run.
:func:`gate_function_tool` returns a copy of the tool whose ``on_invoke_tool`` asks the gate
first: a dispatch calls the original invoker with the gate's arguments as JSON text; a refusal
becomes the tool's output, the way the SDK reports a failed tool to the model, carrying the
gate's code and reason, and the function does not run. The request a policy may read values from
is the latest user message of the turn's input.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from ...errors import ConfigError
from ..calls import ToolCall
from ..decision import Dispatch
from ..gate import RepairGate
from .common import refusal_message, require

ADAPTER = "OpenAI Agents SDK"
PACKAGE = "openai-agents"


def gate_function_tool(tool: Any, gate: RepairGate) -> Any:
    """A copy of the ``FunctionTool`` ``tool`` whose every call goes through ``gate``.

    A tool that needs approval is refused: the SDK validates and shows the arguments as sent to
    the approver before ``on_invoke_tool`` runs, and a repair after that would execute arguments
    nobody approved."""
    require("agents", PACKAGE, ADAPTER)
    from agents import FunctionTool

    if not isinstance(tool, FunctionTool):
        raise ConfigError(f"gate_function_tool wraps an agents.FunctionTool, got {type(tool).__name__}")
    if tool.needs_approval is not False:
        raise ConfigError(f"tool {tool.name!r} needs approval; the gate cannot repair arguments after they are approved")
    invoke = tool.on_invoke_tool

    async def on_invoke_tool(ctx: Any, input_json: str) -> Any:
        input_json = input_json or "{}"  # the SDK reads no arguments as {}; so does the gate
        request = _latest_user_text(getattr(ctx, "turn_input", None))
        decision = await gate.arepair(ToolCall(tool.name, input_json, getattr(ctx, "tool_call_id", None)), request=request)
        if isinstance(decision, Dispatch):
            return await invoke(ctx, json.dumps(decision.call.arguments, ensure_ascii=False))
        return refusal_message(gate, tool.name, input_json, decision)

    gated = copy.copy(tool)  # the SDK's own copy (FunctionTool.__copy__), then the invoker swapped
    gated.on_invoke_tool = on_invoke_tool
    return gated


def _latest_user_text(items: Any) -> str | None:
    """The text of the last user message among a turn's input items; None when there is none."""
    if isinstance(items, str):
        return items
    for item in reversed(items if isinstance(items, list) else []):
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            texts = [part.get("text") for part in content or [] if isinstance(part, dict) and isinstance(part.get("text"), str)]
            return " ".join(texts) if texts else None
    return None


def tool_definitions(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """OpenAI function definitions of ``FunctionTool`` objects (the schema the SDK sends the model
    and validates against), for ``RepairGate(tool_definitions(...))``."""
    require("agents", PACKAGE, ADAPTER)
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.params_json_schema}}
        for t in tools
    ]


__all__ = ["gate_function_tool", "tool_definitions"]
