"""``contractrl ledger repair``: truncate an unfrozen ledger to its last verified row.

A resumed writer refuses a ledger that does not hold (a torn shard, a shard without its timing
file, a gap in the indices, a broken chain) rather than write over or after it. Repair is the way
on: it keeps the longest verified prefix (:func:`ledger.scan_ledger`), moves every other entry of
the ledger folders to ``RUN_DIR/quarantine-NNN/`` under its own relative path, and records there,
in ``repair.json``, what it removed and why. Nothing is deleted, so a removed row can still be
inspected or recovered by hand; after a repair the writer resumes from the kept rows.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import InputFileError
from .ledger import (
    LEDGER_DIR,
    TIMING_DIR,
    LedgerFrozenError,
    LedgerLockedError,
    _file_digest,
    _shard_name,
    _write_parquet,
    read_manifest,
    scan_ledger,
)
from .runfiles import LOCK_FILE, RunLock, fsync_dir

QUARANTINE = re.compile(r"quarantine-([0-9]{3,})")
REPAIR_RECORD = "repair.json"


def _quarantine_dir(run: Path) -> Path:
    """The next unused ``quarantine-NNN`` folder (numbered, so repeated repairs keep their order)."""
    taken = [int(m.group(1)) for p in run.iterdir() if (m := QUARANTINE.fullmatch(p.name))]
    return run / f"quarantine-{max(taken, default=0) + 1:03d}"


def repair_ledger(run_dir: str | Path) -> dict[str, Any]:
    """Truncate the unfrozen ledger of ``run_dir`` to its last verified row; returns what
    ``contractrl ledger repair`` prints. A ledger that holds is left as it is (``repaired``: false).

    Refuses a frozen ledger (:class:`LedgerFrozenError`: it is verified, never truncated) and a
    directory another writer holds (:class:`LedgerLockedError`)."""
    run = Path(run_dir)
    if not run.is_dir():
        raise InputFileError(f"run directory not found: {run}")
    lock = RunLock.try_acquire(run)
    if lock is None:
        raise LedgerLockedError(f"{run} is being written by a ledger writer (it holds {LOCK_FILE}); repair it once it stops")
    try:
        if read_manifest(run).get("ledger_sha256"):
            raise LedgerFrozenError(
                f"the ledger of {run} is frozen: `contractrl ledger verify` checks it; repair never truncates it"
            )
        return _repair(run)
    finally:
        lock.release()


def _repair(run: Path) -> dict[str, Any]:
    scan = scan_ledger(run)
    removed = [*scan.unfinished, *scan.beyond]
    if not removed:
        return {"ok": True, "repaired": False, "rows": scan.count, "ledger_head": scan.head}
    quarantine = _quarantine_dir(run)
    records = []
    for name in removed:
        source = run / name
        entry: dict[str, Any] = {"file": name, "why": "unfinished write" if name in scan.unfinished else "after the fault"}
        if source.is_file() and not source.is_symlink():
            entry["sha256"], entry["bytes"] = _file_digest(source, name)
        target = quarantine / name
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, target)
        records.append(entry)
    rows, timings = scan.salvage
    if rows:  # the verified rows before a chain fault inside a shard: rewritten as that shard
        base = _shard_name(scan.shards)
        _write_parquet(rows, run / LEDGER_DIR / base)
        _write_parquet(timings, run / TIMING_DIR / base)
    for folder in (LEDGER_DIR, TIMING_DIR):
        if (run / folder).is_dir():
            fsync_dir(run / folder)
    kept = scan.count + len(rows)
    head = rows[-1]["row_hash"] if rows else scan.head
    cause = scan.failure.to_dict() if scan.failure is not None else None
    record = {
        "repaired_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "kept_rows": kept,
        "kept_head": head,
        "salvaged_rows": len(rows),
        "cause": cause,
        "removed": records,
    }
    (quarantine / REPAIR_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    fsync_dir(quarantine)
    fsync_dir(run)
    return {
        "ok": True,
        "repaired": True,
        "rows": kept,
        "ledger_head": head,
        "quarantine": str(quarantine),
        "removed": [r["file"] for r in records],
        "cause": cause,
    }


__all__ = ["QUARANTINE", "REPAIR_RECORD", "repair_ledger"]
