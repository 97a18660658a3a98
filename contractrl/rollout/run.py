"""A rollout run: a directory with its manifest, a frozen ledger and its digest.

Every rollout run (``contractrl rollout``, a study's run, a held-out evaluation, one GRPO step's
batch) is created and frozen through :class:`RolloutRun`, so all of their manifests carry the same
fields: the kind, the version, the config and its hash, the seed, the source revision and the
package versions, then the labels the analysis join reads.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import InputFileError
from ..validators.jsonvalue import sha256_json
from .ledger import MANIFEST, LedgerWriter, read_manifest
from .runner import EpisodeRunner

_PACKAGES = ("contractrl", "jsonschema-rs", "jsonschema", "pyarrow", "ray")
ROLLOUT_KIND = "contractrl.rollout"


@cache
def source_revision() -> str | None:
    """The git commit of the source tree, when it is a checkout (asked once per process: every
    GRPO step writes a manifest, and the tree does not change under a running job)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def package_versions(extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Versions of Python and of the packages a run's results depend on (plus ``extra``)."""
    return dict(_versions(extra))


@cache
def _versions(extra: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    versions = [("python", platform.python_version())]
    for name in (*_PACKAGES, *extra):
        try:
            versions.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            continue
    return tuple(versions)


def new_manifest(kind: str, config: dict[str, Any], seed: int, packages: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields every run's manifest starts with, whatever its kind."""
    return {
        "kind": kind,
        "contractrl_version": __version__,
        "config": config,
        "config_sha256": sha256_json(config),
        "seed": seed,
        "source_revision": source_revision(),
        "packages": package_versions(packages),
    }


def write_manifest(run_dir: str | Path, manifest: dict[str, Any]) -> None:
    (Path(run_dir) / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


@dataclass(frozen=True)
class RolloutRun:
    """One rollout run's directory."""

    path: Path

    @classmethod
    def create(
        cls,
        run_dir: str | Path,
        config: dict[str, Any],
        *,
        seed: int,
        labels: dict[str, Any] | None = None,
        trajectories: list[list[str]] | None = None,
        extra: dict[str, Any] | None = None,
        replace: bool = False,
    ) -> RolloutRun:
        """A new run directory with its manifest. ``replace`` clears a half-written run first (an
        interrupted step); otherwise an existing run is an error, never overwritten.

        ``labels`` name the study and condition the run belongs to and ``trajectories`` chain case
        ids into long-horizon trajectories; both are public and become columns of the analysis join.
        ``extra`` adds top-level fields (a training run's ``stage``)."""
        out = Path(run_dir)
        if replace:
            shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True, exist_ok=True)
        if (out / MANIFEST).exists():
            raise InputFileError(f"{out} already holds a run; choose a new --out directory")
        manifest = {**new_manifest(ROLLOUT_KIND, config, seed), "labels": labels or {}, **(extra or {})}
        if trajectories is not None:
            manifest["trajectories"] = trajectories
        write_manifest(out, manifest)
        return cls(out)

    def write(self, rows: Iterable[dict[str, Any]]) -> str:
        """Append the rows in order and freeze; returns ``ledger_sha256``."""
        writer = LedgerWriter(self.path)
        try:
            for row in rows:
                writer.append(row)
            return writer.freeze()
        finally:
            writer.close()  # an interrupted run unlocks its directory now, not when collected

    @property
    def manifest(self) -> dict[str, Any]:
        return read_manifest(self.path)

    def is_frozen(self) -> bool:
        return bool(self.manifest.get("ledger_sha256"))


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
    """Run every episode of ``cases`` into a new rollout run and freeze it; returns ``ledger_sha256``."""
    run = RolloutRun.create(run_dir, config, seed=seed, labels=labels, trajectories=trajectories)
    return run.write(runner.run(cases, group=group, seed=seed, progress=progress))


__all__ = [
    "ROLLOUT_KIND",
    "RolloutRun",
    "new_manifest",
    "package_versions",
    "read_manifest",
    "source_revision",
    "write_manifest",
    "write_run",
]
