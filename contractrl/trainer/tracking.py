"""Tracking: ``metrics.parquet`` (one row per optimizer step) and W&B (offline by default).

The parquet table is the record a user reads with pandas; W&B is the live view. Both receive the
same rows. On resume the table is cut back to the checkpoint's row count, and W&B continues the
same run id, so neither holds a step twice.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .config import WandbConfig

METRICS_FILE = "metrics.parquet"
# the columns every row has, in this order (the command-line contract), then the rest sorted
LEADING = ("step", "stage", "stage_step", "loss", "reward_mean", "semantic_success")


class MetricsTable:
    """Rows of step metrics, rewritten atomically after every step (a few KB per run)."""

    def __init__(self, out: Path, keep_rows: int = 0) -> None:
        self.path = out / METRICS_FILE
        self.rows: list[dict[str, Any]] = []
        if keep_rows and self.path.is_file():
            self.rows = pq.read_table(self.path).to_pylist()[:keep_rows]

    def append(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        self.write()

    def write(self) -> None:
        columns = list(LEADING) + sorted({k for r in self.rows for k in r} - set(LEADING))
        table = pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in self.rows])
        scratch = self.path.with_suffix(".parquet.tmp")
        pq.write_table(table, scratch)
        os.replace(scratch, self.path)


class Tracker:
    """A W&B run for the training run (or nothing when ``mode: disabled``)."""

    def __init__(self, config: WandbConfig, out: Path, run_config: dict[str, Any], run_id: str | None, name: str) -> None:
        self.config = config
        self.run: Any = None
        self.files_dir: str | None = None
        if config.mode == "disabled":
            self.run_id = run_id
            return
        import wandb

        wandb_dir = out / "wandb"
        wandb_dir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=config.project,
            entity=config.entity,
            group=config.group,
            tags=list(config.tags) or None,
            name=name,
            id=run_id,
            resume="allow" if run_id else None,
            dir=str(wandb_dir),
            mode=config.mode,
            config=run_config,
            settings=wandb.Settings(console="off", x_disable_stats=True, disable_git=True, silent=True),
        )
        self.run_id = self.run.id
        self.files_dir = str(Path(self.run.dir).parent)

    def log(self, row: dict[str, Any], step: int) -> None:
        if self.run is None:
            return
        clean = {k: v for k, v in row.items() if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v))}
        clean["stage_is_grpo"] = int(row.get("stage") == "grpo")
        self.run.log(clean, step=step)

    def log_episodes(self, key: str, rows: list[dict[str, Any]], step: int) -> None:
        """A table of sample episodes: what the policy said and what came of it."""
        if self.run is None or not rows:
            return
        import wandb

        columns = list(rows[0])
        self.run.log({key: wandb.Table(columns=columns, data=[[r[c] for c in columns] for r in rows])}, step=step)

    def summary(self, values: dict[str, Any]) -> None:
        if self.run is not None:
            self.run.summary.update(values)

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


__all__ = ["METRICS_FILE", "MetricsTable", "Tracker"]
