"""The training config tree: every knob of ``contractrl train`` and of a Tune trial, typed.

Defaults are the embedded default run (``tiny`` model, built-in catalog, local Ray, W&B offline).
``tune_configs/*.yaml`` override parts of it; on the command line ``key=value`` overrides win.
Range checks live next to the fields, so a bad value fails at load time with the key's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..configtree import check
from ..tasks.audit import UNITS
from ..tasks.catalog import TOOL_FAMILIES
from ..tasks.corruptions import CORRUPTION_FAMILIES
from .presets import PRESETS

TrainArm = Literal["contractrl", "patch_sft", "full_regen"]
Stage = Literal["sft", "grpo"]


@dataclass(frozen=True)
class LoraConfig:
    """peft LoRA on the attention and MLP projections; ``enabled: false`` trains every weight."""

    enabled: bool = True
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    # adapt only the top N transformer layers (0: every layer). Backpropagation stops at the lowest
    # adapted layer, so adapting the top third costs about half a full-LoRA step.
    top_layers: int = 0

    def __post_init__(self) -> None:
        check(self.top_layers >= 0, f"model.lora.top_layers must be >= 0 (0 adapts every layer), got {self.top_layers}")
        check(self.r >= 1, f"model.lora.r must be >= 1, got {self.r}")
        check(self.alpha >= 1, f"model.lora.alpha must be >= 1, got {self.alpha}")
        check(0.0 <= self.dropout < 1.0, f"model.lora.dropout must be in [0, 1), got {self.dropout}")
        check(bool(self.target_modules), "model.lora.target_modules must name at least one module")


@dataclass(frozen=True)
class ModelConfig:
    """``name``: ``tiny`` (built locally; cannot learn the task, shows the mechanics), ``smollm2``
    (SmolLM2-135M-Instruct from a PyPI wheel, no hub needed), ``hf:<hub name or path>`` or a model
    directory.

    ``hidden_size`` and ``layers`` size the ``tiny`` preset (the scaling sweep varies them); they
    are ignored for real models.
    """

    name: str = "tiny"
    hidden_size: int = 64
    layers: int = 2
    cache_dir: str = "runs/models"
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    gradient_checkpointing: bool = False
    # on a CPU with native bf16 (AMX, AVX512-BF16), run matrix products in bf16 under autocast;
    # weights and optimizer state stay fp32 (rollout/cpu.py). About 1.4x faster there.
    cpu_bf16: bool = True
    lora: LoraConfig = field(default_factory=LoraConfig)

    @property
    def label(self) -> str:
        """A short name for result tables: the size of a tiny model, the LoRA rank if any."""
        base = f"tiny-h{self.hidden_size}-l{self.layers}" if self.name == "tiny" else self.name.removeprefix("hf:")
        return f"{base}/lora-r{self.lora.r}" if self.lora.enabled else base

    def __post_init__(self) -> None:
        check(
            self.hidden_size >= 16 and self.hidden_size % 8 == 0,
            f"model.hidden_size must be >= 16 and a multiple of 8, got {self.hidden_size}",
        )
        check(self.layers >= 1, f"model.layers must be >= 1, got {self.layers}")
        check(
            self.name in PRESETS or self.name.startswith("hf:") or "/" in self.name or self.name.startswith("."),
            f"model.name must be {' or '.join(PRESETS)}, hf:<name-or-path> or a model directory, got {self.name!r}",
        )


@dataclass(frozen=True)
class DataConfig:
    """Training and held-out cases, generated from the built-in catalog (disjoint by the split audit)."""

    seed: int = 0
    train_cases: int = 512
    eval_cases: int = 64
    families: tuple[str, ...] = CORRUPTION_FAMILIES
    tool_families: tuple[str, ...] = TOOL_FAMILIES
    max_attempts: int = 2
    max_ops: int = 2
    # audit units on which held-out cases must not overlap the training cases. The audit's default
    # also pins operation sequences, which a catalog of 30 tools exhausts for small op spaces
    # (every stale-schema rename, every ABSTAIN) once the training set has a few hundred cases.
    disjoint: tuple[str, ...] = ("case_id", "candidate_fingerprint", "target_fingerprint", "semantic_cluster")

    def __post_init__(self) -> None:
        unknown = sorted(set(self.disjoint) - set(UNITS))
        check(not unknown, f"data.disjoint: unknown audit units {unknown}; choose from {', '.join(UNITS)}")
        check(self.train_cases >= 1, f"data.train_cases must be >= 1, got {self.train_cases}")
        check(self.eval_cases >= 0, f"data.eval_cases must be >= 0, got {self.eval_cases}")
        unknown = sorted(set(self.families) - set(CORRUPTION_FAMILIES))
        check(not unknown, f"data.families: unknown {unknown}; choose from {', '.join(CORRUPTION_FAMILIES)}")
        unknown = sorted(set(self.tool_families) - set(TOOL_FAMILIES))
        check(not unknown, f"data.tool_families: unknown {unknown}; choose from {', '.join(TOOL_FAMILIES)}")
        check(self.max_attempts >= 1, f"data.max_attempts must be >= 1, got {self.max_attempts}")
        check(self.max_ops >= 1, f"data.max_ops must be >= 1, got {self.max_ops}")


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup_steps: int = 0
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    grad_clip: float = 1.0

    def __post_init__(self) -> None:
        check(self.lr > 0, f"lr must be > 0, got {self.lr}")
        check(self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}")
        check(self.warmup_steps >= 0, f"warmup_steps must be >= 0, got {self.warmup_steps}")
        check(self.grad_clip >= 0, f"grad_clip must be >= 0 (0 disables it), got {self.grad_clip}")


@dataclass(frozen=True)
class SFTConfig:
    """Supervised steps on gold answers: patches for the patch arms, whole objects for full_regen."""

    steps: int = 300
    batch_size: int = 16
    micro_batch_size: int = 4
    arm: TrainArm = "contractrl"
    # demonstrations longer than this (prompt + answer tokens) are left out, with a warning: one
    # outlier in a micro-batch sets the memory of the whole step
    max_tokens: int = 2048
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=3e-3, warmup_steps=10, schedule="cosine"))

    def __post_init__(self) -> None:
        check(self.max_tokens >= 16, f"sft.max_tokens must be >= 16, got {self.max_tokens}")
        check(self.steps >= 0, f"sft.steps must be >= 0, got {self.steps}")
        check(self.batch_size >= 1, f"sft.batch_size must be >= 1, got {self.batch_size}")
        check(self.micro_batch_size >= 1, f"sft.micro_batch_size must be >= 1, got {self.micro_batch_size}")


@dataclass(frozen=True)
class GRPOConfig:
    """Group-relative policy optimisation over whole repair episodes."""

    steps: int = 20
    cases_per_step: int = 8
    group_size: int = 4
    epochs: int = 1
    micro_batch_size: int = 8
    clip_low: float = 0.2
    clip_high: float = 0.28
    kl_coef: float = 0.0
    scale_std: bool = True
    baseline: Literal["mean", "leave_one_out"] = "mean"
    eps: float = 1e-4
    temperature: float = 1.0
    max_new_tokens: int = 96
    generation_batch_size: int = 16
    arm: Literal["contractrl", "patch_sft"] = "contractrl"
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=5e-4))

    def __post_init__(self) -> None:
        check(self.steps >= 0, f"grpo.steps must be >= 0, got {self.steps}")
        check(self.cases_per_step >= 1, f"grpo.cases_per_step must be >= 1, got {self.cases_per_step}")
        check(self.group_size >= 2, f"grpo.group_size must be >= 2 (advantages are relative to the group), got {self.group_size}")
        check(self.epochs >= 1, f"grpo.epochs must be >= 1, got {self.epochs}")
        check(self.micro_batch_size >= 1, f"grpo.micro_batch_size must be >= 1, got {self.micro_batch_size}")
        check(
            0 <= self.clip_low < 1 and self.clip_high >= 0,
            f"grpo.clip_low must be in [0, 1) and clip_high >= 0, got {self.clip_low}, {self.clip_high}",
        )
        check(self.kl_coef >= 0, f"grpo.kl_coef must be >= 0, got {self.kl_coef}")
        check(self.eps > 0, f"grpo.eps must be > 0, got {self.eps}")
        check(self.temperature > 0, f"grpo.temperature must be > 0, got {self.temperature}")
        check(self.max_new_tokens >= 1, f"grpo.max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass(frozen=True)
class RewardConfig:
    """R = 1[semantic success] - collateral*C - retry*r - unsafe*U - tokens*T (DESIGN.md)."""

    collateral: float = 0.1
    retry: float = 0.1
    unsafe: float = 0.2
    tokens: float = 0.001

    def __post_init__(self) -> None:
        for name in ("collateral", "retry", "unsafe", "tokens"):
            check(getattr(self, name) >= 0, f"reward.{name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class DeepSpeedConfig:
    """The DeepSpeed engine of each learner rank (CPU or GPU); ``enabled: false`` uses plain torch AdamW."""

    enabled: bool = True
    zero_stage: int = 0
    offload_optimizer: bool = False

    def __post_init__(self) -> None:
        # ZeRO-3 partitions the weights themselves; the learner generates rollouts and fingerprints
        # its weights between updates, which needs them whole on every rank
        check(
            self.zero_stage in (0, 1, 2),
            f"deepspeed.zero_stage must be 0, 1 or 2 (ZeRO-3 is not supported), got {self.zero_stage}",
        )


@dataclass(frozen=True)
class ResourcesConfig:
    """Ray placement: learner ranks (data parallel) and validator/sandbox workers.

    ``placement: colocated`` generates with the learner's own model; ``separate`` runs a generator
    actor that receives the LoRA adapter tensors (or the weights) after every update.
    ``num_workers: 0`` runs transitions in the driver process; ``ray: false`` runs everything in
    this process (one colocated learner), which is what unit tests and debugging want.
    """

    ray: bool = True
    num_learners: int = 1
    learner_cpus: float = 1.0
    learner_gpus: float = 0.0
    # torch threads per learner rank; 0 keeps Ray's default (one per reserved CPU). Raising it lets a
    # rank use cores that mostly idle workers have reserved, as on a 2-core laptop.
    learner_threads: int = 0
    num_workers: int = 1
    worker_cpus: float = 1.0
    placement: Literal["colocated", "separate"] = "colocated"
    generator_cpus: float = 1.0
    generator_gpus: float = 0.0

    def __post_init__(self) -> None:
        check(self.num_learners >= 1, f"resources.num_learners must be >= 1, got {self.num_learners}")
        check(self.num_workers >= 0, f"resources.num_workers must be >= 0, got {self.num_workers}")
        check(self.learner_threads >= 0, f"resources.learner_threads must be >= 0, got {self.learner_threads}")
        check(
            self.ray or (self.num_learners == 1 and self.placement == "colocated" and self.num_workers == 0),
            "resources.ray=false runs one colocated learner and no worker actors (num_learners=1, num_workers=0)",
        )
        for name in ("learner_cpus", "learner_gpus", "worker_cpus", "generator_cpus", "generator_gpus"):
            check(getattr(self, name) >= 0, f"resources.{name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class WandbConfig:
    """W&B tracking; ``offline`` (default) writes run files under the run directory, no network."""

    mode: Literal["offline", "online", "disabled"] = "offline"
    project: str = "contractrl"
    entity: str | None = None
    group: str | None = None
    tags: tuple[str, ...] = ()
    sample_episodes: int = 8


@dataclass(frozen=True)
class CheckpointConfig:
    every: int = 25
    keep: int = 2

    def __post_init__(self) -> None:
        check(self.every >= 1, f"checkpoint.every must be >= 1, got {self.every}")
        check(self.keep >= 1, f"checkpoint.keep must be >= 1, got {self.keep}")


@dataclass(frozen=True)
class EvalConfig:
    """Held-out evaluation after each stage: greedy decoding, one episode per case."""

    enabled: bool = True
    max_new_tokens: int = 96
    batch_size: int = 16


_WHOLE_OBJECT = frozenset({"full_regen", "constrained"})


@dataclass(frozen=True)
class TrainConfig:
    out: str = "runs/train"
    resume: bool = False
    seed: int = 0
    stages: tuple[Stage, ...] = ("sft", "grpo")
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    deepspeed: DeepSpeedConfig = field(default_factory=DeepSpeedConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        check(bool(self.stages), "stages must name at least one of sft, grpo")
        check(len(set(self.stages)) == len(self.stages), f"stages must not repeat, got {list(self.stages)}")
        check(list(self.stages) == sorted(self.stages, key=["sft", "grpo"].index), "stages run in the order sft, grpo")
        # GRPO starts from what SFT taught: both stages must produce the same output representation
        # (Patch-SFT -> ContractRL is the paper's recipe; a whole-object SFT cannot seed patch GRPO)
        check(
            self.stages != ("sft", "grpo") or (self.sft.arm in _WHOLE_OBJECT) == (self.grpo.arm in _WHOLE_OBJECT),
            f"sft.arm ({self.sft.arm}) and grpo.arm ({self.grpo.arm}) must both be patch arms or both whole-object arms",
        )


__all__ = [
    "CheckpointConfig",
    "DataConfig",
    "DeepSpeedConfig",
    "EvalConfig",
    "GRPOConfig",
    "LoraConfig",
    "ModelConfig",
    "OptimConfig",
    "ResourcesConfig",
    "RewardConfig",
    "SFTConfig",
    "TrainConfig",
    "WandbConfig",
]
