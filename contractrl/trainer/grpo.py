"""The group-relative objective: advantages within a group, and the clipped token-level loss.

Pure functions over numbers and tensors, so each can be checked against hand-computed values.

* Advantages: a baseline subtracted from each episode's reward within the G episodes of one case,
  then divided by the group's standard deviation (``grpo.scale_std``; off: Dr. GRPO). Baselines
  are estimators registered by name (:data:`ADVANTAGE_ESTIMATORS`, :func:`register_advantage`,
  as veRL registers its estimators), which ``grpo.baseline`` selects: ``mean`` (GRPO) and
  ``leave_one_out`` (RLOO: each episode against the mean of the *other* G - 1). A group whose
  rewards are all equal carries no policy-gradient signal: every advantage is 0. Its samples are
  dropped before the update, unless a KL term is on: then they stay, with advantage 0, so the KL
  term also holds the policy on cases where every episode already did the same thing
  (:func:`group_samples`).
* Credit: every decision of an episode takes the episode's advantage (GRPO as published;
  :func:`decision_advantages`). Comparing decision k only with the episodes that reached it was
  measured to change no held-out outcome and was removed.
* Loss: PPO's clipped ratio with separate low and high clip ranges (DAPO's clip-higher), summed
  over tokens and divided by the number of tokens in the whole batch (token-level aggregation),
  plus an optional k3 estimate of KL to the reference policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..errors import ConfigError

ZERO_VARIANCE_TOL = 1e-9
_E = TypeVar("_E", bound=Callable[..., list[float]])


class AdvantageEstimator(Protocol):
    """A group's rewards centred on a baseline, one value per episode (before std scaling)."""

    def __call__(self, rewards: Sequence[float]) -> list[float]: ...


class UnknownEstimatorError(ConfigError, ValueError):
    """An advantage estimator nobody registered: a config error (the name comes from
    ``grpo.baseline``) that is still the ``ValueError`` :func:`group_advantages` always raised."""


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {}
"""Each baseline a group's rewards may be centred on, named once; ``grpo.baseline`` names one."""


def register_advantage(name: str) -> Callable[[_E], _E]:
    """Register a baseline estimator under ``name`` (the value ``grpo.baseline`` selects it by)."""

    def add(estimator: _E) -> _E:
        if name in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ADVANTAGE_ESTIMATORS[name] = estimator
        return estimator

    return add


def advantage_estimator(name: str) -> AdvantageEstimator:
    """The estimator registered under ``name``; an unknown name is a one-line error naming them all."""
    try:
        return ADVANTAGE_ESTIMATORS[name]
    except KeyError:
        known = ", ".join(sorted(ADVANTAGE_ESTIMATORS))
        raise UnknownEstimatorError(f"unknown baseline {name!r}: the registered advantage estimators are {known}") from None


@register_advantage("mean")
def mean_baseline(rewards: Sequence[float]) -> list[float]:
    """GRPO: each episode against the group's mean reward."""
    mean = sum(rewards) / len(rewards)
    return [r - mean for r in rewards]


@register_advantage("leave_one_out")
def leave_one_out_baseline(rewards: Sequence[float]) -> list[float]:
    """RLOO: each episode against the mean of the other G - 1, an unbiased baseline."""
    total, n = sum(rewards), len(rewards)
    return [r - (total - r) / (n - 1) for r in rewards]


def group_advantages(
    rewards: Sequence[float], *, scale_std: bool = True, baseline: str = "mean", eps: float = 1e-4
) -> list[float]:
    """Advantages of one group. ``std`` is the sample standard deviation (n - 1), as in GRPO."""
    n = len(rewards)
    if n < 2:
        raise ValueError("a group needs at least two episodes")
    centred = advantage_estimator(baseline)(rewards)
    if max(rewards) - min(rewards) <= ZERO_VARIANCE_TOL:
        return [0.0] * n
    if not scale_std:
        return centred
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
    return [c / (std + eps) for c in centred]


def decision_advantages(
    rewards: Sequence[float], decisions: Sequence[int], *, scale_std: bool = True, baseline: str = "mean"
) -> list[list[float]]:
    """The advantage of each decision of each episode of one group (``decisions[i]`` decisions in
    episode i): its episode's group advantage. An episode whose first attempt was rejected scores
    below the group's first-try successes even when its second decision repaired the call, so that
    repair is pushed down with the rejected attempt; a per-decision comparison that would not do so
    changed no held-out outcome (docs/notebook, G7) and was removed."""
    if len(rewards) != len(decisions):
        raise ValueError(f"{len(rewards)} rewards for {len(decisions)} episodes")
    advantages = group_advantages(rewards, scale_std=scale_std, baseline=baseline)
    return [[a] * n for a, n in zip(advantages, decisions, strict=True)]


@dataclass(frozen=True)
class PolicySample:
    """One generated turn to learn from: what the model saw, what it sampled, and how good it was."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    old_logprobs: tuple[float, ...]
    advantage: float


class Turn(Protocol):
    """What a sample needs from one generated turn (:class:`contractrl.rollout.policies.Generation`)."""

    @property
    def prompt_ids(self) -> tuple[int, ...]: ...
    @property
    def token_ids(self) -> tuple[int, ...]: ...
    @property
    def logprobs(self) -> tuple[float, ...]: ...


def without_variance(advantages: Sequence[Sequence[float]]) -> bool:
    """Whether a group's advantages (one row per episode) are all 0: no policy-gradient signal."""
    return not any(a for row in advantages for a in row)


def group_samples(
    turns: Sequence[Sequence[Turn]], advantages: Sequence[Sequence[float]], *, kl_coef: float = 0.0
) -> list[PolicySample]:
    """The samples one group contributes to the update: each turn with a token, with its advantage.

    A group without variance (every advantage 0) contributes nothing to the policy gradient. Without
    a KL term it is dropped. With one it is kept, at advantage 0, because dropping it leaves the KL
    term blind exactly where drift costs most: a case where SFT already abstains correctly in every
    episode has zero variance in every step, so without its KL samples nothing would resist updates
    from other cases that move its answer (``benchmarks/RESULTS.md``, G9 and G10).
    """
    if len(turns) != len(advantages):
        raise ValueError(f"{len(turns)} episodes for {len(advantages)} advantage rows")
    if kl_coef <= 0 and without_variance(advantages):
        return []
    return [
        PolicySample(turn.prompt_ids, turn.token_ids, turn.logprobs, advantage)
        for episode, row in zip(turns, advantages, strict=True)
        for turn, advantage in zip(episode, row, strict=True)
        if turn.token_ids
    ]


def clipped_policy_loss(
    new_logprobs: Any,
    old_logprobs: Any,
    advantages: Any,
    mask: Any,
    *,
    clip_low: float,
    clip_high: float,
    token_denominator: float,
    ref_logprobs: Any = None,
    kl_coef: float = 0.0,
) -> tuple[Any, dict[str, Any]]:
    """Token-level clipped surrogate over a (batch, tokens) block; returns (loss, detached parts).

    ``advantages`` has one value per sequence; ``mask`` marks real completion tokens;
    ``token_denominator`` is the number of completion tokens in the whole update (all micro-batches
    and ranks), so each token weighs the same however the batch is split.
    """
    import torch

    adv = advantages.unsqueeze(-1)
    ratio = torch.exp(new_logprobs - old_logprobs)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    kl = torch.zeros_like(per_token)
    if ref_logprobs is not None and kl_coef > 0:
        delta = ref_logprobs - new_logprobs
        kl = torch.exp(delta) - delta - 1.0  # k3: unbiased, always >= 0
        per_token = per_token + kl_coef * kl
    mask = mask.to(per_token.dtype)
    loss = (per_token * mask).sum() / token_denominator
    with torch.no_grad():
        was_clipped = ((ratio < 1.0 - clip_low) & (adv < 0)) | ((ratio > 1.0 + clip_high) & (adv > 0))
        parts = {
            "policy_loss_sum": float((-torch.minimum(unclipped, clipped) * mask).sum()),
            "kl_sum": float((kl * mask).sum()),
            "clipped_tokens": float((was_clipped.to(mask.dtype) * mask).sum()),
            "ratio_sum": float((ratio * mask).sum()),
            "tokens": float(mask.sum()),
        }
    return loss, parts


__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AdvantageEstimator",
    "PolicySample",
    "UnknownEstimatorError",
    "advantage_estimator",
    "clipped_policy_loss",
    "decision_advantages",
    "group_advantages",
    "register_advantage",
]
