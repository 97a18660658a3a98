"""The arm table: every layer asks an arm's spec, so what the spec says is what the arm does."""

from __future__ import annotations

import json
import re
from typing import get_args

import pytest

from contractrl.configtree import load_config
from contractrl.errors import ConfigError
from contractrl.rollout.env import RepairEnv
from contractrl.rollout.policies import HeuristicPolicy, Observation
from contractrl.rollout.prompts import render_blocks, render_messages
from contractrl.rollout.runner import EpisodeRunner, LocalPool
from contractrl.tasks.arms import ARM_SPECS, ARMS, DEFAULT_ARM, PATCH_ARMS, SFT_ARMS, Arm, GrpoArm, SftArm, arm_spec
from contractrl.tasks.demonstrations import gold_answer, rejected_attempt
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.trainer.config import TrainConfig

CASES = generate_cases(GenerateConfig(seed=13, n=26))


def test_every_arm_has_exactly_one_spec() -> None:
    assert tuple(ARM_SPECS) == ARMS and set(ARMS) == {arm.value for arm in Arm}
    for name, spec in ARM_SPECS.items():
        assert spec.arm.value == name and arm_spec(name) is spec and arm_spec(spec.arm) is spec
    assert DEFAULT_ARM == "contractrl" and type(DEFAULT_ARM) is str  # ledgers hold plain names
    assert Observation(CASES[0].public, RepairEnv(CASES[0].public).reset(), 0).arm == DEFAULT_ARM


@pytest.mark.parametrize("use", [arm_spec, lambda arm: RepairEnv(CASES[0].public, arm)])
def test_an_unknown_arm_is_a_typed_error(use: object) -> None:
    with pytest.raises(ConfigError, match=re.escape("unknown arm 'oracle'; choose from full_regen, constrained")):
        use("oracle")  # type: ignore[operator]


@pytest.mark.parametrize("arm", ARMS)
def test_the_spec_says_what_an_arm_answers_and_sees(arm: str) -> None:
    spec = arm_spec(arm)
    repairable = next(c for c in CASES if not c.offline.should_abstain)
    gold = json.loads(gold_answer(repairable, arm))
    assert gold == (repairable.offline.target if spec.whole_object else repairable.offline.target_patch)
    earlier = rejected_attempt(repairable, arm, root_fallback=True)
    assert earlier is not None and isinstance(json.loads(earlier), dict) == spec.whole_object
    state = RepairEnv(repairable.public, arm).reset()
    answer = HeuristicPolicy().respond(Observation(repairable.public, state, 0, arm))
    if answer != "ABSTAIN":
        assert isinstance(json.loads(answer), dict) == spec.whole_object
    system, _ = render_messages(repairable.public, state, arm, "case_matched")
    assert system["content"] == spec.system
    # the first decision has no history, for every arm alike
    assert tuple(render_blocks(repairable.public, state, arm, "case_matched")) == tuple(b for b in spec.blocks if b != "history")


def test_the_config_accepts_the_arms_the_table_lets_each_stage_train() -> None:
    assert get_args(SftArm) == SFT_ARMS and "constrained" not in SFT_ARMS and "full_regen" in SFT_ARMS
    assert get_args(GrpoArm) == PATCH_ARMS == tuple(a for a in ARMS if not arm_spec(a).whole_object)
    assert load_config(TrainConfig, None, ["sft.arm=full_regen", "stages=[sft]"]).sft.arm == "full_regen"
    with pytest.raises(
        ConfigError, match=re.escape("config key 'sft.arm' must be one of 'full_regen', 'patch_sft', 'contractrl'")
    ):
        load_config(TrainConfig, None, ["sft.arm=constrained", "stages=[sft]"])
    with pytest.raises(ConfigError, match=re.escape("config key 'grpo.arm' must be one of 'patch_sft', 'contractrl'")):
        load_config(TrainConfig, None, ["grpo.arm=full_regen"])


def test_the_observations_arm_decides_the_grammar_of_a_batch() -> None:
    from contractrl.rollout.hf_policy import _grammar

    state = RepairEnv(CASES[0].public).reset()
    grammar = [Observation(c.public, state, 0, "constrained") for c in CASES[:2]]
    free = [Observation(c.public, state, 0, "full_regen") for c in CASES[:2]]
    assert _grammar(grammar) and not _grammar(free) and not _grammar([Observation(CASES[0].public, state, 0)])
    with pytest.raises(ConfigError, match="mixes arms with and without a grammar"):
        _grammar(grammar[:1] + free[:1])


def test_the_runner_passes_its_arm_through_every_observation() -> None:
    seen: list[str] = []

    class Recording(HeuristicPolicy):
        def generate(self, observations):  # type: ignore[no-untyped-def]
            seen.extend(o.arm for o in observations)
            return super().generate(observations)

    rows = EpisodeRunner(Recording(), LocalPool(1), arm="full_regen").run([c.public for c in CASES[:4]])
    assert seen and set(seen) == {"full_regen"} and {r["arm"] for r in rows} == {"full_regen"}
