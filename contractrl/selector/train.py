"""``contractrl train-selector``: PPO (RLlib, new API stack) on the candidate-selection MDP.

One run directory holds:

- ``cases/train``, ``cases/eval``: the same cases the LM trainer makes from the same ``data``
  section (disjoint by the split audit);
- ``checkpoints/iter-NNNNN``: RLlib algorithm checkpoints (the module, the optimizer, the env
  runners' state) plus ``selector_state.json`` (iteration, metrics rows, best evaluation), for resume;
- ``eval/iter-NNNNN``: a frozen ledger of the held-out cases, greedy, scored by the judge;
- ``selector/``: the module of the best held-out evaluation (``--policy selector:<out>/selector``);
- ``metrics.parquet``: one row per iteration; ``manifest.json``: config, status, best result.

Env runners are Ray actors (``runners.env_runners``); the learner runs in the driver. Resuming
restores the algorithm from its last checkpoint and continues the iteration count.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..configtree import to_dict
from ..errors import ConfigError
from ..evidence.judge import Judge
from ..rollout.run import new_manifest, read_manifest, write_manifest, write_run
from ..rollout.runner import EpisodeRunner, LocalPool
from ..tasks.arms import DEFAULT_ARM
from ..tasks.cases import Case
from ..trainer.entry import prepare_cases
from ..trainer.tracking import MetricsTable, Tracker
from ..validators.jsonvalue import sha256_json
from .config import SelectorConfig
from .env import SelectorEnv
from .module import SelectorModule
from .policy import SelectorPolicy, save_selector

SELECTOR_KIND = "selector"
STATE_FILE = "selector_state.json"
BEST_DIR = "selector"


@dataclass(frozen=True)
class SelectorResult:
    out: str
    iterations: int
    best_iteration: int
    best_success: float
    best_wall_s: float  # training seconds until the best held-out evaluation
    selector_dir: str
    evals: dict[str, dict[str, Any]]


def _identity(config: SelectorConfig) -> dict[str, Any]:
    data = to_dict(config)
    for key in ("out", "resume", "wandb"):
        data.pop(key)
    data["ppo"].pop("iterations")  # a resumed run may go on for longer
    return data


def build_algorithm(config: SelectorConfig, train_dir: Path) -> Any:
    """The PPO algorithm: SelectorModule, SelectorEnv over ``train_dir``, env runners as Ray actors."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    ppo, runners = config.ppo, config.runners
    env_config = {"case_dir": str(train_dir), "candidates": config.model.candidates, "reward": to_dict(config.reward)}
    algo_config = (
        PPOConfig()
        .environment(SelectorEnv, env_config=env_config)
        .framework("torch")
        .env_runners(
            num_env_runners=runners.env_runners,
            num_envs_per_env_runner=runners.envs_per_runner,
            num_cpus_per_env_runner=runners.cpus_per_runner,
            rollout_fragment_length="auto",
        )
        .learners(num_learners=0)
        .training(
            lr=ppo.lr,
            train_batch_size_per_learner=ppo.train_batch,
            minibatch_size=ppo.minibatch,
            num_epochs=ppo.epochs,
            entropy_coeff=ppo.entropy_coeff,
            clip_param=ppo.clip,
            vf_loss_coeff=ppo.vf_coeff,
            gamma=ppo.gamma,
            lambda_=ppo.lambda_,
        )
        .rl_module(rl_module_spec=RLModuleSpec(module_class=SelectorModule, model_config={"hidden": config.model.hidden}))
        .debugging(seed=config.seed, log_level="ERROR")
    )
    return algo_config.build_algo()


def evaluate(policy: SelectorPolicy, cases: list[Case], judge: Judge, run_dir: Path, config: dict[str, Any]) -> dict[str, Any]:
    """Greedy episodes of the held-out cases into a frozen ledger, then the judge's verdicts."""
    runner = EpisodeRunner(policy, LocalPool(1), arm=DEFAULT_ARM)
    start = time.perf_counter()
    digest = write_run(run_dir, config, runner, [c.public for c in cases], group=1, seed=0, labels={"stage": "selector"})
    wall = time.perf_counter() - start
    scored = judge.score_run(run_dir)
    n = len(scored)
    success = sum(v.success for _, v in scored) / n if n else 0.0
    abstain_right = sum(1 for row, v in scored if row["abstained"] and v.success)
    return {
        "semantic_success": success,
        "episodes": n,
        "abstained": sum(1 for row, _ in scored if row["abstained"]),
        "abstained_right": abstain_right,
        "retries": sum(row["retries"] for row, _ in scored) / n if n else 0.0,
        "seconds_per_episode": wall / n if n else 0.0,
        "ledger_sha256": digest,
    }


def _checkpoints(out: Path) -> list[Path]:
    root = out / "checkpoints"
    return sorted(p for p in root.glob("iter-*") if (p / STATE_FILE).is_file()) if root.is_dir() else []


def _save(algo: Any, out: Path, iteration: int, state: dict[str, Any], keep: int) -> None:
    final = out / "checkpoints" / f"iter-{iteration:05d}"
    scratch = final.with_name(final.name + ".tmp")
    shutil.rmtree(scratch, ignore_errors=True)
    algo.save_to_path(str(scratch.resolve()))
    (scratch / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    scratch.rename(final)
    for old in _checkpoints(out)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def _start(config: SelectorConfig, out: Path) -> None:
    identity = _identity(config)
    existing = read_manifest(out) if (out / "manifest.json").is_file() else {}
    if existing:
        if not config.resume:
            raise ConfigError(f"{out} already holds a selector run; pass resume=true to continue it, or choose another out=")
        if existing.get("config_sha256") != sha256_json(identity):
            raise ConfigError(f"cannot resume {out}: its config differs (only ppo.iterations, out and wandb may change)")
        return
    out.mkdir(parents=True, exist_ok=True)
    write_manifest(out, {**new_manifest(SELECTOR_KIND, identity, config.seed), "status": "running"})


def _row(iteration: int, result: dict[str, Any], wall: float) -> dict[str, Any]:
    runners = result.get("env_runners", {})
    learner = result.get("learners", {}).get("default_policy", {})
    return {
        "step": iteration,
        "stage": "ppo",
        "stage_step": iteration,
        "loss": float(learner.get("total_loss", float("nan"))),
        "reward_mean": float(runners.get("episode_return_mean", float("nan"))),
        "semantic_success": float("nan"),
        "episodes": int(runners.get("num_episodes", 0)),
        "env_steps": int(runners.get("num_env_steps_sampled", 0)),
        "entropy": float(learner.get("entropy", float("nan"))),
        "wall_s": wall,
    }


def train_selector(
    config: SelectorConfig, *, progress: bool = True, report: Callable[[dict[str, Any]], None] | None = None
) -> SelectorResult:
    """Train (or resume) a selector; returns the best held-out evaluation and where its module is."""
    from tqdm import tqdm

    from ..rollout.pool import ensure_ray

    config = dataclasses.replace(config, out=str(Path(config.out).resolve()))
    out = Path(config.out)
    _start(config, out)
    _, eval_cases = prepare_cases(config.data, out)
    if not eval_cases:
        raise ConfigError("train-selector needs held-out cases (data.eval_cases >= 1) to pick its best module")
    judge = Judge(eval_cases)
    ensure_ray()
    algo = build_algorithm(config, out / "cases" / "train")
    state: dict[str, Any] = {
        "iteration": 0,
        "metrics_rows": 0,
        "best_iteration": 0,
        "best_success": -1.0,
        "best_wall_s": 0.0,
        "evals": {},
        "wall_s": 0.0,
        "wandb_run_id": None,
    }
    saved = _checkpoints(out)
    if config.resume and saved:
        algo.restore_from_path(str(saved[-1].resolve()))
        state = json.loads((saved[-1] / STATE_FILE).read_text())
    metrics = MetricsTable(out, keep_rows=state["metrics_rows"])
    tracker = Tracker(config.wandb, out, to_dict(config), state.get("wandb_run_id"), name=f"selector-{out.name}")
    state["wandb_run_id"] = tracker.run_id
    eval_config = {"policy": "selector", "arm": DEFAULT_ARM, "cases": "eval", "seed": 0}
    bar = tqdm(total=config.ppo.iterations, initial=state["iteration"], desc="ppo", unit="it", disable=not progress)
    try:
        while state["iteration"] < config.ppo.iterations:
            start = time.perf_counter()
            result = algo.train()
            state["wall_s"] += time.perf_counter() - start
            state["iteration"] += 1
            it = state["iteration"]
            row = _row(it, result, state["wall_s"])
            last = it == config.ppo.iterations
            improved = False
            if it % config.eval.every == 0 or last:
                policy = SelectorPolicy(algo.get_module(), config.model.candidates)
                run_dir = out / "eval" / f"iter-{it:05d}"
                shutil.rmtree(run_dir, ignore_errors=True)  # a half-written evaluation of an interrupted run
                summary = evaluate(policy, eval_cases, judge, run_dir, eval_config)
                state["evals"][f"iter-{it:05d}"] = summary
                row["semantic_success"] = summary["semantic_success"]
                if summary["semantic_success"] > state["best_success"]:
                    state.update(best_iteration=it, best_success=summary["semantic_success"], best_wall_s=state["wall_s"])
                    save_selector(algo.get_module(), out / BEST_DIR, config.model.candidates)
                    improved = True
            metrics.append(row)
            tracker.log(row, it)
            state["metrics_rows"] = len(metrics.rows)
            if report is not None:
                report(row)
            # a new best is checkpointed at once, so a resumed run never forgets which module selector/ holds
            if it % config.checkpoint.every == 0 or last or improved:
                _save(algo, out, it, state, config.checkpoint.keep)
            bar.update(1)
            bar.set_postfix(reward=f"{row['reward_mean']:.3f}", best=f"{state['best_success']:.3f}")
    finally:
        bar.close()
        algo.stop()
        tracker.finish()
    manifest = read_manifest(out)
    manifest.update(
        {"status": "finished", **{k: state[k] for k in ("iteration", "best_iteration", "best_success", "best_wall_s", "evals")}}
    )
    write_manifest(out, manifest)
    return SelectorResult(
        out=str(out),
        iterations=state["iteration"],
        best_iteration=state["best_iteration"],
        best_success=state["best_success"],
        best_wall_s=state["best_wall_s"],
        selector_dir=str(out / BEST_DIR),
        evals=state["evals"],
    )


__all__ = ["SelectorResult", "build_algorithm", "evaluate", "train_selector"]
