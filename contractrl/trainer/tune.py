"""``contractrl tune``: Ray Tune sweeps over the training config, one full training run per trial.

A sweep file names a base training config and the keys to search::

    base: tiny.yaml              # relative to the sweep file
    overrides: {grpo.steps: 10}  # fixed for every trial (dotted keys)
    search:
      model.hidden_size: {grid: [32, 64, 128]}
      reward.tokens: {loguniform: [1.0e-4, 1.0e-2]}
    metric: eval_semantic_success
    mode: max

``kind: selector`` sweeps ``contractrl train-selector`` runs instead (the base is then a selector
config; see ``tune_configs/selector_sweep.yaml``). Every trial's config is validated before the
sweep starts (each grid value, each distribution's bounds). Each trial reserves its learner and
worker resources as one placement group, so a trial never starts without room for all its actors.
Results go to ``<out>/trials.parquet``, one row per trial with its config and final metrics, and
to W&B through Tune's callback.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..configtree import check, from_dict, merge, nest, parse_overrides, read_yaml
from ..errors import ConfigError
from .config import TrainConfig

SPACES = ("grid", "choice", "uniform", "loguniform", "randint")
TRIALS_FILE = "trials.parquet"


SweepKind = Literal["train", "selector"]


def trial_config_class(kind: str) -> type[Any]:
    """The config tree a trial of this sweep kind is validated against."""
    if kind == "selector":
        from ..selector.config import SelectorConfig

        return SelectorConfig
    return TrainConfig


@dataclass(frozen=True)
class SweepConfig:
    base: str
    kind: SweepKind = "train"
    name: str = "sweep"
    out: str = "runs/tune"
    overrides: dict[str, Any] = field(default_factory=dict)
    search: dict[str, Any] = field(default_factory=dict)
    num_samples: int = 1
    metric: str = "eval_semantic_success"
    mode: Literal["max", "min"] = "max"
    max_concurrent_trials: int = 1
    seed: int = 0
    wandb_mode: Literal["offline", "online", "disabled"] = "offline"
    wandb_project: str = "contractrl-sweeps"

    def __post_init__(self) -> None:
        check(self.num_samples >= 1, f"num_samples must be >= 1, got {self.num_samples}")
        check(self.max_concurrent_trials >= 1, f"max_concurrent_trials must be >= 1, got {self.max_concurrent_trials}")
        check(bool(self.search), "search must name at least one config key to sweep")
        for key, space in self.search.items():
            check(
                isinstance(space, Mapping) and len(space) == 1 and next(iter(space)) in SPACES,
                f"search.{key} must be one of {{{', '.join(f'{s}: [...]' for s in SPACES)}}}, got {space!r}",
            )
            kind, values = next(iter(space.items()))
            check(isinstance(values, list) and values, f"search.{key}.{kind} must be a non-empty list")
            if kind in ("uniform", "loguniform", "randint"):
                check(
                    len(values) == 2 and all(isinstance(v, (int, float)) for v in values) and values[0] < values[1],
                    f"search.{key}.{kind} takes [low, high] with low < high, got {values}",
                )
                check(kind != "loguniform" or values[0] > 0, f"search.{key}.loguniform needs low > 0, got {values[0]}")


def load_sweep(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> tuple[SweepConfig, dict[str, Any]]:
    """The sweep and its base training config as plain data (relative ``base`` paths resolve
    against the sweep file), after checking that every trial's config will be valid."""
    sweep_path = Path(path)
    sweep = from_dict(SweepConfig, merge(read_yaml(sweep_path), parse_overrides(overrides)))
    base_path = (sweep_path.parent / sweep.base) if not Path(sweep.base).is_absolute() else Path(sweep.base)
    base = merge(read_yaml(base_path), nest(sweep.overrides))
    for values in _corner_cases(sweep.search):
        try:
            from_dict(trial_config_class(sweep.kind), merge(base, nest(values)))
        except ConfigError as exc:
            raise ConfigError(f"sweep {sweep_path}: a trial with {values} has an invalid config: {exc}") from exc
    return sweep, base


def _corner_cases(search: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One trial config per grid/choice value and per distribution bound, others at their first value."""
    first = {key: _values(space)[0] for key, space in search.items()}
    out = []
    for key, space in search.items():
        for value in _values(space):
            out.append({**first, key: value})
    return out


def _values(space: Mapping[str, Any]) -> list[Any]:
    kind, values = next(iter(space.items()))
    if kind == "randint":
        return [values[0], values[1] - 1]
    return list(values)


def _space(space: Mapping[str, Any]) -> Any:
    from ray import tune

    kind, values = next(iter(space.items()))
    return {
        "grid": lambda: tune.grid_search(values),
        "choice": lambda: tune.choice(values),
        "uniform": lambda: tune.uniform(*values),
        "loguniform": lambda: tune.loguniform(*values),
        "randint": lambda: tune.randint(*values),
    }[kind]()


def trial_resources(config: Any) -> list[dict[str, float]]:
    """The placement-group bundles of one trial: the trial's driver, learner ranks, generator, workers
    (for a selector: the driver, which also learns, and its env runners)."""
    if not isinstance(config, TrainConfig):
        runners = config.runners
        return [{"CPU": 1.0}, *({"CPU": runners.cpus_per_runner} for _ in range(runners.env_runners))]
    res = config.resources
    bundles: list[dict[str, float]] = [{"CPU": 0.01}]  # the trial driver itself barely computes
    for _ in range(res.num_learners):
        bundles.append({"CPU": res.learner_cpus, **({"GPU": res.learner_gpus} if res.learner_gpus else {})})
    if res.placement == "separate":
        bundles.append({"CPU": res.generator_cpus, **({"GPU": res.generator_gpus} if res.generator_gpus else {})})
    bundles.extend({"CPU": res.worker_cpus} for _ in range(res.num_workers))
    return [{k: v for k, v in b.items() if v > 0} or {"CPU": 0.01} for b in bundles]


def _trial(params: dict[str, Any], *, base: dict[str, Any], out: str, metric: str, kind: str = "train") -> None:
    """One Tune trial: a full training run whose step rows are reported to Tune as they happen."""
    from ray import tune

    from .entry import train

    context = tune.get_context()
    data = merge(base, nest(params))
    data = merge(data, {"out": str(Path(out) / context.get_trial_name()), "wandb": {"mode": "disabled"}})
    config = from_dict(trial_config_class(kind), data)
    # Tune wants the sweep's metric in every report; until the held-out evaluation exists it is NaN
    last: dict[str, Any] = {metric: float("nan")}

    def report(row: dict[str, Any]) -> None:
        last.update({k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
        if kind == "selector" and row.get("semantic_success") == row.get("semantic_success"):  # not NaN
            last["eval_semantic_success"] = row["semantic_success"]
        tune.report(dict(last))

    if kind == "selector":
        from ..selector.train import train_selector

        selected = train_selector(config, report=report, progress=False)
        tune.report({**last, "eval_semantic_success": selected.best_success, "best_iteration": selected.best_iteration})
        return
    result = train(config, report=report, progress=False)
    final = dict(last)
    for stage, summary in result.evals.items():
        final[f"eval_{stage}_semantic_success"] = summary["semantic_success"]
        final["eval_semantic_success"] = summary["semantic_success"]
    final["rollout_digest_prefix"] = int(result.rollout_digest[:8], 16)
    tune.report(final)


def run_sweep(sweep: SweepConfig, base: dict[str, Any]) -> Path:
    """Run every trial; returns the path of ``trials.parquet``."""
    from ray import tune

    from ..rollout.pool import ensure_ray

    ensure_ray()
    out = Path(sweep.out).resolve() / sweep.name
    out.mkdir(parents=True, exist_ok=True)
    config_class = trial_config_class(sweep.kind)
    if config_class is TrainConfig:
        base = merge(base, {"model": {"cache_dir": str(Path(from_dict(TrainConfig, base).model.cache_dir).resolve())}})
    sample = from_dict(config_class, merge(base, nest(_corner_cases(sweep.search)[0])))
    trainable = tune.with_resources(
        tune.with_parameters(_trial, base=base, out=str(out / "runs"), metric=sweep.metric, kind=sweep.kind),
        tune.PlacementGroupFactory(trial_resources(sample), strategy="PACK"),
    )
    callbacks = []
    if sweep.wandb_mode != "disabled":
        from ray.air.integrations.wandb import WandbLoggerCallback

        if sweep.wandb_mode == "offline":  # the callback reads the mode from the environment (no API key needed)
            os.environ["WANDB_MODE"] = "offline"
        (out / "wandb").mkdir(exist_ok=True)
        callbacks.append(
            WandbLoggerCallback(project=sweep.wandb_project, group=sweep.name, mode=sweep.wandb_mode, dir=str(out / "wandb"))
        )
    tuner = tune.Tuner(
        trainable,
        param_space={key: _space(space) for key, space in sweep.search.items()},
        tune_config=tune.TuneConfig(
            metric=sweep.metric, mode=sweep.mode, num_samples=sweep.num_samples, max_concurrent_trials=sweep.max_concurrent_trials
        ),
        run_config=tune.RunConfig(name=sweep.name, storage_path=str(out / "tune"), callbacks=callbacks, verbose=1),
    )
    results = tuner.fit()
    errors = [str(r.error) for r in results if r.error is not None]
    frame = results.get_dataframe()
    frame.columns = [str(c) for c in frame.columns]
    path = out / TRIALS_FILE
    frame.to_parquet(path, index=False)
    if errors:
        raise RuntimeError(f"{len(errors)} of {len(results)} trials failed; first error: {errors[0]}")
    return path


def sweep_trials(sweep: SweepConfig) -> int:
    """How many trials the sweep runs (grid values multiply; samples repeat the grid)."""
    grid = math.prod(len(next(iter(s.values()))) for s in sweep.search.values() if next(iter(s)) == "grid")
    return grid * sweep.num_samples


__all__ = ["SweepConfig", "load_sweep", "run_sweep", "sweep_trials", "trial_resources"]
