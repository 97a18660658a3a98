"""The study command's options as a typed config section (``contractrl study NAME --print-config``).

They extend the rollout command's policy options (:class:`~contractrl.rollout.options.PolicyOptions`)
with what a study adds; a study decodes greedily and uses no Ray workers unless told. The transfer
study's training config is training's own tree (``--config FILE`` and its keys), not a section here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..configtree import check, setting
from ..rollout.options import POLICY_SPECS, PolicyOptions

STUDIES = ("feedback", "noise", "budget", "horizon", "transfer")


@dataclass(frozen=True)
class StudyOptions(PolicyOptions):
    """``contractrl study NAME``: the runs of one study table."""

    study: str = setting("", help=f"the study: {', '.join(STUDIES)} (required; the command's first argument)")
    out: str = setting("", help="the study's directory (re-running resumes it; required)")
    policy: str = setting(
        "heuristic", help=POLICY_SPECS.replace("hf:<preset", "hf:<trained model or adapter dir> | hf:<preset", 1)
    )
    cases: str = setting("", help="the held-out case set (noise: generated under out when not given)")
    stage: str = setting("", help="a label for the policy's training stage, e.g. grpo")
    workers: int = setting(0, help="Ray validator workers (0 = in-process, no Ray)", ge=0)
    n: int = setting(64, help="noise and transfer: held-out cases to generate", ge=1)
    temperature: float = setting(0.0, help="hf policies: sampling temperature (0 = greedy)", ge=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.study in STUDIES or self.study == "", f"study must be one of {', '.join(STUDIES)}, got {self.study!r}")


__all__ = ["STUDIES", "StudyOptions"]
