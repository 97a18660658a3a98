"""The runtime repair gate: a repair policy in front of a real tool executor (docs/gate.md).

A call goes in; :class:`Dispatch` (the valid or repaired call) or :class:`Refusal` (a typed code)
comes out, each decision chained into a ledger. It sits above the trainers because it serves what
they produced (a selector directory, an adapter) and below the command line that exposes it.
"""

from .calls import ToolCall, parse_call
from .decision import GATE_CODES, Decision, Dispatch, Refusal
from .gate import GateBudgets, RepairGate
from .policy import HFOptions, policy_from_spec
from .tools import GateTool, builtin_tool, parse_tools

__all__ = [
    "GATE_CODES",
    "Decision",
    "Dispatch",
    "GateBudgets",
    "GateTool",
    "HFOptions",
    "Refusal",
    "RepairGate",
    "ToolCall",
    "builtin_tool",
    "parse_call",
    "parse_tools",
    "policy_from_spec",
]
