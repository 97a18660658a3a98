"""Shared test fixtures: the public data in ../shared/data (skipped with a reason when absent), the
evidence-boundary check every case source must pass, and the loader of a benchmark script."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("CONTRACTRL_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module: the scripts are run by hand, not installed, and their
    pure parts are tested like any module's."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


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
