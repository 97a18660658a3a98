"""A repair case, in two halves stored apart: what a policy may see, and what only scoring may.

The split is structural. :class:`PublicCase` holds the online evidence (request, corrupted
candidate, verifier report, schema, contract, immutable paths, budgets); :class:`OfflineCase`
holds the canonical target, the gold patch and the expected semantic outcome. They share only
``case_id``, live in different files, and rollout code takes ``PublicCase`` alone.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ..validators.jsonvalue import canonical_json

ABSTAIN = "ABSTAIN"


@dataclass(frozen=True)
class PublicCase:
    """The online half: everything a policy, a prompt or an online reward may depend on."""

    case_id: str
    family: str
    tool: str
    tool_family: str
    schema: dict[str, Any]
    schema_sha256: str
    schema_version: int
    contract: dict[str, Any]
    request: str
    candidate: Any
    report: dict[str, Any]
    immutable: tuple[str, ...]
    max_attempts: int
    max_ops: int
    world_seed: int

    @property
    def budgets(self) -> dict[str, int]:
        return {"max_attempts": self.max_attempts, "max_ops": self.max_ops}

    def to_row(self) -> dict[str, Any]:
        return {
            "case_id": self.case_id,
            "family": self.family,
            "tool": self.tool,
            "tool_family": self.tool_family,
            "schema": canonical_json(self.schema),
            "schema_sha256": self.schema_sha256,
            "schema_version": self.schema_version,
            "contract": canonical_json(self.contract),
            "request": self.request,
            "candidate": canonical_json(self.candidate),
            "report": canonical_json(self.report),
            "immutable": canonical_json(list(self.immutable)),
            "budgets": canonical_json(self.budgets),
            "world_seed": self.world_seed,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> PublicCase:
        budgets = json.loads(row["budgets"])
        return cls(
            case_id=row["case_id"],
            family=row["family"],
            tool=row["tool"],
            tool_family=row["tool_family"],
            schema=json.loads(row["schema"]),
            schema_sha256=row["schema_sha256"],
            schema_version=int(row["schema_version"]),
            contract=json.loads(row["contract"]),
            request=row["request"],
            candidate=json.loads(row["candidate"]),
            report=json.loads(row["report"]),
            immutable=tuple(json.loads(row["immutable"])),
            max_attempts=int(budgets["max_attempts"]),
            max_ops=int(budgets["max_ops"]),
            world_seed=int(row["world_seed"]),
        )


@dataclass(frozen=True)
class OfflineCase:
    """The scoring half: never opened by rollout or training-time prompt code.

    ``target`` is None and ``target_patch`` is ``"ABSTAIN"`` when the correct action is to abstain.
    ``expected`` is the sandbox outcome of the target (``{"abstain": true}`` for abstentions);
    ``cluster`` groups cases whose targets are semantically the same call.
    """

    case_id: str
    target: Any
    target_patch: list[dict[str, Any]] | str
    expected: dict[str, Any]
    cluster: str
    corruption: dict[str, Any]

    @property
    def should_abstain(self) -> bool:
        return self.target_patch == ABSTAIN

    def to_row(self) -> dict[str, Any]:
        return {
            "case_id": self.case_id,
            "target": canonical_json(self.target),
            "target_patch": canonical_json(self.target_patch),
            "expected": canonical_json(self.expected),
            "cluster": self.cluster,
            "corruption": canonical_json(self.corruption),
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> OfflineCase:
        return cls(
            case_id=row["case_id"],
            target=json.loads(row["target"]),
            target_patch=json.loads(row["target_patch"]),
            expected=json.loads(row["expected"]),
            cluster=row["cluster"],
            corruption=json.loads(row["corruption"]),
        )


@dataclass(frozen=True)
class Case:
    """Both halves together: only case generation and offline scoring hold one of these."""

    public: PublicCase
    offline: OfflineCase


def cluster_key(tool: str, target: Any, candidate: Any) -> str:
    """The split audit's semantic cluster: the cases of one tool that end in the same object (or,
    where the answer is ABSTAIN, start from the same call) are one cluster whatever their families,
    so the audit can keep them on one side of a split. Contrast twins are keyed by it too."""
    key = canonical_json([tool, target if target is not None else [ABSTAIN, candidate]])
    return "k" + hashlib.sha256(key.encode()).hexdigest()[:15]
