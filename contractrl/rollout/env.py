"""The repair environment over one public case (plain Python; Ray actors wrap it elsewhere).

``reset`` exposes the case's public report, which for the feedback-noise families is deliberately
imprecise; every later report comes from the real verifier. That holds after an attempt the mask
or the parser refused too: the call is unchanged then and reset has verified it, so the second
decision reads the real report, as it does after a patch that was applied and rejected. An
accepted object is dispatched to
the case's sandbox exactly once. The environment takes a :class:`PublicCase` and nothing else, so
no offline field can reach a policy through it.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..tasks.arms import DEFAULT_ARM, arm_spec
from ..tasks.cases import PublicCase
from ..tasks.catalog import make_sandbox
from ..validators import Budgets, Code, PublicState, RepairContract, Verifier, VerifierReport, load_contract
from ..validators.attempts import consumes_attempt
from ..validators.codes import PATCH_CODES

if TYPE_CHECKING:
    from .policies import Generation


@dataclass(frozen=True)
class StepRecord:
    """One attempt as the ledger keeps it: raw text, typed outcome, cost."""

    attempt: int
    raw: str
    outcome: str
    attempt_class: str
    pointer: str
    message: str
    ops: tuple[dict[str, Any], ...]
    ops_applied: int
    validator_calls: int
    generated_tokens: int
    prompt_tokens: int
    collateral: tuple[str, ...]
    off_pointer: tuple[str, ...]
    finish_reason: str | None
    wall_s: float
    logprob: float | None = None  # the generator's log-probability of the answer (calibration), if it has one
    gen_s: float = 0.0  # wall seconds the policy spent generating this answer (its share of a batch)
    probes: int = 0  # candidate answers the policy checked on the public contract before committing this one
    # tokens of the committed answer, the length ``logprob`` sums over: a shielded decision may commit an
    # answer it never decoded (an enumerated candidate) or decode proposals it did not commit
    answer_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The attempt as the ledger row holds it (wall time goes to the timing file, not the chain)."""
        return {
            "attempt": self.attempt,
            "raw": self.raw,
            "outcome": self.outcome,
            "attempt_class": self.attempt_class,
            "pointer": self.pointer,
            "message": self.message,
            "ops": list(self.ops),
            "ops_applied": self.ops_applied,
            "validator_calls": self.validator_calls,
            "generated_tokens": self.generated_tokens,
            "prompt_tokens": self.prompt_tokens,
            "collateral": list(self.collateral),
            "off_pointer": list(self.off_pointer),
            "finish_reason": self.finish_reason,
            "logprob": self.logprob,
            "probes": self.probes,
            "answer_tokens": self.answer_tokens,
        }


@dataclass
class EpisodeLog:
    """Everything one episode did, in order; becomes one ledger row."""

    steps: list[StepRecord] = field(default_factory=list)
    dispatched: Any = None
    tool_result: dict[str, Any] | None = None
    final_outcome: str | None = None


def contract_for(case: PublicCase) -> RepairContract:
    """The case's contract from its public half: what the environment steps and what a policy may
    probe before it commits (the schema, the cross-field rules, the budgets, the immutable paths)."""
    verifier = Verifier.build(case.schema, load_contract(case.contract))
    return RepairContract(verifier, Budgets(max_attempts=case.max_attempts, max_ops=case.max_ops), case.immutable)


class RepairEnv:
    """reset(public case) -> state; step(action text) -> (state, step record)."""

    def __init__(self, case: PublicCase, arm: str = DEFAULT_ARM) -> None:
        self.case = case
        self.whole_object = arm_spec(arm).whole_object
        self.contract = contract_for(case)
        self.state: PublicState | None = None
        self.log = EpisodeLog()
        self._public_report: VerifierReport | None = None
        self._verified_report: VerifierReport | None = None

    def reset(self) -> PublicState:
        initial = self.contract.initial_state(self.case.candidate)
        # the case's public report is what the policy sees first (it may be deliberately noisy)
        self._public_report = VerifierReport.from_dict(self.case.report)
        self._verified_report = initial.report
        self.state = PublicState(
            candidate=initial.candidate,
            report=self._public_report,
            history=(),
            attempts_left=initial.attempts_left,
            ops_left=initial.ops_left,
            immutable=initial.immutable,
            done=initial.done,
            outcome=initial.outcome,
        )
        self.log = EpisodeLog()
        return self.state

    def step(
        self,
        text: str | bytes,
        *,
        finish_reason: str | None = None,
        generated_tokens: int = 0,
        prompt_tokens: int = 0,
        logprob: float | None = None,
        gen_s: float = 0.0,
        probes: int = 0,
        answer_tokens: int | None = None,
    ) -> tuple[PublicState, StepRecord]:
        if self.state is None:
            raise RuntimeError("call reset() before step()")
        start = time.perf_counter()
        transition = self.contract.step_object if self.whole_object else self.contract.step
        result = transition(self.state, text, finish_reason=finish_reason)
        if result.accepted_object is not None and self.log.dispatched is None:
            self.log.dispatched = result.accepted_object
            outcome = make_sandbox(self.case.tool_family, self.case.world_seed).execute(self.case.tool, result.accepted_object)
            self.log.tool_result = outcome.to_dict()
        self.state = result.state
        if self.state.report is self._public_report:  # a refused attempt: the call is the one reset verified
            self.state = dataclasses.replace(self.state, report=self._verified_report)
        if self.state.done:
            self.log.final_outcome = (self.state.outcome or result.outcome).value
        rec = result.record
        record = StepRecord(
            attempt=rec.attempt,
            raw=rec.raw,
            outcome=rec.outcome.value,
            attempt_class=rec.attempt_class.value,
            pointer=rec.pointer,
            message=rec.message,
            ops=rec.ops,
            ops_applied=rec.ops_applied,
            validator_calls=rec.validator_calls,
            generated_tokens=generated_tokens,
            prompt_tokens=prompt_tokens,
            collateral=rec.collateral,
            off_pointer=rec.off_pointer,
            finish_reason=finish_reason,
            wall_s=time.perf_counter() - start,
            logprob=logprob,
            gen_s=gen_s,
            probes=probes,
            answer_tokens=answer_tokens,
        )
        self.log.steps.append(record)
        return self.state, record

    def commit(self, generation: Generation) -> tuple[PublicState, StepRecord]:
        """:meth:`step` on a policy's generation, its accounting carried into the step record."""
        return self.step(
            generation.text,
            finish_reason=generation.finish_reason,
            generated_tokens=generation.generated_tokens,
            prompt_tokens=generation.prompt_tokens,
            logprob=sum(generation.logprobs) if generation.logprobs else None,
            gen_s=generation.gen_s,
            probes=generation.probes,
            answer_tokens=len(generation.logprobs) if generation.logprobs else None,
        )

    @property
    def done(self) -> bool:
        return self.state is not None and self.state.done


_MASKED = frozenset(code.value for code in PATCH_CODES)


def masked_actions(row: dict[str, Any]) -> int:
    """Attempts the action mask refused (non-applicable or prohibited patch operations) in a ledger row."""
    return sum(1 for step in row["attempts"] if step["outcome"] in _MASKED)


def episode_row(case: PublicCase, log: EpisodeLog, *, arm: str, policy: str, seed: int, sample: int) -> dict[str, Any]:
    """The ledger row of one finished episode (public information only)."""
    steps = log.steps
    patch_attempts = sum(1 for s in steps if consumes_attempt(Code(s.outcome)))
    return {
        "episode_id": f"{case.case_id}/{arm}/{seed}/{sample}",
        "case_id": case.case_id,
        "case_family": case.family,
        "tool": case.tool,
        "tool_family": case.tool_family,
        "arm": arm,
        "policy": policy,
        "seed": seed,
        "sample": sample,
        "attempts": [s.to_dict() for s in steps],
        "outcome": log.final_outcome or "unfinished",
        "accepted": log.dispatched is not None,
        "abstained": any(s.outcome == Code.ABSTAIN.value for s in steps),
        "dispatched": log.dispatched,
        "tool_result": log.tool_result,
        "patch_attempts": patch_attempts,
        "retries": max(0, patch_attempts - 1),
        "first_attempt_valid": bool(steps) and steps[0].outcome == Code.ACCEPTED.value,
        "ops_applied": sum(s.ops_applied for s in steps),
        "validator_calls": sum(s.validator_calls for s in steps),
        "probes": sum(s.probes for s in steps),
        "generated_tokens": sum(s.generated_tokens for s in steps),
        "prompt_tokens": sum(s.prompt_tokens for s in steps),
        "collateral": sum(len(s.collateral) for s in steps),
        "off_pointer": sum(len(s.off_pointer) for s in steps),
        # wall times (not hashed): validation and sandbox, and the policy's generation
        "wall_s": sum(s.wall_s for s in steps),
        "gen_s": sum(s.gen_s for s in steps),
    }
