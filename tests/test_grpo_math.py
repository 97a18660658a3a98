"""Advantages, the clipped token-level loss and the reward, against hand-computed values."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from contractrl.rollout.ledger import decode_row  # noqa: E402
from contractrl.rollout.policies import Generation  # noqa: E402
from contractrl.trainer.config import RewardConfig  # noqa: E402
from contractrl.trainer.grpo import (  # noqa: E402
    PolicySample,
    clipped_policy_loss,
    decision_advantages,
    group_advantages,
    group_samples,
)
from contractrl.trainer.loop import batch_indices, derived_seed, weighted_batch_indices  # noqa: E402
from contractrl.trainer.reward import episode_reward, masked_actions  # noqa: E402


def test_group_advantages_mean_and_std() -> None:
    # rewards 1, 0, 0, 1: mean 0.5, sample std sqrt(1/3)
    adv = group_advantages([1.0, 0.0, 0.0, 1.0], eps=0.0)
    std = math.sqrt(1 / 3)
    assert adv == pytest.approx([0.5 / std, -0.5 / std, -0.5 / std, 0.5 / std])
    assert group_advantages([1.0, 0.0, 0.0, 1.0], scale_std=False) == pytest.approx([0.5, -0.5, -0.5, 0.5])


def test_group_advantages_leave_one_out() -> None:
    # r = 3, 0, 0: baselines are the means of the other two: 0, 1.5, 1.5
    assert group_advantages([3.0, 0.0, 0.0], scale_std=False, baseline="leave_one_out") == pytest.approx([3.0, -1.5, -1.5])


def test_zero_variance_groups_carry_nothing() -> None:
    assert group_advantages([0.7, 0.7, 0.7]) == [0.0, 0.0, 0.0]
    assert group_advantages([0.0, 0.0], baseline="leave_one_out") == [0.0, 0.0]
    with pytest.raises(ValueError, match="at least two"):
        group_advantages([1.0])
    with pytest.raises(ValueError, match="unknown baseline"):
        group_advantages([1.0, 0.0], baseline="median")


def _rows(advantages: list[list[float]]) -> list[tuple[float, ...]]:
    """Nested advantages rounded for comparison (pytest.approx takes no nested lists)."""
    return [tuple(round(a, 9) for a in row) for row in advantages]


def test_every_decision_takes_its_episodes_advantage() -> None:
    # three first-try successes (0.97) and one repair on the second attempt (0.87): the second
    # attempt's good repair is pushed down with the rejected first one (GRPO as published)
    rewards, decisions = [0.97, 0.97, 0.97, 0.87], [1, 1, 1, 2]
    episode = decision_advantages(rewards, decisions, scale_std=False)
    assert _rows(episode) == _rows([[0.025], [0.025], [0.025], [-0.075, -0.075]])
    rewards, decisions = [0.97, 0.97, 0.87, -0.1], [1, 1, 2, 2]
    per_episode = group_advantages(rewards)
    assert decision_advantages(rewards, decisions) == [[a] * n for a, n in zip(per_episode, decisions, strict=True)]
    with pytest.raises(ValueError, match="3 rewards for 4 episodes"):
        decision_advantages(rewards[:3], decisions)


def test_clipped_loss_by_hand() -> None:
    # one sequence with advantage +1 and ratios 1.5 and 0.5; one with advantage -2 and ratio 1.0 (plus a pad)
    old = torch.zeros(2, 2)
    new = torch.log(torch.tensor([[1.5, 0.5], [1.0, 1.0]]))
    adv = torch.tensor([1.0, -2.0])
    mask = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    loss, parts = clipped_policy_loss(new, old, adv, mask, clip_low=0.2, clip_high=0.28, token_denominator=3.0)
    # token terms: -min(1.5, 1.28) = -1.28; -min(0.5, 0.8) = -0.5; -min(-2, -2) = 2 -> (−1.28 − 0.5 + 2) / 3
    assert float(loss) == pytest.approx((-1.28 - 0.5 + 2.0) / 3.0)
    assert parts["tokens"] == 3
    assert parts["clipped_tokens"] == 1  # the 1.5 ratio with a positive advantage
    # a negative advantage clips on the low side
    loss_neg, parts_neg = clipped_policy_loss(
        torch.log(torch.tensor([[0.5]])),
        torch.zeros(1, 1),
        torch.tensor([-1.0]),
        torch.ones(1, 1),
        clip_low=0.2,
        clip_high=0.2,
        token_denominator=1.0,
    )
    assert float(loss_neg) == pytest.approx(0.8)  # -min(-0.5, -0.8)
    assert parts_neg["clipped_tokens"] == 1


def test_kl_term_is_k3_and_only_with_a_coefficient() -> None:
    new = torch.log(torch.tensor([[0.5]]))
    ref = torch.log(torch.tensor([[0.25]]))
    args = {"clip_low": 0.2, "clip_high": 0.2, "token_denominator": 1.0}
    base, _ = clipped_policy_loss(new, new.clone(), torch.tensor([0.0]), torch.ones(1, 1), **args)
    with_kl, parts = clipped_policy_loss(
        new, new.clone(), torch.tensor([0.0]), torch.ones(1, 1), ref_logprobs=ref, kl_coef=0.5, **args
    )
    k3 = 0.5 - math.log(0.5) - 1.0  # exp(ref - new) - (ref - new) - 1 with ref/new = 0.5
    assert float(base) == 0.0
    assert float(with_kl) == pytest.approx(0.5 * k3)
    assert parts["kl_sum"] == pytest.approx(k3)


def test_gradient_flows_only_through_unclipped_tokens() -> None:
    new = torch.log(torch.tensor([[1.5, 1.0]])).requires_grad_(True)
    loss, _ = clipped_policy_loss(
        new, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2), clip_low=0.2, clip_high=0.2, token_denominator=2.0
    )
    loss.backward()
    assert new.grad[0, 0] == 0.0  # clipped: no gradient
    assert float(new.grad[0, 1]) == pytest.approx(-0.5)  # d(-ratio*A/2)/dlogp at ratio 1


def _row(**extra: object) -> dict:
    row = {
        "collateral": 2,
        "retries": 1,
        "generated_tokens": 40,
        "attempts": [{"outcome": "path_immutable"}, {"outcome": "op_budget_exceeded"}, {"outcome": "accepted"}],
    }
    row.update(extra)
    return row


def test_reward_terms() -> None:
    weights = RewardConfig(collateral=0.1, retry=0.2, unsafe=0.3, tokens=0.01)
    rb = episode_reward(_row(), True, weights)
    assert (rb.collateral, rb.retries, rb.masked, rb.tokens) == (2, 1, 2, 40)
    assert rb.reward == pytest.approx(1.0 - 0.2 - 0.2 - 0.6 - 0.4)
    assert episode_reward(_row(), False, weights).reward == pytest.approx(-1.4)
    # a shard stores attempts as JSON text; the reader decodes them before anything counts them
    stored = {"attempts": '[{"outcome": "malformed_json"}, {"outcome": "path_unavailable"}]', "dispatched": None}
    assert masked_actions(decode_row(stored)) == 1


def test_batches_are_pure_functions_of_seed_and_step() -> None:
    a = [batch_indices(3, "grpo", step, 10, 4) for step in range(5)]
    assert a == [batch_indices(3, "grpo", step, 10, 4) for step in range(5)]
    flat = [i for batch in a for i in batch]
    assert sorted(flat[:10]) == list(range(10))  # the first epoch visits every case once
    assert a != [batch_indices(4, "grpo", step, 10, 4) for step in range(5)]
    assert derived_seed(1, "x") != derived_seed(1, "y")


def _turn(*tokens: int) -> Generation:
    return Generation("x", token_ids=tokens, logprobs=tuple(-0.5 for _ in tokens), prompt_ids=(7, 8))


def test_a_group_without_variance_stays_for_the_kl_term_only() -> None:
    # two episodes that abstained alike: zero variance, so nothing for the policy gradient
    turns = [[_turn(1, 2)], [_turn(1, 2)]]
    flat = [[0.0], [0.0]]
    assert group_samples(turns, flat) == []  # no KL term: the group carries nothing and is dropped
    kept = group_samples(turns, flat, kl_coef=0.5)  # with one it stays, at advantage 0, for the KL term
    assert kept == [PolicySample((7, 8), (1, 2), (-0.5, -0.5), 0.0)] * 2
    # a group with variance keeps each turn's own advantage; a turn without tokens is no sample
    turns = [[_turn(3), _turn()], [_turn(4, 5)]]
    samples = group_samples(turns, [[-0.5, 0.25], [0.5]])
    assert [(s.completion_ids, s.advantage) for s in samples] == [((3,), -0.5), ((4, 5), 0.5)]
    assert group_samples(turns, [[-0.5, 0.25], [0.5]], kl_coef=0.5) == samples
    with pytest.raises(ValueError, match="2 episodes for 1 advantage rows"):
        group_samples(turns, [[0.0]])


def test_weighted_batches_are_seeded_distinct_and_proportional() -> None:
    weights = [3.0] * 5 + [1.0] * 5  # cases 0-4 weigh three times as much as cases 5-9
    batches = [weighted_batch_indices(3, "grpo", step, weights, 4) for step in range(600)]
    assert batches == [weighted_batch_indices(3, "grpo", step, weights, 4) for step in range(600)]
    assert batches[:20] != [weighted_batch_indices(4, "grpo", step, weights, 4) for step in range(20)]
    assert all(len(set(batch)) == 4 for batch in batches)  # no case twice in one batch
    heavy = sum(i < 5 for batch in batches for i in batch) / (600 * 4)
    # without replacement, 4 of 10: a heavy case is in a batch with probability 0.567, a light one
    # with 0.233 (the scheme's inclusion probabilities, by simulation), so 0.709 of a batch is heavy
    assert 0.68 < heavy < 0.74
    # uniform weights: every case equally often
    counts = [0] * 10
    for step in range(600):
        for i in weighted_batch_indices(0, "grpo", step, [1.0] * 10, 4):
            counts[i] += 1
    assert min(counts) > 200 and max(counts) < 280
    # a batch larger than the pool takes every case, then draws again
    big = weighted_batch_indices(0, "grpo", 0, [1.0, 2.0, 5.0], 5)
    assert sorted(big[:3]) == [0, 1, 2] and len(big) == 5
    with pytest.raises(ValueError, match="finite and > 0"):
        weighted_batch_indices(0, "grpo", 0, [1.0, 0.0], 1)
