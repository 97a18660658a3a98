"""Hostile files where data is read: devices, FIFOs and endless lines end in one typed line, not a
hang or a MemoryError.

Each read runs in a daemon thread joined with a generous timeout, so a regression fails the test
instead of hanging the suite; a FIFO left blocked is unblocked by opening its write end.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contractrl.cli import main
from contractrl.configtree import read_yaml
from contractrl.errors import InputFileError
from contractrl.io import read_bytes, read_json_file, read_lines
from contractrl.tasks.bfcl import load_bfcl_dir, read_jsonl
from contractrl.tasks.sources import BfclSource, JsonSchemaSource
from contractrl.tasks.store import read_manifest

JOIN_S = 60.0  # generous: a bounded read takes well under a second; an unbounded one never ends
GIB = 1 << 30

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs and /dev/zero")


def _outcome(read: Callable[[], Any], unblock: Path | None = None) -> BaseException | None:
    """What ``read()`` raised (None if it returned), asserting it finished within ``JOIN_S``."""
    box: list[BaseException | None] = []

    def target() -> None:
        try:
            read()
        except BaseException as exc:  # the test inspects whatever came out
            box.append(exc)
        else:
            box.append(None)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(JOIN_S)
    if thread.is_alive() and unblock is not None:
        fd = os.open(unblock, os.O_WRONLY | os.O_NONBLOCK)  # a writer lets the blocked open return
        os.close(fd)
        thread.join(JOIN_S)
    assert box, f"the read did not finish within {JOIN_S} s"
    return box[0]


def _typed_one_line(exc: BaseException | None, *needles: str) -> str:
    assert isinstance(exc, InputFileError), repr(exc)
    message = str(exc)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    return message


def _corpus_file(path: Path) -> None:
    doc = {"schema": {"type": "object", "properties": {"a": {"type": "string"}}}, "tests": [{"valid": True, "data": {"a": "x"}}]}
    path.write_text(json.dumps(doc))


@pytest.fixture
def dev_zero_json(tmp_path: Path) -> Path:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    link = tmp_path / "corpus" / "zero.json"
    link.parent.mkdir()
    _corpus_file(tmp_path / "corpus" / "fine.json")
    link.symlink_to("/dev/zero")
    return link


@pytest.fixture
def fifo_json(tmp_path: Path) -> Path:
    fifo = tmp_path / "corpus" / "pipe.json"
    fifo.parent.mkdir()
    _corpus_file(tmp_path / "corpus" / "fine.json")
    os.mkfifo(fifo)
    return fifo


def test_a_symlink_to_dev_zero_is_refused_not_read(dev_zero_json: Path) -> None:
    """st_size is 0 for /dev/zero: trusting it read without limit, to a MemoryError."""
    exc = _outcome(lambda: read_json_file(dev_zero_json, "schema"))
    _typed_one_line(exc, "character device", "not a regular file", str(dev_zero_json))
    exc = _outcome(lambda: JsonSchemaSource(dev_zero_json.parent))
    _typed_one_line(exc, "zero.json", "character device")


@pytest.mark.parametrize(
    "reader",
    [
        lambda p: read_bytes(p, "call"),
        lambda p: read_json_file(p, "schema"),
        lambda p: list(read_lines(p, "BFCL")),
        lambda p: list(read_jsonl(p)),
        lambda p: read_yaml(p),
        lambda p: JsonSchemaSource(p.parent),
    ],
    ids=["read_bytes", "read_json_file", "read_lines", "read_jsonl", "read_yaml", "jsonschema_corpus"],
)
def test_a_fifo_is_refused_without_blocking(fifo_json: Path, reader: Callable[[Path], Any]) -> None:
    """Opening a FIFO for reading waits for a writer; nobody writes, so it used to block forever."""
    exc = _outcome(lambda: reader(fifo_json), unblock=fifo_json)
    _typed_one_line(exc, "FIFO", "pipe.json")


def test_a_fifo_manifest_or_bfcl_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "possible_answer").mkdir()
    os.mkfifo(tmp_path / "BFCL_v4_simple.json")
    (tmp_path / "possible_answer" / "BFCL_v4_simple.json").write_text('{"id": "x", "ground_truth": []}\n')
    exc = _outcome(lambda: BfclSource(tmp_path), unblock=tmp_path / "BFCL_v4_simple.json")
    _typed_one_line(exc, "FIFO", "BFCL_v4_simple.json")
    cases = tmp_path / "cases"
    cases.mkdir()
    os.mkfifo(cases / "manifest.json")
    # a FIFO is not a file: not a case set, refused at once
    _typed_one_line(_outcome(lambda: read_manifest(cases), unblock=cases / "manifest.json"), "not a case set")


def test_the_cli_refuses_a_fifo_schema_in_one_line(fifo_json: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    call = tmp_path / "call.json"
    call.write_text("{}")
    box: list[int] = []
    exc = _outcome(lambda: box.append(main(["check", "--schema", str(fifo_json), "--call", str(call)])), unblock=fifo_json)
    assert exc is None and box == [2]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "FIFO" in err


def _sparse(path: Path, size: int) -> Path:
    """A file of ``size`` zero bytes that takes no disk: truncate() extends it without writing."""
    with path.open("wb") as fh:
        fh.truncate(size)
    return path


def test_a_2gb_bfcl_file_without_a_newline_is_refused_at_the_line_limit(tmp_path: Path) -> None:
    """The whole line used to be read before the 16 MB limit applied: a MemoryError at 2 GB."""
    (tmp_path / "possible_answer").mkdir()
    question = _sparse(tmp_path / "BFCL_v4_simple.json", 2 * GIB)
    (tmp_path / "possible_answer" / question.name).write_text('{"id": "x", "ground_truth": []}\n')
    exc = _outcome(lambda: load_bfcl_dir(tmp_path))
    _typed_one_line(exc, f"{question}:1", "over the limit of 16000000 bytes")


def test_a_huge_json_file_is_refused_by_its_size(tmp_path: Path) -> None:
    huge = _sparse(tmp_path / "schema.json", 2 * GIB)
    _typed_one_line(_outcome(lambda: read_json_file(huge, "schema")), "over the limit")
    _typed_one_line(_outcome(lambda: read_yaml(_sparse(tmp_path / "c.yaml", 2 * GIB))), "over the limit")


def test_a_file_whose_size_says_zero_is_still_capped() -> None:
    """/proc files report st_size 0 yet have content: the cap counts bytes read, not st_size."""
    maps = Path("/proc/self/maps")
    if not maps.is_file() or maps.stat().st_size != 0:
        pytest.skip("needs a Linux /proc file that reports size 0")
    assert len(read_bytes(maps, "maps", max_bytes=1 << 24)) > 10
    _typed_one_line(_outcome(lambda: read_bytes(maps, "maps", max_bytes=10)), "over the limit of 10 bytes")


def test_a_line_at_the_limit_is_read_and_one_over_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lines.jsonl"
    path.write_bytes(b"12345\n123456\n")
    lines = read_lines(path, "lines", max_line_bytes=6)
    assert next(lines) == (1, b"12345\n")
    with pytest.raises(InputFileError, match=r"lines\.jsonl:2: line is over the limit of 6 bytes"):
        next(lines)
    assert list(read_lines(path, "lines", max_line_bytes=7)) == [(1, b"12345\n"), (2, b"123456\n")]
    exact = tmp_path / "exact.json"
    exact.write_bytes(b"[1, 2]")
    assert read_bytes(exact, "x", max_bytes=6) == b"[1, 2]"
    with pytest.raises(InputFileError, match="over the limit of 5 bytes"):
        read_bytes(exact, "x", max_bytes=5)


def test_a_symlink_to_a_regular_file_is_still_read(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text('{"a": 1}')
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert read_json_file(link, "schema") == {"a": 1}
