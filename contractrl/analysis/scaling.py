"""The scaling study's table: what one more rung of the model ladder buys, and what it costs.

A sweep over ``model`` (``tune_configs/scaling.yaml``) trains one run per size. Each held-out
evaluation a training run writes (``<run>/eval/after-<stage>``) is one row: semantic success with its
bootstrap interval over cases, generated tokens and p95 episode time from the frozen ledger, and,
from the training run itself, the base model's parameter count, the optimizer-step time and the
learners' peak resident memory through that stage. Every row is also compared case by case with the
smallest model of its stage, arm and adapter rank (paired interval and exact McNemar p): a claim
that a larger model repairs more is a difference on the same cases, not two intervals side by side.

Training costs come from the run's ``metrics.parquet`` and ``manifest.json``; the base model's size
is read from its safetensors headers (bounded), never by loading the weights.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..configtree import from_dict
from ..errors import ContractRLError, InputFileError
from ..files import MAX_FILE_BYTES, open_regular
from ..rollout.ledger import read_manifest
from ..trainer.config import TrainConfig
from ..trainer.presets import model_path
from .headline import cell, paired
from .join import relative_run
from .tables import Table

TRAIN_KIND = "contractrl.train"
EVAL_DIR = "eval"
EVAL_PREFIX = "after-"
METRICS_FILE = "metrics.parquet"
# a safetensors header is JSON describing the tensors; real ones are a few hundred KB
MAX_HEADER_BYTES = 64 * 1024 * 1024
# a metrics file has a row per optimizer step, two dozen columns: a million steps stay below both
MAX_METRICS_ROWS = 1_000_000
MAX_METRICS_BYTES = 256 * 1024 * 1024
KEYS = ("model", "stage", "arm")
COLUMNS = (
    *KEYS,
    "params",
    "episodes",
    "families",
    "semantic_success_mean",
    "semantic_success_ci_low",
    "semantic_success_ci_high",
    "generated_tokens_mean",
    "latency_s_p95",
    "steps",
    "train_s",
    "peak_rss_gb",
    "baseline",
    "pairs",
    "difference_mean",
    "ci_low",
    "ci_high",
    "mcnemar_p",
)


@dataclass(frozen=True)
class TrainingCost:
    """What a training run spent up to the end of one stage."""

    params: int | None  # the base model's parameters as stored (None: its files are not here)
    steps: int  # optimizer steps through the stage
    train_s: float  # their wall time, seconds (evaluation and model loading not included)
    peak_rss_gb: float | None  # the learners' peak resident memory so far (None: an older run without it)


def parameter_count(model_dir: str | Path) -> int | None:
    """Parameters stored in a model directory's ``*.safetensors`` files, from their headers only;
    None when the directory holds none or a header is not one."""
    total, found = 0, False
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        try:
            with path.open("rb") as handle:
                (size,) = struct.unpack("<Q", handle.read(8))
                if size > MAX_HEADER_BYTES:
                    return None
                header = json.loads(handle.read(size))
        except (OSError, ValueError, struct.error):
            return None
        for name, entry in header.items():
            if name != "__metadata__" and isinstance(entry, dict):
                total += math.prod(int(d) for d in entry.get("shape", ()))
        found = True
    return total if found else None


def read_metrics(path: Path) -> pd.DataFrame:
    """The columns of a run's ``metrics.parquet`` this table reads. The file comes with a run
    directory that may come from elsewhere and carries no digest, so its stored and uncompressed
    sizes are checked from its footer before any column is decoded."""
    import pyarrow.parquet as pq

    with open_regular(path, "metrics file") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > MAX_FILE_BYTES:
            raise InputFileError(f"{path}: {size} bytes, more than a metrics file holds ({MAX_FILE_BYTES})")
        try:
            parquet = pq.ParquetFile(handle)
            meta = parquet.metadata
            chunks = [meta.row_group(i).column(j) for i in range(meta.num_row_groups) for j in range(meta.num_columns)]
            unpacked = sum(chunk.total_uncompressed_size for chunk in chunks)  # dictionary pages included
            if unpacked > MAX_METRICS_BYTES or meta.num_rows > MAX_METRICS_ROWS:
                raise InputFileError(
                    f"{path}: {meta.num_rows} rows, {unpacked} bytes uncompressed: more than a metrics file holds "
                    f"({MAX_METRICS_ROWS} rows, {MAX_METRICS_BYTES} bytes)"
                )
            wanted = [c for c in ("stage", "wall_s", "peak_rss_gb") if c in parquet.schema_arrow.names]
            return parquet.read(columns=wanted).to_pandas()
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise InputFileError(f"{path}: not a readable metrics file ({exc})") from None


def _base_model_dir(config: dict[str, Any]) -> Path | None:
    """The base model directory a training run's config names, if it can still be resolved."""
    try:
        train = from_dict(TrainConfig, config)
        return Path(model_path(train.model.name, cache_dir=train.model.cache_dir, tiny=train.tiny))
    except (ContractRLError, OSError, ValueError):  # a run from an older config tree, or a cache moved away
        return None


def training_cost(train_dir: str | Path, stage: str) -> TrainingCost | None:
    """The cost of ``train_dir``'s steps through ``stage`` (its stages run in order); None when it is
    not a training run or holds no step of that stage."""
    directory = Path(train_dir)
    manifest = read_manifest(directory)
    if manifest.get("kind") != TRAIN_KIND or not (directory / METRICS_FILE).is_file():
        return None
    metrics = read_metrics(directory / METRICS_FILE)
    positions = [i for i, name in enumerate(metrics["stage"]) if name == stage]
    if not positions:
        return None
    through = metrics.iloc[: positions[-1] + 1]
    peak = through["peak_rss_gb"].max() if "peak_rss_gb" in through else float("nan")
    model_dir = _base_model_dir(manifest.get("config", {}))
    return TrainingCost(
        params=parameter_count(model_dir) if model_dir is not None else None,
        steps=len(through),
        train_s=float(through["wall_s"].sum()),
        peak_rss_gb=None if pd.isna(peak) else float(peak),
    )


def training_costs(run_dirs: Sequence[str | Path], base: Path) -> dict[str, TrainingCost]:
    """For every held-out evaluation a training run wrote (``<train>/eval/after-<stage>``), keyed by
    its ``run`` name (relative to ``base``, as the episodes table names it), that run's cost."""
    out = {}
    for run in map(Path, run_dirs):
        if run.parent.name != EVAL_DIR or not run.name.startswith(EVAL_PREFIX):
            continue
        cost = training_cost(run.parent.parent, run.name.removeprefix(EVAL_PREFIX))
        if cost is not None:
            out[relative_run(run, base)] = cost
    return out


def scaling(episodes: pd.DataFrame, costs: dict[str, TrainingCost] | None = None, *, resamples: int = 10_000) -> Table:
    """One row per model, stage and arm of the main study's model-labelled episodes (an arm, not a
    system: a system names its model, and the rows of one arm are what the sizes are compared on)."""
    rows = episodes[(episodes["study"] == "main") & (episodes["model"].fillna("") != "")]
    costs = costs or {}
    records = []
    for (model, stage, arm), group in rows.groupby(list(KEYS), sort=True):
        cost = _one_cost(group, costs)
        summary = cell(group, resamples=resamples)
        records.append(
            {
                "model": model,
                "stage": stage,
                "arm": arm,
                "params": cost.params if cost else None,
                "episodes": summary["n"],
                "families": group["case_family"].nunique(),
                "semantic_success_mean": summary["success"],
                "semantic_success_ci_low": summary["ci_low"],
                "semantic_success_ci_high": summary["ci_high"],
                "generated_tokens_mean": summary["tokens"],
                "latency_s_p95": summary["p95_s"],
                "steps": cost.steps if cost else None,
                "train_s": cost.train_s if cost else None,
                "peak_rss_gb": cost.peak_rss_gb if cost else None,
            }
        )
    frame = pd.DataFrame(records, columns=list(COLUMNS[:14]))
    frame = _against_smallest(frame, rows, resamples)
    return Table(
        "scaling",
        "Tables 25-26",
        "Model size: success, cost and training price per rung",
        frame.reindex(columns=list(COLUMNS)),
        (
            "semantic_success_ci_*: 95% percentile bootstrap over cases; difference_mean, ci_*, mcnemar_p: this row "
            "minus `baseline` (the smallest model of the same stage, arm and adapter rank) on the cases both ran.",
            "steps, train_s, peak_rss_gb: the training run through this stage (optimizer steps only; peak memory "
            "of the learners, summed over ranks).",
        ),
    )


def _one_cost(group: pd.DataFrame, costs: dict[str, TrainingCost]) -> TrainingCost | None:
    """The training cost of a group's runs when they all come from one training run; pooled runs
    (several seeds) sum their training time and take the largest peak."""
    found = [costs[run] for run in sorted(set(group["run"])) if run in costs]
    if not found:
        return None
    if len(found) == 1:
        return found[0]
    peaks = [c.peak_rss_gb for c in found if c.peak_rss_gb is not None]
    return TrainingCost(
        params=found[0].params,
        steps=sum(c.steps for c in found),
        train_s=sum(c.train_s for c in found),
        peak_rss_gb=max(peaks) if peaks else None,
    )


def adapter_of(label: str) -> str:
    """The adapter part of a model label (``lora-r16`` of ``smollm2/lora-r16``; empty without one)."""
    base, _, adapter = label.rpartition("/")
    return adapter if base and adapter.startswith("lora-r") else ""


def _against_smallest(frame: pd.DataFrame, rows: pd.DataFrame, resamples: int) -> pd.DataFrame:
    """``baseline`` and the paired difference of each row against the smallest model (by stored
    parameters) of its stage, arm and adapter rank, so a size comparison never mixes in a rank
    change; the smallest row itself, and rows of unknown size, get none."""
    extra: list[dict[str, Any]] = []
    adapters = frame["model"].map(adapter_of)
    for index, row in frame.iterrows():
        same = (frame["stage"] == row["stage"]) & (frame["arm"] == row["arm"]) & (adapters == adapters[index])
        peers = frame[same & frame["params"].notna()]
        if pd.isna(row["params"]) or len(peers) < 2:
            extra.append({})
            continue
        smallest = peers.sort_values(["params", "model"]).iloc[0]
        if smallest["model"] == row["model"]:
            extra.append({})
            continue

        def episodes_of(model: str, row: pd.Series = row) -> pd.DataFrame:
            return rows[(rows["model"] == model) & (rows["stage"] == row["stage"]) & (rows["arm"] == row["arm"])]

        result = paired(episodes_of(row["model"]), episodes_of(smallest["model"]), resamples=resamples)
        extra.append(
            {
                "baseline": smallest["model"],
                "pairs": result["n"],
                "difference_mean": result["diff"],
                "ci_low": result["ci_low"],
                "ci_high": result["ci_high"],
                "mcnemar_p": result["mcnemar_p"],
            }
        )
    return pd.concat([frame.reset_index(drop=True), pd.DataFrame(extra, index=frame.index)], axis=1)


@dataclass(frozen=True)
class SizeResult:
    """One rung in ``benchmarks/results/scaling.json`` (the issue's keys)."""

    model: str
    params: int | None
    success: float
    ci_low: float
    ci_high: float
    tokens: float
    p95_s: float
    train_s: float | None
    peak_rss_gb: float | None


def sizes(frame: pd.DataFrame, stage: str | None = None) -> list[SizeResult]:
    """The scaling table's rows of one stage (the last one evaluated when ``stage`` is None),
    smallest model first."""
    if frame.empty:
        return []
    chosen = stage or _last_stage(frame)
    rows = frame[frame["stage"] == chosen].sort_values(["params", "model"], na_position="last")
    return [
        SizeResult(
            model=r["model"],
            params=None if pd.isna(r["params"]) else int(r["params"]),
            success=float(r["semantic_success_mean"]),
            ci_low=float(r["semantic_success_ci_low"]),
            ci_high=float(r["semantic_success_ci_high"]),
            tokens=float(r["generated_tokens_mean"]),
            p95_s=float(r["latency_s_p95"]),
            train_s=_number(r["train_s"]),
            peak_rss_gb=_number(r["peak_rss_gb"]),
        )
        for _, r in rows.iterrows()
    ]


def _number(value: Any) -> float | None:
    return None if pd.isna(value) else float(value)


def _last_stage(frame: pd.DataFrame) -> str:
    order = ["", "sft", "grpo"]
    stages = sorted(set(frame["stage"]), key=lambda s: order.index(s) if s in order else len(order))
    return stages[-1]


def sizes_json(frame: pd.DataFrame, stage: str | None = None) -> dict[str, Any]:
    """``benchmarks/results/scaling.json``'s content: ``sizes`` (one entry per model, the issue's
    keys) and each larger model's paired difference from the smallest, as the table holds them."""
    chosen = stage or (_last_stage(frame) if not frame.empty else "")
    rows = frame[frame["stage"] == chosen] if not frame.empty else frame
    paired_rows = [
        {
            "model": r["model"],
            "baseline": r["baseline"],
            "pairs": int(r["pairs"]),
            **{k: _number(r[k]) for k in ("difference_mean", "ci_low", "ci_high", "mcnemar_p")},
        }
        for _, r in rows.iterrows()
        if isinstance(r.get("baseline"), str) and r["baseline"]
    ]
    cases = int(rows["episodes"].max()) if len(rows) else 0
    return {"stage": chosen, "cases": cases, "sizes": [asdict(s) for s in sizes(frame, chosen)], "paired": paired_rows}


__all__ = [
    "SizeResult",
    "TrainingCost",
    "adapter_of",
    "parameter_count",
    "scaling",
    "sizes",
    "sizes_json",
    "training_cost",
    "training_costs",
]
