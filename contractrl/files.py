"""Bounded reads of untrusted files: a path is a regular file, and no read asks for more than its cap.

What a path names cannot be trusted: ``st_size`` is 0 for ``/dev/zero`` and for ``/proc`` files, a
FIFO blocks the first ``open`` until someone writes to it, and a JSON Lines file with no newline is
one endless line. So a path is opened without blocking (``O_NONBLOCK``) and refused unless it is a
regular file (after symlinks are followed), and no read asks for more than its cap plus one byte,
whatever the file says its size is. Every failure is an InputFileError naming the file and the
cause. This module sits in the bottom layer (the config tree reads YAML through it); JSON files
are parsed strictly in :mod:`contractrl.io`.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .errors import InputFileError

MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_LINE_BYTES = 16_000_000
_CHUNK = 1 << 20

# O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer; O_NOCTTY: a terminal
# never becomes the controlling one. Neither changes how a regular file reads.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


def _file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


@contextlib.contextmanager
def open_regular(path: str | Path, what: str) -> Iterator[BinaryIO]:
    """``path`` opened for binary reading, if it is a regular file once symlinks are followed.

    The type is read with ``fstat`` on the opened descriptor, so the file checked is the file read
    (no window for a swap between a ``stat`` and an ``open``).
    """
    p = Path(path)
    try:
        fd = os.open(p, _OPEN_FLAGS)
    except FileNotFoundError:
        raise InputFileError(f"{what} file not found: {p}") from None
    except IsADirectoryError:
        raise InputFileError(f"{what} path is a directory, not a file: {p}") from None
    except OSError as exc:
        raise InputFileError(f"cannot read {what} file {p}: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputFileError(f"{what} path is a directory, not a file: {p}")
        if not stat.S_ISREG(mode):
            raise InputFileError(f"{what} path {p} is {_file_kind(mode)}, not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)  # a regular file: ordinary reads from here on
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def read_bytes(path: str | Path, what: str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The raw bytes of a user file, refusing missing, unreadable, non-regular or oversized files.

    At most ``max_bytes + 1`` bytes are read: the one extra byte tells an oversized file from one
    exactly at the limit, and ``st_size`` is never trusted to say how much there is.
    """
    chunks: list[bytes] = []
    total = 0
    with open_regular(path, what) as fh:
        if os.fstat(fh.fileno()).st_size > max_bytes:  # a size is believed only when it refuses
            raise InputFileError(f"{what} file {path} is over the limit of {max_bytes} bytes")
        while total <= max_bytes:
            try:  # in chunks: one read of the whole cap would allocate it for every small file
                chunk = fh.read(min(_CHUNK, max_bytes + 1 - total))
            except OSError as exc:
                raise InputFileError(f"cannot read {what} file {path}: {exc.strerror}") from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    if total > max_bytes:
        raise InputFileError(f"{what} file {path} is over the limit of {max_bytes} bytes")
    return b"".join(chunks)


def read_lines(path: str | Path, what: str, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes]]:
    """The lines of a user file with 1-based line numbers, none longer than ``max_line_bytes``.

    Each line is read with ``readline(max_line_bytes + 1)``, so a file with no newline costs at most
    one line's limit before it is refused, not the whole file.
    """
    with open_regular(path, what) as fh:
        lineno = 0
        while True:
            lineno += 1
            try:
                line = fh.readline(max_line_bytes + 1)
            except OSError as exc:
                raise InputFileError(f"cannot read {what} file {path}: {exc.strerror}") from None
            if not line:
                return
            if len(line) > max_line_bytes:
                raise InputFileError(f"{path}:{lineno}: line is over the limit of {max_line_bytes} bytes")
            yield lineno, line
