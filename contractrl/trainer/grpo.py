"""The group-relative objective: advantages within a group, and the clipped token-level loss.

Pure functions over numbers and tensors, so each can be checked against hand-computed values.

* Advantages: ``(r - mean_g) / (std_g + eps)`` over the G episodes of one case. Options: no std
  scaling (Dr. GRPO), and a leave-one-out baseline (RLOO: each episode against the mean of the
  *other* G - 1). A group whose rewards are all equal carries no policy-gradient signal: every
  advantage is 0. Its samples are dropped before the update, unless a KL term is on: then they stay,
  with advantage 0, so the KL term also holds the policy on cases where every episode already did
  the same thing (:func:`group_samples`).
* Credit: every decision of an episode takes the episode's advantage (GRPO as published), or,
  with ``credit="decision"``, decision k is compared only with the group's episodes that also
  reached a decision k. Each is an estimator registered under that name
  (:data:`ADVANTAGE_ESTIMATORS`, :func:`register_advantage`), so a new one is one function.
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
_E = TypeVar("_E", bound=Callable[..., list[list[float]]])


def group_advantages(
    rewards: Sequence[float], *, scale_std: bool = True, baseline: str = "mean", eps: float = 1e-4
) -> list[float]:
    """Advantages of one group. ``std`` is the sample standard deviation (n - 1), as in GRPO."""
    n = len(rewards)
    if n < 2:
        raise ValueError("a group needs at least two episodes")
    mean = sum(rewards) / n
    if max(rewards) - min(rewards) <= ZERO_VARIANCE_TOL:
        return [0.0] * n
    if baseline == "mean":
        centred = [r - mean for r in rewards]
    elif baseline == "leave_one_out":
        total = sum(rewards)
        centred = [r - (total - r) / (n - 1) for r in rewards]
    else:
        raise ValueError(f"unknown baseline {baseline!r}; use mean or leave_one_out")
    if not scale_std:
        return centred
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
    return [c / (std + eps) for c in centred]


class AdvantageEstimator(Protocol):
    """Advantages of one group: one row per episode, one value per decision (``decisions[i]`` in
    episode i). The group's options (``scale_std``, ``baseline``, ``eps``) reach every estimator."""

    def __call__(
        self, rewards: Sequence[float], decisions: Sequence[int], *, scale_std: bool, baseline: str, eps: float
    ) -> list[list[float]]: ...


class UnknownEstimatorError(ConfigError, ValueError):
    """An advantage estimator name nobody registered: a config error (the name comes from
    ``grpo.credit``) that is still the ``ValueError`` :func:`decision_advantages` always raised."""


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {}
"""Each way to spread a group's rewards over its episodes' decisions, named once (veRL's
``register_adv_est``); the config names one, and the GRPO stage asks :func:`advantage_estimator`."""


def register_advantage(name: str) -> Callable[[_E], _E]:
    """Register an estimator under ``name`` (the value the config selects it by)."""

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
        raise UnknownEstimatorError(f"unknown credit {name!r}: the registered advantage estimators are {known}") from None


def _same_length(rewards: Sequence[float], decisions: Sequence[int]) -> None:
    if len(rewards) != len(decisions):
        raise ValueError(f"{len(rewards)} rewards for {len(decisions)} episodes")


@register_advantage("episode")
def episode_advantages(
    rewards: Sequence[float], decisions: Sequence[int], *, scale_std: bool = True, baseline: str = "mean", eps: float = 1e-4
) -> list[list[float]]:
    """Each decision takes its episode's group advantage (GRPO as published). An episode whose first
    attempt was rejected scores below the group's first-try successes even when its second decision
    repaired the call, so that repair is pushed down, and ABSTAIN, the other answer there, up."""
    _same_length(rewards, decisions)
    advantages = group_advantages(rewards, scale_std=scale_std, baseline=baseline, eps=eps)
    return [[a] * n for a, n in zip(advantages, decisions, strict=True)]


@register_advantage("decision")
def per_decision_advantages(
    rewards: Sequence[float], decisions: Sequence[int], *, scale_std: bool = True, baseline: str = "mean", eps: float = 1e-4
) -> list[list[float]]:
    """Decision k is compared only with the episodes of the group that reached a decision k. Those
    all paid for k rejected attempts before it, so what separates their rewards is mostly what
    happened from decision k on. A decision that one episode alone reached gets 0: there is nothing
    to compare it with. The first decision of every episode is compared with the whole group, as
    under ``episode``."""
    _same_length(rewards, decisions)
    out = [[0.0] * n for n in decisions]
    for k in range(max(decisions, default=0)):
        reached = [i for i, n in enumerate(decisions) if n > k]
        if len(reached) < 2:
            continue
        reached_rewards = [rewards[i] for i in reached]
        advantages = group_advantages(reached_rewards, scale_std=scale_std, baseline=baseline, eps=eps)
        for i, advantage in zip(reached, advantages, strict=True):
            out[i][k] = advantage
    return out


def decision_advantages(
    rewards: Sequence[float],
    decisions: Sequence[int],
    *,
    credit: str = "episode",
    scale_std: bool = True,
    baseline: str = "mean",
    eps: float = 1e-4,
) -> list[list[float]]:
    """The advantage of each decision of each episode of one group, by the estimator registered as
    ``credit`` (:data:`ADVANTAGE_ESTIMATORS`)."""
    _same_length(rewards, decisions)
    return advantage_estimator(credit)(rewards, decisions, scale_std=scale_std, baseline=baseline, eps=eps)


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
