"""Fixed-size encodings of a public state and its candidates, and the action mask.

Every candidate is *probed*: the contract's own transition is run on it from the current state
(``RepairContract.step`` is pure, so nothing changes). The probe gives the action mask exactly as the
contract would apply it (a candidate is masked when the transition refuses it with a patch code:
malformed, path unavailable, immutable path, root write, bad move source, over the operation budget)
and, for the rest, what the validator says of the patched object. The validator and the schema are
public, so a policy may consult them before it commits, as a production repair gate would; the
offline half is never consulted.

All features lie in [0, 1]. Their names are listed (:data:`STATE_FEATURES`,
:data:`CANDIDATE_FEATURES`) so a trained selector's inputs can be read back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..rollout.candidates import OP_KINDS, SOURCES, Candidate, disagrees, stated_values
from ..rollout.schema_excerpt import declared_types, subschemas_at
from ..tasks.cases import PublicCase
from ..validators import PublicState, RepairContract
from ..validators.codes import PATCH_CODES, SCHEMA_CODES, Code
from ..validators.pointer import PointerSyntaxError, parse_pointer, resolve

# report codes a state can carry (schema codes, and the response codes a noisy report may show)
_REPORT_CODES: tuple[str, ...] = tuple(sorted(c.value for c in SCHEMA_CODES))
_HISTORY_CODES: tuple[str, ...] = ("accepted", "schema", "masked", "malformed")
_TYPES: tuple[str, ...] = ("string", "integer", "number", "boolean", "array", "object", "null")
_ABSENT = object()

STATE_FEATURES: tuple[str, ...] = (
    *(f"code={c}" for c in _REPORT_CODES),
    "code=other",
    "errors/3",
    "pointer_missing",
    "pointer_depth/4",
    "pointer_exists",
    "pointer_immutable",
    "pointer_stated",
    *(f"schema_type={t}" for t in _TYPES),
    "schema_enum",
    "schema_const",
    "schema_default",
    "stated_args/8",
    "disagreements/4",
    "attempts_left/budget",
    "ops_left/budget",
    "history/2",
    *(f"last={h}" for h in _HISTORY_CODES),
    "immutable_paths/4",
)
CANDIDATE_FEATURES: tuple[str, ...] = (
    "present",
    *(f"source={s}" for s in SOURCES),
    *(f"op={k}" for k in (*OP_KINDS, "combined")),
    "ops/2",
    "at_reported_pointer",
    "top_level_stated",
    "admissible",
    "accepted",
    "still_invalid",
    "errors_after/3",
    "fixes_reported",
    "collateral/3",
    "off_pointer/3",
    "repeats_earlier",
)


@dataclass(frozen=True)
class Probe:
    """What the contract says of one candidate from the current state (nothing is applied)."""

    outcome: Code
    masked: bool
    accepted: bool
    errors_after: int
    fixes_reported: bool
    collateral: int
    off_pointer: int


def probe(contract: RepairContract, state: PublicState, candidate: Candidate) -> Probe:
    """The contract's transition on ``candidate``, read for its mask verdict and its result."""
    result = contract.step(state, candidate.text)
    code = result.outcome
    masked = code in PATCH_CODES
    after = result.state.report
    reported = {e.pointer for e in state.report.errors}
    still = {e.pointer for e in after.errors} if not masked and result.patched is not None else reported
    return Probe(
        outcome=code,
        masked=masked,
        accepted=result.accepted_object is not None,
        errors_after=len(after.errors) if result.patched is not None else len(state.report.errors),
        fixes_reported=bool(reported) and not (reported & still) and not masked and not candidate.is_abstain,
        collateral=len(result.record.collateral),
        off_pointer=len(result.record.off_pointer),
    )


def action_mask(candidates: Sequence[Candidate], probes: Sequence[Probe], size: int) -> np.ndarray:
    """1 for every listed candidate the contract admits (ABSTAIN always), 0 for the rest and the padding."""
    mask = np.zeros(size, dtype=np.float32)
    for index, (cand, result) in enumerate(zip(candidates, probes, strict=True)):
        mask[index] = 1.0 if cand.is_abstain or not result.masked else 0.0
    return mask


def _clip(x: float) -> float:
    return float(min(1.0, max(0.0, x)))


def _schema_facts(case: PublicCase, tokens: tuple[str, ...] | None) -> dict[str, float]:
    facts = {f"schema_type={t}": 0.0 for t in _TYPES} | {"schema_enum": 0.0, "schema_const": 0.0, "schema_default": 0.0}
    if tokens is None:
        return facts
    for node in subschemas_at(case.schema, tokens):
        if not isinstance(node, dict):
            continue
        for t in declared_types(node) & set(_TYPES):
            facts[f"schema_type={t}"] = 1.0
        facts["schema_enum"] = max(facts["schema_enum"], float("enum" in node))
        facts["schema_const"] = max(facts["schema_const"], float("const" in node))
        facts["schema_default"] = max(facts["schema_default"], float("default" in node))
    return facts


def _history_class(code: Code) -> str:
    if code is Code.ACCEPTED:
        return "accepted"
    if code in SCHEMA_CODES:
        return "schema"
    if code in PATCH_CODES:
        return "masked"
    return "malformed"


def encode_state(case: PublicCase, state: PublicState) -> np.ndarray:
    """The state half of the observation (:data:`STATE_FEATURES`)."""
    stated = stated_values(case)
    errors = state.report.errors
    primary = errors[0] if errors else None
    values: dict[str, float] = {name: 0.0 for name in STATE_FEATURES}
    if primary is not None:
        key = f"code={primary.code.value}"
        values[key if key in values else "code=other"] = 1.0
    values["errors/3"] = _clip(len(errors) / 3)
    tokens: tuple[str, ...] | None = None
    if primary is not None:
        try:
            tokens = parse_pointer(primary.pointer)
        except PointerSyntaxError:
            tokens = None
    values["pointer_missing"] = float(not tokens)
    if tokens:
        values["pointer_depth/4"] = _clip(len(tokens) / 4)
        values["pointer_exists"] = float(resolve(state.candidate, tokens, _ABSENT) is not _ABSENT)
        immutable = [parse_pointer(p) for p in case.immutable]
        values["pointer_immutable"] = float(any(tokens[: len(i)] == i for i in immutable))
        values["pointer_stated"] = float(tokens[0] in stated)
    values.update(_schema_facts(case, tokens))
    values["stated_args/8"] = _clip(len(stated) / 8)
    if isinstance(state.candidate, dict):
        differ = sum(1 for k, v in stated.items() if disagrees(state.candidate, k, v))
        values["disagreements/4"] = _clip(differ / 4)
    values["attempts_left/budget"] = _clip(state.attempts_left / max(1, case.max_attempts))
    values["ops_left/budget"] = _clip(state.ops_left / max(1, case.max_ops))
    values["history/2"] = _clip(len(state.history) / 2)
    if state.history:
        values[f"last={_history_class(state.history[-1].outcome)}"] = 1.0
    values["immutable_paths/4"] = _clip(len(case.immutable) / 4)
    return np.asarray([values[name] for name in STATE_FEATURES], dtype=np.float32)


def encode_candidates(
    case: PublicCase, state: PublicState, candidates: Sequence[Candidate], probes: Sequence[Probe], size: int
) -> np.ndarray:
    """The candidate half of the observation: ``size`` rows of :data:`CANDIDATE_FEATURES` (zero padding)."""
    stated = stated_values(case)
    reported = {e.pointer for e in state.report.errors}
    earlier = {h.raw for h in state.history}
    rows = np.zeros((size, len(CANDIDATE_FEATURES)), dtype=np.float32)
    index_of = {name: i for i, name in enumerate(CANDIDATE_FEATURES)}
    for row, (cand, result) in enumerate(zip(candidates, probes, strict=True)):
        out = rows[row]
        out[index_of["present"]] = 1.0
        out[index_of[f"source={cand.source}"]] = 1.0
        if not cand.is_abstain:
            out[index_of[f"op={cand.op_kind}"]] = 1.0
            paths = [op["path"] for op in cand.ops]
            out[index_of["ops/2"]] = _clip(len(cand.ops) / 2)
            out[index_of["at_reported_pointer"]] = float(any(p in reported for p in paths))
            out[index_of["top_level_stated"]] = float(any(p.split("/")[1] in stated for p in paths if p.count("/") >= 1))
            out[index_of["admissible"]] = float(not result.masked)
            out[index_of["accepted"]] = float(result.accepted)
            out[index_of["still_invalid"]] = float(not result.masked and not result.accepted)
            out[index_of["errors_after/3"]] = _clip(result.errors_after / 3)
            out[index_of["fixes_reported"]] = float(result.fixes_reported)
            out[index_of["collateral/3"]] = _clip(result.collateral / 3)
            out[index_of["off_pointer/3"]] = _clip(result.off_pointer / 3)
            out[index_of["repeats_earlier"]] = float(cand.text in earlier)
    return rows


__all__ = [
    "CANDIDATE_FEATURES",
    "STATE_FEATURES",
    "Probe",
    "action_mask",
    "encode_candidates",
    "encode_state",
    "probe",
]
