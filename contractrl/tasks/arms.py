"""The experimental arms, and what each one is: the table every layer asks.

One definition for every layer. It lives in ``tasks`` because the demonstrations (the lowest
user) pick the gold answer by arm; prompts, the environment, the shield, the trainer config, the
metrics and the CLI ask :func:`arm_spec` here instead of testing membership in sets of names, so
what makes an arm an arm (the form of its answer, its prompt, its decoding) is stated once, in
:data:`ARM_SPECS`. Members are strings, so ledgers and configs hold plain names.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal

from ..errors import ConfigError


class Arm(str, Enum):
    FULL_REGEN = "full_regen"  # regenerate the whole call
    CONSTRAINED = "constrained"  # regenerate it under the schema's grammar
    PATCH_SFT = "patch_sft"  # a JSON Patch, supervised only
    CONTRACTRL = "contractrl"  # a JSON Patch with history and budgets, trained by GRPO

    def __str__(self) -> str:
        return self.value


# the arm a command, a runner or a policy uses when none is named (a plain string, as ledgers hold it)
DEFAULT_ARM: str = Arm.CONTRACTRL.value


@dataclass(frozen=True)
class ArmSpec:
    """What one arm emits and is shown, and how it decodes.

    ``whole_object``: the answer is the whole corrected arguments object, checked with
    ``RepairContract.step_object`` and scored without patch metrics; else an RFC 6902 JSON Patch (or
    ABSTAIN). ``system``: the system prompt. ``blocks``: the public blocks the arm sees in
    case-matched mode (the paper's Table 7; same-information mode shows every arm the same ones).
    ``grammar``: decoding is constrained by the schema's grammar (xgrammar), which also makes the
    arm an inference-time variant of another one: SFT trains the unconstrained arm it decodes like.
    """

    arm: Arm
    whole_object: bool
    system: str
    blocks: tuple[str, ...]
    grammar: bool = False


_WHOLE_OBJECT_SYSTEM = "Fix the failed tool call. Reply with the complete corrected arguments as one JSON object only."
_REGENERATION_BLOCKS = ("request", "schema", "candidate")

ARM_SPECS: dict[str, ArmSpec] = {
    spec.arm.value: spec
    for spec in (
        ArmSpec(Arm.FULL_REGEN, whole_object=True, system=_WHOLE_OBJECT_SYSTEM, blocks=_REGENERATION_BLOCKS),
        ArmSpec(Arm.CONSTRAINED, whole_object=True, system=_WHOLE_OBJECT_SYSTEM, blocks=_REGENERATION_BLOCKS, grammar=True),
        ArmSpec(
            Arm.PATCH_SFT,
            whole_object=False,
            system="Repair the failed tool call. Reply with one RFC 6902 JSON Patch array only.",
            blocks=("request", "schema", "candidate", "errors"),
        ),
        ArmSpec(
            Arm.CONTRACTRL,
            whole_object=False,
            system=(
                "Repair the failed tool call. Reply with one small RFC 6902 JSON Patch array, or ABSTAIN if the request "
                "lacks what the repair needs. Never change immutable paths."
            ),
            blocks=("request", "schema", "candidate", "errors", "immutable", "budget", "history"),
        ),
    )
}

ARMS: tuple[str, ...] = tuple(ARM_SPECS)
PATCH_ARMS: tuple[str, ...] = tuple(name for name, spec in ARM_SPECS.items() if not spec.whole_object)
# the arms each training stage accepts, as the Literal types the config tree checks and prints:
# SFT learns any arm's answers except a grammar arm's (it decodes like the arm without a grammar);
# GRPO learns patches
SFT_ARMS: tuple[str, ...] = tuple(name for name, spec in ARM_SPECS.items() if not spec.grammar)
SftArm = Literal[SFT_ARMS]  # type: ignore[valid-type]
GrpoArm = Literal[PATCH_ARMS]  # type: ignore[valid-type]


def arm_spec(arm: str) -> ArmSpec:
    """The spec of ``arm`` (a name or an :class:`Arm`); a typed error for an unknown name."""
    spec = ARM_SPECS.get(str(arm))
    if spec is None:
        raise ConfigError(f"unknown arm {arm!r}; choose from {', '.join(ARMS)}")
    return spec


__all__ = ["ARMS", "ARM_SPECS", "DEFAULT_ARM", "PATCH_ARMS", "SFT_ARMS", "Arm", "ArmSpec", "GrpoArm", "SftArm", "arm_spec"]
