"""Answers this episode has already seen rejected, recognised without asking the validator again.

The validator is deterministic, so an answer that leads to an object it has already rejected in this
episode is a wasted attempt before it is sent: a patch whose result is the failed call or an earlier
patched call, a whole object equal to one of them, the same patch resubmitted to the same call
after the action mask refused it, or a text resent verbatim after the parser refused it. Measured
with SmolLM2 after 300 SFT steps (benchmarks/RESULTS.md), 12 of 130 held-out episodes ended by
resubmitting their first attempt verbatim; with the rule's first version in place, 2 still did,
each a patch whose value had lost a closing brace.

Everything here is read from the public state (the failed call and the policy's own earlier
attempts) with pure functions: the strict parser and RFC 6902 application. Nothing is verified: an
answer that leads to an object not seen before is not judged, so a policy that uses this learns
nothing about validity it did not already have in its history.
"""

from __future__ import annotations

from typing import Any

from ..tasks.arms import arm_spec
from ..tasks.cases import PublicCase
from ..validators import PublicState
from ..validators.apply import apply_patch
from ..validators.jsonvalue import canonical_json, json_identical
from ..validators.patch import PatchAction, parse_action
from ..validators.strict_json import parse_response


def rejected_objects(case: PublicCase, state: PublicState, arm: str) -> list[Any]:
    """The failed call and every object an earlier attempt of this episode made and the validator
    rejected (the episode is still running, so each of them was)."""
    seen = [case.candidate]
    if arm_spec(arm).whole_object:
        for record in state.history:
            parsed = parse_response(record.raw)
            if parsed.is_value:
                seen.append(parsed.value)
        return seen
    document = case.candidate
    for record in state.history:
        if record.ops_applied:
            replayed = _patch(canonical_json(list(record.ops)), len(record.ops))
            applied = apply_patch(document, replayed.ops) if replayed is not None else None
            if applied is not None and applied.ok:
                document = applied.document
                seen.append(document)
    return seen


def known_rejected(text: str, case: PublicCase, state: PublicState, arm: str) -> bool:
    """Whether ``text`` is an answer the validator would reject because it already has."""
    if arm_spec(arm).whole_object:
        # a text sent before was refused by the parser, or made an object the validator rejected
        if any(record.raw.strip() == text.strip() for record in state.history):
            return True
        parsed = parse_response(text)
        return parsed.is_value and any(json_identical(parsed.value, seen) for seen in rejected_objects(case, state, arm))
    action = _patch(text, max(state.ops_left, 1))
    ops = canonical_json([op.to_dict() for op in action.ops]) if action is not None else None
    if _refused_on_this_call(state, text, ops):  # the parser or the mask refuses it again
        return True
    if action is None:
        return False
    applied = apply_patch(state.candidate, action.ops)
    return applied.ok and any(json_identical(applied.document, seen) for seen in rejected_objects(case, state, arm))


def _refused_on_this_call(state: PublicState, text: str, ops: str | None) -> bool:
    """Whether this text, or these canonical ``ops``, were refused on the current call (no patch
    applied since): an attempt that applied nothing was refused by the parser, the mask or RFC 6902
    application, all pure functions of the text and the call."""
    for record in reversed(state.history):
        if record.ops_applied:
            return False
        if record.raw.strip() == text.strip():
            return True
        if ops is not None and record.ops and canonical_json(list(record.ops)) == ops:
            return True
    return False


def _patch(text: str, max_ops: int) -> PatchAction | None:
    action = parse_action(text, max_ops=max_ops)
    return action if isinstance(action, PatchAction) else None


__all__ = ["known_rejected", "rejected_objects"]
