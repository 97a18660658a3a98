"""Per-episode metrics (docs/analysis.md), from a frozen ledger row, its case's two halves and the
judge's verdict. Pure functions: every table is an aggregation of these rows.

Definitions (one row per episode):

* ``semantic_success``: the tool received the intended object and returned the expected result and
  side effects; on a case whose correct action is to abstain, a correct abstention.
* ``schema_valid``: an object was released and it passes its schema and contract.
* ``final_object_match``: the released object equals the canonical target (``x ⊕ p == x*``); on an
  abstain case, nothing was released and the policy abstained.
* ``exact_patch_match``: the accepted attempt's operations equal the canonical patch (patch arms
  only; ``None`` for the whole-object arms); on an abstain case, the policy abstained.
* ``pointer_fix``: the accepted attempt edited exactly the paths the canonical patch edits (patch
  arms only).
* ``first_attempt_valid``: the first attempt was accepted.
* ``collateral``: changed leaf paths not covered by the emitted operations' paths, summed over
  attempts; ``off_pointer``: edited paths away from every reported pointer. ``retries``: r = a - 1
  over attempts that consumed budget.
* ``masked_attempts``: attempts the action mask refused (U of the reward); ``malformed_attempts``:
  attempts that did not parse.
* ``unsafe_dispatch``: an object was released that fails its own schema or contract (must be 0).
* ``fail_closed``: the episode ended with nothing released and without abstaining (the contract
  refused every attempt or the budget ran out).
* ``confidence``: the policy's geometric-mean token probability of its first answer,
  ``exp(logprob / tokens)``; NaN for policies without log-probabilities (calibration, Table 35).
* ``leakage``: the public half of the case contains an offline-only value (the serialized target
  object or patch, or the semantic cluster id); it must be 0 (Table 32).
* ``op_family`` and ``structure``: the shape of the canonical repair (operation kinds; flat, nested,
  array, union, long pointer or multi-field), the strata of Tables 15 and 31.
* tokens, validator calls and latency as recorded; ``latency_s`` is the episode's end-to-end time,
  generation (each answer's share of its batched generate call) plus validation and sandbox.
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa

from ..rollout.env import masked_actions
from ..rollout.ledger import IDENTITY_COLUMNS
from ..tasks.arms import arm_spec
from ..tasks.cases import OfflineCase, PublicCase
from ..validators.attempts import AttemptClass
from ..validators.jsonvalue import canonical_json, json_equal
from ..validators.pointer import parse_pointer

LABELS = tuple(name for name, _ in IDENTITY_COLUMNS)
LONG_POINTER = 4  # pointer depth from which a repair counts as a long-pointer repair (Table 31)

# The scored row's columns and types: one fixed schema, so every block and shard agrees.
SCORED_SCHEMA = pa.schema(
    [
        *IDENTITY_COLUMNS,
        ("semantic_success", pa.bool_()),
        ("schema_valid", pa.bool_()),
        ("final_object_match", pa.bool_()),
        ("exact_patch_match", pa.bool_()),
        ("pointer_fix", pa.bool_()),
        ("first_attempt_valid", pa.bool_()),
        ("first_outcome", pa.string()),
        ("collateral", pa.int64()),
        ("off_pointer", pa.int64()),
        ("retries", pa.int64()),
        ("attempts", pa.int64()),
        ("masked_attempts", pa.int64()),
        ("malformed_attempts", pa.int64()),
        ("unsafe_dispatch", pa.int64()),
        ("fail_closed", pa.bool_()),
        ("abstained", pa.bool_()),
        ("should_abstain", pa.bool_()),
        ("generated_tokens", pa.int64()),
        ("prompt_tokens", pa.int64()),
        ("validator_calls", pa.int64()),
        ("probes", pa.int64()),
        ("latency_s", pa.float64()),
        ("confidence", pa.float64()),
        ("leakage", pa.int64()),
        ("op_family", pa.string()),
        ("structure", pa.string()),
    ]
)


def accepted_ops(row: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The operations of the attempt the contract accepted, or None if none was accepted."""
    for attempt in row["attempts"]:
        if attempt["outcome"] == "accepted":
            return list(attempt["ops"])
    return None


def confidence(attempts: list[dict[str, Any]]) -> float:
    """exp(mean token log-probability) of the first answer; NaN when the policy reported none.

    The mean is over the committed answer's own tokens (``answer_tokens``): a shielded decision
    decodes proposals it may not commit, and may commit an enumerated candidate it only scored, so
    its generated tokens are not the answer's. Ledgers written before ``answer_tokens`` existed fall
    back to the generated tokens (right for blind decoding, which commits what it decoded)."""
    if not attempts:
        return math.nan
    first = attempts[0]
    logprob, tokens = first.get("logprob"), first.get("answer_tokens")
    tokens = int(first.get("generated_tokens") or 0) if tokens is None else int(tokens)
    if logprob is None or tokens <= 0:
        return math.nan
    return math.exp(float(logprob) / tokens)


def op_family(offline: OfflineCase) -> str:
    """The operation kinds of the canonical repair, e.g. ``replace`` or ``add+remove``."""
    if offline.should_abstain:
        return "abstain"
    assert isinstance(offline.target_patch, list)
    return "+".join(sorted({op["op"] for op in offline.target_patch})) or "none"


def _schema_at(schema: Any, tokens: tuple[str, ...]) -> Any:
    """The subschema a path's last token lands in (properties and items only; None if not found)."""
    node = schema
    for token in tokens:
        if not isinstance(node, dict):
            return None
        if token in node.get("properties", {}):
            node = node["properties"][token]
        elif isinstance(node.get("items"), dict):
            node = node["items"]
        else:
            return None
    return node


def structure(public: PublicCase, offline: OfflineCase) -> str:
    """The shape of the canonical repair: the strata of the structure-shift table (Table 31)."""
    if offline.should_abstain:
        return "abstain"
    assert isinstance(offline.target_patch, list)
    paths = {op["path"] for op in offline.target_patch}
    if len(paths) > 1:
        return "multi_field"
    tokens = parse_pointer(next(iter(paths))) if paths else ()
    node = _schema_at(public.schema, tokens)
    if isinstance(node, dict) and ("anyOf" in node or "oneOf" in node):
        return "union"
    if any(t.isdigit() or t == "-" for t in tokens):
        return "array"
    if len(tokens) >= LONG_POINTER:
        return "long_pointer"
    return "nested" if len(tokens) >= 2 else "flat"


def leakage(public: PublicCase, offline: OfflineCase) -> int:
    """1 if an offline-only value appears in the public half's serialization."""
    text = "\n".join(str(value) for value in public.to_row().values())  # raw strings, canonical JSON for structures
    secrets = [offline.cluster, canonical_json(offline.target_patch)]
    if offline.target is not None:
        secrets.append(canonical_json(offline.target))
    return int(any(len(s) >= 8 and s in text for s in secrets))


def episode_metrics(row: dict[str, Any], public: PublicCase, offline: OfflineCase, success: bool, unsafe: bool) -> dict[str, Any]:
    """One scored row: the ledger row's labels and every per-episode metric."""
    attempts = row["attempts"]
    accepted = bool(row["accepted"])
    abstained = bool(row["abstained"])
    dispatched = row.get("dispatched") if accepted else None
    whole_object = arm_spec(row["arm"]).whole_object
    ops = accepted_ops(row)
    pointer_fix: bool | None
    if offline.should_abstain:
        object_match = (not accepted) and abstained
        patch_match: bool | None = None if whole_object else object_match
        pointer_fix = None if whole_object else object_match
    else:
        assert isinstance(offline.target_patch, list)
        object_match = accepted and json_equal(dispatched, offline.target)
        patch_match = None if whole_object else (ops is not None and json_equal(ops, offline.target_patch))
        gold_paths = {op["path"] for op in offline.target_patch}
        pointer_fix = None if whole_object else (ops is not None and {op.get("path") for op in ops} == gold_paths)
    return {
        **{key: row[key] for key in LABELS},
        "semantic_success": bool(success),
        "schema_valid": accepted and not unsafe,
        "final_object_match": bool(object_match),
        "exact_patch_match": patch_match,
        "pointer_fix": pointer_fix,
        "first_attempt_valid": bool(row["first_attempt_valid"]),
        "first_outcome": attempts[0]["outcome"] if attempts else "",
        "collateral": int(row["collateral"]),
        "off_pointer": int(row.get("off_pointer") or 0),
        "retries": int(row["retries"]),
        "attempts": int(row["patch_attempts"]),
        "masked_attempts": masked_actions(row),
        "malformed_attempts": sum(1 for a in attempts if a.get("attempt_class") == AttemptClass.MALFORMED.value),
        "unsafe_dispatch": int(unsafe),
        "fail_closed": (not accepted) and not abstained,
        "abstained": abstained,
        "should_abstain": offline.should_abstain,
        "generated_tokens": int(row["generated_tokens"]),
        "prompt_tokens": int(row["prompt_tokens"]),
        "validator_calls": int(row["validator_calls"]),
        "probes": int(row.get("probes") or 0),  # ledgers written before the shield have none
        "latency_s": float(row.get("wall_s") or 0.0) + float(row.get("gen_s") or 0.0),
        "confidence": confidence(attempts),
        "leakage": leakage(public, offline),
        "op_family": op_family(offline),
        "structure": structure(public, offline),
    }


__all__ = ["LABELS", "SCORED_SCHEMA", "accepted_ops", "confidence", "episode_metrics", "leakage", "op_family", "structure"]
