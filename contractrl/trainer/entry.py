"""``contractrl train``: cases, learners, workers and judge wired together for one run directory.

This is the one module of the trainer that handles both halves of a case, and only to hand them
to their separate owners: the public half to the rollout workers and prompts, the gold answers to
SFT (as :class:`Demonstration` texts), the offline half to the judge, which scores frozen ledgers
only. Everything else in ``trainer`` sees public cases.

A run directory holds ``manifest.json``, ``cases/{train,eval}`` (with their split audit),
``rollouts/step-N`` (one frozen ledger per GRPO step), ``eval/after-<stage>`` (held-out ledgers),
``stages/<stage>`` (each stage's weights), ``checkpoints/``, ``metrics.parquet``, ``wandb/`` and the
trained ``adapter/`` (or ``model/``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..configtree import to_dict
from ..errors import ConfigError
from ..evidence.judge import Judge
from ..rollout.ledger import read_manifest
from ..rollout.run import new_manifest, write_manifest
from ..rollout.runner import LocalPool, WorkerPool
from ..tasks.audit import OverlapIndex, audit
from ..tasks.cases import Case
from ..tasks.contrast import contrast_cases
from ..tasks.demonstrations import Demonstration, demonstrations
from ..tasks.generate import GenerateConfig, generate_cases
from ..tasks.offline import read_cases
from ..tasks.sources import BUILTIN, source_families
from ..tasks.store import MANIFEST_FILE, write_case_set
from ..tasks.store import read_manifest as read_case_manifest
from ..validators.jsonvalue import sha256_json
from .config import DataConfig, TrainConfig, mix_entry, mix_style
from .experimental import ExperimentalConfig
from .loop import Trainer, TrainResult, derived_seed
from .presets import load_tokenizer, model_path

TRAIN_KIND = "contractrl.train"
_PACKAGES_EXTRA = ("torch", "transformers", "peft", "deepspeed", "wandb")
# keys that may differ between a run and its resumption
_RESUMABLE = ("out", "resume")


def finished_run(config: TrainConfig) -> TrainResult | None:
    """The result of a run in ``config.out`` that finished under this very config, else None."""
    config = absolute(config)
    manifest = read_manifest(config.out)
    if manifest.get("status") != "finished" or manifest.get("config_sha256") != sha256_json(run_identity(config)):
        return None
    return TrainResult(
        str(config.out),
        manifest["global_step"],
        manifest["rollout_digest"],
        manifest["evals"],
        manifest["model_dir"],
        manifest.get("wandb_dir"),
    )


def run_identity(config: TrainConfig) -> dict[str, Any]:
    """The config without the keys a resumption may change; its hash pins a run directory."""
    data = to_dict(config)
    for key in _RESUMABLE:
        data.pop(key)
    return data


def absolute(config: TrainConfig) -> TrainConfig:
    """Paths made absolute on the driver: Ray actors run in other working directories."""
    model = dataclasses.replace(config.model, cache_dir=str(Path(config.model.cache_dir).resolve()))
    data = config.data
    if data.eval_dir:
        data = dataclasses.replace(data, eval_dir=str(Path(data.eval_dir).resolve()))
    return dataclasses.replace(config, out=str(Path(config.out).resolve()), model=model, data=data)


def prepare_cases(data: DataConfig, out: Path, experimental: ExperimentalConfig | None = None) -> tuple[list[Case], list[Case]]:
    """Training and held-out cases, written under ``out/cases`` (read back, verified, on resume).

    Held-out cases come from a derived seed and are refused when they share a fingerprint with the
    training set on any of the audit's disjoint units (``experimental.split``). A given held-out set
    (``data.eval_dir``) is fixed instead, so the training cases are the ones drawn around it. The
    built-in catalog's tools come from ``experimental.transfer`` (all of them by default).
    """
    experimental = experimental or ExperimentalConfig()
    disjoint = experimental.split.disjoint
    train_dir, eval_dir = out / "cases" / "train", out / "cases" / "eval"
    if (train_dir / MANIFEST_FILE).is_file() and (eval_dir / MANIFEST_FILE).is_file():
        return read_cases(train_dir), read_cases(eval_dir)
    hosted = source_families(data.source)
    common = {
        "source": data.source,
        "request_style": data.request_style,
        "families": tuple(f for f in data.families if f in hosted),  # BFCL hosts no immutable_field
        "tool_families": experimental.transfer.tool_families,
        "max_attempts": data.max_attempts,
        "max_ops": data.max_ops,
    }
    given = given_held_out(Path(data.eval_dir)) if data.eval_dir else None
    avoid = OverlapIndex(given[0], disjoint).collides if given else None
    train_config = GenerateConfig(seed=data.seed, n=data.train_cases, **common)
    train = generate_cases(train_config, reject=avoid)
    mixed = [mixed_config(data, entry, common) for entry in data.mix]
    for config in mixed:
        train.extend(generate_cases(config, reject=avoid))
    extra_train = {"mix": [config.to_dict() for config in mixed]} if mixed else None
    write_case_set(train, train_dir, train_config.to_dict(), extra_train)
    index = OverlapIndex(train, disjoint)
    if given:
        held_out, eval_generation = given
    elif data.eval_cases == 0:
        return train, []
    else:
        eval_config = GenerateConfig(seed=derived_seed(data.seed, "eval"), n=data.eval_cases, **common)
        held_out, eval_generation = generate_cases(eval_config, reject=index.collides), eval_config.to_dict()
    rows = audit(train, held_out, disjoint)
    extra = {"audit": [r.to_dict() for r in rows], "disjoint_from": str(train_dir), "disjoint_units": list(disjoint)}
    write_case_set(held_out, eval_dir, eval_generation, extra)
    return train, held_out


def eval_condition(data: DataConfig, out: Path) -> str:
    """The ``condition`` label of a run's held-out evaluations: the source of a given held-out set
    (``data.eval_dir``), as its manifest under ``out/cases/eval`` records it; none for drawn cases."""
    if not data.eval_dir:
        return ""
    return str(read_case_manifest(out / "cases" / "eval").get("config", {}).get("source", BUILTIN))


def given_held_out(case_dir: Path) -> tuple[list[Case], dict[str, Any]]:
    """``data.eval_dir``'s cases and the generation config its manifest records, with where they
    came from (the held-out set's manifest names its source)."""
    manifest = read_case_manifest(case_dir)
    origin = {"from_dir": str(case_dir.resolve()), "from_config_sha256": manifest.get("config_sha256")}
    return read_cases(case_dir), {**manifest.get("config", {}), **origin}


def mixed_config(data: DataConfig, entry: str, common: dict[str, Any]) -> GenerateConfig:
    """One ``data.mix`` entry's generation: its own derived seed, the families its source hosts."""
    source, n = mix_entry(entry)
    hosted = source_families(source)
    families = tuple(f for f in data.families if f in hosted)
    if not families:
        raise ConfigError(f"data.mix: {source} hosts none of data.families {list(data.families)}")
    return GenerateConfig(
        **{
            **common,
            "seed": derived_seed(data.seed, "mix", source),
            "n": n,
            "source": source,
            "request_style": mix_style(source, data.request_style),
            "families": families,
        }
    )


def sft_demonstrations(cases: Sequence[Case], config: TrainConfig) -> list[Demonstration]:
    """The demonstrations the config asks for, over the training cases (contrasts in
    ``experimental.contrast.form``, as GRPO's: :func:`grpo_contrasts`)."""
    experimental = config.experimental
    return demonstrations(
        cases,
        config.sft.arm,
        noisy_retries=experimental.noisy_retries.enabled,
        contrast=experimental.contrast.sft,
        contrast_form=experimental.contrast.form,
    )


def grpo_contrasts(cases: Sequence[Case], config: TrainConfig) -> list[Case]:
    """The minimal contrasts GRPO rolls out beside their unrepairable cases (none unless
    ``experimental.contrast.grpo``); refused when the option is on and no case has one."""
    contrast = config.experimental.contrast
    if "grpo" not in config.stages or not contrast.grpo:
        return []
    twins = contrast_cases(cases, contrast.form)
    if not twins:
        raise ConfigError(
            f"experimental.contrast.grpo: none of the {len(cases)} training cases is an unrepairable case of the "
            "built-in catalog or of BFCL, the only cases with a minimal contrast"
        )
    return twins


def config_tokenizer(config: TrainConfig) -> Any:
    """The tokenizer of ``config``'s model, without loading its weights."""
    return load_tokenizer(model_path(config.model.name, cache_dir=config.model.cache_dir, tiny=config.tiny))


def _start_manifest(config: TrainConfig, out: Path) -> None:
    identity = run_identity(config)
    existing = read_manifest(out)
    if existing:
        if not config.resume:
            raise ConfigError(f"{out} already holds a training run; pass resume=true to continue it, or choose another out=")
        if existing.get("config_sha256") != sha256_json(identity):
            changed = _changed_keys(existing.get("config", {}), identity)
            raise ConfigError(f"cannot resume {out}: its config differs in {', '.join(changed) or 'some keys'}")
        return
    out.mkdir(parents=True, exist_ok=True)
    write_manifest(out, {**new_manifest(TRAIN_KIND, identity, config.seed, _PACKAGES_EXTRA), "status": "running"})


def _finish_manifest(out: Path, result: TrainResult, wall_s: float) -> None:
    manifest = read_manifest(out)
    manifest.update(
        {
            "status": "finished",
            "global_step": result.global_step,
            "rollout_digest": result.rollout_digest,
            "evals": result.evals,
            "model_dir": result.model_dir,
            "wandb_dir": result.wandb_dir,
            "wall_s_last_session": round(wall_s, 3),
        }
    )
    write_manifest(out, manifest)


def _changed_keys(old: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            out.extend(_changed_keys(old.get(key), new.get(key), f"{prefix}.{key}" if prefix else key))
        return out
    return [] if old == new else [prefix]


def _pool(config: TrainConfig) -> tuple[WorkerPool, Callable[[], None]]:
    res = config.resources
    if res.num_workers == 0:
        return LocalPool(1), lambda: None
    from ..rollout.pool import RayPool

    pool = RayPool(res.num_workers, num_cpus_per_worker=res.worker_cpus)
    return pool, pool.shutdown


def train(config: TrainConfig, *, report: Callable[[dict[str, Any]], None] | None = None, progress: bool = True) -> TrainResult:
    """Run (or resume) the stages of ``config`` in ``config.out``; returns the run's summary."""
    from .group import LearnerGroup

    start = time.perf_counter()
    config = absolute(config)
    out = Path(config.out)
    _start_manifest(config, out)
    done = finished_run(config)
    if done is not None:  # resumed after the last stage: nothing left to do
        return done
    train_cases, eval_cases = prepare_cases(config.data, out, config.experimental)
    twins = grpo_contrasts(train_cases, config)
    tokenizer = config_tokenizer(config)
    if config.resources.ray:
        from ..rollout.pool import ensure_ray

        ensure_ray()
    group = LearnerGroup(config, use_ray=config.resources.ray)
    pool, close_pool = _pool(config)
    try:
        trainer = Trainer(
            config,
            train_cases=[c.public for c in train_cases],
            eval_cases=[c.public for c in eval_cases],
            demos=sft_demonstrations(train_cases, config),
            judge=Judge([*train_cases, *eval_cases, *twins]),
            group=group,
            pool=pool,
            tokenizer=tokenizer,
            report=report,
            progress=progress,
            contrasts={twin.offline.corruption["contrast_of"]: twin.public for twin in twins},
            eval_condition=eval_condition(config.data, out),
        )
        result = trainer.run(to_dict(config))
    finally:
        close_pool()
        group.shutdown()
    _finish_manifest(out, result, time.perf_counter() - start)
    return result


__all__ = [
    "absolute",
    "eval_condition",
    "finished_run",
    "given_held_out",
    "grpo_contrasts",
    "prepare_cases",
    "run_identity",
    "train",
]
