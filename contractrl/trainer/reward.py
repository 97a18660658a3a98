"""The episode reward (docs/training.md, "What a step does"), from a frozen ledger row and the judge's verdict.

R = 1[semantic success] - λc·C - λr·r - λu·U - λy·T

C counts collateral edits, r extra retries (a - 1), U masked actions (attempts the contract
refused as non-applicable or prohibited patches), T generated tokens. Semantic success comes from
the judge, which sees the offline half only after the batch's ledger is frozen; this module never
does. An unsafe dispatch is not a penalty: the judge raises, and the run stops.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..rollout.env import masked_actions
from .config import RewardConfig


@dataclass(frozen=True)
class RewardBreakdown:
    """Each term of the reward, kept apart so W&B and the metrics table can chart them."""

    success: float
    collateral: int
    retries: int
    masked: int
    tokens: int
    reward: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def episode_reward(row: dict[str, Any], success: bool, weights: RewardConfig) -> RewardBreakdown:
    """The reward of one ledger row given the judge's semantic verdict."""
    collateral = int(row["collateral"])
    retries = int(row["retries"])
    masked = masked_actions(row)
    tokens = int(row["generated_tokens"])
    value = (
        float(success)
        - weights.collateral * collateral
        - weights.retry * retries
        - weights.unsafe * masked
        - weights.tokens * tokens
    )
    return RewardBreakdown(float(success), collateral, retries, masked, tokens, value)


__all__ = ["RewardBreakdown", "episode_reward", "masked_actions"]
