"""The episode ledger: append-only parquet shards, a hash chain, a freeze, and a reader that refuses
every modified byte.

Every row carries the hash of its predecessor, so changing, dropping or reordering any row breaks
every hash after it. The chain covers decoded rows, not files: a flipped bit in parquet metadata or
statistics changes no row, so the freeze also records each file's SHA-256 and size in the manifest,
and the reader checks every file against that record *before* it reads one. What the manifest
holds at freeze:

- ``ledger_sha256``: the content digest, ``sha256("<rows>:<chain head>")``. It depends only on the
  rows' hashed fields, so the same seed and config give the same digest on any machine, with any
  number of workers (:data:`TIMING_FIELDS` are kept out of it);
- ``ledger_rows``, ``ledger_head``: the two inputs of that digest, each cross-checked on read;
- ``ledger_files``: ``{relative path: {"sha256", "bytes", "rows"}}`` for every shard and timing file,
  and nothing else may lie in the ledger folders;
- ``ledger_format``: 2 (a frozen ledger without file digests is refused, not trusted);
- ``ledger_identity``: ``{"run_id", "config_sha256"}`` (:func:`run_identity`), which a reader can
  require (``expect``), so a run's sealed ledger copied over another run is refused;
- ``manifest_sha256``: SHA-256 of the canonical manifest without itself and the HMAC, so an edit
  of any other field (config, seed, labels) is refused too;
- ``ledger_hmac`` (optional): HMAC-SHA256, keyed with ``$CONTRACTRL_LEDGER_KEY``, of the whole
  manifest without this field.

What each mode protects against: without a key, every accidental or partial change (a bit flip,
a truncated or replaced shard, an edited, added, dropped or reordered row, an edited manifest
field, an extra file) is refused, but someone who can rewrite the manifest can rewrite the files
and recompute every digest, since none of them is secret. With a key set when the ledger is frozen
and when it is read, a ledger is accepted only if the manifest (config, seed, digests, file
hashes) was sealed by someone holding the key; a reader with the key refuses an unsealed ledger.

Wall-clock fields (:data:`TIMING_FIELDS`) differ from run to run, so they are not chained: they go
to ``ledger-timing/`` beside the shards, one timing file per shard, bound to their rows by row
hash and protected by the file digests. :func:`read_ledger` returns each row with them merged back.

A file that fails its size or SHA-256 is never parsed (a small file can decode to gigabytes).
Before the freeze nothing binds the files, so the writer guards them instead: one writer per run
directory (a lock), every file written whole (temporary file, fsync, rename), and a resume that
verifies the shards it continues (:func:`scan_ledger`) or refuses with
:class:`LedgerNeedsRepairError`; ``contractrl ledger repair`` (``ledger_repair.py``) then
truncates to the last verified row.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ContractRLError, InputFileError
from ..validators.jsonvalue import canonical_json, sha256_json
from ..validators.strict_json import ParseLimits, parse_json_text
from .runfiles import LOCK_FILE, RunLock, atomic_write, tmp_path

GENESIS = "0" * 64
LEDGER_DIR = "ledger"
TIMING_DIR = "ledger-timing"
MANIFEST = "manifest.json"
LEDGER_FORMAT = 2
KEY_ENV = "CONTRACTRL_LEDGER_KEY"
# Wall-clock timings: recorded per row, never chained, stored and hashed in the timing files.
TIMING_FIELDS = frozenset({"wall_s", "gen_s", "latency_s"})
UNHASHED_FIELDS = TIMING_FIELDS | {"row_hash", "prev_hash"}
# The row's columns that hold JSON documents. A shard stores them as canonical JSON text (one arrow
# type whatever the document); read_ledger and decode_row give them back as values, so code above
# the ledger only ever sees decoded rows.
JSON_COLUMNS = ("attempts", "dispatched", "tool_result")
# The columns that name an episode, with their arrow types: the scored-episode schema of the
# analysis starts with them (contractrl/analysis/metrics.py).
IDENTITY_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("episode_id", pa.string()),
    ("case_id", pa.string()),
    ("case_family", pa.string()),
    ("tool", pa.string()),
    ("tool_family", pa.string()),
    ("arm", pa.string()),
    ("policy", pa.string()),
    ("seed", pa.int64()),
    ("sample", pa.int64()),
    ("outcome", pa.string()),
)
_HEX64 = re.compile(r"[0-9a-f]{64}")
_SHARD = re.compile(r"shard-[0-9]{5}\.parquet")
_UNFINISHED = re.compile(r"\.shard-[0-9]{5}\.parquet\.tmp")  # runfiles.tmp_path of a shard: a write cut short
_MANIFEST_LIMITS = ParseLimits(max_bytes=64 * 1024 * 1024, max_depth=256)
_READ_ERRORS = (pa.ArrowException, OSError, ValueError, EOFError, RuntimeError, TypeError, KeyError, IndexError)


class LedgerError(ContractRLError):
    """A ledger cannot be used: missing, unfrozen where a frozen one is needed, or tampered with."""


class LedgerFrozenError(LedgerError):
    """A write to a ledger that has been frozen."""


class LedgerLockedError(LedgerError):
    """Another writer holds the run directory: two writers would interleave their shards."""


class LedgerIntegrityError(LedgerError):
    """The files, the hash chain, the digest or the manifest do not hold.

    ``row`` is the first bad row (0-based) when one can be named, ``shard`` the file at fault
    (relative to the run directory) when there is one, ``reason`` a short machine-readable cause.
    """

    def __init__(self, message: str, row: int | None = None, *, shard: str | None = None, reason: str = "integrity") -> None:
        super().__init__(message)
        self.row = row
        self.shard = shard
        self.reason = reason

    def to_dict(self) -> dict[str, Any]:
        return {"ok": False, "reason": self.reason, "shard": self.shard, "first_bad_row": self.row, "error": str(self)}


class LedgerNeedsRepairError(LedgerIntegrityError):
    """An unfrozen ledger cannot be resumed as it stands (a missing, torn or foreign file, a gap in
    the shard indices, a broken chain): resuming would write over or after rows that do not hold.
    ``contractrl ledger repair`` truncates it to its last verified row, keeping what it removes."""

    @classmethod
    def of(cls, run: Path, cause: LedgerIntegrityError, action: str = "resume") -> LedgerNeedsRepairError:
        return cls(
            f"cannot {action} the ledger of {run}: {cause}; `contractrl ledger repair {run}` truncates it to its last "
            f"verified row and moves what it removes to {run}/quarantine-NNN/",
            cause.row,
            shard=cause.shard,
            reason=cause.reason,
        )


def row_hash(prev_hash: str, row: dict[str, Any]) -> str:
    """The chain hash of one row: its hashed fields, canonically serialised, after its predecessor's hash."""
    body = {k: v for k, v in row.items() if k not in UNHASHED_FIELDS}
    return hashlib.sha256((prev_hash + canonical_json(body)).encode("utf-8")).hexdigest()


def ledger_digest(count: int, head: str) -> str:
    """The frozen digest: the chain head bound to the number of rows (an empty ledger has one too)."""
    return hashlib.sha256(f"{count}:{head}".encode()).hexdigest()


def manifest_sha256(manifest: dict[str, Any]) -> str:
    """SHA-256 of the canonical manifest without its own ``manifest_sha256`` and ``ledger_hmac``."""
    body = {k: v for k, v in manifest.items() if k not in ("manifest_sha256", "ledger_hmac")}
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


def manifest_hmac(manifest: dict[str, Any], key: bytes) -> str:
    """HMAC-SHA256 of the canonical manifest without its own ``ledger_hmac`` field."""
    body = {k: v for k, v in manifest.items() if k != "ledger_hmac"}
    return hmac.new(key, canonical_json(body).encode("utf-8"), hashlib.sha256).hexdigest()


def ledger_key(key: bytes | str | None = None) -> bytes | None:
    """The HMAC key: the argument, else ``$CONTRACTRL_LEDGER_KEY``, else None (unkeyed)."""
    if key is None:
        key = os.environ.get(KEY_ENV) or None
    if key is None:
        return None
    raw = key.encode("utf-8") if isinstance(key, str) else key
    if len(raw) < 16:
        raise LedgerError(f"the ledger key (${KEY_ENV}) must be at least 16 bytes")
    return raw


def _shard_name(index: int) -> str:
    return f"shard-{index:05d}.parquet"


def run_identity(run_dir: str | Path, manifest: dict[str, Any], run_id: str | None = None) -> dict[str, str]:
    """The identity a freeze binds the seal to, so a sealed run copied over another is refused by a
    reader that expects the other: ``run_id`` (the argument, else the manifest's ``run_id``, else
    the run directory's name) and ``config_sha256`` (the manifest's, else the digest of its
    ``config``, ``null`` when there is none)."""
    if run_id is None:
        named = manifest.get("run_id")
        run_id = named if isinstance(named, str) and named else Path(run_dir).resolve().name
    config_sha = manifest.get("config_sha256")
    if not isinstance(config_sha, str):
        config_sha = sha256_json(manifest.get("config"))
    return {"run_id": run_id, "config_sha256": config_sha}


class LedgerWriter:
    """Appends rows to a run directory's ledger in order; one writer per run, enforced.

    Rows are plain dicts of JSON values. Nested values are stored as canonical JSON text so that the
    parquet schema stays flat and readable with pandas. :data:`TIMING_FIELDS` go to the timing file.

    The writer holds an exclusive lock on the run directory from construction until :meth:`freeze`,
    :meth:`close` or the end of the process; a second writer gets :class:`LedgerLockedError`. Each
    flush writes the shard, then its timing file, each atomically (:func:`runfiles.atomic_write`), so
    a crash leaves whole files only. On an existing ledger the writer resumes after verifying it
    (:func:`scan_ledger`: contiguous shard indices, every shard with its timing file, the chain); a
    ledger that does not hold is a :class:`LedgerNeedsRepairError`, never written over. ``count`` is
    the number of rows already durable, so a caller resumes its rows from there.
    """

    def __init__(self, run_dir: str | Path, shard_rows: int = 1000, *, run_id: str | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / LEDGER_DIR
        self.timing_dir = self.run_dir / TIMING_DIR
        self.shard_rows = shard_rows
        self.run_id = run_id
        self._frozen = False
        self._pending: list[dict[str, Any]] = []
        self._pending_timing: list[dict[str, Any]] = []
        self._refuse_frozen()  # before the lock: a frozen run may lie on read-only storage
        self.run_dir.mkdir(parents=True, exist_ok=True)
        lock = RunLock.try_acquire(self.run_dir)
        if lock is None:
            raise LedgerLockedError(f"{self.run_dir} is being written by another ledger writer (it holds {LOCK_FILE})")
        self._lock = lock
        try:
            self._refuse_frozen()  # frozen by the writer that held the lock until a moment ago
            self.dir.mkdir(exist_ok=True)
            self.timing_dir.mkdir(exist_ok=True)
            for stale in (*unfinished_writes(self.run_dir), tmp_path(self.run_dir / MANIFEST)):
                stale.unlink(missing_ok=True)  # under the lock: writes that never completed, no row of the chain
            scan = scan_ledger(self.run_dir)
            if scan.failure is not None:
                raise LedgerNeedsRepairError.of(self.run_dir, scan.failure)
        except BaseException:
            self.close()
            raise
        self._next_shard = scan.shards
        self.count = scan.count
        self.head = scan.head

    def _refuse_frozen(self) -> None:
        if read_manifest(self.run_dir).get("ledger_sha256"):
            raise LedgerFrozenError(f"the ledger of {self.run_dir} is frozen; it cannot be written to")

    def append(self, row: dict[str, Any]) -> str:
        """Chain and buffer one row; returns its hash."""
        if self._frozen or not self._lock.held:
            raise LedgerFrozenError(f"the ledger writer of {self.run_dir} is frozen or closed; it cannot be written to")
        if "row_hash" in row or "prev_hash" in row:
            raise LedgerError("rows must not carry their own chain fields")
        # hash exactly what is stored, so a reader recomputes the same chain from the file
        chained = {**{k: _cell(k, v) for k, v in row.items() if k not in TIMING_FIELDS}, "prev_hash": self.head}
        chained["row_hash"] = row_hash(self.head, chained)
        self.head = chained["row_hash"]
        self.count += 1
        self._pending.append(chained)
        self._pending_timing.append({"row_hash": self.head, **{k: row[k] for k in sorted(TIMING_FIELDS) if k in row}})
        if len(self._pending) >= self.shard_rows:
            self.flush()
        return self.head

    def flush(self) -> None:
        """Write the buffered rows as the next shard, then its timing file. The shard's rename is
        the commit point; a crash before the timing file's leaves a shard that resume refuses and
        ``ledger repair`` moves aside. The buffer is kept until both files are written."""
        if not self._pending:
            return
        name = _shard_name(self._next_shard)
        _write_parquet(self._pending, self.dir / name)
        _write_parquet(self._pending_timing, self.timing_dir / name)
        self._next_shard += 1
        self._pending = []
        self._pending_timing = []

    def freeze(self, *, key: bytes | str | None = None) -> str:
        """Flush, verify the files as a reader would, record the digests of the content and of every
        file and the run's identity (:func:`run_identity`) in the manifest, refuse every later write
        and release the lock. With a key (argument or ``$CONTRACTRL_LEDGER_KEY``) the manifest is also
        sealed with an HMAC. Returns ``ledger_sha256``."""
        self.flush()
        secret = ledger_key(key)
        scan = scan_ledger(self.run_dir)
        if scan.failure is not None:
            raise LedgerNeedsRepairError.of(self.run_dir, scan.failure, action="freeze")
        if scan.unfinished:
            raise LedgerError(f"cannot freeze {self.run_dir}: {scan.unfinished[0]} is a write that did not finish")
        if (scan.count, scan.head) != (self.count, self.head):
            raise LedgerIntegrityError(
                f"cannot freeze {self.run_dir}: its files hold {scan.count} rows, this writer wrote {self.count}",
                min(scan.count, self.count),
                reason="row_count",
            )
        digest = ledger_digest(self.count, self.head)
        files = {}
        for name, rows in sorted(scan.files.items()):
            sha, size = _file_digest(self.run_dir / name, name)
            files[name] = {"sha256": sha, "bytes": size, "rows": rows}
        manifest = read_manifest(self.run_dir)
        manifest.pop("ledger_hmac", None)
        manifest.pop("manifest_sha256", None)
        manifest.update(
            {
                "ledger_sha256": digest,
                "ledger_rows": self.count,
                "ledger_head": self.head,
                "ledger_format": LEDGER_FORMAT,
                "ledger_files": files,
                "ledger_identity": run_identity(self.run_dir, manifest, self.run_id),
            }
        )
        manifest["manifest_sha256"] = manifest_sha256(manifest)
        if secret is not None:
            manifest["ledger_hmac"] = manifest_hmac(manifest, secret)
        text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
        _atomic_write(self.run_dir / MANIFEST, lambda tmp: tmp.write_text(text))
        self._frozen = True
        self.close()
        return digest

    def close(self) -> None:
        """Release the run directory's lock without flushing (what a crash does); later appends are
        refused. :meth:`freeze` and leaving a ``with`` block call it."""
        self._lock.release()

    def __enter__(self) -> LedgerWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._lock.held:
                self.flush()
        finally:
            self.close()


def _atomic_write(path: Path, write: Any) -> None:
    """Every ledger file goes through here (one place for crash-injection tests to interrupt)."""
    atomic_write(path, write)


def _write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    table = pa.Table.from_pylist(rows)
    _atomic_write(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))


def _cell(name: str, value: Any) -> Any:
    """Scalars stay typed columns; JSON documents (and any list or object) become canonical JSON text."""
    if isinstance(value, (dict, list, tuple)) or (name in JSON_COLUMNS and value is not None):
        return canonical_json(list(value) if isinstance(value, tuple) else value)
    return value


def decode_row(stored: dict[str, Any]) -> dict[str, Any]:
    """A row as a shard stores it (Ray Data reads shards raw) with its JSON columns decoded."""
    row = dict(stored)
    for name in JSON_COLUMNS:
        value = row.get(name)
        # pandas reads a column that is null in every row of a shard as float NaN
        row[name] = json.loads(value) if isinstance(value, str) else None
    return row


def _regular_file(path: Path, name: str) -> os.stat_result:
    """The file's status; a FIFO, device, directory or symlink named like a ledger file is refused
    before anything opens it (reading a FIFO would block forever)."""
    try:
        info = path.lstat()
    except OSError as exc:
        raise LedgerIntegrityError(f"{name}: cannot be read ({exc.strerror})", shard=name, reason="unreadable") from None
    if not stat.S_ISREG(info.st_mode):
        raise LedgerIntegrityError(f"{name}: not a regular file", shard=name, reason="not_a_file")
    return info


def _file_digest(path: Path, name: str) -> tuple[str, int]:
    info = _regular_file(path, name)
    sha = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                sha.update(block)
    except OSError as exc:
        raise LedgerIntegrityError(f"{name}: cannot be read ({exc.strerror})", shard=name, reason="unreadable") from None
    return sha.hexdigest(), info.st_size


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    """A run directory's manifest, parsed strictly ({} when there is none yet): the one reader of
    every kind of manifest (rollout runs, training runs)."""
    path = Path(run_dir) / MANIFEST
    if not path.exists():
        return {}
    _regular_file(path, MANIFEST)
    parsed = parse_json_text(path.read_bytes(), _MANIFEST_LIMITS)  # strict: no duplicate keys, no NaN
    if not parsed.is_value:
        raise LedgerIntegrityError(
            f"{MANIFEST} is not strict JSON ({parsed.code.value}: {parsed.message})", shard=MANIFEST, reason="manifest"
        )
    manifest = parsed.value
    if not isinstance(manifest, dict):
        raise LedgerIntegrityError(f"{MANIFEST} is not a JSON object", shard=MANIFEST, reason="manifest")
    return manifest


def _read_rows(path: Path, run_dir: Path) -> list[dict[str, Any]]:
    """The rows of one parquet file; a damaged, truncated or foreign file is a typed refusal."""
    name = path.relative_to(run_dir).as_posix()
    _regular_file(path, name)
    try:
        return pq.read_table(path).to_pylist()
    except _READ_ERRORS as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LedgerIntegrityError(
            f"{name}: not a readable parquet file ({first[:200]})", shard=name, reason="unreadable"
        ) from None


def _iter_rows(shards: list[Path], run_dir: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    for shard in shards:
        name = shard.relative_to(run_dir).as_posix()
        for row in _read_rows(shard, run_dir):
            yield name, row


def _check_row(head: str, row: dict[str, Any], index: int, name: str) -> str:
    """The row's hash when it follows ``head`` and hashes to what it stores; a typed refusal otherwise."""
    if row.get("prev_hash") != head:
        raise LedgerIntegrityError(
            f"row {index} does not follow row {index - 1}: the chain is broken", index, shard=name, reason="chain"
        )
    try:
        expected = row_hash(head, row)
    except (TypeError, ValueError) as exc:  # NaN, a timestamp or binary column: not JSON
        raise LedgerIntegrityError(
            f"row {index} holds a value that is not JSON ({exc}): the file was rewritten",
            index,
            shard=name,
            reason="not_json",
        ) from None
    if row.get("row_hash") != expected:
        raise LedgerIntegrityError(
            f"row {index} was modified after it was written (hash mismatch)", index, shard=name, reason="row_hash"
        )
    return expected


def _chain(run: Path, shards: list[Path]) -> tuple[list[dict[str, Any]], list[str], str]:
    """Every row with the chain verified; (rows, the shard of each row, the head)."""
    rows: list[dict[str, Any]] = []
    where: list[str] = []
    head = GENESIS
    for index, (name, row) in enumerate(_iter_rows(shards, run)):
        head = _check_row(head, row, index, name)
        rows.append(row)
        where.append(name)
    return rows, where, head


@dataclass
class LedgerScan:
    """An unfrozen ledger up to its first fault: what a writer resumes from and ``ledger repair``
    keeps. ``shards`` whole shards (``shard-00000`` on) verified, with their timing files; ``files``
    maps each verified file to its rows. ``failure`` is the first fault, ``salvage`` the verified
    rows (and their timings) of the shard it lies in, ``unfinished`` the temporary files of writes
    that never completed and ``beyond`` every other entry of the ledger folders after the fault."""

    count: int = 0
    head: str = GENESIS
    shards: int = 0
    files: dict[str, int] = dataclass_field(default_factory=dict)
    failure: LedgerIntegrityError | None = None
    salvage: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
    unfinished: list[str] = dataclass_field(default_factory=list)
    beyond: list[str] = dataclass_field(default_factory=list)


def unfinished_writes(run: Path) -> list[Path]:
    """Temporary files left in the ledger folders by a write that was interrupted."""
    return [path for name, path in sorted(_ledger_files(run).items()) if _UNFINISHED.fullmatch(path.name)]


def scan_ledger(run_dir: str | Path) -> LedgerScan:
    """Verify an unfrozen ledger shard by shard, in index order, stopping at the first fault: a
    shard without its timing file (or the reverse), an unreadable file, a broken chain, a timing
    file that lists other rows, or, after the last whole shard, any other entry (a gap in the
    indices, a foreign file). Nothing is written. A frozen ledger is checked by :func:`read_ledger`.

    The files parsed here are not yet bound by any digest: they are the locked writer's own."""
    run = Path(run_dir)
    present = _ledger_files(run)
    scan = LedgerScan(unfinished=sorted(name for name, path in present.items() if _UNFINISHED.fullmatch(path.name)))
    while True:
        base = _shard_name(scan.shards)
        shard, timing = f"{LEDGER_DIR}/{base}", f"{TIMING_DIR}/{base}"
        if shard not in present and timing not in present:
            break
        try:
            rows, timings = _scan_shard(run, present, shard, timing, scan)
        except LedgerIntegrityError as exc:
            scan.failure = exc
            break
        scan.files[shard], scan.files[timing] = len(rows), len(timings)
        scan.count += len(rows)
        scan.head = rows[-1]["row_hash"] if rows else scan.head
        scan.shards += 1
    scan.beyond = sorted(name for name in present if name not in scan.files and name not in scan.unfinished)
    if scan.failure is None and scan.beyond:
        first = scan.beyond[0]
        if _SHARD.fullmatch(first.split("/", 1)[1]):
            message = f"{first}: {_shard_name(scan.shards)} is missing before it (shard indices run 0, 1, 2, ... without a gap)"
            scan.failure = LedgerIntegrityError(message, scan.count, shard=first, reason="gap")
        else:
            message = f"{first}: not a ledger file; the ledger folders hold only shard-NNNNN.parquet"
            scan.failure = LedgerIntegrityError(message, scan.count, shard=first, reason="unlisted_file")
    return scan


def _scan_shard(
    run: Path, present: dict[str, Path], shard: str, timing: str, scan: LedgerScan
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One shard and its timing file, chained after ``scan``; on a chain fault inside the shard its
    verified rows (with matching timings) are left in ``scan.salvage``."""
    if shard not in present:
        message = f"{timing}: a timing file without its shard {shard}"
        raise LedgerIntegrityError(message, scan.count, shard=timing, reason="missing_file")
    if timing not in present:
        raise LedgerIntegrityError(
            f"{shard}: its timing file {timing} is missing (a write that did not finish)",
            scan.count,
            shard=shard,
            reason="missing_file",
        )
    rows = _read_rows(present[shard], run)
    head = scan.head
    for offset, row in enumerate(rows):
        try:
            head = _check_row(head, row, scan.count + offset, shard)
        except LedgerIntegrityError:
            scan.salvage = _salvage(run, present[timing], rows[:offset])
            raise
    timings = _read_rows(present[timing], run)
    if len(timings) != len(rows) or any(t.get("row_hash") != r["row_hash"] for t, r in zip(timings, rows, strict=False)):
        raise LedgerIntegrityError(f"{timing}: its rows are not the rows of {shard}", scan.count, shard=timing, reason="timing")
    return rows, timings


def _salvage(run: Path, timing: Path, good: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The verified rows before a chain fault with their timings, or nothing when the timing file
    cannot vouch for them (a row is never kept without its timing entry)."""
    if not good:
        return [], []
    try:
        timings = _read_rows(timing, run)
    except LedgerIntegrityError:
        return [], []
    if len(timings) < len(good) or any(t.get("row_hash") != r["row_hash"] for t, r in zip(timings, good, strict=False)):
        return [], []
    return good, timings[: len(good)]


def _check_manifest_fields(manifest: dict[str, Any]) -> None:
    """Every ledger field of a frozen manifest well formed, and the digest the digest of the other two."""
    fmt = manifest.get("ledger_format")
    if fmt != LEDGER_FORMAT:
        raise LedgerIntegrityError(
            f"manifest ledger_format is {fmt!r}, not {LEDGER_FORMAT}: a ledger frozen without file digests cannot be "
            "verified byte for byte; run it again",
            reason="manifest",
        )
    for field in ("ledger_sha256", "ledger_head"):
        value = manifest.get(field)
        if not isinstance(value, str) or not _HEX64.fullmatch(value):
            raise LedgerIntegrityError(f"manifest {field} {value!r} is not a 64-digit hex digest", reason="manifest")
    rows = manifest.get("ledger_rows")
    if type(rows) is not int or rows < 0:
        raise LedgerIntegrityError(f"manifest ledger_rows {rows!r} is not a row count", reason="manifest")
    expected = ledger_digest(rows, manifest["ledger_head"])
    if manifest["ledger_sha256"] != expected:
        raise LedgerIntegrityError(
            f"manifest ledger_sha256 {manifest['ledger_sha256'][:16]}... is not the digest of its own ledger_rows={rows} "
            f"and ledger_head {manifest['ledger_head'][:16]}... (that is {expected[:16]}...): the manifest was edited",
            reason="manifest",
        )
    own = manifest.get("manifest_sha256")
    if own != manifest_sha256(manifest):
        raise LedgerIntegrityError(
            f"manifest_sha256 {str(own)[:16]}... is not the digest of the manifest's other fields: the manifest was edited",
            reason="manifest",
        )
    files = manifest.get("ledger_files")
    if not isinstance(files, dict) or not all(
        isinstance(name, str)
        and isinstance(entry, dict)
        and isinstance(entry.get("sha256"), str)
        and type(entry.get("bytes")) is int
        and type(entry.get("rows")) is int
        for name, entry in files.items()
    ):
        raise LedgerIntegrityError("manifest ledger_files is not a map of file digests", reason="manifest")


def _check_seal(manifest: dict[str, Any], secret: bytes | None) -> bool:
    """Verify the HMAC when a key is set; returns whether the manifest was verified with a key."""
    if secret is None:
        return False
    seal = manifest.get("ledger_hmac")
    if not isinstance(seal, str):
        raise LedgerIntegrityError(f"a ledger key is set (${KEY_ENV}) but the manifest carries no ledger_hmac", reason="hmac")
    if not hmac.compare_digest(seal, manifest_hmac(manifest, secret)):
        raise LedgerIntegrityError(
            "manifest ledger_hmac does not match: the manifest was not sealed with this key", reason="hmac"
        )
    return True


def _ledger_files(run: Path) -> dict[str, Path]:
    """Every entry of the ledger folders by relative name (whatever it is: it must be accounted for)."""
    out: dict[str, Path] = {}
    for folder in (LEDGER_DIR, TIMING_DIR):
        base = run / folder
        if base.is_symlink() or (base.exists() and not base.is_dir()):
            raise LedgerIntegrityError(f"{folder} is not a directory", shard=folder, reason="not_a_file")
        if base.is_dir():
            out.update({f"{folder}/{p.name}": p for p in base.iterdir()})
    return out


def _ledger_order(name: str) -> tuple[str, int, str]:
    """Files in the order of their rows: shard by shard, each shard before its timing file."""
    folder, _, base = name.partition("/")
    return (base, 0 if folder == LEDGER_DIR else 1, folder)


def _check_files(run: Path, manifest: dict[str, Any], present: dict[str, Path]) -> None:
    """Every recorded file present, regular, of its size and SHA-256; nothing else in the folders.

    Nothing is parsed here, and a file whose size or SHA-256 is not the frozen one is never parsed
    at all: a small file in place of a shard can expand to gigabytes (a decompression bomb)."""
    recorded: dict[str, dict[str, Any]] = manifest["ledger_files"]
    for name in sorted(present.keys() - recorded.keys()):
        raise LedgerIntegrityError(f"{name}: a file the frozen manifest does not list", shard=name, reason="unlisted_file")
    for name in sorted(recorded.keys() - present.keys()):
        raise LedgerIntegrityError(f"{name}: listed in the manifest but missing", shard=name, reason="missing_file")
    for name in sorted(recorded, key=_ledger_order):
        info = _regular_file(present[name], name)
        if info.st_size != recorded[name]["bytes"]:
            raise _unparsed(
                manifest, name, f"{name}: {info.st_size} bytes, but {recorded[name]['bytes']} were frozen", "file_size"
            )
        sha, _ = _file_digest(present[name], name)
        if sha != recorded[name]["sha256"]:
            message = f"{name}: SHA-256 {sha[:16]}... differs from the frozen {recorded[name]['sha256'][:16]}..."
            raise _unparsed(manifest, name, message, "file_sha256")


def _unparsed(manifest: dict[str, Any], name: str, message: str, reason: str) -> LedgerIntegrityError:
    """A file that is not the frozen one, named with the first row it holds (from the verified
    manifest's row counts of the shards before it), without reading a byte of it as parquet."""
    base = name.partition("/")[2]
    first = sum(
        entry["rows"]
        for other, entry in manifest["ledger_files"].items()
        if other.startswith(LEDGER_DIR + "/") and other.partition("/")[2] < base
    )
    return LedgerIntegrityError(
        f"{message}; not parsed: its rows, from row {first} on, cannot be trusted", first, shard=name, reason=reason
    )


def _merge_timing(run: Path, rows: list[dict[str, Any]], where: list[str], shards: list[Path]) -> None:
    """Put each row's timing fields back; a timing file must list exactly its shard's rows, in order."""
    start = 0
    for shard in shards:
        count = where.count(f"{LEDGER_DIR}/{shard.name}")
        name = f"{TIMING_DIR}/{shard.name}"
        path = run / TIMING_DIR / shard.name
        if not path.exists():
            raise LedgerIntegrityError(f"{name}: the timing file of {shard.name} is missing", shard=name, reason="missing_file")
        timing = _read_rows(path, run)
        block = rows[start : start + count]
        if len(timing) != count or any(t.get("row_hash") != r["row_hash"] for t, r in zip(timing, block, strict=True)):
            raise LedgerIntegrityError(f"{name}: its rows are not the rows of {shard.name}", start, shard=name, reason="timing")
        for t, row in zip(timing, block, strict=True):
            row.update({k: v for k, v in t.items() if k in TIMING_FIELDS and v is not None})
        start += count


def read_ledger(
    run_dir: str | Path,
    *,
    require_frozen: bool = True,
    key: bytes | str | None = None,
    expect: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Every row, decoded (:func:`decode_row`) and with its timing fields merged back, after
    verifying the ledger.

    A frozen ledger is verified in this order, each step before the next reads anything: the
    manifest's own fields (and its HMAC when a key is set), the identity in ``expect`` (any of
    ``run_id``, ``config_sha256``) when given, the list of files (nothing missing, nothing extra, no
    FIFO or link), each file's size and SHA-256, then the hash chain of the decoded rows and the row
    count and head the manifest recorded. Any failure is a :class:`LedgerIntegrityError` that names
    the file and the first row that cannot be trusted; a file that fails its size or SHA-256 is
    never parsed.
    """
    run = Path(run_dir)
    if not run.is_dir():
        raise InputFileError(f"run directory not found: {run}")
    manifest = read_manifest(run)
    frozen = bool(manifest.get("ledger_sha256"))
    if require_frozen and not frozen:
        raise LedgerError(f"the ledger of {run} is not frozen; freeze it before joining targets")
    present = _ledger_files(run)
    shards = sorted(p for name, p in present.items() if name.startswith(LEDGER_DIR + "/") and _SHARD.fullmatch(p.name))
    if frozen:
        _check_manifest_fields(manifest)
        _check_seal(manifest, ledger_key(key))
        _check_identity(manifest, expect)
        _check_files(run, manifest, present)
    rows, where, head = _chain(run, shards)
    if frozen:
        if len(rows) != manifest["ledger_rows"]:
            raise LedgerIntegrityError(
                f"the ledger holds {len(rows)} rows but the manifest's ledger_rows says {manifest['ledger_rows']}",
                min(len(rows), manifest["ledger_rows"]),
                reason="row_count",
            )
        if head != manifest["ledger_head"]:
            raise LedgerIntegrityError(
                f"the chain ends at {head[:16]}... but the manifest's ledger_head is {manifest['ledger_head'][:16]}...",
                len(rows) - 1 if rows else None,
                reason="head",
            )
    _merge_timing(run, rows, where, shards)
    return [decode_row(row) for row in rows]


def _check_identity(manifest: dict[str, Any], expect: dict[str, str] | None) -> None:
    """The frozen identity (:func:`run_identity`) equal to every expected field given. Unkeyed, this
    catches a run put in the wrong place; with a key, also a sealed run copied over another."""
    wanted = {k: v for k, v in (expect or {}).items() if v is not None}
    if not wanted:
        return
    unknown = set(wanted) - {"run_id", "config_sha256"}
    if unknown:
        raise LedgerError(f"unknown identity fields {sorted(unknown)}; expected run_id and/or config_sha256")
    identity = manifest.get("ledger_identity")
    if not isinstance(identity, dict):
        raise LedgerIntegrityError(
            "the manifest records no ledger_identity (frozen by an earlier version): it cannot be the expected run",
            reason="identity",
        )
    for name, value in sorted(wanted.items()):
        if identity.get(name) != value:
            raise LedgerIntegrityError(
                f"the ledger belongs to {name} {identity.get(name)!r}, not the expected {value!r}: another run's ledger",
                reason="identity",
            )


def verify_ledger(run_dir: str | Path, *, key: bytes | str | None = None, expect: dict[str, str] | None = None) -> dict[str, Any]:
    """What ``contractrl ledger verify`` prints for a ledger that holds (raises otherwise)."""
    rows = read_ledger(run_dir, require_frozen=True, key=key, expect=expect)
    manifest = read_manifest(Path(run_dir))
    secret = ledger_key(key)
    return {
        "ok": True,
        "rows": len(rows),
        "ledger_sha256": manifest["ledger_sha256"],
        "files": len(manifest["ledger_files"]),
        "identity": manifest.get("ledger_identity"),
        "hmac": "verified" if secret is not None else ("present, not checked (no key)" if "ledger_hmac" in manifest else "none"),
    }
