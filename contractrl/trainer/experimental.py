"""The ``experimental`` section of the training config: options that exist for an experiment.

The core sections (``model``, ``data``, ``sft``, ``grpo`` ...) hold the knobs a newcomer needs to
train; what a study added to test one idea lives here, one sub-section per feature, with the
checks that relate its own knobs. The contrast pairs, for example, were four knobs in three
sections whose checks crossed sections; here they are ``experimental.contrast.*``. Each
sub-section names the notebook or results section that measured it, so a reader can judge whether
to turn it on. An option whose experiment showed no gain was removed, not kept here
(``TrainConfig.REMOVED_KEYS`` says which and why).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from ..configtree import check, setting
from ..tasks.audit import UNITS
from ..tasks.catalog import TOOL_FAMILIES
from ..tasks.corruptions import CORRUPTION_FAMILIES

# the split audit's units for a training run: the audit's own default also pins operation
# sequences, which 30 tools exhaust for small operation spaces
TRAIN_DISJOINT = ("case_id", "candidate_fingerprint", "target_fingerprint", "semantic_cluster")


@dataclass(frozen=True)
class ContrastConfig:
    """Minimal contrasts of unrepairable cases: the same call and report with the withheld value
    stated in the request, the repair as the answer (tasks/contrast.py). Measured: GRPO with them
    against its ablation +0.077 held out (11 gained / 1 lost); clause contrasts with decision
    weight 20 over 240 twin pairs, then every family, +0.256 on the abstention families
    (benchmarks/RESULTS.md, "What the contrast does", "Three times the twin pairs")."""

    sft: bool = setting(True, help="SFT demonstrates each unrepairable case's contrast beside it")
    grpo: bool = setting(
        False,
        help="GRPO rolls out each drawn unrepairable case's contrast in the same step, so abstaining is paid on one "
        "and charged on the other within one update",
    )
    form: Literal["appended", "clause"] = setting(
        "appended",
        help="how a contrast states the withheld value: appended after the request's last clause, or as one more "
        "clause at a seeded place among them; a policy trained on many appended contrasts learned the place, not "
        "the value",
    )
    decision_weight: float = setting(
        1.0,
        help="weight of each SFT answer's first token, the decision between ABSTAIN and a patch, in the loss (the "
        "others weigh 1): at 1 it is about 1/40 of a patch demonstration's loss; the logged loss is the weighted "
        "mean",
        gt=0,
    )


@dataclass(frozen=True)
class NoisyRetriesConfig:
    """Second-decision demonstrations for cases whose first report is noisy: +0.069 held out with
    SmolLM2 (benchmarks/RESULTS.md, "Noisy-report retries")."""

    enabled: bool = setting(
        True,
        help="also demonstrate the decision after a rejected attempt for cases whose first report is noisy (a wrong "
        "or parent pointer, a garbled message): the first decision to show the verifier's real report",
    )


@dataclass(frozen=True)
class GRPOFamiliesConfig:
    """Which corruption families GRPO draws from, and how often: the lever the contrast runs used
    to give twin pairs a share of each step (benchmarks/RESULTS.md, G11-G20)."""

    families: tuple[str, ...] = setting(
        CORRUPTION_FAMILIES,
        help="corruption families GRPO draws its training cases from (SFT sees them all); leaving out "
        "immutable_field and unrepairable leaves abstention to SFT",
        nonempty=True,
    )
    weights: dict[str, float] = setting(
        factory=dict,
        help="relative weight of a family's cases in GRPO batches (unlisted: 1; none listed: seeded epochs over the "
        "cases, each case once per epoch), e.g. experimental.grpo_families.weights.immutable_field=3",
    )

    def __post_init__(self) -> None:
        unknown = sorted(set(self.families) - set(CORRUPTION_FAMILIES))
        check(
            not unknown,
            f"experimental.grpo_families.families: unknown {unknown}; choose from {', '.join(CORRUPTION_FAMILIES)}",
        )
        unweighable = sorted(set(self.weights) - set(self.families))
        check(
            not unweighable,
            f"experimental.grpo_families.weights: {unweighable} not among experimental.grpo_families.families "
            f"{list(self.families)}",
        )
        for family, weight in self.weights.items():
            check(
                math.isfinite(weight) and weight > 0,
                f"experimental.grpo_families.weights.{family} must be a finite number > 0, got {weight} (leave a "
                "family out with experimental.grpo_families.families)",
            )


@dataclass(frozen=True)
class RankingConfig:
    """A ranking term in SFT: the gold answer above accepted wrong candidates, the order the shield
    commits by. 1.000 against 0.904 of 52 held-out cases (docs/notebook/2026-12-06-budgets-and-ranking.md);
    the main job sets ``negatives: 2``."""

    negatives: int = setting(
        0,
        help="per demonstration, this many enumerated answers the public verifier accepts that do not make the gold "
        "answer's object, each contrasted with the gold answer (trainer/ranking.py); 0: off",
        ge=0,
    )
    weight: float = setting(1.0, help="weight of the ranking term beside the per-token cross-entropy", ge=0)
    margin: float = setting(
        2.0,
        help="how many nats the gold answer's log-probability should exceed an accepted wrong one's",
    )


@dataclass(frozen=True)
class SplitConfig:
    """The units on which held-out cases must not overlap training (tasks/audit.py; docs/cases.md)."""

    disjoint: tuple[str, ...] = setting(
        TRAIN_DISJOINT,
        help="audit units on which held-out cases must not overlap training (the audit's default also pins op "
        "sequences, which 30 tools exhaust for small op spaces)",
    )

    def __post_init__(self) -> None:
        unknown = sorted(set(self.disjoint) - set(UNITS))
        check(not unknown, f"experimental.split.disjoint: unknown audit units {unknown}; choose from {', '.join(UNITS)}")


@dataclass(frozen=True)
class TransferConfig:
    """Train on some tool families only: the transfer study holds one family out (experiments/studies.py)."""

    tool_families: tuple[str, ...] = setting(TOOL_FAMILIES, help="tool families of the built-in catalog to draw from")

    def __post_init__(self) -> None:
        unknown = sorted(set(self.tool_families) - set(TOOL_FAMILIES))
        check(
            not unknown,
            f"experimental.transfer.tool_families: unknown {unknown}; choose from {', '.join(TOOL_FAMILIES)}",
        )


@dataclass(frozen=True)
class ExperimentalConfig:
    """Options that exist for an experiment, one sub-section per feature."""

    contrast: ContrastConfig = setting(factory=ContrastConfig, help="minimal contrasts of unrepairable cases")
    noisy_retries: NoisyRetriesConfig = setting(
        factory=NoisyRetriesConfig, help="second-decision demonstrations after noisy reports"
    )
    grpo_families: GRPOFamiliesConfig = setting(
        factory=GRPOFamiliesConfig, help="the families GRPO draws from, and their weights"
    )
    ranking: RankingConfig = setting(factory=RankingConfig, help="the SFT ranking term")
    split: SplitConfig = setting(factory=SplitConfig, help="the split audit's units")
    transfer: TransferConfig = setting(factory=TransferConfig, help="the tool families trained on")

    def __post_init__(self) -> None:
        check(
            not self.contrast.grpo or "unrepairable" in self.grpo_families.families,
            "experimental.contrast.grpo pairs unrepairable cases with their contrasts, but "
            f"experimental.grpo_families.families {list(self.grpo_families.families)} leaves unrepairable out",
        )

    def cautions(self) -> tuple[str, ...]:
        """Settings that pass every check but were measured to hurt: said once, at the stage's start,
        rather than refused, since a study may want exactly that run (benchmarks/RESULTS.md)."""
        found: list[str] = []
        weight = self.grpo_families.weights.get("unrepairable", 1.0)
        if weight > 1 and not self.contrast.grpo:
            found.append(
                f"experimental.grpo_families.weights.unrepairable={weight:g} without experimental.contrast.grpo=true: "
                "measured to teach abstention on missing required fields (missing_required 0.75 to 0.05 on 240 "
                'held-out cases; benchmarks/RESULTS.md, "What the contrast does")'
            )
        return tuple(found)


__all__ = [
    "TRAIN_DISJOINT",
    "ContrastConfig",
    "ExperimentalConfig",
    "GRPOFamiliesConfig",
    "NoisyRetriesConfig",
    "RankingConfig",
    "SplitConfig",
    "TransferConfig",
]
