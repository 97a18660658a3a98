"""The repair gate in front of the tool executors of agent frameworks (docs/gate.md, "Agent frameworks").

One small module per framework, each importing its framework only when an adapter is built, so
``contractrl.gate`` stays importable without them; a missing framework is a one-line
:class:`MissingExtraError` naming the ``agents`` extra. Every adapter sends every tool call through
:meth:`RepairGate.repair` (one ledger row per call) and hands the tool the dispatched arguments or
gives the framework the refusal in the form it already feeds back to its model.
"""

from .common import AGENTS_EXTRA, MissingExtraError, refusal_message
from .langgraph import GateToolCallWrapper, gated_tool_node
from .langgraph import tool_definitions as langchain_tool_definitions
from .openai_agents import gate_function_tool
from .openai_agents import tool_definitions as openai_agents_tool_definitions
from .pydantic_ai import gate_capability
from .pydantic_ai import tool_definitions as pydantic_ai_tool_definitions

__all__ = [
    "AGENTS_EXTRA",
    "GateToolCallWrapper",
    "MissingExtraError",
    "gate_capability",
    "gate_function_tool",
    "gated_tool_node",
    "langchain_tool_definitions",
    "openai_agents_tool_definitions",
    "pydantic_ai_tool_definitions",
    "refusal_message",
]
