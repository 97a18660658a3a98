"""Reading user JSON files: bounded (:mod:`contractrl.files`), then parsed strictly.

Every file a user or a data set hands over is read through :mod:`contractrl.files`, so a FIFO, a
device or an endless line is refused before anything is parsed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import InputFileError
from .files import MAX_FILE_BYTES, MAX_LINE_BYTES, open_regular, read_bytes, read_lines
from .validators.strict_json import ParseLimits, parse_json_text

__all__ = ["MAX_FILE_BYTES", "MAX_LINE_BYTES", "open_regular", "read_bytes", "read_json_file", "read_lines"]


def read_json_file(path: str | Path, what: str, limits: ParseLimits | None = None) -> Any:
    """A strictly parsed JSON file (no duplicate keys, NaN or trailing data)."""
    raw = read_bytes(path, what)
    parsed = parse_json_text(raw, limits or ParseLimits(max_bytes=MAX_FILE_BYTES, max_depth=256))
    if not parsed.is_value:
        raise InputFileError(f"{what} file {path} is not strict JSON ({parsed.code.value}): {parsed.message}")
    return parsed.value
