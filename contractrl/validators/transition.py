"""The CR-MDP transition: (public state, action text) -> (next public state, typed outcome).

Order is fixed and fail-closed: parse the text strictly -> action mask (static rules, then the
dynamic ones found while applying to a copy) -> apply all-or-nothing -> schema + cross-field
validation. Only an object the verifier accepts is ever returned as ``accepted_object``; every
other path keeps the candidate out of reach of the executor.

Budgets: an attempt is consumed by every response except ABSTAIN and an explicit refusal, which end
the episode and keep what is left. Operations are consumed only by a patch that was admitted and
applied (a masked patch changed nothing). When the attempts run out without an accepted object
the episode ends in ``attempts_exhausted``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConfigError
from .apply import apply_patch
from .attempts import AttemptClass, classify_attempt, consumes_attempt
from .codes import Code
from .collateral import changed_leaves, outside
from .jsonvalue import json_identical
from .mask import static_violation
from .patch import OP_KINDS, AbstainAction, InvalidAction, RefusalAction, parse_action
from .pointer import PointerSyntaxError, Tokens, format_pointer, parse_pointer, resolve
from .report import VerifierReport
from .strict_json import parse_response
from .verifier import Verifier

# The paper's chosen budgets, B=2 attempts and K=2 operations: the one default of every episode,
# case set, gate and screen (each may be given others; a study varies them).
DEFAULT_MAX_ATTEMPTS = 2
DEFAULT_MAX_OPS = 2


@dataclass(frozen=True, slots=True)
class Budgets:
    """Attempt and operation budgets and the allowed op kinds."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    max_ops: int = DEFAULT_MAX_OPS
    allowed_ops: frozenset[str] = frozenset(OP_KINDS)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.max_ops < 1:
            raise ConfigError(f"max_ops must be >= 1, got {self.max_ops}")
        unknown = set(self.allowed_ops) - set(OP_KINDS)
        if unknown or not self.allowed_ops:
            raise ConfigError(f"allowed_ops must be a non-empty subset of {OP_KINDS}, got {sorted(self.allowed_ops)}")


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """What one attempt was and what it did; the raw text is kept, valid or not."""

    attempt: int
    raw: str
    outcome: Code
    attempt_class: AttemptClass
    pointer: str
    message: str
    ops: tuple[dict[str, Any], ...] = ()
    ops_applied: int = 0
    validator_calls: int = 0
    collateral: tuple[str, ...] = ()
    off_pointer: tuple[str, ...] = ()
    wall_s: float = 0.0


@dataclass(frozen=True, slots=True)
class PublicState:
    """s_t = (x_t, e_t, q_t, h_t, b_t, k_t) plus the terminal flag; holds nothing offline."""

    candidate: Any
    report: VerifierReport
    history: tuple[AttemptRecord, ...]
    attempts_left: int
    ops_left: int
    immutable: tuple[str, ...]
    done: bool = False
    outcome: Code | None = None

    @property
    def error_code(self) -> Code | None:
        primary = self.report.primary
        return primary.code if primary else None

    @property
    def pointer(self) -> str | None:
        primary = self.report.primary
        return primary.pointer if primary else None

    @property
    def attempts_used(self) -> int:
        return sum(1 for h in self.history if consumes_attempt(h.outcome))


_ABSENT = object()


def _is_pointer(text: str) -> bool:
    try:
        parse_pointer(text)
    except PointerSyntaxError:
        return False
    return True


@dataclass(slots=True)
class StepResult:
    """The transition's answer. ``accepted_object`` is set only when the verifier accepted it; it
    shares structure with ``state.candidate`` (both are immutable by convention), so an executor
    that mutates its input must copy it first."""

    state: PublicState
    outcome: Code
    record: AttemptRecord
    accepted_object: Any = None
    patched: Any = None
    collateral: tuple[str, ...] = field(default=())


def _immutable_tokens(paths: Iterable[str]) -> tuple[Tokens, ...]:
    out = []
    for p in paths:
        try:
            out.append(parse_pointer(p))
        except PointerSyntaxError as exc:
            raise ConfigError(f"immutable path {p!r}: {exc}") from exc
    return tuple(out)


class RepairContract:
    """The deterministic environment core for one tool version: verifier, budgets, immutable paths."""

    def __init__(self, verifier: Verifier, budgets: Budgets = Budgets(), immutable: Iterable[str] = ()) -> None:
        self.verifier = verifier
        self.budgets = budgets
        self.immutable = tuple(sorted(set(immutable)))
        self.immutable_tokens = _immutable_tokens(self.immutable)  # parsed once: the mask and the prefix judge read them

    def initial_state(self, candidate: Any) -> PublicState:
        """The state before any repair attempt; an already valid candidate starts (and ends) accepted."""
        report = self.verifier.verify(candidate)
        return PublicState(
            candidate=candidate,
            report=report,
            history=(),
            attempts_left=self.budgets.max_attempts,
            ops_left=self.budgets.max_ops,
            immutable=self.immutable,
            done=report.accepted,
            outcome=Code.ACCEPTED if report.accepted else None,
        )

    def _over(self, state: PublicState, text: str | bytes, attempt: int) -> StepResult:
        """An attempt after the episode ended: recorded, never evaluated."""
        raw = text.decode("utf-8", "backslashreplace") if isinstance(text, bytes) else text
        record = AttemptRecord(
            attempt, raw, Code.ATTEMPTS_EXHAUSTED, AttemptClass.EXHAUSTED, "", "the episode is over; attempt not evaluated"
        )
        next_state = replace(state, history=(*state.history, record), done=True, outcome=state.outcome or Code.ATTEMPTS_EXHAUSTED)
        return StepResult(next_state, Code.ATTEMPTS_EXHAUSTED, record)

    def step_object(self, state: PublicState, text: str | bytes, finish_reason: str | None = None) -> StepResult:
        """The transition of the whole-object arms (full regeneration, constrained decoding).

        The response is the complete argument object. It is parsed strictly, must leave every
        immutable path exactly as it was, and is then verified like a patched object; operation
        budgets do not apply. Changes outside the reported pointers count as collateral, which is
        what regenerating fields that were right costs.
        """
        start = time.perf_counter()
        attempt = len(state.history) + 1
        if state.done or state.attempts_left <= 0:
            return self._over(state, text, attempt)
        parsed = parse_response(text, self.verifier.limits, finish_reason)
        if parsed.code in (Code.ABSTAIN, Code.REFUSAL):
            record = self._record(attempt, parsed.raw, parsed.code, "", parsed.message, start)
            return StepResult(
                replace(state, history=(*state.history, record), done=True, outcome=parsed.code), parsed.code, record
            )
        if not parsed.is_value:
            return self._reject(state, attempt, parsed.raw, parsed.code, "", parsed.message, (), start)
        if not isinstance(parsed.value, dict):
            return self._reject(
                state, attempt, parsed.raw, Code.WRONG_TYPE, "", "the arguments must be one JSON object", (), start
            )
        for tokens, pointer in zip(self.immutable_tokens, self.immutable, strict=True):
            if not json_identical(resolve(state.candidate, tokens, _ABSENT), resolve(parsed.value, tokens, _ABSENT)):
                return self._reject(
                    state, attempt, parsed.raw, Code.PATH_IMMUTABLE, pointer, f"{pointer} is immutable", (), start
                )
        pointers = tuple(parse_pointer(e.pointer) for e in state.report.errors if _is_pointer(e.pointer))
        return self._validate(state, attempt, parsed.raw, parsed.value, pointers, (), 0, start)

    def step(self, state: PublicState, text: str | bytes, finish_reason: str | None = None) -> StepResult:
        start = time.perf_counter()
        attempt = len(state.history) + 1
        if state.done or state.attempts_left <= 0:
            return self._over(state, text, attempt)

        action = parse_action(
            text,
            allowed_ops=self.budgets.allowed_ops,
            max_ops=state.ops_left,
            limits=self.verifier.limits,
            finish_reason=finish_reason,
        )
        if isinstance(action, (AbstainAction, RefusalAction)):
            code = Code.ABSTAIN if isinstance(action, AbstainAction) else Code.REFUSAL
            message = action.reason if isinstance(action, AbstainAction) else action.message
            record = self._record(attempt, action.raw, code, "", message, start)
            return StepResult(replace(state, history=(*state.history, record), done=True, outcome=code), code, record)
        if isinstance(action, InvalidAction):
            return self._reject(state, attempt, action.raw, action.code, action.pointer, action.message, (), start)

        ops_dicts = tuple(op.to_dict() for op in action.ops)
        for index, op in enumerate(action.ops):
            violation = static_violation(op, index, self.immutable_tokens)
            if violation is not None:
                return self._reject(
                    state, attempt, action.raw, violation.code, violation.pointer, violation.message, ops_dicts, start
                )
        applied = apply_patch(state.candidate, action.ops, self.verifier.limits, self.immutable_tokens)
        if not applied.ok:
            assert applied.code is not None
            return self._reject(state, attempt, action.raw, applied.code, applied.pointer, applied.message, ops_dicts, start)
        return self._validate(state, attempt, action.raw, applied.document, applied.touched, ops_dicts, len(action.ops), start)

    def _validate(
        self,
        state: PublicState,
        attempt: int,
        raw: str,
        patched: Any,
        touched: tuple[Tokens, ...],
        ops_dicts: tuple[dict[str, Any], ...],
        n_ops: int,
        start: float,
    ) -> StepResult:
        report = self.verifier.verify(patched)
        changed = changed_leaves(state.candidate, patched)
        collateral = tuple(outside(changed, (format_pointer(t) for t in touched)))
        off_pointer = tuple(outside(changed, (e.pointer for e in state.report.errors)))
        ops_left = state.ops_left - n_ops
        attempts_left = state.attempts_left - 1
        primary = report.primary
        code = Code.ACCEPTED if report.accepted else primary.code  # type: ignore[union-attr]
        record = self._record(
            attempt, raw, code, primary.pointer if primary else "", primary.message if primary else "", start,
            ops=ops_dicts, ops_applied=n_ops, validator_calls=1, collateral=collateral,
            off_pointer=off_pointer,
        )  # fmt: skip
        exhausted = not report.accepted and attempts_left <= 0
        next_state = PublicState(
            candidate=patched,
            report=report,
            history=(*state.history, record),
            attempts_left=attempts_left,
            ops_left=ops_left,
            immutable=state.immutable,
            done=report.accepted or exhausted,
            outcome=Code.ACCEPTED if report.accepted else (Code.ATTEMPTS_EXHAUSTED if exhausted else None),
        )
        return StepResult(next_state, code, record, patched if report.accepted else None, patched, collateral)

    def _reject(
        self,
        state: PublicState,
        attempt: int,
        raw: str,
        code: Code,
        pointer: str,
        message: str,
        ops_dicts: tuple[dict[str, Any], ...],
        start: float,
    ) -> StepResult:
        """An inadmissible action: the candidate is untouched, one attempt is spent."""
        record = self._record(attempt, raw, code, pointer, message, start, ops=ops_dicts)
        attempts_left = state.attempts_left - 1
        done = attempts_left <= 0
        next_state = replace(
            state,
            history=(*state.history, record),
            attempts_left=attempts_left,
            done=done,
            outcome=Code.ATTEMPTS_EXHAUSTED if done else None,
        )
        return StepResult(next_state, code, record)

    @staticmethod
    def _record(attempt: int, raw: str, code: Code, pointer: str, message: str, start: float, **extra: Any) -> AttemptRecord:
        return AttemptRecord(
            attempt, raw, code, classify_attempt(code), pointer, message, wall_s=time.perf_counter() - start, **extra
        )
