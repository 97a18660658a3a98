"""Per-episode metrics of DESIGN.md, from a frozen ledger row, its case's offline half and the
judge's verdict. Pure functions: every table is an aggregation of these rows.

Definitions (one row per episode):

* ``semantic_success``: the tool received the intended object and returned the expected result and
  side effects; on a case whose correct action is to abstain, a correct abstention.
* ``schema_valid``: an object was released and it passes its schema and contract.
* ``final_object_match``: the released object equals the canonical target (``x ⊕ p == x*``); on an
  abstain case, nothing was released and the policy abstained.
* ``exact_patch_match``: the accepted attempt's operations equal the canonical patch (patch arms
  only; ``None`` for the whole-object arms); on an abstain case, the policy abstained.
* ``first_attempt_valid``: the first attempt was accepted.
* ``collateral``: changed leaf paths not covered by the emitted operations' paths, summed over
  attempts. ``retries``: r = a - 1 over attempts that consumed budget.
* ``unsafe_dispatch``: an object was released that fails its own schema or contract (must be 0).
* ``fail_closed``: the episode ended with nothing released and without abstaining (the contract
  refused every attempt or the budget ran out).
* tokens, validator calls and latency (``latency_s``, the transition wall time) as recorded.
"""

from __future__ import annotations

import json
from typing import Any

from ..tasks.cases import OfflineCase
from ..validators.jsonvalue import json_equal

WHOLE_OBJECT_ARMS = frozenset({"full_regen", "constrained"})
LABELS = ("episode_id", "case_id", "case_family", "tool", "tool_family", "arm", "policy", "seed", "sample", "outcome")


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def accepted_ops(row: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The operations of the attempt the contract accepted, or None if none was accepted."""
    for attempt in _json(row["attempts"]):
        if attempt["outcome"] == "accepted":
            return list(attempt["ops"])
    return None


def episode_metrics(row: dict[str, Any], offline: OfflineCase, success: bool, unsafe: bool) -> dict[str, Any]:
    """One scored row: the ledger row's labels and every per-episode metric."""
    accepted = bool(row["accepted"])
    abstained = bool(row["abstained"])
    dispatched = _json(row.get("dispatched")) if accepted else None
    whole_object = row["arm"] in WHOLE_OBJECT_ARMS
    if offline.should_abstain:
        object_match = (not accepted) and abstained
        patch_match: bool | None = None if whole_object else object_match
    else:
        object_match = accepted and json_equal(dispatched, offline.target)
        ops = accepted_ops(row)
        patch_match = None if whole_object else (ops is not None and json_equal(ops, offline.target_patch))
    return {
        **{key: row[key] for key in LABELS},
        "semantic_success": bool(success),
        "schema_valid": accepted and not unsafe,
        "final_object_match": bool(object_match),
        "exact_patch_match": patch_match,
        "first_attempt_valid": bool(row["first_attempt_valid"]),
        "collateral": int(row["collateral"]),
        "retries": int(row["retries"]),
        "attempts": int(row["patch_attempts"]),
        "unsafe_dispatch": int(unsafe),
        "fail_closed": (not accepted) and not abstained,
        "abstained": abstained,
        "should_abstain": offline.should_abstain,
        "generated_tokens": int(row["generated_tokens"]),
        "prompt_tokens": int(row["prompt_tokens"]),
        "validator_calls": int(row["validator_calls"]),
        "latency_s": float(row.get("wall_s") or 0.0),
    }


__all__ = ["LABELS", "accepted_ops", "episode_metrics"]
