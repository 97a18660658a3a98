"""What a gate answers: dispatch this call, or refuse it with a typed code.

Both carry the decision's latency and the hash of the ledger row that records it, so a caller can
cite the audited decision for the call it executes (or does not).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .calls import ToolCall

# Refusal codes of the gate itself, beside the verifier's and the episode's (docs/gate.md).
UNKNOWN_TOOL = "unknown_tool"  # the call names no tool of the gate
TOKEN_BUDGET = "token_budget"  # the policy spent the token budget before a repair was accepted
POLICY_ERROR = "policy_error"  # the policy raised: nothing it produced is trusted
INTERNAL_ERROR = "internal_error"  # the environment or the verifier raised
UNVERIFIED = "unverified"  # the final object failed the gate's own re-verification
GATE_CODES = (UNKNOWN_TOOL, TOKEN_BUDGET, POLICY_ERROR, INTERNAL_ERROR, UNVERIFIED)


@dataclass(frozen=True)
class Dispatch:
    """Execute ``call``: it was valid as sent (``repaired`` False) or became valid by a repair the
    verifier accepted. ``attempts`` counts the policy's decisions."""

    call: ToolCall
    repaired: bool
    attempts: int
    latency_s: float
    row_hash: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": "dispatch",
            "call": self.call.to_dict(),
            "repaired": self.repaired,
            "attempts": self.attempts,
            "latency_s": self.latency_s,
            "row_hash": self.row_hash,
        }


@dataclass(frozen=True)
class Refusal:
    """Do not execute: ``code`` is a verifier or episode code (``abstain``, ``attempts_exhausted``,
    ``malformed_json``, ...) or one of :data:`GATE_CODES`; ``reason`` is one line for the caller."""

    code: str
    reason: str
    attempts: int
    latency_s: float
    row_hash: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": "refusal",
            "code": self.code,
            "reason": self.reason,
            "attempts": self.attempts,
            "latency_s": self.latency_s,
            "row_hash": self.row_hash,
        }


Decision = Dispatch | Refusal

__all__ = ["GATE_CODES", "Decision", "Dispatch", "Refusal"]
