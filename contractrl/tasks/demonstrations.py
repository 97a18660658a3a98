"""Supervised demonstrations: the gold answer of a case's decisions, per arm.

This is the one place the SFT data meets the offline half, and what leaves it is a public case,
the attempts replayed before the decision, and an answer text: the trainer learns *from* gold
patches but never imports the targets. Patch arms learn the gold patch (compact canonical JSON) or
ABSTAIN; the full-regeneration arm learns the whole target object.

First-decision demonstrations alone teach a policy nothing about its second attempt. A
later-decision demonstration replays one typical rejected attempt (the reported value resubmitted
unchanged, or the edit the report points at) before the gold answer; the trainer replays it
through the real validator and keeps the demonstration only when the attempt was in fact rejected
and the budgets leave room for the answer. Given for every case, it cost first decisions and did
not stop repeated attempts (single-field 0.88 to 0.56, benchmarks/RESULTS.md), so it was removed;
it remains for the cases below, where the later decision shows something new.

An unrepairable case and a missing_required case carry the same report; only the request says
whether the value can be found. ``contrast=True`` pairs each unrepairable case with its minimal
contrast (:mod:`contractrl.tasks.contrast`): the same call and report, the withheld value stated in
the request, and the repair as the answer. Measured in benchmarks/RESULTS.md; the trainer's config
turns it on by default.

A noisy first report (a wrong or parent pointer, a garbled message) is the one case where the
later decision shows something new: after a rejected attempt the environment reports what the
verifier really found. ``noisy_retries=True`` demonstrates that decision for those cases only
(their corruption records the true report), so it costs few first decisions; where the noisy
report names no pointer, the rejected attempt puts back the candidate's first member unchanged.
The trainer's config turns it on by default (measured in benchmarks/RESULTS.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConfigError
from ..validators.jsonvalue import canonical_json
from ..validators.pointer import format_pointer, parse_pointer, resolve
from .arms import ARM_SPECS, ARMS, arm_spec
from .cases import ABSTAIN, Case, PublicCase
from .contrast import contrast_case

_ABSENT = object()


@dataclass(frozen=True)
class Demonstration:
    """A public case, the attempts replayed before the decision, and what a perfect policy answers."""

    case: PublicCase
    answer: str
    earlier: tuple[str, ...] = ()


def gold_answer(case: Case, arm: str) -> str:
    if case.offline.should_abstain:
        return ABSTAIN
    spec = ARM_SPECS.get(arm)
    if spec is None:
        raise ConfigError(f"no demonstrations for arm {arm!r}; choose from {', '.join(ARMS)}")
    return canonical_json(case.offline.target if spec.whole_object else case.offline.target_patch)


def rejected_attempt(case: Case, arm: str, *, root_fallback: bool = False) -> str | None:
    """A first attempt a weak policy typically makes and the validator rejects, or None.

    Whole-object arms resubmit the failed call. Patch arms edit the first reported pointer: they
    put back the value already there (still invalid), or, where nothing is there, ``replace`` the
    target's value (inadmissible: RFC 6902 replaces only existing members). On an immutable field
    either edit is refused by the mask, which is the case the abstention must follow. Where the
    answer is ABSTAIN the attempt never carries the target's value: a withheld value must not
    appear in the prompt of a demonstration that teaches it cannot be known.

    A report without a pointer gives None, unless ``root_fallback``: then the candidate's first
    member (in sorted order) is put back unchanged, the guess of a policy that cannot locate it.
    """
    if arm_spec(arm).whole_object:
        return canonical_json(case.public.candidate)
    errors = case.public.report.get("errors") or []
    if not errors:
        return None
    pointer = str(errors[0].get("pointer", ""))
    if not pointer and root_fallback and isinstance(case.public.candidate, dict) and case.public.candidate:
        pointer = format_pointer([min(case.public.candidate)])
    if not pointer:  # a root edit rewrites the whole call: not a patch a repair policy makes
        return None
    tokens = parse_pointer(pointer)
    value = resolve(case.public.candidate, tokens, _ABSENT)
    if value is _ABSENT:
        value = None if case.offline.should_abstain else resolve(case.offline.target, tokens, None)
    return canonical_json([{"op": "replace", "path": pointer, "value": value}])


def contrast_demonstration(case: Case, arm: str, form: str = "appended") -> Demonstration | None:
    """For an unrepairable built-in case: its minimal contrast (:func:`contrast_case`, the withheld
    value stated in the request in ``form``) answered by the repair; else None."""
    twin = contrast_case(case, form)
    return None if twin is None else Demonstration(twin.public, gold_answer(twin, arm))


def has_noisy_report(case: Case) -> bool:
    """Whether the case's public first report is a rewrite of what the verifier found."""
    return "true_report" in case.offline.corruption


def demonstrations(
    cases: Sequence[Case],
    arm: str,
    *,
    noisy_retries: bool = False,
    contrast: bool = False,
    contrast_form: str = "appended",
) -> list[Demonstration]:
    """Each case's first decision, then its later decision when ``noisy_retries`` and its first
    report is noisy, then its minimal contrast in ``contrast_form`` when ``contrast`` (unrepairable
    cases only)."""
    out: list[Demonstration] = []
    for case in cases:
        answer = gold_answer(case, arm)
        out.append(Demonstration(case.public, answer))
        if noisy_retries and has_noisy_report(case):
            earlier = rejected_attempt(case, arm, root_fallback=True)
            if earlier is not None and earlier != answer:
                out.append(Demonstration(case.public, answer, (earlier,)))
        if contrast and (paired := contrast_demonstration(case, arm, contrast_form)) is not None:
            out.append(paired)
    return out


__all__ = [
    "Demonstration",
    "contrast_demonstration",
    "demonstrations",
    "gold_answer",
    "has_noisy_report",
    "rejected_attempt",
]
