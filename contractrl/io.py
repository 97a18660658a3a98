"""Reading user files: every failure becomes an InputFileError that names the file and the cause."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import InputFileError
from .validators.strict_json import ParseLimits, parse_json_text

MAX_FILE_BYTES = 64 * 1024 * 1024


def read_bytes(path: str | Path, what: str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The raw bytes of a user file, refusing missing, unreadable or oversized files."""
    p = Path(path)
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise InputFileError(f"{what} file not found: {p}") from None
    except OSError as exc:
        raise InputFileError(f"cannot read {what} file {p}: {exc.strerror}") from None
    if p.is_dir():
        raise InputFileError(f"{what} path is a directory, not a file: {p}")
    if size > max_bytes:
        raise InputFileError(f"{what} file {p} is {size} bytes, over the limit of {max_bytes}")
    try:
        return p.read_bytes()
    except OSError as exc:
        raise InputFileError(f"cannot read {what} file {p}: {exc.strerror}") from None


def read_json_file(path: str | Path, what: str, limits: ParseLimits | None = None) -> Any:
    """A strictly parsed JSON file (no duplicate keys, NaN or trailing data)."""
    raw = read_bytes(path, what)
    parsed = parse_json_text(raw, limits or ParseLimits(max_bytes=MAX_FILE_BYTES, max_depth=256))
    if not parsed.is_value:
        raise InputFileError(f"{what} file {path} is not strict JSON ({parsed.code.value}): {parsed.message}")
    return parsed.value
