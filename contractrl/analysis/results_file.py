"""A benchmark's JSON result (``benchmarks/results/*.json``): written sorted and indented, so a
rerun that changes nothing leaves the file byte-identical, and printed when the caller asks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_result(result: dict[str, Any], out: str | Path, *, echo: bool = False) -> Path:
    """Write ``result`` to ``out`` (its folder made if needed); with ``echo``, print it too."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2, sort_keys=True)
    path.write_text(text + "\n")
    if echo:
        print(text)
    return path


__all__ = ["write_result"]
