"""The experimental arms: what a policy emits, and so how its answers are checked and scored.

One definition for every layer. It lives in ``tasks`` because the demonstrations (the lowest
user) pick the gold answer by arm; prompts, the environment, the trainer config, the metrics and
the CLI import it from here. Members are strings, so ledgers and configs hold plain names.
"""

from __future__ import annotations

from enum import Enum


class Arm(str, Enum):
    FULL_REGEN = "full_regen"  # regenerate the whole call
    CONSTRAINED = "constrained"  # regenerate it under the schema's grammar
    PATCH_SFT = "patch_sft"  # a JSON Patch, supervised only
    CONTRACTRL = "contractrl"  # a JSON Patch with history and budgets, trained by GRPO

    def __str__(self) -> str:
        return self.value


ARMS: tuple[str, ...] = tuple(arm.value for arm in Arm)
WHOLE_OBJECT_ARMS = frozenset({Arm.FULL_REGEN, Arm.CONSTRAINED})
PATCH_ARMS = frozenset({Arm.PATCH_SFT, Arm.CONTRACTRL})

__all__ = ["ARMS", "PATCH_ARMS", "WHOLE_OBJECT_ARMS", "Arm"]
