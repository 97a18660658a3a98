"""Ray Tune sweeps: trial configs checked before launch, resources per trial, a real 2-trial sweep."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("ray.tune")
pytest.importorskip("deepspeed")

from contractrl.cli import main
from contractrl.configtree import load_config
from contractrl.errors import ConfigError
from contractrl.trainer.config import TrainConfig
from contractrl.trainer.tune import load_sweep, run_sweep, sweep_trials, trial_resources

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["scaling", "budget", "reward_weights", "lora_rank"])
def test_shipped_sweeps_validate(name: str) -> None:
    sweep, base = load_sweep(ROOT / "tune_configs" / f"{name}.yaml")
    assert sweep_trials(sweep) >= 4
    assert base["model"]["name"] == "tiny"


def test_bad_sweeps_fail_before_launch(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("grpo: {steps: 2}\n")
    cases = {
        "search:\n  grpo.stepz: {grid: [1, 2]}\n": "unknown config key 'grpo.stepz'",
        "search:\n  grpo.group_size: {grid: [1, 2]}\n": "grpo.group_size must be >= 2",
        "search:\n  reward.tokens: {loguniform: [0, 1]}\n": "needs low > 0",
        "search:\n  reward.tokens: {between: [0, 1]}\n": "must be one of",
        "search: {}\n": "search must name at least one",
    }
    for body, message in cases.items():
        path = tmp_path / "sweep.yaml"
        path.write_text("base: base.yaml\n" + body)
        with pytest.raises(ConfigError, match=message):
            load_sweep(path)


def test_trial_resources_reserve_every_actor() -> None:
    config = load_config(
        TrainConfig,
        None,
        ["resources.num_learners=2", "resources.learner_gpus=1", "resources.num_workers=3", "resources.placement=separate"],
    )
    bundles = trial_resources(config)
    assert bundles[0] == {"CPU": 0.01}
    assert bundles[1:3] == [{"CPU": 1.0, "GPU": 1.0}] * 2
    assert bundles[3] == {"CPU": 1.0}  # the generator
    assert bundles[4:] == [{"CPU": 1.0}] * 3


@pytest.mark.slow
def test_two_trial_sweep_on_cpu(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(
        f"""
stages: [sft]
model: {{cache_dir: {tmp_path / "models"}}}
data: {{train_cases: 8, eval_cases: 2}}
sft: {{steps: 2, batch_size: 4}}
eval: {{max_new_tokens: 8}}
resources: {{num_workers: 0, learner_cpus: 1}}
"""
    )
    (tmp_path / "sweep.yaml").write_text(
        f"""
name: two
base: base.yaml
out: {tmp_path / "tune"}
search:
  sft.optim.lr: {{grid: [0.001, 0.003]}}
wandb_mode: offline
"""
    )
    sweep, base = load_sweep(tmp_path / "sweep.yaml")
    table = pd.read_parquet(run_sweep(sweep, base))
    assert len(table) == 2
    assert sorted(table["config/sft.optim.lr"]) == [0.001, 0.003]
    assert table["eval_semantic_success"].between(0, 1).all()
    assert (table["step"] == 2).all()
    # each trial is a complete training run directory
    runs = sorted((tmp_path / "tune" / "two" / "runs").iterdir())
    assert len(runs) == 2 and all((r / "metrics.parquet").is_file() for r in runs)
    assert list((tmp_path / "tune" / "two" / "wandb").rglob("*.wandb")), "no offline W&B files from the Tune callback"
    assert main(["tune", "--config", str(tmp_path / "sweep.yaml"), "--dry-run"]) == 0


@pytest.mark.slow
def test_selector_sweep_on_cpu(tmp_path: Path) -> None:
    """``kind: selector``: each trial is a PPO run of the candidate-selection policy."""
    (tmp_path / "base.yaml").write_text(
        """
data: {train_cases: 26, eval_cases: 13}
ppo: {iterations: 2, train_batch: 64, minibatch: 32, epochs: 2}
eval: {every: 2}
runners: {env_runners: 0}
"""
    )
    (tmp_path / "sweep.yaml").write_text(
        f"""
name: sel
kind: selector
base: base.yaml
out: {tmp_path / "tune"}
search:
  model.hidden: {{grid: [8, 16]}}
wandb_mode: disabled
"""
    )
    sweep, base = load_sweep(tmp_path / "sweep.yaml")
    assert sweep.kind == "selector"
    table = pd.read_parquet(run_sweep(sweep, base))
    assert sorted(table["config/model.hidden"]) == [8, 16]
    assert table["eval_semantic_success"].between(0, 1).all() and (table["best_iteration"] == 2).all()
    runs = sorted((tmp_path / "tune" / "sel" / "runs").iterdir())
    assert len(runs) == 2 and all((r / "selector" / "selector.json").is_file() for r in runs)


def test_a_selector_sweep_is_checked_against_the_selector_tree(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("ppo: {iterations: 2}\n")
    (tmp_path / "sweep.yaml").write_text("kind: selector\nbase: base.yaml\nsearch:\n  ppo.lr: {grid: [0.001, -1.0]}\n")
    with pytest.raises(ConfigError, match=r"ppo\.lr must be > 0"):
        load_sweep(tmp_path / "sweep.yaml")
    (tmp_path / "sweep.yaml").write_text("kind: selector\nbase: base.yaml\nsearch:\n  sft.steps: {grid: [1, 2]}\n")
    with pytest.raises(ConfigError, match="sft"):
        load_sweep(tmp_path / "sweep.yaml")
