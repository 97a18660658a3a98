"""The freeze-checked join: frozen ledgers + offline targets -> one scored row per episode.

Every run's hash chain and frozen digest are verified first, on the driver (a chain is sequential
by nature); an unfrozen or tampered ledger stops the join with :class:`LedgerError` before any
target is opened. Scoring then runs on Ray Data: the ledger shards are read in parallel, each block
is scored by a worker that holds the judge, and the result is written as parquet. The same code
runs on one machine and on a cluster; the output is sorted, so it does not depend on how many
workers scored it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from ..rollout.ledger import LEDGER_DIR, read_ledger
from ..tasks.cases import Case
from ..tasks.offline import read_cases
from .judge import Judge
from .metrics import episode_metrics

EPISODES = "episodes.parquet"


@dataclass(frozen=True)
class VerifiedRun:
    run_dir: str
    rows: int
    shards: tuple[str, ...]


def verify_runs(run_dirs: Sequence[str | Path], progress: bool = False) -> list[VerifiedRun]:
    """Check every run's chain and digest; refuse unfrozen or tampered ledgers."""
    from tqdm.auto import tqdm

    out = []
    for run in tqdm(list(run_dirs), desc="verify ledgers", unit="run", disable=not progress):
        rows = read_ledger(run, require_frozen=True)
        shards = tuple(str(p.resolve()) for p in sorted((Path(run) / LEDGER_DIR).glob("shard-*.parquet")))
        out.append(VerifiedRun(str(Path(run).resolve()), len(rows), shards))
    return out


class EpisodeScorer:
    """Scores batches of ledger rows (a Ray Data callable class: built once per worker)."""

    def __init__(self, case_dirs: Sequence[str], run_of_shard: dict[str, str]) -> None:
        cases: list[Case] = [case for case_dir in case_dirs for case in read_cases(case_dir)]
        self.judge = Judge(cases)
        self.run_of_shard = run_of_shard

    def __call__(self, batch: pd.DataFrame) -> pd.DataFrame:
        scored = []
        for row in batch.to_dict("records"):
            verdict = self.judge.verdict(row, strict=False)
            record = episode_metrics(row, self.judge.offline(row["case_id"]), verdict.success, verdict.unsafe)
            record["run"] = self.run_of_shard.get(str(row.get("path", "")), "")
            record["row_hash"] = row["row_hash"]
            scored.append(record)
        return pd.DataFrame(scored)


def join_runs(
    run_dirs: Sequence[str | Path],
    case_dirs: Sequence[str | Path],
    out_dir: str | Path,
    *,
    use_ray: bool = True,
    workers: int = 1,
    progress: bool = False,
) -> Path:
    """Write ``out_dir/episodes.parquet``: one scored row per episode of every run, sorted by run
    and episode id."""
    runs = verify_runs(run_dirs, progress)
    shard_run = {shard: run.run_dir for run in runs for shard in run.shards}
    cases = [str(Path(c).resolve()) for c in case_dirs]
    if use_ray:
        frame = _score_with_ray(list(shard_run), cases, shard_run, workers)
    else:
        scorer = EpisodeScorer(cases, shard_run)
        parts = [scorer(pd.read_parquet(shard).assign(path=shard)) for shard in shard_run]
        frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if not frame.empty:
        frame = frame.sort_values(["run", "episode_id"], kind="stable").reset_index(drop=True)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(out / EPISODES, index=False)
    return out / EPISODES


def _score_with_ray(shards: list[str], case_dirs: list[str], shard_run: dict[str, str], workers: int) -> pd.DataFrame:
    import ray
    import ray.data

    from ..rollout.pool import ensure_ray

    ensure_ray()
    if not shards:
        return pd.DataFrame()
    dataset: Any = ray.data.read_parquet(shards, include_paths=True)
    scored = dataset.map_batches(
        EpisodeScorer,
        fn_constructor_args=(case_dirs, shard_run),
        batch_format="pandas",
        concurrency=workers,
    )
    # blocks may type a column differently (all-null in one block); promote, then plain pandas dtypes
    tables = ray.get(scored.to_arrow_refs())
    return pa.concat_tables(tables, promote_options="default").to_pandas() if tables else pd.DataFrame()


__all__ = ["EPISODES", "EpisodeScorer", "VerifiedRun", "join_runs", "verify_runs"]
