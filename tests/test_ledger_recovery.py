"""Nothing a ledger writer was given is lost silently (issue 49, section 4).

A writer can be killed at any write, a shard can be torn or deleted, and two writers can point at
one directory. Each case must end in the full run or in a typed refusal whose repair path
(``contractrl ledger repair``) leads to the full run: never in a frozen ledger with fewer rows.
The crash tests interrupt every ledger write (each shard, each timing file, the manifest) before
it starts, half way through its temporary file, and just after its rename, then resume.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import contractrl.rollout.ledger as ledger
from contractrl.cli import main
from contractrl.rollout.ledger import (
    LedgerError,
    LedgerFrozenError,
    LedgerLockedError,
    LedgerNeedsRepairError,
    LedgerWriter,
    read_ledger,
)
from contractrl.rollout.ledger_repair import REPAIR_RECORD, repair_ledger
from contractrl.rollout.runfiles import tmp_path as tmp_name

ROWS = [{"i": i, "text": f"raw {i}", "nested": {"a": [i]}, "wall_s": 0.25 * i} for i in range(8)]
SHARD_ROWS = 3  # 8 rows: shards of 3, 3 and 2 rows
# every ledger write of one run, in order: three flushes (shard, then its timing file), the manifest
WRITES = [
    *(f"{folder}/shard-0000{k}.parquet" for k in range(3) for folder in ("ledger", "ledger-timing")),
    "manifest.json",
]


class Killed(BaseException):
    """What a kill leaves behind: no handler of the writer runs (not an Exception)."""


def _new_run(run: Path) -> Path:
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"kind": "contractrl.rollout", "config": {"n": 8}, "seed": 1}))
    return run


def _write(run: Path) -> str:
    """The caller's side of a resumable run: start (or resume) a writer, append the rows it does
    not hold yet, freeze."""
    writer = LedgerWriter(run, shard_rows=SHARD_ROWS)
    for row in ROWS[writer.count :]:
        writer.append(row)
    return writer.freeze()


def _resume(run: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """Resume after a crash: ``full`` (already frozen), ``resumed``, or ``repaired`` (refused with
    the repair path, repaired with the command line, then resumed)."""
    try:
        _write(run)
        return "resumed"
    except LedgerFrozenError:
        return "full"
    except LedgerNeedsRepairError as refusal:
        assert f"contractrl ledger repair {run}" in str(refusal) and "\n" not in str(refusal)
    capsys.readouterr()
    assert main(["ledger", "repair", str(run)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["repaired"]
    _write(run)
    return "repaired"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict[str, Any]]]:
    """The digest and rows of the run written without a crash."""
    run = _new_run(tmp_path_factory.mktemp("reference") / "run")
    return _write(run), read_ledger(run)


def _assert_full(run: Path, reference: tuple[str, list[dict[str, Any]]], capsys: pytest.CaptureFixture[str]) -> None:
    digest, rows = reference
    assert read_ledger(run) == rows
    assert json.loads((run / "manifest.json").read_text())["ledger_sha256"] == digest
    assert main(["ledger", "verify", str(run)]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == len(ROWS)


def _expected_outcome(write: str, when: str) -> str:
    """A shard committed without its timing file needs the repair; a committed manifest is the
    full run; every other crash leaves whole flushes only, which resume continues."""
    if write == "manifest.json":
        return "full" if when == "after" else "resumed"
    shard_without_timing = (write.startswith("ledger/") and when == "after") or (
        write.startswith("ledger-timing/") and when != "after"
    )
    return "repaired" if shard_without_timing else "resumed"


@pytest.mark.parametrize("when", ["before", "torn", "after"])
@pytest.mark.parametrize("point", range(len(WRITES)), ids=WRITES)
def test_a_crash_at_any_ledger_write_ends_in_the_full_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    reference: tuple[str, list[dict[str, Any]]],
    point: int,
    when: str,
) -> None:
    run = _new_run(tmp_path / "run")
    original = ledger._atomic_write
    calls: list[str] = []

    def crashing(path: Path, write: Any) -> None:
        calls.append(path.relative_to(run).as_posix())
        if len(calls) - 1 != point:
            original(path, write)
            return
        if when == "torn":  # killed while the temporary file was half written
            write(tmp_name(path))
            data = tmp_name(path).read_bytes()
            tmp_name(path).write_bytes(data[: len(data) // 2])
        elif when == "after":  # killed right after the rename
            original(path, write)
        raise Killed

    monkeypatch.setattr(ledger, "_atomic_write", crashing)
    writer = LedgerWriter(run, shard_rows=SHARD_ROWS)
    with pytest.raises(Killed):
        for row in ROWS:
            writer.append(row)
        writer.freeze()
    assert calls[point] == WRITES[point]
    writer.close()  # the kernel drops a killed process's lock; here its descriptor is closed by hand
    monkeypatch.setattr(ledger, "_atomic_write", original)

    outcome = _resume(run, capsys)
    assert outcome == _expected_outcome(WRITES[point], when)
    _assert_full(run, reference, capsys)
    assert not list(run.rglob("*.tmp"))  # no unfinished write survives a resume


_CHILD = """
import sys
from pathlib import Path
import contractrl.rollout.ledger as ledger
from tests.test_ledger_recovery import ROWS, SHARD_ROWS

run, point = Path(sys.argv[1]), int(sys.argv[2])
original, calls = ledger._atomic_write, []

def crashing(path, write):
    original(path, write)
    calls.append(path)
    if len(calls) - 1 == point:
        import os
        os._exit(9)  # a kill: no finally, no atexit, no flush

ledger._atomic_write = crashing
writer = ledger.LedgerWriter(run, shard_rows=SHARD_ROWS)
for row in ROWS:
    writer.append(row)
writer.freeze()
"""


@pytest.mark.parametrize("point", [0, 3])
def test_a_killed_writer_process_releases_its_lock_and_its_run_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reference: tuple[str, list[dict[str, Any]]], point: int
) -> None:
    """The reported crash: the process dies between a shard and its timing file (point 0), or
    between two flushes (point 3). No code of the writer runs after the kill."""
    run = _new_run(tmp_path / "run")
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.run([sys.executable, "-c", _CHILD, str(run), str(point)], cwd=repo, env=env, capture_output=True)
    assert child.returncode == 9, child.stderr.decode()
    assert _resume(run, capsys) == ("repaired" if point == 0 else "resumed")
    _assert_full(run, reference, capsys)


def _unfrozen(run: Path, n: int = 8) -> Path:
    """A run whose writer flushed ``n`` rows and stopped without freezing."""
    _new_run(run)
    writer = LedgerWriter(run, shard_rows=SHARD_ROWS)
    for row in ROWS[:n]:
        writer.append(row)
    writer.flush()
    writer.close()
    return run


def _digests(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("missing", ["ledger/shard-00001.parquet", "ledger-timing/shard-00001.parquet", "both"])
def test_a_missing_middle_shard_is_refused_not_overwritten(tmp_path: Path, missing: str) -> None:
    run = _unfrozen(tmp_path / "run")
    for name in ("ledger/shard-00001.parquet", "ledger-timing/shard-00001.parquet"):
        if missing in (name, "both"):
            (run / name).unlink()
    before = _digests(run / "ledger")
    with pytest.raises(LedgerNeedsRepairError) as info:
        LedgerWriter(run, shard_rows=SHARD_ROWS)
    assert info.value.row == 3 and info.value.reason in ("missing_file", "gap")
    assert _digests(run / "ledger") == before  # shard-00002 is still there, unchanged
    out = repair_ledger(run)
    assert out["rows"] == 3 and "ledger/shard-00002.parquet" in out["removed"]
    quarantine = Path(out["quarantine"])
    assert hashlib.sha256((quarantine / "ledger/shard-00002.parquet").read_bytes()).hexdigest() == before["shard-00002.parquet"]
    assert LedgerWriter(run, shard_rows=SHARD_ROWS).count == 3


def test_a_torn_shard_is_repaired_to_the_last_verified_row_and_then_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reference: tuple[str, list[dict[str, Any]]]
) -> None:
    run = _unfrozen(tmp_path / "run")
    torn = run / "ledger" / "shard-00001.parquet"
    data = torn.read_bytes()[:300]
    torn.write_bytes(data)
    with pytest.raises(LedgerNeedsRepairError) as info:
        LedgerWriter(run)
    assert info.value.reason == "unreadable" and info.value.shard == "ledger/shard-00001.parquet"
    assert main(["ledger", "repair", str(run)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rows"] == 3 and out["cause"]["reason"] == "unreadable"
    quarantine = run / "quarantine-001"
    assert Path(out["quarantine"]) == quarantine
    assert (quarantine / "ledger" / "shard-00001.parquet").read_bytes() == data  # kept apart, byte for byte
    record = json.loads((quarantine / REPAIR_RECORD).read_text())
    assert record["kept_rows"] == 3
    assert {r["file"] for r in record["removed"]} == {
        f"{folder}/shard-0000{k}.parquet" for folder in ("ledger", "ledger-timing") for k in (1, 2)
    }
    assert sorted(p.name for p in (run / "ledger").iterdir()) == ["shard-00000.parquet"]
    _write(run)
    _assert_full(run, reference, capsys)
    # a second repair of a ledger that holds changes nothing
    assert main(["ledger", "repair", str(run)]) == 1  # frozen now: verified, never truncated
    assert "frozen" in json.loads(capsys.readouterr().out)["error"]


def test_repair_keeps_the_verified_rows_before_a_broken_chain_inside_a_shard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reference: tuple[str, list[dict[str, Any]]]
) -> None:
    run = _unfrozen(tmp_path / "run")
    shard = run / "ledger" / "shard-00001.parquet"
    rows = pq.read_table(shard).to_pylist()
    rows[2]["text"] = "forged"  # row 5: rows 3 and 4 still verify
    pq.write_table(pa.Table.from_pylist(rows), shard)
    with pytest.raises(LedgerNeedsRepairError) as info:
        LedgerWriter(run)
    assert info.value.row == 5 and info.value.reason == "row_hash"
    out = repair_ledger(run)
    assert out["rows"] == 5
    assert json.loads((Path(out["quarantine"]) / REPAIR_RECORD).read_text())["salvaged_rows"] == 2
    writer = LedgerWriter(run, shard_rows=SHARD_ROWS)
    assert writer.count == 5
    writer.close()
    _write(run)
    _assert_full(run, reference, capsys)


def test_repair_quarantines_foreign_files_and_unfinished_writes(tmp_path: Path) -> None:
    run = _unfrozen(tmp_path / "run")
    (run / "ledger" / "notes.txt").write_text("not a shard")
    (run / "ledger-timing" / ".notes.tmp").write_text("hidden, not the writer's")
    (run / "ledger" / ".shard-00003.parquet.tmp").write_bytes(b"half")
    with pytest.raises(LedgerNeedsRepairError, match="not a ledger file"):
        LedgerWriter(run)
    assert not (run / "ledger" / ".shard-00003.parquet.tmp").exists()  # resume drops unfinished writes itself
    assert (run / "ledger-timing" / ".notes.tmp").exists()  # but only its own
    (run / "ledger" / ".shard-00003.parquet.tmp").write_bytes(b"half")
    out = repair_ledger(run)
    assert out["rows"] == 8 and sorted(out["removed"]) == [
        "ledger-timing/.notes.tmp",
        "ledger/.shard-00003.parquet.tmp",
        "ledger/notes.txt",
    ]
    assert (run / "quarantine-001" / "ledger" / "notes.txt").read_text() == "not a shard"
    assert repair_ledger(run) == {"ok": True, "repaired": False, "rows": 8, "ledger_head": out["ledger_head"]}
    assert LedgerWriter(run).count == 8


def test_a_second_writer_on_one_directory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _new_run(tmp_path / "run")
    first = LedgerWriter(run, shard_rows=2)
    for row in ROWS[:4]:
        first.append(row)
    with pytest.raises(LedgerLockedError, match=str(run)) as info:
        LedgerWriter(run, shard_rows=2)
    assert isinstance(info.value, LedgerError) and "\n" not in str(info.value)
    assert main(["ledger", "repair", str(run)]) == 1  # repair waits for the writer too
    assert "being written" in json.loads(capsys.readouterr().out)["error"]
    for row in ROWS[4:]:
        first.append(row)
    first.freeze()  # releases the lock
    assert [r["i"] for r in read_ledger(run)] == list(range(8))
    with pytest.raises(LedgerFrozenError):
        LedgerWriter(run)


def test_the_lock_is_released_by_close_and_by_a_with_block(tmp_path: Path) -> None:
    run = _new_run(tmp_path / "run")
    with LedgerWriter(run, shard_rows=5) as writer:
        for row in ROWS[:3]:
            writer.append(row)
    with pytest.raises(LedgerFrozenError):
        writer.append(ROWS[3])  # a closed writer takes no more rows
    resumed = LedgerWriter(run, shard_rows=5)  # the with block flushed and unlocked
    assert resumed.count == 3
    resumed.close()
    assert LedgerWriter(run).count == 3


def test_a_second_writer_in_another_process_is_refused(tmp_path: Path) -> None:
    run = _new_run(tmp_path / "run")
    writer = LedgerWriter(run)
    repo = Path(__file__).resolve().parents[1]
    code = (
        "import sys\nfrom contractrl.rollout.ledger import LedgerWriter, LedgerLockedError\n"
        "try:\n    LedgerWriter(sys.argv[1])\nexcept LedgerLockedError as exc:\n    print(exc); sys.exit(3)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.run([sys.executable, "-c", code, str(run)], cwd=repo, env=env, capture_output=True, text=True)
    assert child.returncode == 3 and str(run) in child.stdout, child.stderr
    writer.close()


def test_freeze_refuses_files_that_do_not_hold_the_rows_written(tmp_path: Path) -> None:
    """A timing file lost under a live writer: the freeze checks the files as a reader would."""
    run = _new_run(tmp_path / "run")
    writer = LedgerWriter(run, shard_rows=SHARD_ROWS)
    for row in ROWS:
        writer.append(row)
    (run / "ledger-timing" / "shard-00001.parquet").unlink()
    with pytest.raises(LedgerNeedsRepairError, match="cannot freeze"):
        writer.freeze()
    assert not json.loads((run / "manifest.json").read_text()).get("ledger_sha256")
