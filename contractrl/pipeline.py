"""``contractrl run``: the main job, end to end, on its embedded default.

One command takes a new user from nothing to a report:

1. **ContractRL** training (``out/train``): cases and their split audit, SFT on gold patches with
   the Patch-SFT prompt, then GRPO over whole repair episodes with the ContractRL prompt. The
   trainer evaluates the held-out cases after each stage, so the SFT stage's run *is* the Patch-SFT
   arm (supervised only) and the GRPO stage's run is the ContractRL arm.
2. **Whole-object** training (``out/whole-object``): SFT on gold target objects, evaluated as the
   full-regeneration arm; with ``whole_object.constrained=true`` the same weights decoded under the
   tool's schema grammar are the constrained-decoding arm too (``out/eval/constrained``; off by
   default: the summary compares ContractRL with regeneration and the heuristic, and the headline
   benchmark, ``benchmarks/bench_headline.py``, runs constrained decoding on every slice).
3. The non-learned references on the same held-out cases: the schema-guided heuristic and oracle
   replay (``out/eval/heuristic``, ``out/eval/replay``).
4. Every run is frozen as it is written; the report joins them to the held-out targets afterwards
   (``out/report``). Every arm sees the same public block (same-information mode).

Each step is skipped when its output already exists and is complete, so running the same command
again after an interruption resumes it. This module, like ``trainer/entry.py``, hands the two
halves of a case to their separate owners: the replay reference is the only policy given targets,
and it is the mechanism check, not a learner.
"""

from __future__ import annotations

import functools
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from .analysis.options import ReportConfig
from .analysis.report import Report, build_report
from .configtree import check, derive, from_dict, merge, nest, parse_overrides, setting, to_dict
from .experiments.studies import StudySetup, evaluate, replay_policy
from .rollout.options import DEFAULT_MAX_NEW_TOKENS
from .rollout.run import RolloutRun
from .tasks.bfcl_wheel import CATEGORIES as BFCL_CATEGORIES
from .trainer.config import TrainConfig

# The embedded default is MainJobConfig's defaults below: TrainConfig's own defaults
# (trainer/config.py) with MAIN_JOB's changes. SmolLM2-135M-Instruct with LoRA (a real
# pretrained model, taken from a PyPI wheel; no model hub), the built-in tool catalog, local Ray,
# sized for about 30 minutes on a 2-core CPU (plus DeepSpeed's one-time op build and the model's
# one-time conversion).
#
# MAIN_JOB's changes fit that budget; all were measured on a 2-core EPYC (benchmarks/RESULTS.md).
# - Paraphrased requests (values in words, not JSON to copy), the headline request style.
# - GRPO samples through the shielded decision (grpo.shield_k=1), as held-out decisions are shielded
#   (eval.shield_k=1, the default): after the same 60 SFT steps the shield took held-out success from
#   0.365 to 0.923 ("Shielded decoding").
# - SFT ranks the gold answer above two accepted wrong candidates (experimental.ranking.negatives=2), the order the
#   shield commits by: 1.000 against 0.904 of 52 held-out cases for the same SFT without it ("A ranking
#   term in SFT"); the whole-object arm, trained the same way, reached 1.000 too.
# - Two GRPO steps show the stage as four did; neither moved held-out success.
# - LoRA on the top 15 of SmolLM2's 30 layers stops the backward pass halfway: 21.9 against 31.7
#   minutes for the whole job, at 3 of 52 held-out cases fewer for every learned arm (p >= 0.55 each).
# - Constrained decoding is left to the headline benchmark (whole_object.constrained=false): the
#   summary compares ContractRL with regeneration and the heuristic, and on a CPU without native
#   bf16 it cost 3.5 of the job's minutes.
# - The report scores its few hundred episodes in this process (report.workers=0): a one-actor Ray
#   Data pool took 49 s to start on 2 busy cores for what takes under a second here; a large join still
#   takes report.workers=N.
MAIN_JOB: dict[str, Any] = {
    "train": {
        "model": {"lora": {"top_layers": 15}},
        "data": {"request_style": "paraphrase"},
        "grpo": {"steps": 2, "shield_k": 1},
        "experimental": {"ranking": {"negatives": 2}},
    },
    "report": {"workers": 0},
}

# --quick: the same pipeline with the tiny preset, small enough for a first look in a few minutes.
# tiny is built from a config and cannot learn the task: it shows the mechanics, not learning.
QUICK: dict[str, Any] = {
    "out": "runs/quick",
    "train": {
        "model": {"name": "tiny", "hidden_size": 64, "layers": 2, "lora": {"enabled": False}},
        "data": {"train_cases": 64, "eval_cases": 16},
        "sft": {"steps": 20, "batch_size": 8, "optim": {"lr": 3.0e-3, "warmup_steps": 2}},
        "grpo": {"steps": 2, "cases_per_step": 4, "group_size": 2, "max_new_tokens": 32, "optim": {"lr": 2.0e-4}},
        "eval": {"max_new_tokens": 48},
        "checkpoint": {"every": 10},
    },
    "whole_object": {"sft_steps": 10, "max_new_tokens": 64},
    "bfcl": {"cases": 6},
}
# the one line a summary of a tiny-model run carries
TINY_NOTE = (
    "Note: the tiny model is built from a config and cannot learn the task; it shows the mechanics only. "
    "`make run` (SmolLM2-135M with LoRA) shows learning."
)


@dataclass(frozen=True)
class WholeObjectConfig:
    """The model behind the full-regeneration and constrained-decoding arms."""

    enabled: bool = setting(True, help="train and evaluate the whole-object arms")
    constrained: bool = setting(
        False,
        help="also decode the whole-object model under the tool's schema grammar (the constrained-decoding arm; "
        "3.5 more minutes on a 2-core CPU without native bf16; the headline benchmark runs it on every slice)",
    )
    sft_steps: int = setting(60, help="SFT steps on gold target objects (the patch arms' SFT budget)", ge=1)
    max_new_tokens: int = setting(DEFAULT_MAX_NEW_TOKENS, help="generation limit per whole object", ge=8)
    policy_actors: int = setting(0, help="held-out evaluation on N Ray actors, each holding the model (0 = here)", ge=0)
    gpus_per_actor: float = setting(0.0, help="GPUs per policy actor", ge=0)


@dataclass(frozen=True)
class BfclSliceConfig:
    """Real users' questions from the BFCL wheel, evaluated after the built-in cases, never trained on."""

    category: str = setting(
        "live_simple",
        help="a BFCL v4 category of the bfcl-eval wheel (tasks/bfcl_wheel.py; '' skips the slice); the live "
        "categories are held out: evaluated, never trained or selected on",
    )
    cases: int = setting(24, help="cases drawn from the category, over the corruption families it can host", ge=1)

    def __post_init__(self) -> None:
        check(
            self.category == "" or self.category in BFCL_CATEGORIES,
            f"bfcl.category: unknown BFCL category {self.category!r}; choose from {', '.join(BFCL_CATEGORIES)}, or ''",
        )


@dataclass(frozen=True)
class MainJobConfig:
    out: str = setting("runs/main", help="the main job's directory (training under out/train)")
    train: TrainConfig = setting(factory=TrainConfig, help="the ContractRL / Patch-SFT training")
    whole_object: WholeObjectConfig = setting(factory=WholeObjectConfig, help="the whole-object arms' model")
    references: bool = setting(True, help="also run the heuristic and oracle-replay references")
    bfcl: BfclSliceConfig = setting(factory=BfclSliceConfig, help="a slice of real users' questions (BFCL), evaluated only")
    report: ReportConfig = setting(factory=ReportConfig, help="the join and the report")


def load_main_job_config(
    *, quick: bool = False, out: str | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> MainJobConfig:
    """The embedded default, then ``--quick``, then ``--out``, then ``key=value`` overrides."""
    data = merge(MAIN_JOB, QUICK if quick else {})
    data.setdefault("out", MainJobConfig.out)
    if out is not None:
        data = merge(data, {"out": out})
    data = merge(data, nest(parse_overrides(list(overrides))))
    # the training run lives inside the run directory (the whole-object run beside it)
    data = merge(data, {"train": {"out": str(Path(data["out"]) / "train"), "resume": True}})
    return from_dict(MainJobConfig, data)


@dataclass(frozen=True)
class MainJobResult:
    out: Path
    report: Report
    summary: list[dict[str, Any]]


def _train_config(config: MainJobConfig, name: str, extra: dict[str, Any]) -> TrainConfig:
    return derive(config.train, extra, out=str(Path(config.out) / name), resume=True)


def uses_ray(config: MainJobConfig) -> bool:
    """Whether any step of the job starts Ray actors (training, the report's scoring, policy actors)."""
    return config.train.resources.ray or config.report.workers > 0 or config.whole_object.policy_actors > 0


def attach_ray(address: str | None = None) -> str:
    """Start or join Ray for the main job, and say which.

    Ray's own default (``ray.init()`` with no address) silently joins whatever head was last
    started on this machine, someone else's included. The main job joins a running cluster only
    when asked, by ``address`` (``--ray-address``) or ``RAY_ADDRESS`` (which ``ray job submit``
    sets for its jobs); otherwise it starts a local instance of its own, which ends with the job.
    """
    import os

    import ray

    from .rollout.pool import init_ray

    target = address or os.environ.get("RAY_ADDRESS") or None
    if not ray.is_initialized():
        init_ray(target or "local")
    total = ray.cluster_resources()
    size = f"{total.get('CPU', 0):g} CPUs, {total.get('GPU', 0):g} GPUs"
    if target:
        return f"Ray: attached to the cluster at {target} ({size})"
    return f"Ray: a local instance of its own ({size}); --ray-address or RAY_ADDRESS attaches to a running cluster"


def run_main_job(
    config: MainJobConfig, *, progress: bool = True, log: TextIO = sys.stderr, ray_address: str | None = None
) -> MainJobResult:
    """Every step of the main job; ``ray_address`` joins a running Ray cluster (see :func:`attach_ray`)."""
    from .trainer.entry import finished_run, train

    def train_once(train_config: TrainConfig) -> None:
        if finished_run(train_config) is not None:
            say(f"   {train_config.out} finished earlier with this config: kept")
        else:
            train(train_config, progress=progress)

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "run_config.json").write_text(json.dumps(to_dict(config), indent=2) + "\n")

    def say(text: str) -> None:
        print(f"[contractrl run] {text}", file=log, flush=True)

    if uses_ray(config):
        say(attach_ray(ray_address))
    sft, grpo = config.train.sft.steps, config.train.grpo.steps
    say(f"1/4 training ContractRL: SFT ({sft} steps), then GRPO ({grpo} steps) -> {out / 'train'}")
    train_once(_train_config(config, "train", {}))
    eval_cases = out / "train" / "cases" / "eval"

    whole_dir = None
    if config.whole_object.enabled:
        whole = config.whole_object
        say(f"2/4 training the whole-object model: SFT ({whole.sft_steps} steps) -> {out / 'whole-object'}")
        extra = {
            "stages": ["sft"],
            "sft": {"steps": whole.sft_steps, "arm": "full_regen"},
            "eval": {"max_new_tokens": whole.max_new_tokens},
        }
        train_once(_train_config(config, "whole-object", extra))
        whole_dir = out / "whole-object" / "stages" / "sft"

    others = "constrained decoding and the references" if config.whole_object.constrained else "the references"
    say(f"3/4 evaluating {others} on the held-out cases")
    _evaluate_others(config, eval_cases, whole_dir, out / "eval", progress)
    if config.bfcl.category:
        say(f"   and every system on {config.bfcl.cases} cases of BFCL {config.bfcl.category} (real users' questions)")
        skipped = _evaluate_bfcl(config, whole_dir, out / "bfcl", progress)
        if skipped:
            say(f"   BFCL slice skipped: {skipped}")

    say("4/4 joining the frozen ledgers to the held-out targets and writing the report")
    report = build_report(
        [out],
        out / "report",
        thresholds=config.report.thresholds,
        use_ray=config.report.workers > 0,
        workers=max(1, config.report.workers),
        progress=progress,
    )
    return MainJobResult(out, report, list(report.summary))


def _evaluate_others(config: MainJobConfig, eval_cases: Path, whole_dir: Path | None, out: Path, progress: bool) -> None:
    from .rollout.hf_policy import SamplingConfig
    from .rollout.policies import HeuristicPolicy, Policy
    from .rollout.runner import LocalPool
    from .tasks.store import read_public

    cases = read_public(eval_cases)
    pool = LocalPool(1)
    labels = {"study": "main", "mode": "same_information"}
    model_label = config.train.model.label
    if whole_dir is not None and config.whole_object.constrained:
        from .rollout.policy_pool import ActorPolicy, PolicySpec
        from .trainer.presets import load_model

        whole = config.whole_object
        sampling = SamplingConfig(
            max_new_tokens=whole.max_new_tokens,
            do_sample=False,
            batch_size=config.train.eval.batch_size,
            shield_k=config.train.eval.shield_k,
            shield_defer=config.train.eval.defer,
        )
        load = functools.partial(
            load_model, str(Path(whole_dir).resolve()), cache_dir=Path(config.train.model.cache_dir).resolve()
        )
        spec = PolicySpec(load, sampling=sampling, name=model_label, cpu_bf16=config.train.model.cpu_bf16)
        policy: Policy = (
            ActorPolicy(spec, whole.policy_actors, num_gpus=whole.gpus_per_actor) if whole.policy_actors else spec.build()
        )
        setup = StudySetup(
            lambda _: policy, pool, arm="constrained", seed=config.train.seed, model=model_label, stage="sft", progress=progress
        )
        try:
            evaluate(setup, cases, out / "constrained", labels)
        finally:
            if isinstance(policy, ActorPolicy):
                policy.shutdown()
    if config.references:
        heuristic = StudySetup(lambda _: HeuristicPolicy(), pool, seed=config.train.seed, progress=progress)
        evaluate(heuristic, cases, out / "heuristic", labels)
        replay = StudySetup(lambda _: replay_policy(eval_cases), pool, seed=config.train.seed, progress=progress)
        evaluate(replay, cases, out / "replay", labels)


def _evaluate_bfcl(config: MainJobConfig, whole_dir: Path | None, out: Path, progress: bool) -> str:
    """The BFCL slice: its cases drawn once, then ContractRL (the last trained stage), full
    regeneration and the heuristic on them. Returns why it was skipped, or ''."""
    from .rollout.hf_policy import HFPolicy, SamplingConfig
    from .rollout.policies import HeuristicPolicy
    from .rollout.runner import LocalPool
    from .tasks.bfcl_wheel import BfclDataError
    from .tasks.generate import GenerateConfig, generate_cases
    from .tasks.sources import source_families
    from .tasks.store import read_public, write_case_set
    from .trainer.presets import load_model

    spec = f"bfcl:{config.bfcl.category}"
    try:
        hosted = source_families(spec)
    except BfclDataError as exc:
        return str(exc)
    data = config.train.data
    case_dir = out / "cases"
    if not (case_dir / "manifest.json").is_file():
        families = tuple(f for f in data.families if f in hosted)
        generate = GenerateConfig(
            seed=data.seed,
            n=config.bfcl.cases,
            families=families,
            max_attempts=data.max_attempts,
            max_ops=data.max_ops,
            source=spec,
        )
        write_case_set(generate_cases(generate), case_dir, generate.to_dict())
    cases = read_public(case_dir)
    pool, seed, label = LocalPool(1), config.train.seed, config.train.model.label
    labels = {"study": "bfcl", "condition": spec, "mode": "same_information"}
    evaluate(StudySetup(lambda _: HeuristicPolicy(), pool, seed=seed, progress=progress), cases, out / "heuristic", labels)
    stage = config.train.stages[-1]
    learned = [(Path(config.out) / "train" / "stages" / stage, config.train.grpo.arm, stage, config.train.eval.max_new_tokens)]
    if whole_dir is not None:
        learned.append((whole_dir, "full_regen", "sft", config.whole_object.max_new_tokens))
    for model_dir, arm, stage_name, max_new_tokens in learned:
        run_dir = out / arm
        if RolloutRun(run_dir).is_frozen():
            continue
        model, tokenizer = load_model(str(model_dir.resolve()), cache_dir=config.train.model.cache_dir)
        sampling = SamplingConfig(
            max_new_tokens=max_new_tokens,
            do_sample=False,
            batch_size=config.train.eval.batch_size,
            shield_k=config.train.eval.shield_k,
            shield_defer=config.train.eval.defer,
        )
        policy = HFPolicy(model, tokenizer, sampling=sampling, name=label, cpu_bf16=config.train.model.cpu_bf16)
        setup = StudySetup(lambda _, p=policy: p, pool, arm=arm, seed=seed, model=label, stage=stage_name, progress=progress)
        evaluate(setup, cases, run_dir, labels)
    return ""


def format_summary(rows: list[dict[str, Any]]) -> str:
    """The terminal table: one row per slice and system (the report's overview columns, short titles)."""
    headers = [
        ("slice", "slice", "{}"),
        ("system", "system", "{}"),
        ("episodes", "episodes", "{}"),
        ("semantic", "semantic_success_mean", "{:.3f}"),
        ("schema-valid", "schema_valid_mean", "{:.3f}"),
        ("gen tokens", "generated_tokens_mean", "{:.1f}"),
        ("probes", "probes_mean", "{:.1f}"),
        ("p95 episode s (gen+check)", "latency_s_p95", "{:.3f}"),
        ("collateral", "collateral_mean", "{:.3f}"),
        ("unsafe", "unsafe_dispatch_total", "{}"),
    ]
    cells = [[fmt.format(row[key]) for _, key, fmt in headers] for row in rows]
    widths = [max(len(title), *(len(c[i]) for c in cells)) if cells else len(title) for i, (title, _, _) in enumerate(headers)]
    line = "  ".join(
        title.ljust(w) if i < 2 else title.rjust(w) for i, ((title, _, _), w) in enumerate(zip(headers, widths, strict=True))
    )
    body = [
        "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))) for row in cells
    ]
    return "\n".join([line, "-" * len(line), *body])


__all__ = [
    "QUICK",
    "TINY_NOTE",
    "MainJobConfig",
    "MainJobResult",
    "attach_ray",
    "format_summary",
    "load_main_job_config",
    "run_main_job",
    "uses_ray",
]
