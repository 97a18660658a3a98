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
worker resources as one placement group, so a trial never starts without room for all its actors,
and a sweep whose trial is larger than the machine or cluster is refused before it starts
(``tune_fit.py``) instead of waiting forever. A ``local:`` section holds the sweep-key changes that
size it for a 2-core machine (``contractrl tune --local``).

Results go to ``<out>/<name>/trials.parquet``, one row per trial with its status, config hash, run
directory, best weights and final metrics (``tune_trials.py``), ``<out>/<name>/best`` links the
best trial's run, and each trial's W&B run carries the trial's full resolved config. An interrupted
sweep raises :class:`SweepInterrupted` and is continued with ``contractrl tune --resume DIR``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..configtree import check, derive, from_dict, merge, nest, parse_overrides, read_yaml, setting, to_dict
from ..errors import ConfigError
from ..tasks.store import MANIFEST_FILE as CASES_MANIFEST
from ..validators.jsonvalue import sha256_json
from .config import TrainConfig
from .tune_fit import Capacity, check_fits, local_capacity, ray_capacity, trial_need

SPACES = ("grid", "choice", "uniform", "loguniform", "randint")
TRIALS_FILE = "trials.parquet"
SWEEP_FILE = "sweep.json"  # the resolved sweep and base, read back by --resume


class SweepInterrupted(Exception):
    """The sweep stopped before every trial ended (Ctrl-C); its state is saved for ``--resume``."""

    def __init__(self, directory: Path, unfinished: int, total: int) -> None:
        super().__init__(
            f"interrupted with {unfinished} of {total} trials unfinished; continue it with: contractrl tune --resume {directory}"
        )
        self.directory = directory


SweepKind = Literal["train", "selector"]


def trial_config_class(kind: str) -> type[Any]:
    """The config tree a trial of this sweep kind is validated against."""
    if kind == "selector":
        from ..selector.config import SelectorConfig

        return SelectorConfig
    return TrainConfig


@dataclass(frozen=True)
class SweepConfig:
    """A sweep file (``tune_configs/*.yaml``): its base training config, what it searches, how it ranks."""

    base: str = setting(help="the base config YAML every trial starts from (relative to the sweep file)")
    kind: SweepKind = setting("train", help="what a trial trains: train (the LM) or selector (PPO)")
    name: str = setting("sweep", help="the sweep's name: it writes under out/name")
    out: str = setting("runs/tune", help="where sweeps write")
    overrides: dict[str, Any] = setting(factory=dict, help="dotted base-config keys every trial sets")
    search: dict[str, Any] = setting(
        factory=dict, help=f"dotted config key -> one space ({', '.join(SPACES)}: [values] or [low, high])"
    )
    num_samples: int = setting(1, help="samples of the search space (each grid point this many times)", ge=1)
    metric: str = setting("eval_semantic_success", help="the trial metric the sweep ranks by")
    mode: Literal["max", "min"] = setting("max", help="whether the best trial maximises or minimises the metric")
    max_concurrent_trials: int = setting(1, help="trials that run at once", ge=1)
    seed: int = setting(0, help="the search's seed")
    wandb_mode: Literal["offline", "online", "disabled"] = setting("offline", help="W&B logging of every trial")
    wandb_project: str = setting("contractrl-sweeps", help="the W&B project")
    local: dict[str, Any] = setting(factory=dict, help="sweep keys that --local applies (the sweep's 2-core size)")
    wait_for_resources: bool = setting(False, help="queue a trial that does not fit the cluster yet instead of refusing")

    def __post_init__(self) -> None:
        # by hand, not nonempty metadata: the loader checks only the keys a file gives, and a sweep
        # file without a search would keep the empty default
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


def load_sweep(
    path: str | Path, overrides: list[str] | tuple[str, ...] = (), *, local: bool = False
) -> tuple[SweepConfig, dict[str, Any]]:
    """The sweep and its base training config as plain data (relative ``base`` paths resolve
    against the sweep file), after checking that every trial's config will be valid. ``local``
    applies the file's ``local:`` section (its 2-core size) before the overrides."""
    sweep_path = Path(path)
    data = read_yaml(sweep_path)
    if local:
        profile = data.get("local")
        if not isinstance(profile, Mapping) or not profile:
            raise ConfigError(f"sweep {sweep_path} has no local: section (the sweep keys that size it for a small machine)")
        data = merge(data, profile)
    sweep = from_dict(SweepConfig, merge(data, parse_overrides(overrides)))
    base_path = (sweep_path.parent / sweep.base) if not Path(sweep.base).is_absolute() else Path(sweep.base)
    base = merge(read_yaml(base_path), nest(sweep.overrides))
    if sweep.kind == "train":  # one model cache (and held-out case set) for every trial, wherever Ray runs it
        config = from_dict(TrainConfig, base)
        base = merge(base, {"model": {"cache_dir": str(Path(config.model.cache_dir).resolve())}})
        if config.data.eval_dir:
            base = merge(base, {"data": {"eval_dir": str(Path(config.data.eval_dir).resolve())}})
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


def sample_config(sweep: SweepConfig, base: dict[str, Any]) -> Any:
    """The first trial's config: every trial reserves what it reserves (the resources are not swept)."""
    return from_dict(trial_config_class(sweep.kind), merge(base, nest(_corner_cases(sweep.search)[0])))


def check_capacity(sweep: SweepConfig, base: dict[str, Any], capacity: Capacity) -> None:
    """Refuse, with the fix, a sweep whose trial cannot fit ``capacity`` (it would wait forever)."""
    if sweep.wait_for_resources:
        return
    config = sample_config(sweep, base)
    check_fits(trial_resources(config), capacity, _fixes(sweep, config, capacity))


def check_inputs(sweep: SweepConfig, base: dict[str, Any]) -> None:
    """Refuse, before any trial starts, a held-out case directory (``data.eval_dir``) that is not
    there: every trial would fail on it after loading its model."""
    if sweep.kind != "train":
        return
    for values in _corner_cases(sweep.search):
        eval_dir = from_dict(TrainConfig, merge(base, nest(values))).data.eval_dir
        if eval_dir and not (Path(eval_dir) / CASES_MANIFEST).is_file():
            raise ConfigError(
                f"data.eval_dir {eval_dir} is not a case set (no {CASES_MANIFEST}); make it first with "
                f"contractrl cases generate ... --out {eval_dir} (the sweep file says which)"
            )


def _fixes(sweep: SweepConfig, config: Any, capacity: Capacity) -> list[str]:
    """Ways to make one trial fit, each checked against ``capacity``."""
    fixes = ["add --local (the sweep's 2-core size)"] if sweep.local else []
    if isinstance(config, TrainConfig) and config.resources.num_workers > 0:
        without = derive(config, {"resources.num_workers": 0})
        cpus, gpus = trial_need(trial_resources(without))
        if cpus <= capacity.cpus and gpus <= capacity.gpus:
            fixes.append(f"override overrides.resources.num_workers=0 (then it needs {cpus:g} CPUs)")
    elif not isinstance(config, TrainConfig) and config.runners.env_runners > 0:
        fixes.append("override overrides.runners.env_runners=0")
    return fixes


def trial_config(params: Mapping[str, Any], *, base: dict[str, Any], kind: str, out: str = "") -> Any:
    """The config one trial trains with: the base, the sweep's fixed overrides, its sampled values;
    its own run directory, which resumes; W&B left to Tune's callback."""
    data = merge(base, nest(dict(params)))
    data = merge(data, {"resume": True, "wandb": {"mode": "disabled"}, **({"out": out} if out else {})})
    return from_dict(trial_config_class(kind), data)


def resolved_config(params: Mapping[str, Any], *, base: dict[str, Any], kind: str) -> dict[str, Any]:
    """A trial's full config as flat dotted keys, with its hash: what the trial's W&B run records,
    so a run says everything it trained with. The hash leaves out where the run is written (as
    ``run_identity`` does), so for a training trial it is its run manifest's ``config_sha256``."""
    config = to_dict(trial_config(params, base=base, kind=kind))
    for key in ("out", "resume"):
        config.pop(key, None)
    flat = _flatten(config)
    flat["config_sha256"] = sha256_json(config)
    return flat


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, name))
        else:
            out[name] = value
    return out


def _trial(params: dict[str, Any], *, base: dict[str, Any], out: str, metric: str, kind: str = "train") -> None:
    """One Tune trial: a full training run whose step rows are reported to Tune as they happen.

    Its run directory is named by the trial id and resumes (``resume=true``), so a trial that a
    restored sweep starts again continues from its last training checkpoint."""
    from ray import tune

    from .entry import train
    from .tune_trials import DONE_KEY

    config = trial_config(params, base=base, kind=kind, out=str(Path(out) / tune.get_context().get_trial_id()))
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
        final = {**last, "eval_semantic_success": selected.best_success, "best_iteration": selected.best_iteration}
        tune.report({**final, DONE_KEY: 1})
        return
    result = train(config, report=report, progress=False)
    final = dict(last)
    for stage, summary in result.evals.items():
        final[f"eval_{stage}_semantic_success"] = summary["semantic_success"]
        final["eval_semantic_success"] = summary["semantic_success"]
    final["rollout_digest_prefix"] = int(result.rollout_digest[:8], 16)
    tune.report({**final, DONE_KEY: 1})


def sweep_dir(sweep: SweepConfig) -> Path:
    """Where a sweep writes: ``<out>/<name>`` (trials.parquet, runs/, tune/, wandb/, best)."""
    return Path(sweep.out).resolve() / sweep.name


def save_sweep(sweep: SweepConfig, base: dict[str, Any]) -> Path:
    """Write the resolved sweep and base beside its results: ``--resume DIR`` reads them back."""
    out = sweep_dir(sweep)
    out.mkdir(parents=True, exist_ok=True)
    path = out / SWEEP_FILE
    path.write_text(json.dumps({"sweep": to_dict(sweep), "base": base}, indent=2) + "\n")
    return path


def load_saved_sweep(directory: str | Path) -> tuple[SweepConfig, dict[str, Any]]:
    """The sweep and base a sweep directory was started with (for ``--resume``)."""
    path = Path(directory) / SWEEP_FILE
    if not path.is_file():
        raise ConfigError(f"{directory} is not a sweep directory (no {SWEEP_FILE}); give the <out>/<name> a sweep wrote")
    saved = json.loads(path.read_text())
    return from_dict(SweepConfig, saved["sweep"]), saved["base"]


def _wandb_callback(sweep: SweepConfig, base: dict[str, Any], out: Path) -> Any:
    """Tune's W&B callback, logging each trial's full resolved config (``tune_wandb.py``)."""
    from .tune_wandb import ResolvedConfigWandb

    if sweep.wandb_mode == "offline":  # the callback reads the mode from the environment (no API key needed)
        os.environ["WANDB_MODE"] = "offline"
    (out / "wandb").mkdir(exist_ok=True)
    return ResolvedConfigWandb(
        base=base, kind=sweep.kind, project=sweep.wandb_project, group=sweep.name, mode=sweep.wandb_mode, dir=str(out / "wandb")
    )


def run_sweep(sweep: SweepConfig, base: dict[str, Any], *, resume: bool = False) -> Path:
    """Run every trial (``resume``: continue the sweep saved in its directory); returns the path of
    ``trials.parquet``. Raises :class:`SweepInterrupted` when stopped before every trial ended."""
    import ray
    from ray import tune

    out = sweep_dir(sweep)
    if not ray.is_initialized():
        # a cluster only under RAY_ADDRESS (which `ray job submit` sets), never the head someone last
        # started on this machine, which is what ray.init() without an address would join
        from ..rollout.pool import init_ray

        init_ray(None if os.environ.get("RAY_ADDRESS") else "local")
    check_capacity(sweep, base, ray_capacity())
    check_inputs(sweep, base)
    if not resume:
        save_sweep(sweep, base)
    trainable = tune.with_resources(
        tune.with_parameters(_trial, base=base, out=str(out / "runs"), metric=sweep.metric, kind=sweep.kind),
        tune.PlacementGroupFactory(trial_resources(sample_config(sweep, base)), strategy="PACK"),
    )
    experiment = out / "tune" / sweep.name
    if sweep.wandb_mode == "offline":  # a restored W&B callback reads the mode from the environment too
        os.environ["WANDB_MODE"] = "offline"
    if resume:
        if not tune.Tuner.can_restore(str(experiment)):
            raise ConfigError(f"{out} holds no Tune state to resume ({experiment} is missing); start the sweep again")
        tuner = tune.Tuner.restore(str(experiment), trainable, resume_unfinished=True, resume_errored=True)
    else:
        callbacks = [_wandb_callback(sweep, base, out)] if sweep.wandb_mode != "disabled" else []
        tuner = tune.Tuner(
            trainable,
            param_space={key: _space(space) for key, space in sweep.search.items()},
            tune_config=tune.TuneConfig(
                metric=sweep.metric,
                mode=sweep.mode,
                num_samples=sweep.num_samples,
                max_concurrent_trials=sweep.max_concurrent_trials,
            ),
            run_config=tune.RunConfig(name=sweep.name, storage_path=str(out / "tune"), callbacks=callbacks, verbose=1),
        )
    return write_trials(tuner.fit(), sweep, base, out)


def write_trials(results: Any, sweep: SweepConfig, base: dict[str, Any], out: Path) -> Path:
    """``trials.parquet`` and the ``best`` link from a finished sweep's results; an interrupted
    sweep writes neither (its table would be partial) and raises :class:`SweepInterrupted`."""
    import pandas as pd

    from .tune_trials import ERROR, FINISHED, best_row, link_best, trial_row

    rows = []
    for result in results:
        row = trial_row(result, out / "runs", sweep.metric)
        row["config_sha256"] = resolved_config(result.config or {}, base=base, kind=sweep.kind)["config_sha256"]
        rows.append(row)
    rows.sort(key=lambda r: r["trial_id"])  # a restored sweep lists its trials in another order
    unfinished = [r for r in rows if r["status"] not in (FINISHED, ERROR)]
    if unfinished or len(rows) < sweep_trials(sweep) or not rows:
        raise SweepInterrupted(out, len(unfinished) + max(0, sweep_trials(sweep) - len(rows)), sweep_trials(sweep))
    out.mkdir(parents=True, exist_ok=True)
    path = out / TRIALS_FILE
    pd.DataFrame(rows).to_parquet(path, index=False)
    best = best_row(rows, sweep.metric, sweep.mode)
    if best is not None:
        link_best(out, best)
    errors = [r["error"] for r in rows if r["status"] == ERROR]
    if errors:
        raise RuntimeError(f"{len(errors)} of {len(rows)} trials failed (see {path}); first error: {errors[0]}")
    return path


def sweep_trials(sweep: SweepConfig) -> int:
    """How many trials the sweep runs (grid values multiply; samples repeat the grid)."""
    grid = math.prod(len(next(iter(s.values()))) for s in sweep.search.values() if next(iter(s)) == "grid")
    return grid * sweep.num_samples


__all__ = [
    "SweepConfig",
    "SweepInterrupted",
    "check_capacity",
    "check_inputs",
    "load_saved_sweep",
    "load_sweep",
    "local_capacity",
    "resolved_config",
    "run_sweep",
    "sweep_dir",
    "sweep_trials",
    "trial_resources",
]
