"""One rollout run: a run directory with its manifest, a frozen ledger and its digest."""

from __future__ import annotations

import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import InputFileError
from ..validators.jsonvalue import sha256_json
from .ledger import MANIFEST, LedgerWriter
from .runner import EpisodeRunner

_PACKAGES = ("contractrl", "jsonschema-rs", "jsonschema", "pyarrow", "ray")


def source_revision() -> str | None:
    """The git commit of the source tree, when it is a checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def package_versions(extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Versions of Python and of the packages a run's results depend on (plus ``extra``)."""
    versions = {"python": platform.python_version()}
    for name in (*_PACKAGES, *extra):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def write_run(
    run_dir: str | Path,
    config: dict[str, Any],
    runner: EpisodeRunner,
    cases: list[Any],
    *,
    group: int,
    seed: int,
    progress: Any = None,
    labels: dict[str, Any] | None = None,
    trajectories: list[list[str]] | None = None,
) -> str:
    """Run every episode, append the rows in order, freeze; returns ``ledger_sha256``.

    ``labels`` name the study and condition the run belongs to and ``trajectories`` chain case ids
    into long-horizon trajectories; both are public and become columns of the analysis join."""
    out = Path(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    if (out / MANIFEST).exists():
        raise InputFileError(f"{out} already holds a run; choose a new --out directory")
    manifest = {
        "kind": "contractrl.rollout",
        "contractrl_version": __version__,
        "config": config,
        "config_sha256": sha256_json(config),
        "seed": seed,
        "source_revision": source_revision(),
        "packages": package_versions(),
        "labels": labels or {},
    }
    if trajectories is not None:
        manifest["trajectories"] = trajectories
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    rows = runner.run(cases, group=group, seed=seed, progress=progress)
    writer = LedgerWriter(out)
    for row in rows:
        writer.append(row)
    return writer.freeze()
