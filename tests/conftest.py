"""Shared test fixtures: the public data in ../shared/data, skipped with a reason when absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("CONTRACTRL_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def shared_path(*parts: str) -> Path:
    """A path under ../shared/data; the calling test is skipped, with the path named, when it is missing."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"public test data not found at {path} (set CONTRACTRL_SHARED_DATA to its folder)")
    return path
