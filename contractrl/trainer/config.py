"""The training config tree: every knob of ``contractrl train`` and of a Tune trial, typed.

The defaults *are* the main job's training (``contractrl run``): SmolLM2-135M-Instruct with LoRA,
the built-in catalog, local Ray, W&B offline, sized for a 2-core CPU. There is no other copy:
``contractrl run`` takes them as they are, and ``tune_configs/tiny.yaml`` states only how the fast
tiny-model configuration differs. On the command line ``key=value`` overrides win. Every field
carries a one-line help text (``--print-config`` shows it), and range checks live next to the
fields, so a bad value fails at load time with the key's name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from ..configtree import check, setting
from ..errors import ConfigError
from ..tasks.arms import DEFAULT_ARM, PATCH_ARMS, GrpoArm, SftArm
from ..tasks.audit import UNITS
from ..tasks.bfcl_wheel import check_trainable
from ..tasks.catalog import TOOL_FAMILIES
from ..tasks.corruptions import CORRUPTION_FAMILIES
from ..tasks.sources import check_source
from ..validators.transition import DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_OPS
from .presets import PRESETS, TinyConfig

Stage = Literal["sft", "grpo"]


@dataclass(frozen=True)
class LoraConfig:
    """peft LoRA on the attention and MLP projections; ``enabled: false`` trains every weight."""

    enabled: bool = setting(True, help="train LoRA adapters; false trains every weight (full fine-tuning)")
    r: int = setting(16, help="adapter rank")
    alpha: int = setting(32, help="LoRA scaling numerator (the update is scaled by alpha / r)")
    dropout: float = setting(0.0, help="dropout on the adapter input, in [0, 1)")
    target_modules: tuple[str, ...] = setting(
        ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
        help="module names that get adapters (attention and MLP projections)",
    )
    top_layers: int = setting(
        0,
        help="adapt only the top N transformer layers (0: all); backprop stops at the lowest adapted layer, "
        "so the top third costs about half a full-LoRA step",
    )

    def __post_init__(self) -> None:
        check(self.top_layers >= 0, f"model.lora.top_layers must be >= 0 (0 adapts every layer), got {self.top_layers}")
        check(self.r >= 1, f"model.lora.r must be >= 1, got {self.r}")
        check(self.alpha >= 1, f"model.lora.alpha must be >= 1, got {self.alpha}")
        check(0.0 <= self.dropout < 1.0, f"model.lora.dropout must be in [0, 1), got {self.dropout}")
        check(bool(self.target_modules), "model.lora.target_modules must name at least one module")


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
    hidden_size: int = setting(64, help="tiny preset only: hidden width (the scaling sweep varies it)")
    layers: int = setting(2, help="tiny preset only: transformer layers")
    cache_dir: str = setting("runs/models", help="where presets are built once and cached")
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
            self.hidden_size >= 16 and self.hidden_size % 8 == 0,
            f"model.hidden_size must be >= 16 and a multiple of 8, got {self.hidden_size}",
        )
        check(self.layers >= 1, f"model.layers must be >= 1, got {self.layers}")
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
    train_cases: int = setting(256, help="training cases (SFT demonstrations and GRPO prompts)")
    mix: tuple[str, ...] = setting(
        (),
        help="more training cases from other sources, each SOURCE=N (e.g. bfcl:simple=64): joined to the training "
        "split only, so held-out cases still come from data.source alone; held-out categories (bfcl:live_*) refused",
    )
    eval_cases: int = setting(52, help="held-out cases, disjoint from training by the split audit (4 per family)")
    families: tuple[str, ...] = setting(
        CORRUPTION_FAMILIES, help="corruption families to draw cases from (those the source can host)"
    )
    tool_families: tuple[str, ...] = setting(TOOL_FAMILIES, help="tool families of the built-in catalog to draw from")
    max_attempts: int = setting(DEFAULT_MAX_ATTEMPTS, help="attempt budget B of every episode")
    max_ops: int = setting(DEFAULT_MAX_OPS, help="operation budget K of every episode")
    contrast_form: Literal["appended", "clause"] = setting(
        "appended",
        help="how an unrepairable case's minimal contrast (sft/grpo.contrast_unrepairable) states the withheld "
        "value: appended after the request's last clause, or as one more clause at a seeded place among them; a "
        "policy trained on many appended contrasts learned the place, not the value (tasks/contrast.py)",
    )
    disjoint: tuple[str, ...] = setting(
        ("case_id", "candidate_fingerprint", "target_fingerprint", "semantic_cluster"),
        help="audit units on which held-out cases must not overlap training (the audit's default also pins op "
        "sequences, which 30 tools exhaust for small op spaces)",
    )

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
    lr: float = setting(1e-3, help="peak learning rate")
    weight_decay: float = setting(0.0, help="AdamW weight decay")
    warmup_steps: int = setting(0, help="linear warmup steps")
    schedule: Literal["constant", "linear", "cosine"] = setting("constant", help="decay after warmup")
    grad_clip: float = setting(1.0, help="gradient norm clip (0 disables it)")

    def __post_init__(self) -> None:
        check(self.lr > 0, f"lr must be > 0, got {self.lr}")
        check(self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}")
        check(self.warmup_steps >= 0, f"warmup_steps must be >= 0, got {self.warmup_steps}")
        check(self.grad_clip >= 0, f"grad_clip must be >= 0 (0 disables it), got {self.grad_clip}")


@dataclass(frozen=True)
class SFTConfig:
    """Supervised steps on gold answers: patches for the patch arms, whole objects for full_regen."""

    steps: int = setting(60, help="optimizer steps")
    batch_size: int = setting(4, help="demonstrations per step")
    micro_batch_size: int = setting(4, help="demonstrations per forward/backward (gradient accumulation above it)")
    arm: SftArm = setting("patch_sft", help="whose prompt and gold answer to learn: a patch arm, or full_regen")
    max_tokens: int = setting(
        2048, help="leave out (with a warning) demonstrations longer than this: one outlier sets a step's memory"
    )
    retry_demos: bool = setting(
        False,
        help="also demonstrate the decision after a typical rejected attempt (tasks/demonstrations.py); "
        "off: with SmolLM2 it diluted first decisions and did not stop repeated attempts (RESULTS.md)",
    )
    noisy_report_retries: bool = setting(
        True,
        help="also demonstrate the decision after a rejected attempt for cases whose first report is noisy (a "
        "wrong or parent pointer, a garbled message): the first decision to show the verifier's real report; "
        "+0.069 held-out with SmolLM2 (RESULTS.md)",
    )
    abstain_repeat: int = setting(1, help="repeat ABSTAIN demonstrations this many times (a rare first-token choice)")
    contrast_unrepairable: bool = setting(
        True,
        help="pair each unrepairable case with its minimal contrast: the value stated in the request, the repair "
        "as the answer (tasks/demonstrations.py)",
    )
    decision_weight: float = setting(
        1.0,
        help="weight of each answer's first token, the decision between ABSTAIN and a patch, in the loss (the "
        "others weigh 1): at 1 it is about 1/40 of a patch demonstration's loss; the logged loss is the weighted mean",
    )
    contrast_repeat: int = setting(
        1,
        help="give each twin pair (an unrepairable case's first decision and its contrast) this many times in all: "
        "at 1 the pairs are a few percent of the demonstrations and the request barely moved ABSTAIN (RESULTS.md)",
    )
    rank_negatives: int = setting(
        0,
        help="per demonstration, this many enumerated answers the public verifier accepts that do not make the "
        "gold answer's object, each contrasted with the gold answer (trainer/ranking.py): a shielded policy "
        "commits the best-scoring accepted candidate, so SFT trains that ranking; 0: off",
    )
    rank_weight: float = setting(1.0, help="weight of the ranking term beside the per-token cross-entropy")
    rank_margin: float = setting(
        2.0, help="how many nats the gold answer's log-probability should exceed an accepted wrong one's"
    )
    optim: OptimConfig = setting(
        factory=lambda: OptimConfig(lr=2e-3, warmup_steps=3, schedule="cosine"), help="optimizer and schedule"
    )

    def __post_init__(self) -> None:
        check(self.rank_negatives >= 0, f"sft.rank_negatives must be >= 0, got {self.rank_negatives}")
        check(self.rank_weight >= 0, f"sft.rank_weight must be >= 0, got {self.rank_weight}")
        check(self.abstain_repeat >= 1, f"sft.abstain_repeat must be >= 1, got {self.abstain_repeat}")
        check(self.contrast_repeat >= 1, f"sft.contrast_repeat must be >= 1, got {self.contrast_repeat}")
        check(self.decision_weight > 0, f"sft.decision_weight must be > 0, got {self.decision_weight}")
        check(
            self.contrast_repeat == 1 or self.contrast_unrepairable,
            "sft.contrast_repeat repeats the twin pairs, but there are none: set sft.contrast_unrepairable=true",
        )
        check(self.max_tokens >= 16, f"sft.max_tokens must be >= 16, got {self.max_tokens}")
        check(self.steps >= 0, f"sft.steps must be >= 0, got {self.steps}")
        check(self.batch_size >= 1, f"sft.batch_size must be >= 1, got {self.batch_size}")
        check(self.micro_batch_size >= 1, f"sft.micro_batch_size must be >= 1, got {self.micro_batch_size}")


@dataclass(frozen=True)
class GRPOConfig:
    """Group-relative policy optimisation over whole repair episodes."""

    steps: int = setting(4, help="policy updates (the main job runs 2 for its 30-minute CPU budget; bench_learning 16)")
    cases_per_step: int = setting(4, help="training cases per update")
    group_size: int = setting(4, help="episodes per case; advantages are relative to the case's group")
    epochs: int = setting(1, help="passes over each rollout batch")
    micro_batch_size: int = setting(4, help="generations per forward/backward")
    clip_low: float = setting(0.2, help="PPO ratio clip below 1")
    clip_high: float = setting(0.28, help="PPO ratio clip above 1 (asymmetric, as in DAPO)")
    kl_coef: float = setting(
        0.0,
        help="KL penalty to the adapter-off reference (0: none): the base model after this run's SFT, the SFT "
        "model when GRPO starts from a trained adapter (model.name=RUN/stages/sft stages=[grpo]); when on, "
        "groups without reward variance stay in the update for this term alone",
    )
    scale_std: bool = setting(True, help="divide advantages by the group's standard deviation")
    baseline: Literal["mean", "leave_one_out"] = setting("mean", help="the group baseline subtracted from rewards")
    credit: Literal["episode", "decision"] = setting(
        "episode",
        help="episode: every decision takes its episode's advantage; decision: decision k is compared only "
        "with the group's episodes that reached a decision k (trainer/grpo.py)",
    )
    eps: float = setting(1e-4, help="added to the group's standard deviation")
    temperature: float = setting(1.0, help="sampling temperature of rollouts")
    max_new_tokens: int = setting(64, help="generation limit per answer")
    generation_batch_size: int = setting(16, help="prompts per generation call")
    shield_k: int = setting(
        0,
        help="train through the shielded decision: K sampled proposals per decision, probed with the enumerated "
        "candidates, one committed; the loss applies to the committed answer's tokens (0: blind sampling; "
        "rollout/shield.py)",
    )
    arm: GrpoArm = setting(DEFAULT_ARM, help="the prompt GRPO trains (a patch arm)")
    families: tuple[str, ...] = setting(
        CORRUPTION_FAMILIES,
        help="corruption families GRPO draws its training cases from (SFT sees them all); leaving out "
        "immutable_field and unrepairable leaves abstention to SFT",
    )
    family_weights: dict[str, float] = setting(
        factory=dict,
        help="relative weight of a family's cases in GRPO batches (unlisted: 1; none listed: seeded epochs "
        "over the cases, each case once per epoch), e.g. grpo.family_weights.immutable_field=3",
    )
    contrast_unrepairable: bool = setting(
        False,
        help="roll out each drawn unrepairable case's minimal contrast (its call and report, the withheld value "
        "stated in the request: tasks/contrast.py) in the same step, so abstaining is paid on one and charged on "
        "the other within one update",
    )
    contrast_baseline: Literal["own", "pair"] = setting(
        "own",
        help="own: a contrast's episodes share a baseline only with each other, like any case's; pair: an "
        "unrepairable case and its contrast are one group of 2 x group_size, so abstaining on both twins is paid "
        "on one and charged on the other even when neither side alone varies (needs grpo.contrast_unrepairable)",
    )
    optim: OptimConfig = setting(
        factory=lambda: OptimConfig(lr=3e-5), help="optimizer; 2e-4 collapsed SmolLM2 to ABSTAIN in 6 steps"
    )

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
        check(self.shield_k >= 0, f"grpo.shield_k must be >= 0 (0: blind sampling), got {self.shield_k}")
        unknown = sorted(set(self.families) - set(CORRUPTION_FAMILIES))
        check(not unknown, f"grpo.families: unknown {unknown}; choose from {', '.join(CORRUPTION_FAMILIES)}")
        check(bool(self.families), "grpo.families: at least one family is needed")
        unweighable = sorted(set(self.family_weights) - set(self.families))
        check(not unweighable, f"grpo.family_weights: {unweighable} not among grpo.families {list(self.families)}")
        for family, weight in self.family_weights.items():
            check(
                math.isfinite(weight) and weight > 0,
                f"grpo.family_weights.{family} must be a finite number > 0, got {weight} (leave a family out with grpo.families)",
            )
        check(
            not self.contrast_unrepairable or "unrepairable" in self.families,
            f"grpo.contrast_unrepairable pairs unrepairable cases with their contrasts, but grpo.families {list(self.families)} "
            "leaves unrepairable out",
        )
        check(
            self.contrast_baseline == "own" or self.contrast_unrepairable,
            "grpo.contrast_baseline=pair joins each unrepairable case's group with its contrast's, but there are no "
            "contrasts: set grpo.contrast_unrepairable=true",
        )

    def cautions(self) -> tuple[str, ...]:
        """Settings that pass every check but were measured to hurt: said once, at the stage's start,
        rather than refused, since a study may want exactly that run (benchmarks/RESULTS.md)."""
        found: list[str] = []
        weight = self.family_weights.get("unrepairable", 1.0)
        if weight > 1 and not self.contrast_unrepairable:
            found.append(
                f"grpo.family_weights.unrepairable={weight:g} without grpo.contrast_unrepairable=true: measured to teach "
                "abstention on missing required fields (missing_required 0.75 to 0.05 on 240 held-out cases; "
                'benchmarks/RESULTS.md, "What the contrast does")'
            )
        return tuple(found)


@dataclass(frozen=True)
class RewardConfig:
    """R = 1[semantic success] - collateral*C - retry*r - unsafe*U - tokens*T (docs/training.md)."""

    collateral: float = setting(0.1, help="charge per collateral edit (C)")
    retry: float = setting(0.1, help="charge per retry (r)")
    unsafe: float = setting(0.2, help="charge per unsafe action (U)")
    tokens: float = setting(0.001, help="charge per generated token (T)")

    def __post_init__(self) -> None:
        for name in ("collateral", "retry", "unsafe", "tokens"):
            check(getattr(self, name) >= 0, f"reward.{name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class DeepSpeedConfig:
    """The DeepSpeed engine of each learner rank (CPU or GPU); ``enabled: false`` uses plain torch AdamW."""

    enabled: bool = setting(True, help="a DeepSpeed engine per learner rank; false: plain torch AdamW")
    zero_stage: int = setting(0, help="ZeRO stage 0, 1 or 2 (ZeRO-3 would shard the weights rollouts need whole)")
    offload_optimizer: bool = setting(False, help="ZeRO optimizer state on the CPU")

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

    ray: bool = setting(True, help="Ray actors; false runs one colocated learner in this process (tests, debugging)")
    num_learners: int = setting(1, help="data-parallel learner ranks")
    learner_cpus: float = setting(1.0, help="CPUs reserved per learner rank")
    learner_gpus: float = setting(0.0, help="GPUs per learner rank")
    learner_threads: int = setting(
        2, help="torch threads per learner rank (0: one per reserved CPU); lets a rank use cores idle workers hold"
    )
    num_workers: int = setting(1, help="validator/sandbox worker actors (0: transitions in the driver)")
    worker_cpus: float = setting(1.0, help="CPUs per worker actor")
    placement: Literal["colocated", "separate"] = setting(
        "colocated", help="generate with the learner's model, or on a generator actor that receives the weights"
    )
    generator_cpus: float = setting(1.0, help="CPUs of the separate generator actor")
    generator_gpus: float = setting(0.0, help="GPUs of the separate generator actor")

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

    mode: Literal["offline", "online", "disabled"] = setting("offline", help="offline writes run files, no network")
    project: str = setting("contractrl", help="W&B project")
    entity: str | None = setting(None, help="W&B entity (team); none: the default")
    group: str | None = setting(None, help="W&B run group")
    tags: tuple[str, ...] = setting((), help="W&B run tags")
    sample_episodes: int = setting(8, help="episodes logged as a table per GRPO step")


@dataclass(frozen=True)
class CheckpointConfig:
    every: int = setting(20, help="checkpoint every N optimizer steps or PPO iterations (and at each stage's end)")
    keep: int = setting(2, help="checkpoints kept")

    def __post_init__(self) -> None:
        check(self.every >= 1, f"checkpoint.every must be >= 1, got {self.every}")
        check(self.keep >= 1, f"checkpoint.keep must be >= 1, got {self.keep}")


@dataclass(frozen=True)
class EvalConfig:
    """Held-out evaluation after each stage: greedy decoding, one episode per case."""

    enabled: bool = setting(True, help="evaluate the held-out cases after each stage")
    max_new_tokens: int = setting(96, help="generation limit per answer")
    batch_size: int = setting(16, help="prompts per generation call")
    shield_k: int = setting(
        1,
        help="shielded decoding: K proposals per decision (the greedy one, then samples), probed with the enumerated "
        "candidates on the public contract before one is committed (0: blind; rollout/shield.py)",
    )
    shield_enumerate: bool = setting(True, help="the shield also scores the enumerated candidates (rollout/candidates.py)")

    def __post_init__(self) -> None:
        check(self.shield_k >= 0, f"eval.shield_k must be >= 0 (0: blind decoding), got {self.shield_k}")


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
        check(
            "grpo" not in self.stages or bool(set(self.grpo.families) & set(self.data.families)),
            f"grpo.families {list(self.grpo.families)} shares no family with data.families: GRPO would have no case",
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
