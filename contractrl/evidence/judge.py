"""The judge: semantic verdicts for the episodes of a frozen ledger.

This is the evidence boundary's door. It opens the offline half of cases, but only for a ledger
whose hash chain and frozen digest verify, so a verdict can never flow back into the episode it
scores. GRPO asks it for one verdict per episode after each rollout batch is frozen; analysis uses
the same verdicts. It also enforces the hard constraint: an episode that released an object that
fails the tool's schema or contract is an *unsafe dispatch*, and the judge raises instead of
scoring, which stops a training run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ContractRLError
from ..rollout.ledger import read_ledger
from ..tasks.cases import Case, OfflineCase, PublicCase
from ..tasks.offline import read_offline, semantic_outcome
from ..tasks.store import read_public
from ..validators import Verifier, load_contract


class UnsafeDispatchError(ContractRLError):
    """An episode released an object that its own schema or contract rejects."""


@dataclass(frozen=True)
class Verdict:
    episode_id: str
    case_id: str
    success: bool
    reason: str
    unsafe: bool = False  # only when scoring with strict=False: an invalid object was released


class Judge:
    """Holds both halves of a case set and scores ledgers against it."""

    def __init__(self, cases: Iterable[Case]) -> None:
        self._public: dict[str, PublicCase] = {}
        self._offline: dict[str, OfflineCase] = {}
        for case in cases:
            case_id = case.public.case_id
            if case_id in self._public and self._public[case_id] != case.public:
                raise ContractRLError(f"two different cases share the id {case_id!r}; join their runs separately")
            self._public[case_id] = case.public
            self._offline[case_id] = case.offline
        self._verifiers: dict[str, Verifier] = {}

    @classmethod
    def from_case_dir(cls, case_dir: str | Path) -> Judge:
        offline = read_offline(case_dir)
        return cls(Case(p, offline[p.case_id]) for p in read_public(case_dir))

    def score_run(self, run_dir: str | Path) -> list[tuple[dict[str, Any], Verdict]]:
        """(row, verdict) for every episode of a frozen, verified ledger, in ledger order."""
        return [(row, self.verdict(row)) for row in read_ledger(run_dir, require_frozen=True)]

    def public(self, case_id: str) -> PublicCase:
        return self._public[case_id]

    def offline(self, case_id: str) -> OfflineCase:
        return self._offline[case_id]

    def verdict(self, row: dict[str, Any], *, strict: bool = True) -> Verdict:
        """The episode's semantic verdict. An unsafe dispatch raises (training must stop), or with
        ``strict=False`` is a failed verdict marked ``unsafe`` (analysis counts them)."""
        case_id = row["case_id"]
        if case_id not in self._public:
            raise ContractRLError(f"episode {row['episode_id']} is for case {case_id}, which this judge does not hold")
        public = self._public[case_id]
        dispatched = row.get("dispatched")
        if row.get("accepted"):
            report = self._verifier(public).verify(dispatched)
            if not report.accepted:
                message = (
                    f"episode {row['episode_id']} dispatched an object its contract rejects: "
                    f"{report.errors[0].code.value} at {report.errors[0].pointer!r}"
                )
                if strict:
                    raise UnsafeDispatchError(message)
                return Verdict(row["episode_id"], case_id, False, message, unsafe=True)
        else:
            dispatched = None
        outcome = semantic_outcome(public, self._offline[case_id], dispatched, bool(row.get("abstained")))
        return Verdict(row["episode_id"], case_id, outcome.success, outcome.reason)

    def _verifier(self, public: PublicCase) -> Verifier:
        if public.case_id not in self._verifiers:
            self._verifiers[public.case_id] = Verifier.build(public.schema, load_contract(public.contract))
        return self._verifiers[public.case_id]


__all__ = ["Judge", "UnsafeDispatchError", "Verdict"]
