"""LangGraph: the gate as ToolNode's tool-call wrapper, between the AIMessage and the tool.

Left alone, ToolNode validates each call against the tool's schema and returns a failure to the
model as a ``ToolMessage`` with ``status="error"``. :class:`GateToolCallWrapper` is the
``wrap_tool_call`` (and ``awrap_tool_call``) interceptor ToolNode offers: each call goes through
the gate first; a dispatch runs the tool with the gate's arguments (``request.override``), a
refusal is answered with that same kind of error ``ToolMessage``, carrying the gate's code and
reason, and the tool is not run. The request a policy may read values from is the latest human
message of the graph state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ...errors import ConfigError
from ..calls import ToolCall
from ..decision import Dispatch, Refusal
from ..gate import RepairGate
from .common import refusal_message, require

ADAPTER = "LangGraph"
PACKAGE = "langgraph"


class GateToolCallWrapper:
    """``ToolNode(tools, wrap_tool_call=w, awrap_tool_call=w.awrap)``; :func:`gated_tool_node` does that."""

    def __init__(self, gate: RepairGate) -> None:
        require("langgraph.prebuilt", PACKAGE, ADAPTER)
        from langchain_core.messages import ToolMessage

        self.gate = gate
        self._tool_message = ToolMessage

    def __call__(self, request: Any, execute: Callable[[Any], Any]) -> Any:
        call = request.tool_call
        decision = self.gate.repair(_gate_call(call), request=_latest_human_text(request.state))
        if isinstance(decision, Dispatch):
            return execute(request.override(tool_call={**call, "args": decision.call.arguments}))
        return self._refusal(call, decision)

    async def awrap(self, request: Any, execute: Callable[[Any], Awaitable[Any]]) -> Any:
        """The async form (``awrap_tool_call``): the decision runs in a worker thread."""
        call = request.tool_call
        decision = await self.gate.arepair(_gate_call(call), request=_latest_human_text(request.state))
        if isinstance(decision, Dispatch):
            return await execute(request.override(tool_call={**call, "args": decision.call.arguments}))
        return self._refusal(call, decision)

    def _refusal(self, call: dict[str, Any], refusal: Refusal) -> Any:
        """The error ``ToolMessage`` ToolNode itself answers a failed call with, saying why."""
        return self._tool_message(
            content=refusal_message(self.gate, call["name"], call.get("args"), refusal),
            name=call["name"],
            tool_call_id=call.get("id") or "",
            status="error",
        )


def _gate_call(call: dict[str, Any]) -> ToolCall:
    return ToolCall(call["name"], call.get("args"), call.get("id"))


def _latest_human_text(state: Any) -> str | None:
    """The text of the last human message in a graph state (a ``{"messages": [...]}`` mapping, a
    list of messages, or a model with ``messages``); None when there is none."""
    messages = state.get("messages") if isinstance(state, dict) else getattr(state, "messages", state)
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if getattr(message, "type", None) == "human" and isinstance(message.content, str):
            return message.content
    return None


def gated_tool_node(tools: Sequence[Any], gate: RepairGate, **kwargs: Any) -> Any:
    """A ``ToolNode`` over ``tools`` whose every call goes through ``gate`` (other ToolNode
    arguments pass through; ``wrap_tool_call`` and ``awrap_tool_call`` are the gate's)."""
    wrapper = GateToolCallWrapper(gate)
    if "wrap_tool_call" in kwargs or "awrap_tool_call" in kwargs:
        raise ConfigError("gated_tool_node sets wrap_tool_call itself; compose your wrapper around GateToolCallWrapper")
    from langgraph.prebuilt import ToolNode

    return ToolNode(list(tools), wrap_tool_call=wrapper, awrap_tool_call=wrapper.awrap, **kwargs)


def tool_definitions(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """OpenAI function definitions of LangChain tools (what ``bind_tools`` sends the model), for
    ``RepairGate(tool_definitions(...))``."""
    require("langchain_core", "langchain-core", ADAPTER)
    from langchain_core.utils.function_calling import convert_to_openai_tool

    return [convert_to_openai_tool(tool) for tool in tools]


__all__ = ["GateToolCallWrapper", "gated_tool_node", "tool_definitions"]
