"""The stage objects and the advantage-estimator registry: which stages a config builds, what each
holds, how an unknown name is refused, and that each registered baseline computes what the GRPO
step computed inline before the registry (the group's mean, or each episode's leave-one-out mean)."""

from __future__ import annotations

import ast
import math
import typing
from pathlib import Path
from typing import get_args

import pytest

from contractrl.configtree import load_config
from contractrl.errors import ConfigError
from contractrl.rollout.policies import Generation
from contractrl.rollout.runner import Episode
from contractrl.rollout.worker import EpisodeKey
from contractrl.tasks.contrast import CONTRAST_SUFFIX
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.trainer.batches import advantage_spans, with_contrasts
from contractrl.trainer.config import GRPOConfig, TrainConfig
from contractrl.trainer.config import Stage as StageName
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


def _round(values: list[float]) -> list[float]:
    return [round(v, 9) for v in values]


# --- the advantage registry ------------------------------------------------------------------------


def test_the_registry_names_exactly_the_baselines_the_config_offers() -> None:
    offered = get_args(typing.get_type_hints(GRPOConfig)["baseline"])
    assert sorted(ADVANTAGE_ESTIMATORS) == sorted(offered) == ["leave_one_out", "mean"]
    for name, estimator in ADVANTAGE_ESTIMATORS.items():
        assert advantage_estimator(name) is estimator


def test_an_unknown_estimator_is_a_one_line_config_error_naming_the_registered_ones() -> None:
    with pytest.raises(UnknownEstimatorError) as caught:
        advantage_estimator("median")
    message = str(caught.value)
    assert "\n" not in message and "'median'" in message and message.endswith("leave_one_out, mean")
    # a config error for the CLI's one-line report, and the ValueError callers of group_advantages catch
    assert isinstance(caught.value, ConfigError) and isinstance(caught.value, ValueError)
    with pytest.raises(ValueError, match="unknown baseline 'median'"):
        group_advantages(REWARDS, baseline="median")


def test_each_baseline_by_hand() -> None:
    mean = sum(REWARDS) / 4
    assert _round(advantage_estimator("mean")(REWARDS)) == _round([r - mean for r in REWARDS])
    others = [(sum(REWARDS) - r) / 3 for r in REWARDS]
    assert _round(advantage_estimator("leave_one_out")(REWARDS)) == _round([r - o for r, o in zip(REWARDS, others, strict=True)])
    std = math.sqrt(sum((r - mean) ** 2 for r in REWARDS) / 3)  # GRPO's sample std, then the scaled advantages
    assert _round(group_advantages(REWARDS, eps=0.0)) == _round([(r - mean) / std for r in REWARDS])
    assert _round(group_advantages(REWARDS, scale_std=False, baseline="leave_one_out")) == _round(
        [r - o for r, o in zip(REWARDS, others, strict=True)]
    )


@pytest.mark.parametrize("baseline", ["mean", "leave_one_out"])
def test_every_decision_takes_its_episode_advantage_and_a_flat_group_gives_zeros(baseline: str) -> None:
    per_episode = group_advantages(REWARDS, baseline=baseline)
    got = decision_advantages(REWARDS, DECISIONS, baseline=baseline)
    assert [_round(row) for row in got] == [_round([a] * n) for a, n in zip(per_episode, DECISIONS, strict=True)]
    assert decision_advantages([0.5, 0.5], [2, 1], baseline=baseline) == [[0.0, 0.0], [0.0]]
    with pytest.raises(ValueError, match="3 rewards for 2 episodes"):
        decision_advantages([1.0, 0.0, 0.0], [1, 1], baseline=baseline)


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
    config = load_config(TrainConfig, TINY_YAML, ["experimental.grpo_families.families=[unrepairable]"])
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


@pytest.mark.parametrize("baseline", ["mean", "leave_one_out"])
def test_the_grpo_stage_advantages_follow_the_configured_baseline_and_groups(baseline: str) -> None:
    """An unrepairable case and its contrast, two episodes each: each case's episodes are one group
    (a contrast's too), so a flat group gives nothing, and a group with variance gives each sample
    its episode's advantage against the configured baseline."""
    overrides = ["grpo.group_size=2", "grpo.scale_std=false", "experimental.contrast.grpo=true", f"grpo.baseline={baseline}"]
    config = load_config(TrainConfig, TINY_YAML, overrides)
    (stage,) = build_stages(["grpo"], _parts(config))
    assert isinstance(stage, GRPOStage)
    case = next(c for c in stage.cases if c.family == "unrepairable")
    twin = case.__class__(**{**case.__dict__, "case_id": case.case_id + CONTRAST_SUFFIX})
    cases = with_contrasts([case], {case.case_id: twin})
    decisions, rewards = [1, 2, 1, 1], [1.0, 0.0, 0.0, 0.0]
    batch = stage.advantages(cases, [_episode(n) for n in decisions], [_reward(r) for r in rewards])
    expected: list[float] = []
    for first, stop in advantage_spans(cases, 2):
        rows = decision_advantages(rewards[first:stop], decisions[first:stop], baseline=baseline, scale_std=False)
        if not without_variance(rows):  # no KL term: a flat group is dropped
            expected.extend(a for row in rows for a in row)
    assert _round([s.advantage for s in batch.samples]) == _round(expected)
    assert (batch.groups, batch.zero_variance, batch.updates) == (2, 1, True)
    # by hand: the case's group 1 and 0 (mean 0.5; leave-one-out 1 and -1), its second decision too
    by_hand = [0.5, -0.5, -0.5] if baseline == "mean" else [1.0, -1.0, -1.0]
    assert _round([s.advantage for s in batch.samples]) == by_hand


def test_no_stage_is_picked_by_comparing_its_name() -> None:
    """The loop and the learner ask the stage object; neither compares a stage name to a literal."""
    names = set(STAGES)
    for module in ("loop.py", "learner.py"):
        tree = ast.parse((PACKAGE / "trainer" / module).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                literals = {c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)}
                assert not literals & names, f"{module}:{node.lineno} compares with {literals & names}"
