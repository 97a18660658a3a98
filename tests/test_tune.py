"""Ray Tune sweeps: trial configs checked before launch, resources per trial, a real 2-trial sweep."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

pytest.importorskip("ray.tune")
pytest.importorskip("deepspeed")

from contractrl.cli import main
from contractrl.configtree import load_config
from contractrl.errors import ConfigError
from contractrl.trainer.config import TrainConfig
from contractrl.trainer.tune import (
    TRIALS_FILE,
    SweepConfig,
    SweepInterrupted,
    check_capacity,
    load_sweep,
    resolved_config,
    run_sweep,
    save_sweep,
    sweep_trials,
    trial_resources,
    write_trials,
)
from contractrl.trainer.tune_fit import Capacity
from contractrl.trainer.tune_trials import DONE_KEY

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["budget", "reward_weights", "lora_rank"])
def test_shipped_sweeps_validate(name: str) -> None:
    sweep, base = load_sweep(ROOT / "tune_configs" / f"{name}.yaml")
    assert sweep_trials(sweep) >= 4
    assert base["model"]["name"] == "tiny"


def test_the_scaling_sweep_crosses_every_rung_of_the_model_ladder_with_ranks() -> None:
    """Model size for real: the three pretrained presets (never ``tiny``), each with the main job's
    training, evaluated on one held-out case set; the 2-core size keeps every rung at one rank."""
    from contractrl.trainer.presets import PRESETS

    sweep, base = load_sweep(ROOT / "tune_configs" / "scaling.yaml")
    names = [entry["name"] for entry in sweep.search["model"]["grid"]]
    assert names == ["smollm2", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"] and set(names) <= set(PRESETS)
    assert sweep_trials(sweep) == 9 and len(sweep.search["model.lora.r"]["grid"]) == 3
    assert Path(base["data"]["eval_dir"]).is_absolute()  # a trial runs in another working directory
    local, local_base = load_sweep(ROOT / "tune_configs" / "scaling.yaml", local=True)
    assert sweep_trials(local) == 3 and local_base["data"]["eval_dir"] == base["data"]["eval_dir"]
    # every rung trains as the main job does, apart from what the sweep file names
    from contractrl.configtree import from_dict, to_dict

    def flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flat(value, f"{prefix}{key}.") if isinstance(value, dict) and value else {prefix + key: value})
        return out

    trial, main_job = (
        flat(to_dict(from_dict(TrainConfig, base))),
        flat(to_dict(load_config(TrainConfig, ROOT / "tune_configs" / "main.yaml"))),
    )
    changed = {key for key in trial if trial[key] != main_job[key]}
    assert changed == {"stages", "data.eval_dir", "sft.micro_batch_size", "wandb.mode", "model.cache_dir"}


def test_a_missing_held_out_case_set_is_refused_before_any_trial(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from contractrl.tasks.generate import GenerateConfig, generate_cases
    from contractrl.tasks.store import write_case_set
    from contractrl.trainer.tune import check_inputs

    (tmp_path / "base.yaml").write_text("model: {name: tiny}\nresources: {num_workers: 0}\n")
    (tmp_path / "sweep.yaml").write_text(
        f"base: base.yaml\noverrides: {{data.eval_dir: {tmp_path / 'held'}}}\nsearch:\n  seed: {{grid: [0, 1]}}\n"
    )
    sweep, base = load_sweep(tmp_path / "sweep.yaml")
    with pytest.raises(ConfigError, match=r"data.eval_dir .*held is not a case set \(no manifest.json\); make it first"):
        check_inputs(sweep, base)
    assert main(["tune", "--config", str(tmp_path / "sweep.yaml"), "--dry-run"]) == 2
    assert "is not a case set" in capsys.readouterr().err
    config = GenerateConfig(seed=9, n=2, source="builtin", families=("wrong_type",))
    write_case_set(generate_cases(config), tmp_path / "held", config.to_dict())
    check_inputs(sweep, base)


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


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("num_samples=0", "num_samples must be >= 1, got 0"),
        ("max_concurrent_trials=0", "max_concurrent_trials must be >= 1, got 0"),
    ],
)
def test_sweep_options_refuse_out_of_range_values(tmp_path: Path, override: str, message: str) -> None:
    """SweepConfig's ranges are field metadata, checked with the key's name whether a file or an override sets them."""
    (tmp_path / "base.yaml").write_text("grpo: {steps: 2}\n")
    path = tmp_path / "sweep.yaml"
    path.write_text("base: base.yaml\nsearch:\n  grpo.steps: {grid: [1, 2]}\n")
    with pytest.raises(ConfigError, match=re.escape(message)) as raised:
        load_sweep(path, [override])
    assert "\n" not in str(raised.value)
    key, _, value = override.partition("=")
    path.write_text(f"base: base.yaml\n{key}: {value}\nsearch:\n  grpo.steps: {{grid: [1, 2]}}\n")
    with pytest.raises(ConfigError, match=re.escape(message)):
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
    wandb_runs = list((tmp_path / "tune" / "two" / "wandb").rglob("*.wandb"))
    assert len(wandb_runs) == 2, "no offline W&B files from the Tune callback"
    for record in wandb_runs:  # each W&B run holds the whole resolved config, not only the swept key
        raw = record.read_bytes()
        assert b"config_sha256" in raw and b"data.train_cases" in raw and b"sft.batch_size" in raw
    assert main(["tune", "--config", str(tmp_path / "sweep.yaml"), "--dry-run"]) == 0
    # each row traces to its run: status, the run's own config hash, its weights, the best link
    assert list(table["status"]) == ["FINISHED", "FINISHED"] and "done" not in table.columns
    assert sorted(table["run_dir"]) == [str(r) for r in runs]
    for row in table.itertuples():
        manifest = json.loads((Path(row.run_dir) / "manifest.json").read_text())
        assert row.config_sha256 == manifest["config_sha256"]
        assert Path(row.best_checkpoint).is_dir() and Path(row.model_dir).is_dir() and row.best_stage == "sft"
    best = (tmp_path / "tune" / "two" / "best").resolve()
    assert best in runs and (best / "adapter").is_dir()  # the default model trains a LoRA adapter
    # resuming a finished sweep runs nothing again and gives the same table
    again = pd.read_parquet(run_sweep(sweep, base, resume=True))
    assert list(again["trial_id"]) == list(table["trial_id"]) and list(again["status"]) == list(table["status"])
    assert sorted((tmp_path / "tune" / "two" / "runs").iterdir()) == runs


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


# --- fitting the machine -------------------------------------------------------------------------

SHIPPED = ["scaling", "budget", "reward_weights", "lora_rank", "selector_sweep"]
TWO_CORES = Capacity(2.0, 0.0, "this machine")


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_sweep_has_a_local_size_that_fits_two_cores(name: str) -> None:
    sweep, base = load_sweep(ROOT / "tune_configs" / f"{name}.yaml", local=True)
    check_capacity(sweep, base, TWO_CORES)  # raises if one trial could not be placed
    assert sweep.name.endswith("-local")  # its results never mix with the full sweep's
    assert 1 <= sweep_trials(sweep) <= 4


@pytest.mark.parametrize("name", ["scaling", "budget", "reward_weights", "lora_rank"])
def test_a_trial_larger_than_the_machine_is_refused_with_the_fix(name: str) -> None:
    sweep, base = load_sweep(ROOT / "tune_configs" / f"{name}.yaml")
    with pytest.raises(ConfigError) as caught:
        check_capacity(sweep, base, TWO_CORES)
    message = str(caught.value)
    assert "\n" not in message
    assert "needs 2.01 CPUs; this machine has 2" in message
    assert "--local" in message and "overrides.resources.num_workers=0 (then it needs 1.01 CPUs)" in message
    # the fix it names works
    fixed, base = load_sweep(ROOT / "tune_configs" / f"{name}.yaml", ["overrides.resources.num_workers=0"])
    check_capacity(fixed, base, TWO_CORES)


def test_gpus_are_checked_and_an_autoscaling_cluster_may_wait(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("resources: {learner_gpus: 1, num_workers: 0}\n")
    (tmp_path / "sweep.yaml").write_text("base: base.yaml\nsearch:\n  seed: {grid: [0, 1]}\n")
    sweep, base = load_sweep(tmp_path / "sweep.yaml")
    with pytest.raises(ConfigError, match="needs 1 GPUs; this machine has 0"):
        check_capacity(sweep, base, Capacity(16.0, 0.0, "this machine"))
    check_capacity(sweep, base, Capacity(16.0, 1.0, "this machine"))
    waiting, base = load_sweep(tmp_path / "sweep.yaml", ["wait_for_resources=true"])
    check_capacity(waiting, base, Capacity(1.0, 0.0, "this Ray cluster"))


def test_dry_run_refuses_what_would_hang(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr("contractrl.trainer.tune_fit.os.cpu_count", lambda: 2)
    sweep_file = str(ROOT / "tune_configs" / "lora_rank.yaml")
    assert main(["tune", "--config", sweep_file, "--dry-run"]) == 2
    assert "would stay PENDING forever" in capsys.readouterr().err
    assert main(["tune", "--config", sweep_file, "--local", "--dry-run"]) == 0
    assert '"trials": 2' in capsys.readouterr().out


def test_local_needs_a_local_section(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("grpo: {steps: 2}\n")
    (tmp_path / "sweep.yaml").write_text("base: base.yaml\nsearch:\n  seed: {grid: [0, 1]}\n")
    with pytest.raises(ConfigError, match="has no local: section"):
        load_sweep(tmp_path / "sweep.yaml", local=True)


# --- tracing trials ------------------------------------------------------------------------------


def test_the_resolved_config_is_the_whole_trial_config_and_its_hash_the_runs() -> None:
    _, base = load_sweep(ROOT / "tune_configs" / "lora_rank.yaml", local=True)
    flat = resolved_config({"model.lora.r": 16}, base=base, kind="train")
    assert flat["model.lora.r"] == 16 and flat["model.lora.enabled"] is True
    assert flat["model.name"] == "tiny" and flat["sft.steps"] == 20 and flat["resources.num_workers"] == 0
    assert "grpo.kl_coef" in flat  # defaults the files never name are there too
    assert "out" not in flat and "resume" not in flat
    other = resolved_config({"model.lora.r": 4}, base=base, kind="train")
    assert other["config_sha256"] != flat["config_sha256"]
    # the trial's own run manifest pins the same hash (run_identity of the config it trains with)
    from contractrl.trainer.entry import absolute, run_identity
    from contractrl.trainer.tune import trial_config
    from contractrl.validators.jsonvalue import sha256_json

    config = trial_config({"model.lora.r": 16}, base=base, kind="train", out="/tmp/somewhere")
    assert sha256_json(run_identity(absolute(config))) == flat["config_sha256"]


def _result(trial_id: str, *, finished: bool, metric: float = float("nan"), error: Exception | None = None) -> SimpleNamespace:
    metrics = {"trial_id": trial_id, "eval_semantic_success": metric, "step": 3, "done": False}
    if finished:
        metrics[DONE_KEY] = 1
    return SimpleNamespace(metrics=metrics, path=f"/x/_trial_{trial_id}_0_seed=0", error=error, config={"seed": 0})


def _sweep(tmp_path: Path) -> tuple[SweepConfig, dict[str, Any]]:
    (tmp_path / "base.yaml").write_text("grpo: {steps: 2}\n")
    (tmp_path / "sweep.yaml").write_text(f"name: s\nbase: base.yaml\nout: {tmp_path}\nsearch:\n  seed: {{grid: [0, 1]}}\n")
    return load_sweep(tmp_path / "sweep.yaml")


def test_a_finished_sweep_table_has_status_paths_and_the_best_link(tmp_path: Path) -> None:
    sweep, base = _sweep(tmp_path)
    out = tmp_path / "s"
    run = out / "runs" / "abc_00001"
    (run / "stages" / "grpo").mkdir(parents=True)
    evals = {"sft": {"semantic_success": 0.5}, "grpo": {"semantic_success": 0.75}}
    (run / "manifest.json").write_text(json.dumps({"kind": "contractrl.train", "evals": evals, "model_dir": str(run / "model")}))
    path = write_trials(
        [_result("abc_00000", finished=True, metric=0.25), _result("abc_00001", finished=True, metric=0.75)], sweep, base, out
    )
    table = pd.read_parquet(path)
    assert list(table["status"]) == ["FINISHED", "FINISHED"] and "done" not in table.columns
    assert list(table["trial_id"]) == ["abc_00000", "abc_00001"]
    assert table["config_sha256"].str.len().eq(64).all() and table["config_sha256"].nunique() == 1  # same config
    row = table.iloc[1]
    assert row["run_dir"] == str(run) and row["best_stage"] == "grpo" and row["best_checkpoint"] == str(run / "stages" / "grpo")
    assert row["model_dir"] == str(run / "model")
    assert (out / "best").resolve() == run.resolve()
    assert json.loads((out / "best.json").read_text())["trial_id"] == "abc_00001"


def test_an_interrupted_sweep_writes_no_table(tmp_path: Path) -> None:
    sweep, base = _sweep(tmp_path)
    out = tmp_path / "s"
    with pytest.raises(SweepInterrupted, match=f"1 of 2 trials unfinished; continue it with: contractrl tune --resume {out}"):
        write_trials([_result("a_00000", finished=True, metric=0.5), _result("a_00001", finished=False)], sweep, base, out)
    with pytest.raises(SweepInterrupted, match="2 of 2 trials unfinished"):
        write_trials([], sweep, base, out)
    assert not (out / TRIALS_FILE).exists() and not (out / "best").exists()


def test_failed_trials_are_in_the_table_and_fail_the_sweep(tmp_path: Path) -> None:
    sweep, base = _sweep(tmp_path)
    out = tmp_path / "s"
    results = [_result("a_00000", finished=True, metric=0.5), _result("a_00001", finished=False, error=RuntimeError("boom"))]
    with pytest.raises(RuntimeError, match="1 of 2 trials failed"):
        write_trials(results, sweep, base, out)
    assert list(pd.read_parquet(out / TRIALS_FILE)["status"]) == ["FINISHED", "ERROR"]


def test_cli_tune_interrupted_exits_130_and_says_how_to_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(sweep: SweepConfig, base: dict[str, Any], *, resume: bool = False) -> Path:
        raise SweepInterrupted(tmp_path / "s", 1, 2)

    monkeypatch.setattr("contractrl.trainer.tune.run_sweep", interrupted)
    monkeypatch.setattr("contractrl.trainer.tune.check_capacity", lambda *a: None)
    _sweep(tmp_path)
    assert main(["tune", "--config", str(tmp_path / "sweep.yaml")]) == 130
    captured = capsys.readouterr()
    assert captured.out == ""  # no table, no result JSON
    resume = f"contractrl tune --resume {tmp_path / 's'}"
    assert captured.err.strip() == f"contractrl tune: interrupted with 1 of 2 trials unfinished; continue it with: {resume}"


def test_resume_reads_the_saved_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tune", "--resume", str(tmp_path)]) == 2
    assert "is not a sweep directory" in capsys.readouterr().err
    sweep, base = _sweep(tmp_path)
    save_sweep(sweep, base)
    seen: dict[str, Any] = {}

    def fake(sweep: SweepConfig, base: dict[str, Any], *, resume: bool = False) -> Path:
        seen.update(sweep=sweep, base=base, resume=resume)
        return tmp_path / "s" / TRIALS_FILE

    monkeypatch.setattr("contractrl.trainer.tune.run_sweep", fake)
    assert main(["tune", "--resume", str(tmp_path / "s")]) == 0
    assert seen == {"sweep": sweep, "base": base, "resume": True}
    assert main(["tune", "--resume", str(tmp_path / "s"), "--config", str(tmp_path / "sweep.yaml")]) == 2
