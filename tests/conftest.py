"""Shared test fixtures: the public data in ../shared/data (skipped with a reason when absent), the
evidence-boundary check every case source must pass."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

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


def assert_nothing_offline_in_public(case: Any, *, ignore_case: bool = False) -> None:
    """The split the evidence boundary rests on: no target, gold patch, possible answer or withheld
    value can be read anywhere in a case's public half. ``ignore_case``: a withheld string in no
    casing either (BFCL questions, where the value was cut out of the user's own words)."""
    from contractrl.validators.jsonvalue import canonical_json

    pub, off = case.public, case.offline
    public_text = canonical_json(pub.to_row())
    assert canonical_json(off.target_patch) not in public_text
    assert "bfcl_possible" not in public_text
    if off.target is not None:
        assert canonical_json(off.target) not in public_text
    if pub.family == "unrepairable":
        withheld = off.corruption["withheld_value"]
        assert canonical_json(withheld) not in public_text
        if isinstance(withheld, str):
            assert withheld not in public_text and withheld not in pub.request
            assert not ignore_case or withheld.lower() not in pub.request.lower()
