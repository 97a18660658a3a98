"""pydantic-ai: the gate as a capability that repairs a tool call's arguments before validation.

pydantic-ai validates a call's arguments against the tool's signature and, when they fail, sends
the error back to the model as a retry (up to the tool's ``retries``). The capability's
``before_tool_validate`` hook runs first, on the raw arguments: the gate's dispatched arguments
go on to pydantic-ai's own validation and the tool; a refusal is raised as ``ModelRetry`` with
the gate's code and reason, so it takes pydantic-ai's own path for a call the tool will not run
(a retry prompt the model reads, counted against the same per-tool cap). The message history
keeps the model's arguments as sent; the ledger row holds both.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError
from ..calls import ToolCall
from ..decision import Dispatch
from ..gate import RepairGate
from .common import refusal_message, require

ADAPTER = "pydantic-ai"
PACKAGE = "pydantic-ai-slim"


def gate_capability(gate: RepairGate) -> Any:
    """A pydantic-ai capability (``Agent(..., capabilities=[gate_capability(gate)])``) that sends
    every function-tool call through ``gate``. Output tools and partial (streamed) arguments are
    not tool execution and pass untouched."""
    require("pydantic_ai", PACKAGE, ADAPTER)  # every time: the class below is built once
    return _capability_class()(gate)


@functools.cache
def _capability_class() -> type:
    """The capability class, defined once pydantic-ai is importable (it subclasses its base)."""
    from pydantic_ai import ModelRetry
    from pydantic_ai.capabilities import AbstractCapability

    @dataclass
    class RepairGateCapability(AbstractCapability[Any]):
        """Repair before validation; refuse as ``ModelRetry`` (see the module docstring)."""

        gate: RepairGate

        async def before_tool_validate(self, ctx: Any, *, call: Any, tool_def: Any, args: Any) -> Any:
            if tool_def.kind == "output" or ctx.partial_output:
                return args
            prompt = ctx.prompt if isinstance(ctx.prompt, str) else None
            args = args or {}  # pydantic-ai reads no arguments ("" or None) as {}; so does the gate
            decision = await self.gate.arepair(ToolCall(call.tool_name, args, call.tool_call_id), request=prompt)
            if isinstance(decision, Dispatch):
                return decision.call.arguments
            raise ModelRetry(refusal_message(self.gate, call.tool_name, args, decision))

    return RepairGateCapability


def tool_definitions(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """OpenAI function definitions of pydantic-ai tools (``Tool`` objects or plain functions), built
    from the schema pydantic-ai itself validates against, for ``RepairGate(tool_definitions(...))``."""
    require("pydantic_ai", PACKAGE, ADAPTER)
    from pydantic_ai import Tool

    definitions = []
    for tool in tools:
        spec = (tool if isinstance(tool, Tool) else Tool(_callable(tool))).tool_def
        parameters = spec.parameters_json_schema
        definitions.append(
            {"type": "function", "function": {"name": spec.name, "description": spec.description or "", "parameters": parameters}}
        )
    return definitions


def _callable(tool: Any) -> Callable[..., Any]:
    if not callable(tool):
        raise ConfigError(f"a pydantic-ai tool must be a Tool or a function, got {type(tool).__name__}")
    return tool


__all__ = ["gate_capability", "tool_definitions"]
