"""The training config tree: every knob of ``contractrl train`` and of a Tune trial, typed.

The defaults *are* the main job's training (``contractrl run``): SmolLM2-135M-Instruct with LoRA,
the built-in catalog, local Ray, W&B offline, sized for a 2-core CPU. There is no other copy:
``contractrl run`` takes them as they are, and ``tune_configs/tiny.yaml`` states only how the fast
tiny-model configuration differs. On the command line ``key=value`` overrides win. Every field
carries a one-line help text (``--print-config`` shows it) and its range as metadata
(``setting(..., ge=1)``), so a bad value fails at load time with the key's name; ``__post_init__``
holds only the checks that relate several fields.

The core sections hold the established knobs. Options that exist for an experiment live in one
``experimental`` section, one sub-section per feature (the contrast pairs' knobs together); an
option whose experiment showed no gain was removed rather than left off. A key that moved or was
removed fails with its new name or the reason (``TrainConfig.MOVED_KEYS`` and ``REMOVED_KEYS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from ..configtree import check, setting
from ..errors import ConfigError
from ..tasks.arms import DEFAULT_ARM, PATCH_ARMS, GrpoArm, SftArm
from ..tasks.bfcl_wheel import check_trainable
from ..tasks.corruptions import CORRUPTION_FAMILIES
from ..tasks.sources import check_source
from ..validators.transition import DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_OPS
from .experimental import ExperimentalConfig
from .model_cache import MODELS_DIR
from .presets import PRESETS, TinyConfig

Stage = Literal["sft", "grpo"]


@dataclass(frozen=True)
class LoraConfig:
    """peft LoRA on the attention and MLP projections; ``enabled: false`` trains every weight."""

    enabled: bool = setting(True, help="train LoRA adapters; false trains every weight (full fine-tuning)")
    r: int = setting(16, help="adapter rank", ge=1)
    alpha: int = setting(32, help="LoRA scaling numerator (the update is scaled by alpha / r)", ge=1)
    target_modules: tuple[str, ...] = setting(
        ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
        help="module names that get adapters (attention and MLP projections)",
        nonempty=True,
    )
    top_layers: int = setting(
        0,
        help="adapt only the top N transformer layers (0: all); backprop stops at the lowest adapted layer, "
        "so the top third costs about half a full-LoRA step",
        ge=0,
        why="(0 adapts every layer)",
    )


@dataclass(frozen=True)
class ModelConfig:
    """``name``: ``tiny`` (built locally; cannot learn the task, shows the mechanics), ``smollm2``
    (SmolLM2-135M-Instruct from a PyPI wheel, no hub needed), ``qwen2.5-coder-0.5b`` and
    ``qwen2.5-coder-1.5b`` (the larger rungs, from chunk wheels), ``hf:<hub name or path>`` or a
    model directory.

    ``hidden_size`` and ``layers`` size the ``tiny`` preset (the scaling sweep varies them); they
    are ignored for real models.
    """

    name: str = setting(
        "smollm2",
        help="tiny, smollm2, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b, hf:<hub name or path>, or a model directory",
    )
    hidden_size: int = setting(64, help="tiny preset only: hidden width (the scaling sweep varies it)", ge=16, multiple_of=8)
    layers: int = setting(2, help="tiny preset only: transformer layers", ge=1)
    cache_dir: str = setting(str(MODELS_DIR), help="where presets are built once and cached")
    dtype: Literal["auto", "float32", "bfloat16"] = setting("auto", help="weight dtype; auto: bf16 on a GPU, fp32 on a CPU")
    gradient_checkpointing: bool = setting(False, help="recompute activations in the backward pass (less memory)")
    cpu_bf16: bool = setting(
        True,
        help="on a CPU with native bf16 (AMX, AVX512-BF16), matrix products under bf16 autocast; weights and "
        "optimizer state stay fp32 (about 1.4x)",
    )
    lora: LoraConfig = setting(factory=LoraConfig, help="peft LoRA adapters")

    @property
    def label(self) -> str:
        """A short name for result tables: the size of a tiny model, the LoRA rank if any."""
        base = f"tiny-h{self.hidden_size}-l{self.layers}" if self.name == "tiny" else self.name.removeprefix("hf:")
        return f"{base}/lora-r{self.lora.r}" if self.lora.enabled else base

    def __post_init__(self) -> None:
        check(
            self.name in PRESETS or self.name.startswith("hf:") or "/" in self.name or self.name.startswith("."),
            f"model.name must be {' or '.join(PRESETS)}, hf:<name-or-path> or a model directory, got {self.name!r}",
        )


def mix_entry(entry: str) -> tuple[str, int]:
    """``SOURCE=N`` of ``data.mix`` as (source, N), checked without reading any data. A mixed-in
    source states its requests as its data does (BFCL: the users' own words), so it is checked in
    the style that source takes."""
    source, sep, count = entry.rpartition("=")
    if not sep or not source or not count.strip().isdigit() or int(count) < 1:
        raise ConfigError(f"{entry!r}: write SOURCE=N with N >= 1 training cases, e.g. bfcl:simple=64")
    check_source(source, mix_style(source, "verbatim"))
    check_trainable(source)
    return source, int(count)


def mix_style(source: str, style: str) -> str:
    """The request style a mixed-in source is generated in: BFCL's questions are its own words."""
    return "verbatim" if source.partition(":")[0] in ("bfcl", "bfcl-results") else style


@dataclass(frozen=True)
class DataConfig:
    """Training and held-out cases, generated from one source (disjoint by the split audit)."""

    source: str = setting(
        "builtin",
        help="where valid calls come from: builtin, bfcl:CATEGORY (from the BFCL wheel; live_* are held out), "
        "bfcl:DIR, jsonschema:DIR or bfcl-results:DIR (a model's natural failures from its non-live BFCL result "
        "files; bfcl-results-live:DIR is held out) (docs/cases.md)",
    )
    request_style: Literal["verbatim", "paraphrase"] = setting(
        "verbatim", help="how requests state values: JSON to copy, or words to understand (docs/cases.md)"
    )
    seed: int = setting(0, help="case generation seed (held-out cases use a seed derived from it)")
    train_cases: int = setting(256, help="training cases (SFT demonstrations and GRPO prompts)", ge=1)
    mix: tuple[str, ...] = setting(
        (),
        help="more training cases from other sources, each SOURCE=N (e.g. bfcl:simple=64): joined to the training "
        "split only, so held-out cases still come from data.source alone; held-out categories (bfcl:live_*) refused",
    )
    eval_cases: int = setting(52, help="held-out cases, disjoint from training by the split audit (4 per family)", ge=0)
    eval_dir: str = setting(
        "",
        help="held-out cases from a case directory (contractrl cases generate, e.g. a headline slice) instead of "
        "eval_cases drawn from data.source; the training cases are then drawn disjoint from them",
    )
    families: tuple[str, ...] = setting(
        CORRUPTION_FAMILIES, help="corruption families to draw cases from (those the source can host)"
    )
    max_attempts: int = setting(DEFAULT_MAX_ATTEMPTS, help="attempt budget B of every episode", ge=1)
    max_ops: int = setting(DEFAULT_MAX_OPS, help="operation budget K of every episode", ge=1)

    def __post_init__(self) -> None:
        try:
            check_source(self.source, self.request_style)
            check_trainable(self.source)
        except ConfigError as exc:
            raise ConfigError(f"data.source: {exc}") from exc
        for entry in self.mix:
            try:
                mix_entry(entry)
            except ConfigError as exc:
                raise ConfigError(f"data.mix: {exc}") from exc
        unknown = sorted(set(self.families) - set(CORRUPTION_FAMILIES))
        check(not unknown, f"data.families: unknown {unknown}; choose from {', '.join(CORRUPTION_FAMILIES)}")


@dataclass(frozen=True)
class OptimConfig:
    """AdamW without weight decay (LoRA adapters start at zero and move little) and a schedule."""

    lr: float = setting(1e-3, help="peak learning rate", gt=0)
    warmup_steps: int = setting(0, help="linear warmup steps", ge=0)
    schedule: Literal["constant", "linear", "cosine"] = setting("constant", help="decay after warmup")
    grad_clip: float = setting(1.0, help="gradient norm clip (0 disables it)", ge=0, why="(0 disables it)")


@dataclass(frozen=True)
class SFTConfig:
    """Supervised steps on gold answers: patches for the patch arms, whole objects for full_regen."""

    steps: int = setting(60, help="optimizer steps", ge=0)
    batch_size: int = setting(4, help="demonstrations per step", ge=1)
    micro_batch_size: int = setting(4, help="demonstrations per forward/backward (gradient accumulation above it)", ge=1)
    arm: SftArm = setting("patch_sft", help="whose prompt and gold answer to learn: a patch arm, or full_regen")
    max_tokens: int = setting(
        2048,
        help="leave out (with a warning) demonstrations longer than this: one outlier sets a step's memory",
        ge=16,
    )
    optim: OptimConfig = setting(
        factory=lambda: OptimConfig(lr=2e-3, warmup_steps=3, schedule="cosine"), help="optimizer and schedule"
    )


@dataclass(frozen=True)
class GRPOConfig:
    """Group-relative policy optimisation over whole repair episodes."""

    steps: int = setting(4, help="policy updates (the main job runs 2 for its 30-minute CPU budget; bench_learning 16)", ge=0)
    cases_per_step: int = setting(4, help="training cases per update", ge=1)
    group_size: int = setting(
        4,
        help="episodes per case; advantages are relative to the case's group",
        ge=2,
        why="(advantages are relative to the group)",
    )
    epochs: int = setting(1, help="passes over each rollout batch", ge=1)
    micro_batch_size: int = setting(4, help="generations per forward/backward", ge=1)
    clip_low: float = setting(0.2, help="PPO ratio clip below 1", ge=0, lt=1)
    clip_high: float = setting(0.28, help="PPO ratio clip above 1 (asymmetric, as in DAPO)", ge=0)
    kl_coef: float = setting(
        0.0,
        help="KL penalty to the adapter-off reference (0: none): the base model after this run's SFT, the SFT "
        "model when GRPO starts from a trained adapter (model.name=RUN/stages/sft stages=[grpo]); when on, "
        "groups without reward variance stay in the update for this term alone",
        ge=0,
    )
    scale_std: bool = setting(True, help="divide advantages by the group's standard deviation")
    baseline: Literal["mean", "leave_one_out"] = setting("mean", help="the group baseline subtracted from rewards")
    temperature: float = setting(1.0, help="sampling temperature of rollouts", gt=0)
    max_new_tokens: int = setting(64, help="generation limit per answer", ge=1)
    generation_batch_size: int = setting(16, help="prompts per generation call", ge=1)
    shield_k: int = setting(
        0,
        help="train through the shielded decision: K sampled proposals per decision, probed with the enumerated "
        "candidates, one committed; the loss applies to the committed answer's tokens (0: blind sampling; "
        "rollout/shield.py)",
        ge=0,
        why="(0: blind sampling)",
    )
    arm: GrpoArm = setting(DEFAULT_ARM, help="the prompt GRPO trains (a patch arm)")
    optim: OptimConfig = setting(
        factory=lambda: OptimConfig(lr=3e-5), help="optimizer; 2e-4 collapsed SmolLM2 to ABSTAIN in 6 steps"
    )


@dataclass(frozen=True)
class RewardConfig:
    """R = 1[semantic success] - collateral*C - retry*r - unsafe*U - tokens*T (docs/training.md)."""

    collateral: float = setting(0.1, help="charge per collateral edit (C)", ge=0)
    retry: float = setting(0.1, help="charge per retry (r)", ge=0)
    unsafe: float = setting(0.2, help="charge per unsafe action (U)", ge=0)
    tokens: float = setting(0.001, help="charge per generated token (T)", ge=0)


@dataclass(frozen=True)
class DeepSpeedConfig:
    """The DeepSpeed engine of each learner rank (CPU or GPU); ``enabled: false`` uses plain torch AdamW."""

    enabled: bool = setting(True, help="a DeepSpeed engine per learner rank; false: plain torch AdamW")
    # ZeRO-3 partitions the weights themselves; the learner generates rollouts and fingerprints
    # its weights between updates, which needs them whole on every rank
    zero_stage: int = setting(
        0,
        help="ZeRO stage 0, 1 or 2 (ZeRO-3 would shard the weights rollouts need whole)",
        ge=0,
        le=2,
        why="(ZeRO-3 is not supported)",
    )


@dataclass(frozen=True)
class ResourcesConfig:
    """Ray placement: learner ranks (data parallel) and validator/sandbox workers.

    ``placement: colocated`` generates with the learner's own model; ``separate`` runs a generator
    actor that receives the LoRA adapter tensors (or the weights) after every update.
    ``num_workers: 0`` runs transitions in the driver process; ``ray: false`` runs everything in
    this process (one colocated learner), which is what unit tests and debugging want.
    """

    ray: bool = setting(True, help="Ray actors; false runs one colocated learner in this process (tests, debugging)")
    num_learners: int = setting(1, help="data-parallel learner ranks", ge=1)
    learner_cpus: float = setting(1.0, help="CPUs reserved per learner rank", ge=0)
    learner_gpus: float = setting(0.0, help="GPUs per learner rank", ge=0)
    learner_threads: int = setting(
        2,
        help="torch threads per learner rank (0: one per reserved CPU); lets a rank use cores idle workers hold",
        ge=0,
    )
    num_workers: int = setting(1, help="validator/sandbox worker actors (0: transitions in the driver)", ge=0)
    worker_cpus: float = setting(1.0, help="CPUs per worker actor", ge=0)
    placement: Literal["colocated", "separate"] = setting(
        "colocated", help="generate with the learner's model, or on a generator actor that receives the weights"
    )
    generator_cpus: float = setting(1.0, help="CPUs of the separate generator actor", ge=0)
    generator_gpus: float = setting(0.0, help="GPUs of the separate generator actor", ge=0)

    def __post_init__(self) -> None:
        check(
            self.ray or (self.num_learners == 1 and self.placement == "colocated" and self.num_workers == 0),
            "resources.ray=false runs one colocated learner and no worker actors (num_learners=1, num_workers=0)",
        )


@dataclass(frozen=True)
class WandbConfig:
    """W&B tracking; ``offline`` (default) writes run files under the run directory, no network."""

    mode: Literal["offline", "online", "disabled"] = setting("offline", help="offline writes run files, no network")
    project: str = setting("contractrl", help="W&B project")
    entity: str | None = setting(None, help="W&B entity (team); none: the default")
    group: str | None = setting(None, help="W&B run group")
    tags: tuple[str, ...] = setting((), help="W&B run tags")


@dataclass(frozen=True)
class CheckpointConfig:
    every: int = setting(20, help="checkpoint every N optimizer steps or PPO iterations (and at each stage's end)", ge=1)
    keep: int = setting(2, help="checkpoints kept", ge=1)


@dataclass(frozen=True)
class EvalConfig:
    """Held-out evaluation after each stage: greedy decoding, one episode per case."""

    enabled: bool = setting(True, help="evaluate the held-out cases after each stage")
    max_new_tokens: int = setting(96, help="generation limit per answer", ge=1)
    batch_size: int = setting(16, help="prompts per generation call", ge=1)
    shield_k: int = setting(
        1,
        help="shielded decoding: K proposals per decision (the greedy one, then samples), probed with the enumerated "
        "candidates on the public contract before one is committed, beside the enumerated candidates "
        "(rollout/candidates.py) (0: blind; rollout/shield.py)",
        ge=0,
        why="(0: blind decoding)",
    )
    defer: bool = setting(
        True,
        help="shielded decoding weighs the enumerated candidates first and decodes proposals only where none settles "
        "the decision (an accepted one, or the policy's ABSTAIN): no held-out case lost, 3-7x fewer generated tokens "
        "(docs/notebook/2026-12-07-deferring-to-candidates.md)",
    )


@dataclass(frozen=True)
class TrainConfig:
    out: str = setting("runs/train", help="the training run's directory")
    resume: bool = setting(False, help="continue the run in out from its last checkpoint")
    seed: int = setting(0, help="seed of batches, sampling and weights")
    stages: tuple[Stage, ...] = setting(("sft", "grpo"), help="stages to run, in order")
    model: ModelConfig = setting(factory=ModelConfig, help="the policy model")
    data: DataConfig = setting(factory=DataConfig, help="training and held-out cases")
    sft: SFTConfig = setting(factory=SFTConfig, help="supervised steps on gold answers")
    grpo: GRPOConfig = setting(factory=GRPOConfig, help="group-relative policy optimisation over episodes")
    reward: RewardConfig = setting(factory=RewardConfig, help="the episode reward's charges")
    deepspeed: DeepSpeedConfig = setting(factory=DeepSpeedConfig, help="the learners' DeepSpeed engine")
    resources: ResourcesConfig = setting(factory=ResourcesConfig, help="Ray placement")
    wandb: WandbConfig = setting(factory=WandbConfig, help="W&B tracking")
    checkpoint: CheckpointConfig = setting(factory=CheckpointConfig, help="checkpoints for resume")
    eval: EvalConfig = setting(factory=EvalConfig, help="held-out evaluation")
    experimental: ExperimentalConfig = setting(
        factory=ExperimentalConfig, help="options that exist for an experiment, one sub-section per feature"
    )

    # keys of earlier configs: an old YAML file or override naming one fails with the new name
    MOVED_KEYS: ClassVar[dict[str, str]] = {
        "data.contrast_form": "experimental.contrast.form",
        "sft.contrast_unrepairable": "experimental.contrast.sft",
        "grpo.contrast_unrepairable": "experimental.contrast.grpo",
        "sft.decision_weight": "experimental.contrast.decision_weight",
        "sft.noisy_report_retries": "experimental.noisy_retries.enabled",
        "grpo.families": "experimental.grpo_families.families",
        "grpo.family_weights": "experimental.grpo_families.weights",
        "sft.rank_negatives": "experimental.ranking.negatives",
        "sft.rank_weight": "experimental.ranking.weight",
        "sft.rank_margin": "experimental.ranking.margin",
        "data.disjoint": "experimental.split.disjoint",
        "data.tool_families": "experimental.transfer.tool_families",
    }
    # ... and the keys removed: options whose experiment showed no gain, and constants nobody set
    REMOVED_KEYS: ClassVar[dict[str, str]] = {
        "sft.retry_demos": "later-decision demonstrations took single-field success from 0.88 to 0.56 and did "
        'not stop repeated attempts (benchmarks/RESULTS.md, "Later-decision demonstrations")',
        "sft.abstain_repeat": "ABSTAIN twice took pooled held-out success from 0.685 to 0.585 (benchmarks/RESULTS.md, "
        '"Later-decision demonstrations and ABSTAIN repetition")',
        "sft.contrast_repeat": "twin pairs four times (with clause contrasts and decision weight 20) lost 23 and "
        "gained 10 of 240 held-out cases; the recipe that worked gives each pair once (benchmarks/RESULTS.md, "
        '"Contrasts without a place cue")',
        "grpo.credit": "per-decision credit left every held-out outcome as episode credit did (G7 against G6, "
        "benchmarks/RESULTS.md); every decision takes its episode's advantage",
        "grpo.contrast_baseline": "one baseline for the twins was neutral on both seeds (13 gained, 8 lost of 740; "
        'benchmarks/RESULTS.md, "One baseline for the twins"); each case is its own group',
        "grpo.eps": "the guard added to a group's standard deviation is the constant 1e-4 (trainer/grpo.py)",
        "eval.shield_enumerate": "the shield always scores the enumerated candidates: without them held-out success "
        "was 0.462 against 0.923 (docs/notebook/2026-12-05-shielded-decoding.md)",
        "wandb.sample_episodes": "W&B logs 8 episodes a GRPO step as a table (trainer/loop.py)",
        "model.lora.dropout": "LoRA adapters have no dropout (no run set it)",
        "sft.optim.weight_decay": "AdamW runs without weight decay (no run set it)",
        "grpo.optim.weight_decay": "AdamW runs without weight decay (no run set it)",
        "deepspeed.offload_optimizer": "the optimizer state stays on the learner's device (no run set it; a LoRA "
        "adapter's state is megabytes)",
    }

    @property
    def tiny(self) -> TinyConfig:
        """The shape of the ``tiny`` preset under this config (read only when ``model.name`` is tiny)."""
        return TinyConfig(hidden_size=self.model.hidden_size, num_hidden_layers=self.model.layers, seed=self.seed)

    def __post_init__(self) -> None:
        check(bool(self.stages), "stages must name at least one of sft, grpo")
        check(len(set(self.stages)) == len(self.stages), f"stages must not repeat, got {list(self.stages)}")
        check(list(self.stages) == sorted(self.stages, key=["sft", "grpo"].index), "stages run in the order sft, grpo")
        # GRPO (a patch arm) starts from what SFT taught, so SFT must teach patches too
        # (Patch-SFT -> ContractRL is the paper's recipe; a whole-object SFT cannot seed patch GRPO)
        check(
            self.stages != ("sft", "grpo") or self.sft.arm in PATCH_ARMS,
            f"sft.arm ({self.sft.arm}) must be a patch arm ({', '.join(sorted(PATCH_ARMS))}) when GRPO follows it",
        )
        families = self.experimental.grpo_families.families
        check(
            "grpo" not in self.stages or bool(set(families) & set(self.data.families)),
            f"experimental.grpo_families.families {list(families)} shares no family with data.families: GRPO would have no case",
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
