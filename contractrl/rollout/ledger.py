"""The episode ledger: append-only parquet shards, a hash chain, and a freeze.

Every row carries the hash of its predecessor, so changing, dropping or reordering any row breaks
every hash after it. Freezing writes the chain head (with the row count) into the run manifest as
``ledger_sha256``; after that the ledger refuses writes, and a reader refuses a ledger whose chain
or digest does not hold. Offline targets are joined only to a frozen, verified ledger.

Wall-clock fields are recorded but not hashed, so the same seed and config give the same digest on
any machine and with any number of workers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ContractRLError
from ..validators.jsonvalue import canonical_json

GENESIS = "0" * 64
LEDGER_DIR = "ledger"
MANIFEST = "manifest.json"
UNHASHED_FIELDS = frozenset({"wall_s", "gen_s", "row_hash", "prev_hash"})


class LedgerError(ContractRLError):
    """A ledger cannot be used: missing, unfrozen where a frozen one is needed, or tampered with."""


class LedgerFrozenError(LedgerError):
    """A write to a ledger that has been frozen."""


class LedgerIntegrityError(LedgerError):
    """The hash chain or the frozen digest does not hold; ``row`` is the first bad row (0-based)."""

    def __init__(self, message: str, row: int | None = None) -> None:
        super().__init__(message)
        self.row = row


def row_hash(prev_hash: str, row: dict[str, Any]) -> str:
    """The chain hash of one row: its hashed fields, canonically serialised, after its predecessor's hash."""
    body = {k: v for k, v in row.items() if k not in UNHASHED_FIELDS}
    return hashlib.sha256((prev_hash + canonical_json(body)).encode("utf-8")).hexdigest()


def ledger_digest(count: int, head: str) -> str:
    """The frozen digest: the chain head bound to the number of rows (an empty ledger has one too)."""
    return hashlib.sha256(f"{count}:{head}".encode()).hexdigest()


def _shard_name(index: int) -> str:
    return f"shard-{index:05d}.parquet"


class LedgerWriter:
    """Appends rows to a run directory's ledger in order; one writer per run.

    Rows are plain dicts of JSON values. Nested values are stored as canonical JSON text so that the
    parquet schema stays flat and readable with pandas.
    """

    def __init__(self, run_dir: str | Path, shard_rows: int = 1000) -> None:
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / LEDGER_DIR
        if _read_manifest(self.run_dir).get("ledger_sha256"):
            raise LedgerFrozenError(f"the ledger of {self.run_dir} is frozen; it cannot be written to")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.shard_rows = shard_rows
        self._frozen = False
        self._pending: list[dict[str, Any]] = []
        existing = sorted(self.dir.glob("shard-*.parquet"))
        self._next_shard = len(existing)
        self.count = 0
        self.head = GENESIS
        for row in _iter_rows(existing):  # resume: continue the chain where it stopped
            self.count += 1
            self.head = row["row_hash"]

    def append(self, row: dict[str, Any]) -> str:
        """Chain and buffer one row; returns its hash."""
        if self._frozen:
            raise LedgerFrozenError(f"the ledger of {self.run_dir} is frozen; it cannot be written to")
        if "row_hash" in row or "prev_hash" in row:
            raise LedgerError("rows must not carry their own chain fields")
        # hash exactly what is stored, so a reader recomputes the same chain from the file
        chained = {**{k: _cell(v) for k, v in row.items()}, "prev_hash": self.head}
        chained["row_hash"] = row_hash(self.head, chained)
        self.head = chained["row_hash"]
        self.count += 1
        self._pending.append(chained)
        if len(self._pending) >= self.shard_rows:
            self.flush()
        return self.head

    def flush(self) -> None:
        if not self._pending:
            return
        table = pa.Table.from_pylist(self._pending)
        pq.write_table(table, self.dir / _shard_name(self._next_shard), compression="zstd")
        self._next_shard += 1
        self._pending = []

    def freeze(self) -> str:
        """Flush, write ``ledger_sha256`` into the manifest, and refuse every later write."""
        self.flush()
        digest = ledger_digest(self.count, self.head)
        manifest = _read_manifest(self.run_dir)
        manifest.update({"ledger_sha256": digest, "ledger_rows": self.count, "ledger_head": self.head})
        (self.run_dir / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        self._frozen = True
        return digest

    def __enter__(self) -> LedgerWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()


def _cell(value: Any) -> Any:
    """Scalars stay typed columns; lists and objects become canonical JSON text."""
    if isinstance(value, (dict, list, tuple)):
        return canonical_json(list(value) if isinstance(value, tuple) else value)
    return value


def _read_manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / MANIFEST
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise LedgerError(f"{path} is not valid JSON: {exc}") from exc


def _iter_rows(shards: list[Path]) -> Iterator[dict[str, Any]]:
    for shard in shards:
        yield from pq.read_table(shard).to_pylist()


def read_ledger(run_dir: str | Path, *, require_frozen: bool = True) -> list[dict[str, Any]]:
    """Every row, after verifying the chain and (for a frozen ledger) the digest in the manifest."""
    run = Path(run_dir)
    manifest = _read_manifest(run)
    if require_frozen and not manifest.get("ledger_sha256"):
        raise LedgerError(f"the ledger of {run} is not frozen; freeze it before joining targets")
    rows = list(_iter_rows(sorted((run / LEDGER_DIR).glob("shard-*.parquet"))))
    head = GENESIS
    for index, row in enumerate(rows):
        if row.get("prev_hash") != head:
            raise LedgerIntegrityError(f"row {index} does not follow row {index - 1}: the chain is broken", index)
        expected = row_hash(head, row)
        if row.get("row_hash") != expected:
            raise LedgerIntegrityError(f"row {index} was modified after it was written (hash mismatch)", index)
        head = expected
    if manifest.get("ledger_sha256") and manifest["ledger_sha256"] != ledger_digest(len(rows), head):
        raise LedgerIntegrityError(
            f"the ledger holds {len(rows)} rows but the frozen digest was written for {manifest.get('ledger_rows')}", len(rows)
        )
    return rows
