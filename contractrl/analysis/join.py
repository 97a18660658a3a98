"""The freeze-checked join: frozen ledgers + offline targets -> one scored row per episode.

Every run's hash chain and frozen digest are verified first, on the driver (a chain is sequential
by nature); an unfrozen or tampered ledger stops the join with :class:`LedgerError` before any
target is opened. Scoring then runs on Ray Data: the ledger shards are read in parallel, each block
is scored by a worker that holds the judge, and the scored blocks are written as a parquet dataset.
The same code runs on one machine and on a cluster; :func:`read_episodes` sorts the rows, so what a
reader sees does not depend on how many workers scored them.

A run's manifest may carry ``labels`` (the study and condition it belongs to: feedback variant,
budget, prompt mode, stage, model, transfer fold, horizon) and ``trajectories`` (the chained case
ids of a long-horizon run). Both are public: they become columns of every scored row.

A row's ``run`` is its run directory relative to the *job directory* (the common ancestor of the
runs' parents, or the one the caller names: ``contractrl report`` names the common ancestor of its
arguments), so a table reads the same on every machine and no absolute path leaks into it.
:func:`read_episodes` adds ``system`` and ``episode_key`` (unique across runs, where ``episode_id``
is unique only within a run) and gives every column its dtype from the data dictionary.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ContractRLError
from ..evidence.judge import Judge
from ..rollout.ledger import LEDGER_DIR, TIMING_FIELDS, decode_row, read_ledger, read_manifest
from ..tasks.offline import read_cases
from .dictionary import EPISODE_COLUMNS, typed
from .metrics import SCORED_SCHEMA, episode_metrics
from .systems import with_system

EPISODES = "episodes"

# Run-level labels (from the manifest), with their types and the value a run without one gets.
RUN_LABELS: dict[str, tuple[pa.DataType, Any]] = {
    "study": (pa.string(), "main"),
    "condition": (pa.string(), ""),
    "mode": (pa.string(), "same_information"),
    "feedback": (pa.string(), "full"),
    "stage": (pa.string(), ""),
    "model": (pa.string(), ""),
    "max_attempts": (pa.int64(), None),
    "max_ops": (pa.int64(), None),
    "train_tool_families": (pa.string(), ""),
    "heldout_tool_family": (pa.string(), ""),
    "horizon": (pa.int64(), None),
}
EPISODE_SCHEMA = pa.schema(
    [
        *SCORED_SCHEMA,
        *(pa.field(name, kind) for name, (kind, _) in RUN_LABELS.items()),
        pa.field("trajectory", pa.int64()),
        pa.field("step", pa.int64()),
        pa.field("run", pa.string()),
        pa.field("row_hash", pa.string()),
    ]
)


@dataclass(frozen=True)
class VerifiedRun:
    """A run whose ledger verified: where its shards are and what its rows carry besides them."""

    run_dir: str  # absolute: where the shards are read from
    rows: int
    shards: tuple[str, ...]
    labels: dict[str, Any] = field(default_factory=dict)
    steps: dict[str, tuple[int, int]] = field(default_factory=dict)  # case_id -> (trajectory, step)
    timing: dict[str, dict[str, Any]] = field(default_factory=dict)  # row_hash -> wall-clock fields (not in the shards)
    name: str = ""  # the ``run`` column: run_dir relative to the job directory


def job_dir(run_dirs: Sequence[str | Path]) -> Path:
    """The default job directory of some runs: the common ancestor of their parent directories
    (``runs/main`` for ``runs/main/eval/heuristic`` and ``runs/main/train/eval/after-sft``)."""
    parents = [str(Path(run).resolve().parent) for run in run_dirs]
    return Path(os.path.commonpath(parents)) if parents else Path.cwd()


def relative_run(run_dir: str | Path, base: Path) -> str:
    """A run's name in the tables: its path below ``base`` (POSIX separators)."""
    resolved = Path(run_dir).resolve()
    try:
        return resolved.relative_to(base.resolve()).as_posix()
    except ValueError:
        raise ContractRLError(f"run {resolved} is not below the job directory {base}") from None


def run_labels(manifest: dict[str, Any]) -> dict[str, Any]:
    """The run-level label columns of a manifest; unknown label keys are an error, not a silent drop."""
    given = dict(manifest.get("labels") or {})
    unknown = sorted(set(given) - set(RUN_LABELS))
    if unknown:
        raise ContractRLError(f"unknown run labels {unknown}; known: {', '.join(RUN_LABELS)}")
    if "stage" not in given and isinstance(manifest.get("stage"), str):  # trainer eval runs name their stage
        given["stage"] = manifest["stage"].removeprefix("eval-after-")
    if "mode" not in given and isinstance(manifest.get("config"), dict) and "mode" in manifest["config"]:
        given["mode"] = manifest["config"]["mode"]
    return {name: given.get(name, default) for name, (_, default) in RUN_LABELS.items()}


def verify_runs(run_dirs: Sequence[str | Path], progress: bool = False) -> list[VerifiedRun]:
    """Check every run's chain and digest; refuse unfrozen or tampered ledgers."""
    from tqdm.auto import tqdm

    out = []
    for run in tqdm(list(run_dirs), desc="verify ledgers", unit="run", disable=not progress):
        rows = read_ledger(run, require_frozen=True)
        manifest = read_manifest(run)
        steps = {case: (t, s) for t, chain in enumerate(manifest.get("trajectories") or []) for s, case in enumerate(chain)}
        shards = tuple(str(p.resolve()) for p in sorted((Path(run) / LEDGER_DIR).glob("shard-*.parquet")))
        timing = {row["row_hash"]: {k: row[k] for k in TIMING_FIELDS if k in row} for row in rows}
        resolved = Path(run).resolve()
        out.append(VerifiedRun(str(resolved), len(rows), shards, run_labels(manifest), steps, timing, resolved.name))
    return out


class EpisodeScorer:
    """Scores batches of ledger rows (a Ray Data callable class: built once per worker).

    Runs come in groups, each with its own case sets and its own judge, so two groups whose case
    ids collide (two training runs with the same seed, say) never score each other's episodes."""

    def __init__(self, case_dirs: Sequence[Sequence[str]], runs: dict[str, tuple[int, VerifiedRun]]) -> None:
        self.case_dirs = [list(group) for group in case_dirs]
        self.judges: dict[int, Judge] = {}
        self.runs = runs  # by shard path: (group, run)

    def _judge(self, group: int) -> Judge:
        if group not in self.judges:
            self.judges[group] = Judge(case for case_dir in self.case_dirs[group] for case in read_cases(case_dir))
        return self.judges[group]

    def __call__(self, batch: pd.DataFrame) -> pa.Table:
        scored = []
        for stored in batch.to_dict("records"):
            row = decode_row(stored)  # Ray Data reads the shards raw
            group, run = self.runs[str(row["path"])]
            row.update(run.timing.get(row["row_hash"], {}))  # the shards hold no timings: the verified read did
            judge = self._judge(group)
            verdict = judge.verdict(row, strict=False)
            case_id = row["case_id"]
            record = episode_metrics(row, judge.public(case_id), judge.offline(case_id), verdict.success, verdict.unsafe)
            trajectory, step = run.steps.get(case_id, (None, None))
            record.update(run.labels, trajectory=trajectory, step=step, run=run.name, row_hash=row["row_hash"])
            scored.append(record)
        return pa.Table.from_pylist(scored, schema=EPISODE_SCHEMA)


def join_runs(
    run_dirs: Sequence[str | Path],
    case_dirs: Sequence[str | Path],
    out_dir: str | Path,
    *,
    use_ray: bool = True,
    workers: int = 1,
    progress: bool = False,
    base: str | Path | None = None,
) -> Path:
    """Write the parquet dataset ``out_dir/episodes/``: one scored row per episode of every run;
    ``base`` is the job directory the ``run`` column is relative to (default :func:`job_dir`)."""
    return join_groups([(run_dirs, case_dirs)], out_dir, use_ray=use_ray, workers=workers, progress=progress, base=base)


def join_groups(
    groups: Sequence[tuple[Sequence[str | Path], Sequence[str | Path]]],
    out_dir: str | Path,
    *,
    use_ray: bool = True,
    workers: int = 1,
    progress: bool = False,
    base: str | Path | None = None,
) -> Path:
    """:func:`join_runs` over several (runs, case sets) groups in one pass; each group's runs are
    scored against its own case sets only."""
    root = Path(base) if base is not None else job_dir([run for run_dirs, _ in groups for run in run_dirs])
    by_shard: dict[str, tuple[int, VerifiedRun]] = {}
    for index, (run_dirs, _) in enumerate(groups):
        for run in verify_runs(run_dirs, progress):
            run = replace(run, name=relative_run(run.run_dir, root))
            by_shard.update({shard: (index, run) for shard in run.shards})
    case_dirs = [[str(Path(c).resolve()) for c in cases] for _, cases in groups]
    out = Path(out_dir) / EPISODES
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if use_ray and by_shard:
        _score_with_ray(by_shard, case_dirs, out, workers, progress)
    else:
        scorer = EpisodeScorer(case_dirs, by_shard)
        tables = [scorer(pd.read_parquet(shard).assign(path=shard)) for shard in by_shard]
        pq.write_table(pa.concat_tables(tables) if tables else EPISODE_SCHEMA.empty_table(), out / "part-0.parquet")
    return out


def read_episodes(path: str | Path) -> pd.DataFrame:
    """A joined episodes dataset as one frame, sorted by run and episode id, with ``system`` and
    ``episode_key`` added and the data dictionary's dtypes (nullable ``Int64`` and ``boolean``
    where a value may be missing, never ``object``), in the dictionary's column order."""
    files = sorted(Path(path).glob("*.parquet")) if Path(path).is_dir() else [Path(path)]
    tables = [pq.read_table(f, schema=EPISODE_SCHEMA) for f in files] or [EPISODE_SCHEMA.empty_table()]
    frame = typed(pa.concat_tables(tables).to_pandas())
    frame = frame.sort_values(["run", "episode_id"], kind="stable").reset_index(drop=True)
    frame = with_system(frame).assign(episode_key=frame["run"] + "/" + frame["episode_id"])
    if not frame["episode_key"].is_unique:
        raise ContractRLError(f"two rows of {path} share a run and an episode id: a scored file is there twice")
    return typed(frame[[c.name for c in EPISODE_COLUMNS]])


def _score_with_ray(
    by_shard: dict[str, tuple[int, VerifiedRun]], case_dirs: list[list[str]], out: Path, workers: int, progress: bool
) -> None:
    import ray.data

    from ..rollout.pool import ensure_ray

    ensure_ray()
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = progress  # without a terminal Ray Data logs progress every 10 s instead
    context.print_on_execution_start = progress
    dataset: Any = ray.data.read_parquet(list(by_shard), include_paths=True)
    scored = dataset.map_batches(
        EpisodeScorer,
        fn_constructor_args=(case_dirs, by_shard),
        batch_format="pandas",
        compute=ray.data.ActorPoolStrategy(size=workers),
    )
    scored.write_parquet(str(out))


__all__ = [
    "EPISODES",
    "EPISODE_SCHEMA",
    "RUN_LABELS",
    "EpisodeScorer",
    "VerifiedRun",
    "job_dir",
    "join_runs",
    "read_episodes",
    "relative_run",
    "verify_runs",
]
