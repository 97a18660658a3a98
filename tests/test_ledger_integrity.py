"""The ledger refuses every modified byte, and says which file and why (issue 13, section 4).

A hash chain over decoded rows misses what decoding hides (parquet metadata, statistics, a
timing column it does not hash) and a manifest whose fields are not cross-checked. These tests
flip bits in every file, rewrite shards and manifests as an attacker would, and put hostile files
where shards belong; each must end in a typed refusal, from Python and from ``ledger verify``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contractrl.cli import main
from contractrl.rollout.ledger import (
    KEY_ENV,
    TIMING_FIELDS,
    LedgerError,
    LedgerIntegrityError,
    LedgerWriter,
    ledger_digest,
    manifest_sha256,
    read_ledger,
    row_hash,
)

KEY = "k" * 32


def _freeze(run: Path, n: int = 20, shard_rows: int = 8, key: str | None = None, **timing: Any) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    (run / "manifest.json").write_text(json.dumps({"kind": "contractrl.rollout", "seed": 1}))
    writer = LedgerWriter(run, shard_rows=shard_rows)
    for i in range(n):
        writer.append({"i": i, "text": f"raw {i}", "score": 0.5 * i, "nested": {"a": [i]}, "wall_s": 0.01 * i, **timing})
    writer.freeze(key=key)
    return run


def _verify(run: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["ledger", "verify", str(run)])
    return code, json.loads(capsys.readouterr().out)


def _refused(run: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """A refusal from Python and the same refusal, as JSON with exit 1, from the command line."""
    with pytest.raises(LedgerError):
        read_ledger(run)
    code, out = _verify(run, capsys)
    assert code == 1 and out["ok"] is False and out["error"], out
    return out


@pytest.fixture(scope="module")
def frozen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _freeze(tmp_path_factory.mktemp("ledger") / "run")


def _copy(frozen: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(frozen, run)
    return run


def test_a_frozen_ledger_verifies_and_returns_its_timings(frozen: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = read_ledger(frozen)
    assert [r["i"] for r in rows] == list(range(20))
    assert [r["wall_s"] for r in rows] == [0.01 * i for i in range(20)]
    assert all("gen_s" not in r for r in rows)  # a row without gen_s simply lacks it
    code, out = _verify(frozen, capsys)
    assert code == 0 and out["ok"] and out["rows"] == 20 and out["files"] == 6 and out["hmac"] == "none"
    # the shards hold no timing: it lives in ledger-timing/, hashed through the manifest
    assert not TIMING_FIELDS & set(pq.read_table(frozen / "ledger" / "shard-00000.parquet").column_names)


def test_timings_never_change_the_content_digest(tmp_path: Path) -> None:
    a = _freeze(tmp_path / "a", gen_s=1.0)
    b = _freeze(tmp_path / "b", gen_s=7.5)
    digests = [json.loads((r / "manifest.json").read_text())["ledger_sha256"] for r in (a, b)]
    assert digests[0] == digests[1]
    assert [r["gen_s"] for r in read_ledger(b)] == [7.5] * 20


@pytest.mark.parametrize("name", ["ledger/shard-00000.parquet", "ledger-timing/shard-00001.parquet", "manifest.json"])
def test_every_single_bit_flip_is_refused(frozen: Path, tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Flip one bit at 61 places spread over the file (header, pages, statistics, footer)."""
    original = (frozen / name).read_bytes()
    positions = sorted({(len(original) - 1) * k // 60 for k in range(61)})
    passed = []
    for position in positions:
        run = tmp_path / f"flip-{position}"
        shutil.copytree(frozen, run)
        data = bytearray(original)
        data[position] ^= 1 << (position % 8)
        (run / name).write_bytes(bytes(data))
        try:
            read_ledger(run)
            passed.append(position)
        except LedgerError:
            pass
        code, out = _verify(run, capsys)
        assert code == 1 and out["ok"] is False
        shutil.rmtree(run)
    assert passed == []


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "file_size"),
        (b"PAR1garbage-not-parquet-PAR1", "file_size"),
        ("truncate", "file_size"),
    ],
)
def test_empty_truncated_or_garbage_shards_are_refused(
    frozen: Path, tmp_path: Path, content: Any, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(frozen, tmp_path)
    shard = run / "ledger" / "shard-00001.parquet"
    shard.write_bytes(shard.read_bytes()[:100] if content == "truncate" else content)
    out = _refused(run, capsys)
    assert out["shard"] == "ledger/shard-00001.parquet" and out["reason"] == reason


@pytest.mark.parametrize("change", ["nan", "inf", "timestamp", "binary", "drop-column"])
def test_rewritten_columns_are_refused_frozen_or_not(
    frozen: Path, tmp_path: Path, change: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Columns that are not JSON (NaN, Inf, timestamps, binary) end typed, even without file digests."""
    run = _copy(frozen, tmp_path)
    shard = run / "ledger" / "shard-00000.parquet"
    table = pq.read_table(shard)
    if change in ("nan", "inf"):
        table = table.append_column("extra", pa.array([float(change)] * table.num_rows))
    elif change == "timestamp":
        table = table.append_column("when", pa.array([0] * table.num_rows, pa.timestamp("s")))
    elif change == "binary":
        table = table.set_column(table.column_names.index("text"), "text", table.column("text").cast(pa.binary()))
    else:
        table = table.drop_columns(["score"])
    pq.write_table(table, shard)
    out = _refused(run, capsys)
    assert out["shard"] == "ledger/shard-00000.parquet"
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["ledger_sha256"]
    (run / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(LedgerIntegrityError) as info:
        read_ledger(run, require_frozen=False)
    assert info.value.row == 0 and info.value.shard == "ledger/shard-00000.parquet"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
def test_a_fifo_named_like_a_shard_is_refused_without_blocking(
    frozen: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(frozen, tmp_path)
    os.mkfifo(run / "ledger" / "shard-00009.parquet")
    assert _refused(run, capsys)["reason"] == "unlisted_file"
    shard = run / "ledger" / "shard-00001.parquet"
    shard.unlink()
    os.mkfifo(shard)
    os.unlink(run / "ledger" / "shard-00009.parquet")
    assert _refused(run, capsys)["reason"] == "not_a_file"


def _append_chained_row(run: Path) -> None:
    """What an attacker without the key does: append a correctly chained row in a new shard and
    recompute ledger_sha256, ledger_rows and ledger_head."""
    rows = read_ledger(run)
    head = rows[-1]["row_hash"]
    forged = {"i": 99, "text": "forged", "score": 0.0, "nested": '{"a":[99]}', "prev_hash": head}
    forged["row_hash"] = row_hash(head, forged)
    pq.write_table(pa.Table.from_pylist([forged]), run / "ledger" / "shard-00003.parquet")
    pq.write_table(pa.Table.from_pylist([{"row_hash": forged["row_hash"]}]), run / "ledger-timing" / "shard-00003.parquet")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.update(ledger_rows=21, ledger_head=forged["row_hash"], ledger_sha256=ledger_digest(21, forged["row_hash"]))
    manifest["manifest_sha256"] = manifest_sha256(manifest)
    (run / "manifest.json").write_text(json.dumps(manifest))


def test_an_appended_chained_row_with_a_recomputed_digest_is_refused(
    frozen: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(frozen, tmp_path)
    _append_chained_row(run)
    out = _refused(run, capsys)
    assert out["reason"] == "unlisted_file" and out["shard"] in (
        "ledger/shard-00003.parquet",
        "ledger-timing/shard-00003.parquet",
    )


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("ledger_rows", 19, "not the digest of its own ledger_rows=19"),
        ("ledger_head", "0" * 64, "not the digest"),
        ("ledger_sha256", None, "not the digest"),
        ("ledger_rows", "20", "is not a row count"),
        ("ledger_format", None, "ledger_format is None"),
        ("ledger_files", [], "not a map of file digests"),
    ],
)
def test_every_manifest_field_is_cross_checked(
    frozen: Path, tmp_path: Path, field: str, value: Any, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(frozen, tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    if field == "ledger_sha256":  # the reported instance: a one-character edit of the digest
        digest = manifest[field]
        value = ("1" if digest[0] != "1" else "2") + digest[1:]
    manifest[field] = value
    manifest["manifest_sha256"] = manifest_sha256(manifest)  # the field checks name the mismatch themselves
    (run / "manifest.json").write_text(json.dumps(manifest))
    out = _refused(run, capsys)
    assert message in out["error"] and out["reason"] == "manifest"


def test_an_edit_of_any_other_manifest_field_is_refused(frozen: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy(frozen, tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["seed"] = 2
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert "manifest_sha256" in _refused(run, capsys)["error"]


def test_consistent_but_false_counts_name_the_mismatch(frozen: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A manifest whose rows/head/digest agree with each other but not with the files."""
    run = _copy(frozen, tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    rows = read_ledger(run)
    manifest.update(ledger_rows=19, ledger_head=rows[18]["row_hash"], ledger_sha256=ledger_digest(19, rows[18]["row_hash"]))
    manifest["manifest_sha256"] = manifest_sha256(manifest)
    (run / "manifest.json").write_text(json.dumps(manifest))
    out = _refused(run, capsys)
    assert out["reason"] == "row_count" and "holds 20 rows but the manifest's ledger_rows says 19" in out["error"]


def test_the_keyed_seal_refuses_what_an_unkeyed_reader_cannot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a key, a full rewrite (rows, files, every digest) is undetectable by design; with one it is not."""
    run = _freeze(tmp_path / "sealed", key=KEY)
    monkeypatch.setenv(KEY_ENV, KEY)
    code, out = _verify(run, capsys)
    assert code == 0 and out["hmac"] == "verified"
    # rewrite everything an attacker can: a forged row in a new shard, recomputed digests and file list
    _append_chained_row(run)
    manifest = json.loads((run / "manifest.json").read_text())
    from contractrl.rollout.ledger import _file_digest

    for name in ("ledger/shard-00003.parquet", "ledger-timing/shard-00003.parquet"):
        sha, size = _file_digest(run / name, name)
        manifest["ledger_files"][name] = {"sha256": sha, "bytes": size, "rows": 1}
    manifest["manifest_sha256"] = manifest_sha256(manifest)
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert _refused(run, capsys)["reason"] == "hmac"
    monkeypatch.delenv(KEY_ENV)
    assert len(read_ledger(run)) == 21  # the unkeyed mode cannot tell: README says so
    # a key at read time refuses a ledger that was never sealed
    unsealed = _freeze(tmp_path / "unsealed")
    monkeypatch.setenv(KEY_ENV, KEY)
    assert "no ledger_hmac" in _refused(unsealed, capsys)["error"]


def test_legacy_frozen_ledgers_without_file_digests_are_refused(
    frozen: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(frozen, tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    for field in ("ledger_format", "ledger_files"):
        del manifest[field]
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert "without file digests" in _refused(run, capsys)["error"]


@pytest.mark.parametrize("manifest", [b"[1, 2]", b"\xff\xfe", b"{"])
def test_a_manifest_that_is_not_a_json_object_is_a_typed_refusal(
    frozen: Path, tmp_path: Path, manifest: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(frozen, tmp_path)
    (run / "manifest.json").write_bytes(manifest)
    assert _refused(run, capsys)["shard"] == "manifest.json"


def test_a_missing_run_directory_is_an_input_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ledger", "verify", str(tmp_path / "nowhere")]) == 2
    assert "not found" in capsys.readouterr().err


def test_a_decompression_bomb_in_place_of_a_shard_is_refused_without_parsing_it(
    frozen: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a kilobyte that decodes to 200 MB (one dictionary value repeated): its size and digest
    are not the frozen ones, so it is refused before any parquet reader opens it (issue 49 §4)."""
    run = _copy(frozen, tmp_path)
    bomb = run / "ledger" / "shard-00001.parquet"
    n = 200_000
    column = pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array(["x" * 1000]))
    options = {"compression": "zstd", "write_statistics": False, "data_page_size": 1 << 30, "store_schema": False}
    pq.write_table(pa.table({"text": column}), bomb, **options)
    assert bomb.stat().st_size < 1024 and pq.ParquetFile(bomb).metadata.num_rows == n
    parsed: list[Path] = []
    original = pq.read_table

    def spy(source: Any, *args: Any, **kwargs: Any) -> Any:
        parsed.append(Path(source))
        return original(source, *args, **kwargs)

    monkeypatch.setattr(pq, "read_table", spy)
    with pytest.raises(LedgerIntegrityError) as info:
        read_ledger(run)
    assert info.value.reason == "file_size" and info.value.row == 8  # shard 1 starts at row 8
    out = _refused(run, capsys)
    assert out["shard"] == "ledger/shard-00001.parquet" and out["first_bad_row"] == 8 and "not parsed" in out["error"]
    assert parsed == []  # nothing is parsed before every file holds: not the bomb, not the others
    # the same file under the frozen size (padded) fails on its digest, still unparsed
    pad = json.loads((run / "manifest.json").read_text())["ledger_files"]["ledger/shard-00001.parquet"]["bytes"]
    data = bomb.read_bytes()
    assert len(data) < pad
    bomb.write_bytes(data + b"\0" * (pad - len(data)))
    assert _refused(run, capsys)["reason"] == "file_sha256" and parsed == []


def _sealed(run: Path, **identity: str) -> Path:
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"kind": "contractrl.rollout", "config": {"policy": "h"}, "seed": 1}))
    writer = LedgerWriter(run, shard_rows=4, **identity)
    for i in range(6):
        writer.append({"i": i})
    writer.freeze(key=KEY)
    return run


def test_a_sealed_run_copied_over_another_is_refused_by_its_expected_identity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    a, b = _sealed(tmp_path / "a"), _sealed(tmp_path / "b")
    config_sha = json.loads((b / "manifest.json").read_text())["ledger_identity"]["config_sha256"]
    assert json.loads((b / "manifest.json").read_text())["ledger_identity"] == {"run_id": "b", "config_sha256": config_sha}
    assert main(["ledger", "verify", str(b), "--expect-run-id", "b", "--expect-config-sha256", config_sha]) == 0
    assert json.loads(capsys.readouterr().out)["identity"]["run_id"] == "b"
    shutil.rmtree(b)
    shutil.copytree(a, b)  # the same config, the same rows, a valid seal: only the identity differs
    assert main(["ledger", "verify", str(b)]) == 0  # without an expectation a copy is self-consistent
    capsys.readouterr()
    assert main(["ledger", "verify", str(b), "--expect-run-id", "b"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["reason"] == "identity" and "'a'" in out["error"] and "'b'" in out["error"]
    with pytest.raises(LedgerIntegrityError, match="config_sha256"):
        read_ledger(b, expect={"config_sha256": "0" * 64})
    # rewriting the identity to the expected one breaks the seal
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["ledger_identity"]["run_id"] = "b"
    manifest["manifest_sha256"] = manifest_sha256(manifest)
    (b / "manifest.json").write_text(json.dumps(manifest))
    assert main(["ledger", "verify", str(b), "--expect-run-id", "b"]) == 1
    assert json.loads(capsys.readouterr().out)["reason"] == "hmac"


def test_the_run_id_comes_from_the_writer_then_the_manifest_then_the_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    named = _sealed(tmp_path / "x", run_id="rollout-7")
    assert read_ledger(named, key=KEY, expect={"run_id": "rollout-7"})
    run = tmp_path / "y"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"run_id": "from-manifest", "config_sha256": "c" * 64}))
    writer = LedgerWriter(run)
    writer.append({"i": 1})
    writer.freeze()
    identity = json.loads((run / "manifest.json").read_text())["ledger_identity"]
    assert identity == {"run_id": "from-manifest", "config_sha256": "c" * 64}


def test_a_ledger_frozen_without_an_identity_is_refused_only_when_one_is_expected(
    frozen: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(frozen, tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["ledger_identity"]
    manifest["manifest_sha256"] = manifest_sha256(manifest)
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert len(read_ledger(run)) == 20
    assert main(["ledger", "verify", str(run), "--expect-run-id", "run"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["reason"] == "identity" and "no ledger_identity" in out["error"]
