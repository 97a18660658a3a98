"""The stage objects and the advantage-estimator registry: which stages a config builds, what each
holds, how an unknown name is refused, and that each registered estimator computes what the GRPO
step computed inline before the registry (group advantages over the whole group, or over the
episodes that reached each decision)."""

from __future__ import annotations

import ast
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, get_args

import pytest

from contractrl.configtree import load_config
from contractrl.errors import ConfigError
from contractrl.rollout.policies import Generation
from contractrl.rollout.runner import Episode
from contractrl.rollout.worker import EpisodeKey
from contractrl.tasks.contrast import CONTRAST_SUFFIX
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.trainer.batches import advantage_spans, with_contrasts
from contractrl.trainer.config import Stage as StageName
from contractrl.trainer.config import TrainConfig
from contractrl.trainer.grpo import (
    ADVANTAGE_ESTIMATORS,
    UnknownEstimatorError,
    advantage_estimator,
    decision_advantages,
    group_advantages,
    without_variance,
)
from contractrl.trainer.learner import stage_optim
from contractrl.trainer.reward import RewardBreakdown
from contractrl.trainer.stages import STAGES, GRPOStage, RunParts, SFTStage, build_stages

PACKAGE = Path(__file__).resolve().parents[1] / "contractrl"
TINY_YAML = PACKAGE.parent / "tune_configs" / "tiny.yaml"
# a group of four: two first-try successes, a repair on the second attempt, an abstention after a rejection
REWARDS = [0.97, 0.97, 0.87, -0.1]
DECISIONS = [1, 1, 2, 2]
# GRPO's default group options, and Dr. GRPO's unscaled advantages with RLOO's leave-one-out baseline
OPTIONS: list[dict[str, Any]] = [
    {"scale_std": True, "baseline": "mean", "eps": 1e-4},
    {"scale_std": False, "baseline": "leave_one_out", "eps": 1e-4},
]


def _rows(advantages: list[list[float]]) -> list[tuple[float, ...]]:
    return [tuple(round(a, 9) for a in row) for row in advantages]


# --- the advantage registry ------------------------------------------------------------------------


def test_the_registry_names_the_estimators_the_config_offers() -> None:
    assert sorted(ADVANTAGE_ESTIMATORS) == ["decision", "episode"]
    for name, estimator in ADVANTAGE_ESTIMATORS.items():
        assert advantage_estimator(name) is estimator


def test_an_unknown_estimator_is_a_one_line_config_error_naming_the_registered_ones() -> None:
    with pytest.raises(UnknownEstimatorError) as caught:
        advantage_estimator("turn")
    message = str(caught.value)
    assert "\n" not in message and "'turn'" in message and message.endswith("decision, episode")
    # a config error for the CLI's one-line report, and the ValueError callers of decision_advantages catch
    assert isinstance(caught.value, ConfigError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize("options", OPTIONS)
def test_episode_credit_gives_every_decision_its_episode_advantage(options: dict[str, Any]) -> None:
    got = advantage_estimator("episode")(REWARDS, DECISIONS, **options)
    per_episode = group_advantages(REWARDS, **options)
    assert _rows(got) == _rows([[per_episode[0]], [per_episode[1]], [per_episode[2]] * 2, [per_episode[3]] * 2])


def test_episode_credit_by_hand() -> None:
    # mean 0.6775, sample std sqrt(sum of squares / 3)
    mean = sum(REWARDS) / 4
    std = math.sqrt(sum((r - mean) ** 2 for r in REWARDS) / 3)
    got = advantage_estimator("episode")(REWARDS, DECISIONS, scale_std=True, baseline="mean", eps=0.0)
    expected = [[(r - mean) / std] * n for r, n in zip(REWARDS, DECISIONS, strict=True)]
    assert _rows(got) == _rows(expected)


@pytest.mark.parametrize("options", OPTIONS)
def test_decision_credit_compares_the_second_decision_with_the_episodes_that_reached_it(options: dict[str, Any]) -> None:
    got = advantage_estimator("decision")(REWARDS, DECISIONS, **options)
    first = group_advantages(REWARDS, **options)
    second = group_advantages(REWARDS[2:], **options)  # only episodes 2 and 3 reached a second decision
    assert _rows(got) == _rows([[first[0]], [first[1]], [first[2], second[0]], [first[3], second[1]]])
    # with scale_std off and the mean baseline, the second decisions by hand: 0.87 and -0.1 around 0.385
    plain = advantage_estimator("decision")(REWARDS, DECISIONS, scale_std=False, baseline="mean", eps=1e-4)
    assert [round(row[-1], 9) for row in plain[2:]] == [0.485, -0.485]


def test_a_decision_one_episode_alone_reached_gets_nothing_and_a_flat_group_gives_zeros() -> None:
    got = advantage_estimator("decision")([0.97, 0.97, 0.97, 0.87], [1, 1, 1, 2], scale_std=False, baseline="mean", eps=1e-4)
    assert _rows(got) == _rows([[0.025], [0.025], [0.025], [-0.075, 0.0]])
    for name in ADVANTAGE_ESTIMATORS:
        assert advantage_estimator(name)([0.5, 0.5], [2, 1], scale_std=True, baseline="mean", eps=1e-4) == [[0.0, 0.0], [0.0]]
        with pytest.raises(ValueError, match="3 rewards for 2 episodes"):
            advantage_estimator(name)([1.0, 0.0, 0.0], [1, 1], scale_std=True, baseline="mean", eps=1e-4)


def test_decision_advantages_dispatches_through_the_registry() -> None:
    for name, estimator in ADVANTAGE_ESTIMATORS.items():
        options = OPTIONS[1]
        assert decision_advantages(REWARDS, DECISIONS, credit=name, **options) == estimator(REWARDS, DECISIONS, **options)


# --- stage selection -------------------------------------------------------------------------------


def _parts(config: TrainConfig, n_cases: int = 26) -> RunParts:
    """The stages' shared parts; the collaborators stay None: building a stage must not touch them."""
    cases = [c.public for c in generate_cases(GenerateConfig(seed=0, n=n_cases))]
    return RunParts(
        config=config,
        out=Path("unused"),
        group=None,  # type: ignore[arg-type]
        pool=None,  # type: ignore[arg-type]
        judge=None,  # type: ignore[arg-type]
        tokenizer=None,
        train_cases=cases,
        demos=[],
        contrasts={},
    )


def test_the_stage_registry_holds_every_stage_the_config_can_name() -> None:
    assert list(STAGES) == list(get_args(StageName)) == ["sft", "grpo"]
    assert all(STAGES[name] is kind and kind.name == name for name, kind in (("sft", SFTStage), ("grpo", GRPOStage)))


def test_a_config_builds_its_stages_in_order_each_with_its_own_steps_arm_and_optimizer() -> None:
    config = load_config(TrainConfig, TINY_YAML, ["sft.steps=7", "grpo.steps=5", "grpo.arm=patch_sft"])
    sft, grpo = build_stages(config.stages, _parts(config))
    assert isinstance(sft, SFTStage) and isinstance(grpo, GRPOStage)
    assert (sft.name, sft.steps, sft.arm, sft.optim) == ("sft", 7, config.sft.arm, config.sft.optim)
    assert (grpo.name, grpo.steps, grpo.arm, grpo.optim) == ("grpo", 5, "patch_sft", config.grpo.optim)
    assert sft.optim != grpo.optim  # each stage starts its own optimizer and schedule
    (only,) = build_stages(["grpo"], _parts(config))
    assert isinstance(only, GRPOStage)
    assert [s.name for s in build_stages(["sft"], _parts(config))] == ["sft"]


def test_an_unknown_stage_is_a_one_line_config_error_naming_the_registered_ones() -> None:
    with pytest.raises(ConfigError, match=r"^unknown stage 'ppo': the registered stages are sft, grpo$"):
        build_stages(["sft", "ppo"], _parts(TrainConfig()))


def test_building_grpo_checks_its_cases_before_any_step_and_sft_alone_does_not() -> None:
    config = load_config(TrainConfig, TINY_YAML, ["grpo.families=[unrepairable]"])
    with pytest.raises(ConfigError, match="none of the 12 training cases"):  # 12 generated cases, none unrepairable
        build_stages(config.stages, _parts(config, n_cases=12))
    assert [s.name for s in build_stages(["sft"], _parts(config, n_cases=12))] == ["sft"]


def test_the_learner_takes_the_stage_optimizer_or_the_section_named_like_the_stage() -> None:
    config = TrainConfig()
    assert stage_optim(config, "sft") == config.sft.optim and stage_optim(config, "grpo") == config.grpo.optim
    with pytest.raises(ConfigError, match="stage 'model' has no config section with an optim"):
        stage_optim(config, "model")


def _episode(decisions: int) -> Episode:
    turn = Generation(text="[]", token_ids=(1, 2), logprobs=(-0.5, -0.5), prompt_ids=(7,))
    return Episode(EpisodeKey(0, 0, "contractrl", "test", 0), {}, (turn,) * decisions)


def _reward(value: float) -> RewardBreakdown:
    return RewardBreakdown(success=float(value > 0), collateral=0, retries=0, masked=0, tokens=2, reward=value)


@pytest.mark.parametrize("credit", ["episode", "decision"])
@pytest.mark.parametrize("baseline", ["own", "pair"])
def test_the_grpo_stage_advantages_follow_the_configured_estimator_and_groups(credit: str, baseline: str) -> None:
    """An unrepairable case and its contrast, two episodes each: every episode abstains, right on the
    case (1) and wrong on the contrast (0), one of them after a rejected attempt. Alone each group is
    flat and gives nothing; joined (``pair``) they teach, and each sample carries the estimator's
    advantage for its decision."""
    overrides = [f"grpo.credit={credit}", "grpo.group_size=2", "grpo.scale_std=false", "grpo.contrast_unrepairable=true"]
    config = load_config(TrainConfig, TINY_YAML, [*overrides, f"grpo.contrast_baseline={baseline}"])
    (stage,) = build_stages(["grpo"], _parts(config))
    assert isinstance(stage, GRPOStage) and stage.estimator is ADVANTAGE_ESTIMATORS[credit]
    case = next(c for c in stage.cases if c.family == "unrepairable")
    twin = replace(case, case_id=case.case_id + CONTRAST_SUFFIX)
    cases = with_contrasts([case], {case.case_id: twin})
    decisions, rewards = [1, 2, 1, 1], [1.0, 1.0, 0.0, 0.0]
    batch = stage.advantages(cases, [_episode(n) for n in decisions], [_reward(r) for r in rewards])
    spans = advantage_spans(cases, 2, join_contrasts=baseline == "pair")
    expected: list[float] = []
    for first, stop in spans:
        rows = decision_advantages(rewards[first:stop], decisions[first:stop], credit=credit, scale_std=False)
        if not without_variance(rows):  # no KL term: a flat group is dropped
            expected.extend(a for row in rows for a in row)
    assert [round(s.advantage, 9) for s in batch.samples] == [round(a, 9) for a in expected]
    joined = baseline == "pair"
    assert (batch.groups, batch.zero_variance, batch.updates) == ((1, 0, True) if joined else (2, 2, False))
    if joined:  # by hand: mean 0.5; under decision credit the one second decision has nobody to compare with
        second = 0.5 if credit == "episode" else 0.0
        assert [s.advantage for s in batch.samples] == [0.5, 0.5, second, -0.5, -0.5]


def test_no_stage_is_picked_by_comparing_its_name() -> None:
    """The loop and the learner ask the stage object; neither compares a stage name to a literal."""
    names = set(STAGES)
    for module in ("loop.py", "learner.py"):
        tree = ast.parse((PACKAGE / "trainer" / module).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                literals = {c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)}
                assert not literals & names, f"{module}:{node.lineno} compares with {literals & names}"
