"""Checkpoints: everything a resumed run needs to continue exactly where it stopped.

A checkpoint directory holds the trainable weights (``trainable.pt``: the LoRA adapter, or every
weight without LoRA), each rank's engine state (optimizer, schedule, RNG) while a stage is still
running, and ``trainer_state.json``: stage, step counters, the digests of the rollout ledgers
written so far (the ledger position), the metrics rows already recorded and the W&B run id.
Batches and sampling seeds are pure functions of (seed, stage, step), so nothing else is needed
for a resumed run to produce the same losses and the same ledger digests as an uninterrupted one.

Checkpoints are written to a scratch directory and renamed into place, so a run killed while
saving leaves the previous checkpoint intact.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# a training run's directory: checkpoints, the frozen ledger of every GRPO step's rollout batch
# (scored during training, left out of the report's runs), held-out evaluations, stage weights
CHECKPOINTS = "checkpoints"
GRPO_BATCHES = "rollouts"
EVALS = "eval"
STAGE_MODELS = "stages"
STATE_FILE = "trainer_state.json"
WEIGHTS_FILE = "trainable.pt"


@dataclass
class TrainerState:
    """The driver's side of a checkpoint."""

    stage: str | None = None  # the stage in progress (None before the first step)
    stage_step: int = 0  # optimizer steps done in ``stage``
    global_step: int = 0  # optimizer steps done in all stages
    stages_done: list[str] = field(default_factory=list)
    rollout_digests: list[str] = field(default_factory=list)  # one frozen ledger per GRPO step
    metrics_rows: int = 0
    evals: dict[str, dict[str, Any]] = field(default_factory=dict)  # held-out results after each stage
    wandb_run_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainerState:
        return cls(**data)

    @property
    def rollout_digest(self) -> str:
        """One digest over every rollout ledger of the run, in order."""
        digest = hashlib.sha256()
        for item in self.rollout_digests:
            digest.update(item.encode())
        return digest.hexdigest()


def checkpoint_dir(out: Path, global_step: int) -> Path:
    return out / CHECKPOINTS / f"step-{global_step:06d}"


def latest_checkpoint(out: Path) -> Path | None:
    """The newest complete checkpoint (one with its state file), or None."""
    root = out / CHECKPOINTS
    if not root.is_dir():
        return None
    complete = sorted(p for p in root.glob("step-*") if (p / STATE_FILE).is_file())
    return complete[-1] if complete else None


def write_state(directory: Path, state: TrainerState) -> None:
    (directory / STATE_FILE).write_text(json.dumps(state.to_dict(), indent=2, sort_keys=True) + "\n")


def read_state(directory: Path) -> TrainerState:
    return TrainerState.from_dict(json.loads((directory / STATE_FILE).read_text()))


def scratch_dir(out: Path, global_step: int) -> Path:
    path = out / CHECKPOINTS / f".tmp-step-{global_step:06d}"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def commit(scratch: Path, final: Path, keep: int) -> None:
    """Move a finished checkpoint into place, then drop all but the newest ``keep``."""
    shutil.rmtree(final, ignore_errors=True)
    os.replace(scratch, final)
    complete = sorted(p for p in final.parent.glob("step-*") if (p / STATE_FILE).is_file())
    for old in complete[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


__all__ = [
    "CHECKPOINTS",
    "STATE_FILE",
    "WEIGHTS_FILE",
    "TrainerState",
    "checkpoint_dir",
    "commit",
    "latest_checkpoint",
    "read_state",
    "scratch_dir",
    "write_state",
]
