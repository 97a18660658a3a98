"""Durable and exclusive file operations on a run directory.

A ledger is only as good as its worst crash: a file written in place can be left half written, and
two processes writing one directory silently interleave. So every ledger file is written to a
hidden temporary name, flushed to disk, renamed over its final name and the rename flushed too (a
reader sees the old file or the whole new one, never a torn one), and a writer holds an exclusive
``flock`` on the run directory's lock file for as long as it writes. The kernel drops that lock when
the descriptor closes, including when the process dies, so a crash never leaves a stale lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable
from pathlib import Path

LOCK_FILE = ".ledger.lock"
_TMP_SUFFIX = ".tmp"


def tmp_path(path: Path) -> Path:
    """Where :func:`atomic_write` writes ``path`` before the rename: hidden (a leading dot), so that
    parquet dataset readers (Ray Data, ``pq.read_table`` on a folder) never pick it up."""
    return path.with_name(f".{path.name}{_TMP_SUFFIX}")


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries (a rename is durable only once its directory is)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write ``path`` whole or not at all: ``write`` fills a temporary file, which is synced and
    renamed over ``path``; the directory is synced after the rename."""
    tmp = tmp_path(path)
    write(tmp)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


class RunLock:
    """An exclusive ``flock`` on ``<run_dir>/.ledger.lock``, held until :meth:`release` or until the
    process exits. The lock file itself stays (removing it would let a waiter lock a dead inode)."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def try_acquire(cls, run_dir: Path) -> RunLock | None:
        """The lock, or None when another open descriptor (this process or another) holds it."""
        path = run_dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, path)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Unlock and close (closing alone would unlock); a second call does nothing."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __del__(self) -> None:  # an abandoned writer must not keep its directory locked
        with contextlib.suppress(Exception):  # at interpreter exit the kernel closes the descriptor anyway
            self.release()


__all__ = ["LOCK_FILE", "RunLock", "atomic_write", "fsync_dir", "tmp_path"]
