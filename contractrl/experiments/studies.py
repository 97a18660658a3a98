"""Experiment drivers: the runs the study tables need that training does not produce.

Each driver runs a policy over public cases into frozen run directories whose manifests carry the
study's labels (feedback variant, budget, horizon, transfer fold), so the join can stratify by
them. Drivers see only public cases; the offline half stays in the case directories until the
report joins it. A run directory that is already frozen is kept, so an interrupted study resumes
where it stopped; a half-written one is redone.

* feedback: the same policy with the errors block reduced to the pointer, the code, the free-text
  message, or removed (context only) - Table 27.
* noise: clean single-field cohorts against stale schemas, wrong and ambiguous pointers, malformed
  reports and injected tool text - Table 32.
* budget: the same cases under other operation and attempt budgets - Table 30.
* horizon: cases of one family chained into trajectories of 1, 3, 5 and 8 steps; a trajectory
  succeeds only if every step does - Table 33.
* transfer: train on four tool families, evaluate on the fifth, for each family - Table 34.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..configtree import derive
from ..rollout.policies import Policy, ReplayPolicy
from ..rollout.prompts import FEEDBACK
from ..rollout.run import RolloutRun, write_run
from ..rollout.runner import EpisodeRunner, WorkerPool
from ..tasks.arms import DEFAULT_ARM
from ..tasks.cases import Case, PublicCase
from ..tasks.catalog import TOOL_FAMILIES
from ..tasks.corruptions import CLEAN_FAMILIES, NOISE_FAMILIES
from ..tasks.demonstrations import gold_answer
from ..tasks.generate import GenerateConfig, generate_cases
from ..tasks.offline import read_cases
from ..tasks.store import write_case_set
from ..trainer.config import TrainConfig
from .options import STUDIES

DEFAULT_BUDGETS: tuple[tuple[int, int], ...] = ((1, 1), (1, 2), (2, 2), (3, 3), (4, 4))  # (attempts B, operations K)
DEFAULT_HORIZONS: tuple[int, ...] = (1, 3, 5, 8)


@dataclass(frozen=True)
class StudySetup:
    """What every evaluation driver needs: a policy per feedback variant, workers, the arm."""

    make_policy: Callable[[str], Policy]  # feedback variant -> policy
    pool: WorkerPool
    arm: str = DEFAULT_ARM
    seed: int = 0
    model: str = ""
    stage: str = ""
    progress: bool = True


def evaluate(
    setup: StudySetup,
    cases: Sequence[PublicCase],
    out: str | Path,
    labels: dict[str, Any],
    *,
    feedback: str = "full",
    trajectories: list[list[str]] | None = None,
) -> Path:
    """One frozen run of ``cases``; kept as it is if it already exists and is frozen."""
    from tqdm.auto import tqdm

    run_dir = Path(out)
    if RolloutRun(run_dir).is_frozen():
        return run_dir
    shutil.rmtree(run_dir, ignore_errors=True)  # a run interrupted before its freeze
    policy = setup.make_policy(feedback)
    runner = EpisodeRunner(policy, setup.pool, arm=setup.arm)
    labels = {"model": setup.model, "stage": setup.stage, "feedback": feedback, **labels}
    config = {"policy": policy.name, "arm": setup.arm, "seed": setup.seed, "labels": labels}
    with tqdm(total=len(cases), desc=run_dir.name, unit="ep", disable=not setup.progress) as bar:
        write_run(
            run_dir, config, runner, list(cases), group=1, seed=setup.seed, progress=bar, labels=labels, trajectories=trajectories
        )
    return run_dir


def replay_policy(case_dir: str | Path, arm: str = DEFAULT_ARM) -> ReplayPolicy:
    """Oracle replay: each case's gold answer for ``arm``, the mechanism check (the one policy given
    targets, by design). Targets are read here, from the case set's offline half, never inside
    rollout code."""
    return ReplayPolicy({case.public.case_id: [gold_answer(case, arm)] for case in read_cases(case_dir)})


def feedback_study(
    setup: StudySetup, cases: Sequence[PublicCase], out_root: str | Path, variants: Sequence[str] = FEEDBACK
) -> list[Path]:
    root = Path(out_root)
    return [evaluate(setup, cases, root / f"feedback-{v}", {"study": "feedback", "condition": v}, feedback=v) for v in variants]


def noise_cases(seed: int, n: int, tool_families: Sequence[str] = TOOL_FAMILIES) -> list[Case]:
    """Clean single-field cohorts and the five verifier-noise cohorts, from one seeded draw."""
    config = GenerateConfig(seed=seed, n=n, families=(*CLEAN_FAMILIES, *NOISE_FAMILIES), tool_families=tuple(tool_families))
    return generate_cases(config)


def noise_study(setup: StudySetup, cases: Sequence[PublicCase], out_root: str | Path) -> list[Path]:
    return [evaluate(setup, cases, Path(out_root) / "noise", {"study": "noise"})]


def rebudget(cases: Sequence[PublicCase], max_attempts: int, max_ops: int) -> list[PublicCase]:
    """The same cases under another budget (budgets are public: they are part of the state)."""
    if max_attempts < 1 or max_ops < 1:
        raise ValueError(f"budgets must be >= 1, got attempts={max_attempts}, ops={max_ops}")
    return [replace(case, max_attempts=max_attempts, max_ops=max_ops) for case in cases]


def budget_study(
    setup: StudySetup, cases: Sequence[PublicCase], out_root: str | Path, budgets: Sequence[tuple[int, int]] = DEFAULT_BUDGETS
) -> list[Path]:
    root = Path(out_root)
    return [
        evaluate(
            setup,
            rebudget(cases, attempts, ops),
            root / f"budget-b{attempts}-k{ops}",
            {"study": "budget", "condition": f"B={attempts},K={ops}", "max_attempts": attempts, "max_ops": ops},
        )
        for attempts, ops in budgets
    ]


def chain_cases(cases: Sequence[PublicCase], horizon: int, seed: int) -> list[list[str]]:
    """Trajectories of ``horizon`` case ids, each within one case family (rows never pool
    families), in a seeded order; a family's remainder that cannot fill a trajectory is left out."""
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")

    def order(case: PublicCase) -> str:
        return hashlib.sha256(f"{seed}/{horizon}/{case.case_id}".encode()).hexdigest()

    chains: list[list[str]] = []
    for family in sorted({c.family for c in cases}):
        members = sorted((c for c in cases if c.family == family), key=order)
        for start in range(0, len(members) - horizon + 1, horizon):
            chains.append([c.case_id for c in members[start : start + horizon]])
    return chains


def horizon_study(
    setup: StudySetup, cases: Sequence[PublicCase], out_root: str | Path, horizons: Sequence[int] = DEFAULT_HORIZONS
) -> list[Path]:
    runs = []
    by_id = {c.case_id: c for c in cases}
    for horizon in horizons:
        chains = chain_cases(cases, horizon, setup.seed)
        chained = [by_id[case_id] for chain in chains for case_id in chain]
        if not chained:
            continue  # no family has enough cases for this horizon
        labels = {"study": "horizon", "condition": f"H={horizon}", "horizon": horizon}
        runs.append(evaluate(setup, chained, Path(out_root) / f"horizon-{horizon}", labels, trajectories=chains))
    return runs


def transfer_study(
    config: TrainConfig,
    out_root: str | Path,
    *,
    families: Sequence[str] = TOOL_FAMILIES,
    heldout_cases: int = 64,
    workers: int = 0,
    progress: bool = True,
) -> list[Path]:
    """For each tool family: train on the others (the full SFT -> GRPO recipe of ``config``), then
    evaluate the trained policy greedily on new cases of the held-out family."""
    # torch and Ray load only when a transfer study runs
    from ..rollout.hf_policy import HFPolicy, SamplingConfig
    from ..rollout.pool import RayPool
    from ..rollout.runner import LocalPool
    from ..trainer.entry import train
    from ..trainer.loop import derived_seed
    from ..trainer.presets import load_model

    unknown = set(families) - set(TOOL_FAMILIES)
    if unknown or len(families) < 2:
        raise ValueError(f"transfer needs at least two of {', '.join(TOOL_FAMILIES)}, got {list(families)}")
    root = Path(out_root)
    sampling = SamplingConfig(
        max_new_tokens=config.eval.max_new_tokens,
        do_sample=False,
        batch_size=config.eval.batch_size,
        shield_k=config.eval.shield_k,
        shield_defer=config.eval.defer,
    )
    runs = []
    for heldout in families:
        trained_on = tuple(f for f in families if f != heldout)
        fold = root / f"transfer-{heldout}"
        run_dir = fold / "heldout-eval"
        if RolloutRun(run_dir).is_frozen():
            runs.append(run_dir)
            continue
        fold_config = derive(
            config, {"experimental.transfer.tool_families": list(trained_on)}, out=str(fold / "train"), resume=True
        )
        result = train(fold_config, progress=progress)
        case_config = GenerateConfig(
            seed=derived_seed(config.data.seed, "transfer", heldout),
            n=heldout_cases,
            families=config.data.families,
            tool_families=(heldout,),
            max_attempts=config.data.max_attempts,
            max_ops=config.data.max_ops,
        )
        cases = generate_cases(case_config)
        write_case_set(cases, fold / "cases" / "heldout", case_config.to_dict())
        model, tokenizer = load_model(result.model_dir, cache_dir=config.model.cache_dir)
        arm = config.grpo.arm

        def make_policy(feedback: str, model: Any = model, tokenizer: Any = tokenizer) -> Policy:
            return HFPolicy(model, tokenizer, feedback=feedback, sampling=sampling, name="hf")

        labels = {"study": "transfer", "condition": f"heldout={heldout}", "heldout_tool_family": heldout}
        labels["train_tool_families"] = "+".join(trained_on)
        ray_pool = RayPool(workers) if workers > 0 else None
        try:
            setup = StudySetup(
                make_policy,
                ray_pool or LocalPool(1),
                arm=arm,
                seed=config.seed,
                model=config.model.label,
                stage="grpo",
                progress=progress,
            )
            runs.append(evaluate(setup, [c.public for c in cases], run_dir, labels))
        finally:
            if ray_pool is not None:  # the workers of one fold are not left running into the next
                ray_pool.shutdown()
    return runs


__all__ = [
    "DEFAULT_BUDGETS",
    "DEFAULT_HORIZONS",
    "STUDIES",
    "StudySetup",
    "budget_study",
    "chain_cases",
    "evaluate",
    "feedback_study",
    "horizon_study",
    "noise_cases",
    "noise_study",
    "rebudget",
    "replay_policy",
    "transfer_study",
]
