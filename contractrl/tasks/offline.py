"""The offline half: reading targets and scoring semantic outcomes, after a ledger is frozen.

Nothing in rollout or training-time prompt code may import this module: it is where the
canonical target, the gold patch and the expected tool outcome live.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from ..errors import InputFileError
from ..validators.jsonvalue import json_equal
from .bfcl import bfcl_accepts
from .cases import Case, OfflineCase, PublicCase
from .catalog import make_sandbox
from .spec import ExecResult
from .store import OFFLINE_FILE, read_public, verified_path


def read_offline(case_dir: str | Path) -> dict[str, OfflineCase]:
    """Targets by case id (checked against the manifest's SHA-256)."""
    table = pq.read_table(verified_path(case_dir, OFFLINE_FILE))
    return {row["case_id"]: OfflineCase.from_row(row) for row in table.to_pylist()}


@dataclass(frozen=True)
class SemanticOutcome:
    """Whether the episode did what the user asked: the right call ran, or a correct abstention."""

    success: bool
    reason: str
    observed: dict[str, Any] | None = None


def semantic_outcome(public: PublicCase, offline: OfflineCase, dispatched: Any | None, abstained: bool) -> SemanticOutcome:
    """Score one episode: ``dispatched`` is the object released to the tool (None if none was).

    An abstention is a success only on a case whose correct action is to abstain; any dispatch on
    such a case is a failure, since it sends a corrupted or invented value. Otherwise the dispatched
    call is executed in a fresh sandbox and must produce exactly the expected result and side effects;
    a BFCL case has no sandbox, and its call must pass BFCL's acceptance rule over every acceptable
    value; a JSON Schema corpus case must give back exactly its target object.
    """
    if offline.should_abstain:
        if dispatched is not None:
            return SemanticOutcome(False, "dispatched on a case that requires abstaining")
        return SemanticOutcome(abstained, "correct abstention" if abstained else "no abstention")
    if dispatched is None:
        return SemanticOutcome(False, "abstained on a repairable case" if abstained else "nothing dispatched")
    if offline.expected.get("match") == "target":
        same = json_equal(dispatched, offline.target)
        return SemanticOutcome(same, "the target object" if same else "differs from the target object")
    if "bfcl_possible" in offline.expected:
        accepted, why = bfcl_accepts(dispatched, offline.expected["bfcl_possible"], public.schema)
        return SemanticOutcome(accepted, f"BFCL: {why}")
    observed = make_sandbox(public.tool_family, public.world_seed).execute(public.tool, dispatched)
    expected = ExecResult.from_dict(offline.expected)
    if observed.same_as(expected):
        return SemanticOutcome(True, "expected result and side effects", observed.to_dict())
    return SemanticOutcome(False, "result or side effects differ from the target's", observed.to_dict())


def read_cases(case_dir: str | Path) -> list[Case]:
    """Both halves joined by case id: for generation-time audits and offline scoring only."""
    offline = read_offline(case_dir)
    public = read_public(case_dir)
    missing = [p.case_id for p in public if p.case_id not in offline]
    if missing or len(offline) != len(public):
        raise InputFileError(f"{case_dir}: public and offline halves do not hold the same case ids (e.g. {missing[:3]})")
    return [Case(p, offline[p.case_id]) for p in public]
