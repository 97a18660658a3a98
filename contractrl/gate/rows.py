"""A gate decision as a ledger row: the episode's row (rollout/env.py) plus what the gate decided.

Reusing :func:`~contractrl.rollout.env.episode_row` keeps one row format for rollouts and for the
gate, so the ledger reader, the integrity checks and the analysis join read both. ``latency_s`` is
a timing field (not chained), so the same calls in the same order give the same ledger digest.
"""

from __future__ import annotations

import json
from typing import Any

from ..rollout.env import EpisodeLog, episode_row
from ..tasks.cases import PublicCase
from ..validators.jsonvalue import canonical_json

GATE_KIND = "contractrl.gate"
RECEIVED_MAX_CHARS = 65_536  # a ledger row keeps at most this much of the arguments as received


def received_text(arguments: Any) -> str:
    """The arguments as the caller sent them, as text the ledger can hold (bounded)."""
    if isinstance(arguments, str):
        text = arguments
    elif isinstance(arguments, bytes):
        text = arguments.decode("utf-8", "backslashreplace")
    else:
        try:
            text = canonical_json(arguments)
        except (TypeError, ValueError, RecursionError):
            text = f"<not a JSON value: {type(arguments).__name__}>"
    return text if len(text) <= RECEIVED_MAX_CHARS else text[:RECEIVED_MAX_CHARS] + "...<truncated>"


def decision_row(
    case: PublicCase,
    log: EpisodeLog,
    *,
    arm: str,
    policy: str,
    seed: int,
    sequence: int,
    call_id: str | None,
    received: str,
    dispatched: Any,
    code: str,
    reason: str,
    latency_s: float,
) -> dict[str, Any]:
    """One decision's row. ``dispatched`` is what left the gate (None for a refusal), ``code``
    ``accepted`` for a dispatch, else the refusal code."""
    row = episode_row(case, log, arm=arm, policy=policy, seed=seed, sample=sequence)
    row.update(
        {
            "kind": GATE_KIND,
            "decision": "dispatch" if dispatched is not None else "refusal",
            "code": code,
            "reason": reason,
            "call_id": call_id,
            "request": case.request,
            "received": received,
            "outcome": code,
            "accepted": dispatched is not None,
            "dispatched": dispatched,
            "latency_s": latency_s,
        }
    )
    return row


def decode_received(row: dict[str, Any]) -> Any:
    """The received arguments of a row as a JSON value, or the raw text when they were not JSON."""
    try:
        return json.loads(row["received"])
    except (json.JSONDecodeError, TypeError):
        return row["received"]


__all__ = ["GATE_KIND", "decision_row", "decode_received", "received_text"]
