"""Files carried to a machine in bounded parts: the split, its manifest, the per-call plan, and the
checked reassembly.

The lent GPU machine takes at most 64 MiB per call (the working tree included) and can fetch
nothing, while what a real training run needs there (a wheelhouse with Ray, the model weights) is
several hundred MB. So the files are laid end to end in one stream, in stage order (what every run
needs first, an optional larger model after), and the stream is cut into parts of at most
``part_bytes``; each call carries one part, and a stage can run as soon as the call carrying its
last byte has arrived, without waiting for the later stages. Every part and every whole file has a
pinned SHA-256 in the manifest, so a missing, stale or damaged part is refused by name before
anything is installed or loaded.

Standard library only: the receiving side runs this before it has installed anything.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import ConfigError

MANIFEST_FILE = "manifest.json"
# a manifest lists a few hundred files at most; anything larger is not one of ours
MAX_MANIFEST_BYTES = 4 << 20
_BLOCK = 1 << 20


class CarryError(ConfigError):
    """A carried part or file is missing, has other bytes, or the manifest is not one of ours."""


@dataclass(frozen=True)
class CarriedFile:
    """One whole file of the stream: where it goes on arrival (``path``, relative) and its stage."""

    path: str
    stage: str
    offset: int  # where it starts in the stream
    size: int
    sha256: str


@dataclass(frozen=True)
class Part:
    """One cut of the stream; ``name`` is its file name on both machines."""

    name: str
    offset: int
    size: int
    sha256: str


@dataclass(frozen=True)
class Call:
    """One device call: the part it carries and the stages complete once it has arrived."""

    index: int  # 1-based
    part: str
    size: int
    ready: tuple[str, ...]


@dataclass(frozen=True)
class Manifest:
    part_bytes: int
    stages: tuple[str, ...]  # in stream order
    files: tuple[CarriedFile, ...]
    parts: tuple[Part, ...]
    meta: dict[str, str]  # what the receiving side must check before use (its Python, say)

    def stage_files(self, stage: str) -> list[CarriedFile]:
        if stage not in self.stages:
            raise CarryError(f"no stage {stage!r} in the manifest (stages: {', '.join(self.stages)})")
        return [f for f in self.files if f.stage == stage]

    def parts_for(self, stage: str) -> list[Part]:
        """Every part holding a byte of the stage's files (a stage's files are contiguous)."""
        files = self.stage_files(stage)
        if not files:
            return []
        start, end = files[0].offset, files[-1].offset + files[-1].size
        return [p for p in self.parts if p.offset < end and p.offset + p.size > start]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def split(files: Sequence[tuple[Path, str, str]], out: Path, part_bytes: int, meta: dict[str, str] | None = None) -> Manifest:
    """Cut ``(source, path on arrival, stage)`` files, laid end to end in the given order, into parts
    ``part000``, ``part001``, ... of at most ``part_bytes`` under ``out``; writes and returns the
    manifest. A stage's files must be contiguous, so that its parts are a run of the stream."""
    if part_bytes < 1:
        raise CarryError(f"part_bytes must be positive, got {part_bytes}")
    stages: list[str] = []
    for _, _, stage in files:
        if stages and stage != stages[-1] and stage in stages:
            raise CarryError(f"stage {stage!r}: its files are not contiguous in the given order")
        if not stages or stage != stages[-1]:
            stages.append(stage)
    out.mkdir(parents=True, exist_ok=True)
    carried: list[CarriedFile] = []
    parts: list[Part] = []
    writer = _PartWriter(out, part_bytes, parts)
    offset = 0
    for source, path, stage in files:
        digest, size = hashlib.sha256(), 0
        with Path(source).open("rb") as handle:
            for block in iter(lambda: handle.read(_BLOCK), b""):
                digest.update(block)
                writer.write(block)
                size += len(block)
        carried.append(CarriedFile(path, stage, offset, size, digest.hexdigest()))
        offset += size
    writer.close()
    manifest = Manifest(part_bytes, tuple(stages), tuple(carried), tuple(parts), dict(meta or {}))
    write_manifest(manifest, out / MANIFEST_FILE)
    return manifest


class _PartWriter:
    def __init__(self, out: Path, part_bytes: int, parts: list[Part]) -> None:
        self.out, self.part_bytes, self.parts = out, part_bytes, parts
        self.handle = None
        self.digest = hashlib.sha256()
        self.size = 0
        self.offset = 0

    def write(self, data: bytes) -> None:
        while data:
            if self.handle is None:
                self.handle = (self.out / f"part{len(self.parts):03d}").open("wb")
            room = self.part_bytes - self.size
            chunk, data = data[:room], data[room:]
            self.handle.write(chunk)
            self.digest.update(chunk)
            self.size += len(chunk)
            if self.size == self.part_bytes:
                self._finish()

    def _finish(self) -> None:
        assert self.handle is not None
        self.handle.close()
        self.parts.append(Part(f"part{len(self.parts):03d}", self.offset, self.size, self.digest.hexdigest()))
        self.offset += self.size
        self.handle, self.digest, self.size = None, hashlib.sha256(), 0

    def close(self) -> None:
        if self.handle is not None:
            self._finish()


def plan_calls(manifest: Manifest) -> list[Call]:
    """One call per part, in stream order; each names the stages whose last part it carries."""
    last = {stage: manifest.parts_for(stage)[-1].name for stage in manifest.stages if manifest.parts_for(stage)}
    return [
        Call(i, part.name, part.size, tuple(s for s in manifest.stages if last.get(s) == part.name))
        for i, part in enumerate(manifest.parts, start=1)
    ]


def write_manifest(manifest: Manifest, path: Path) -> None:
    path.write_text(json.dumps(asdict(manifest), indent=1) + "\n", encoding="utf-8")


def read_manifest(path: Path) -> Manifest:
    """The manifest at ``path``, read bounded and checked field by field (it crossed machines)."""
    try:
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            raise CarryError(f"{path}: over {MAX_MANIFEST_BYTES} bytes, not a carry manifest")
        raw = json.loads(path.read_text(encoding="utf-8"))
        files = tuple(
            CarriedFile(str(f["path"]), str(f["stage"]), int(f["offset"]), int(f["size"]), str(f["sha256"])) for f in raw["files"]
        )
        parts = tuple(Part(str(p["name"]), int(p["offset"]), int(p["size"]), str(p["sha256"])) for p in raw["parts"])
        manifest = Manifest(
            int(raw["part_bytes"]), tuple(map(str, raw["stages"])), files, parts, {str(k): str(v) for k, v in raw["meta"].items()}
        )
    except OSError as exc:
        raise CarryError(f"cannot read the carry manifest {path}: {exc}") from exc
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CarryError(f"{path} is not a carry manifest: {type(exc).__name__}: {exc}") from exc
    for item in (*files, *parts):
        name = item.path if isinstance(item, CarriedFile) else item.name
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise CarryError(f"{path}: {name!r} would be written outside the target folder")
    return manifest


def check_part(path: Path, part: Part) -> None:
    """Refuse a part that is absent or has other bytes than the manifest pins."""
    if not path.is_file():
        raise CarryError(f"{part.name} is missing from {path.parent}: carry it (see the call plan)")
    size = path.stat().st_size
    if size != part.size:
        raise CarryError(f"{path}: {size} bytes, the manifest says {part.size}: a stale or truncated part")
    actual = file_sha256(path)
    if actual != part.sha256:
        raise CarryError(f"{path}: sha256 {actual}, the manifest says {part.sha256}: a stale or damaged part")


def missing_parts(manifest: Manifest, folder: Path, stages: Iterable[str]) -> list[str]:
    """The parts the given stages still need in ``folder`` (by name; hashes are checked on join)."""
    wanted = {p.name for stage in stages for p in manifest.parts_for(stage)}
    return sorted(name for name in wanted if not (folder / name).is_file())


def join(manifest: Manifest, folder: Path, out: Path, stages: Sequence[str]) -> list[Path]:
    """The files of ``stages`` rebuilt under ``out`` from the parts in ``folder``: every part they
    touch is checked first, every rebuilt file after. Files already there with the right hash are
    kept (a later stage's call does not redo an earlier one's)."""
    missing = missing_parts(manifest, folder, stages)
    if missing:
        raise CarryError(f"{len(missing)} part(s) missing from {folder}: {', '.join(missing)} (see the call plan)")
    needed = {p.name: p for stage in stages for p in manifest.parts_for(stage)}
    for part in needed.values():
        check_part(folder / part.name, part)
    written = []
    for stage in stages:
        for item in manifest.stage_files(stage):
            target = out / item.path
            if not (target.is_file() and target.stat().st_size == item.size and file_sha256(target) == item.sha256):
                target.parent.mkdir(parents=True, exist_ok=True)
                with target.open("wb") as handle:
                    _copy_range(manifest.parts, folder, item.offset, item.size, handle)
                actual = file_sha256(target)
                if actual != item.sha256:
                    raise CarryError(f"{target}: sha256 {actual} after joining, the manifest says {item.sha256}")
            written.append(target)
    return written


def _copy_range(parts: Sequence[Part], folder: Path, offset: int, size: int, handle: object) -> None:
    end = offset + size
    for part in parts:
        lo, hi = max(offset, part.offset), min(end, part.offset + part.size)
        if lo >= hi:
            continue
        with (folder / part.name).open("rb") as source:
            source.seek(lo - part.offset)
            left = hi - lo
            while left:
                block = source.read(min(_BLOCK, left))
                handle.write(block)  # type: ignore[attr-defined]
                left -= len(block)


__all__ = [
    "MANIFEST_FILE",
    "Call",
    "CarriedFile",
    "CarryError",
    "Manifest",
    "Part",
    "check_part",
    "file_sha256",
    "join",
    "missing_parts",
    "plan_calls",
    "read_manifest",
    "split",
    "write_manifest",
]
