"""Supervised demonstrations: the gold answer of each case's first decision, per arm.

This is the one place the SFT data meets the offline half, and what leaves it is a public case and
an answer text: the trainer learns *from* gold patches but never imports the targets. Patch arms
learn the gold patch (compact canonical JSON) or ABSTAIN; the full-regeneration arm learns the
whole target object.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConfigError
from ..validators.jsonvalue import canonical_json
from .cases import ABSTAIN, Case, PublicCase

PATCH_ARMS = frozenset({"contractrl", "patch_sft"})
OBJECT_ARMS = frozenset({"full_regen", "constrained"})


@dataclass(frozen=True)
class Demonstration:
    """A public case and the text a perfect policy answers at its first decision."""

    case: PublicCase
    answer: str


def gold_answer(case: Case, arm: str) -> str:
    if case.offline.should_abstain:
        return ABSTAIN
    if arm in PATCH_ARMS:
        return canonical_json(case.offline.target_patch)
    if arm in OBJECT_ARMS:
        return canonical_json(case.offline.target)
    raise ConfigError(f"no demonstrations for arm {arm!r}; choose from {', '.join(sorted(PATCH_ARMS | OBJECT_ARMS))}")


def demonstrations(cases: Sequence[Case], arm: str) -> list[Demonstration]:
    return [Demonstration(case.public, gold_answer(case, arm)) for case in cases]


__all__ = ["Demonstration", "demonstrations", "gold_answer"]
