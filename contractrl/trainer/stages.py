"""The training stages as objects: each owns its step count, arm, optimizer and step function.

The loop (:mod:`contractrl.trainer.loop`) runs the stages the config names (``stages=[sft, grpo]``),
built from :data:`STAGES`, and knows nothing of what a step does. A stage's step returns its
metrics row; what a row holds differs by stage (``docs/training.md``).

One GRPO step, in the order the evidence boundary demands:

1. draw the step's cases (a pure function of seed and step, from the training cases of
   ``experimental.grpo_families``, each unrepairable case followed by its minimal contrast with
   ``experimental.contrast.grpo``) and roll out G episodes per case with the current weights, on
   the validator/sandbox workers;
2. append the episodes to a fresh ledger under ``rollouts/step-N`` and *freeze* it, then ask the
   judge for semantic verdicts on the frozen ledger (the only moment the offline half is
   consulted), and compute each episode's reward from its ledger row and verdict;
3. group-relative advantages per case against the baseline ``grpo.baseline`` names
   (:data:`contractrl.trainer.grpo.ADVANTAGE_ESTIMATORS`), each decision taking its episode's;
   groups without variance are dropped, or, with a KL term, kept at advantage 0 for the KL term
   alone;
4. clipped policy-gradient update on every generated turn of the remaining episodes, then check
   that the weights rollouts come from have changed;
5. the step's metrics.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..configtree import to_dict
from ..errors import ConfigError
from ..rollout.hf_policy import SamplingConfig
from ..rollout.run import RolloutRun
from ..rollout.runner import Episode, EpisodeRunner, WorkerPool
from ..tasks.cases import PublicCase
from ..tasks.demonstrations import Demonstration
from .batches import advantage_spans, batch_indices, derived_seed, grpo_cases, weighted_batch_indices, with_contrasts
from .checkpoint import GRPO_BATCHES, TrainerState
from .config import OptimConfig, TrainConfig
from .group import GroupPolicy, LearnerGroup
from .grpo import PolicySample, advantage_estimator, decision_advantages, group_samples, without_variance
from .ranking import SftExample
from .reward import RewardBreakdown, episode_reward
from .sft_data import sft_examples, sft_token_weight
from .tracking import Tracker

log = logging.getLogger(__name__)
# GRPO episodes a step logs to W&B as a table
SAMPLE_EPISODES = 8


class VerdictLike(Protocol):
    success: bool


class EpisodeJudge(Protocol):
    """Scores the episodes of a frozen ledger (see :class:`contractrl.evidence.judge.Judge`)."""

    def score_run(self, run_dir: str | Path) -> list[tuple[dict[str, Any], VerdictLike]]: ...


Scored = list[tuple[dict[str, Any], VerdictLike]]


@dataclass(frozen=True)
class RunParts:
    """What the stages share: the run's config and collaborators, handed over by the trainer, so
    tests can run a stage in process and :mod:`contractrl.trainer.entry` on Ray."""

    config: TrainConfig
    out: Path
    group: LearnerGroup
    pool: WorkerPool
    judge: EpisodeJudge
    tokenizer: Any
    train_cases: Sequence[PublicCase]
    demos: Sequence[Demonstration]
    # an unrepairable training case's id -> its minimal contrast (experimental.contrast.grpo)
    contrasts: Mapping[str, PublicCase]


class Stage(Protocol):
    """One stage of a run. ``name`` is its key in :data:`STAGES` and in ``stages=[...]``; it names
    the stage's metrics rows, its saved weights (``stages/<name>``) and its held-out evaluation."""

    name: str
    steps: int
    arm: str
    optim: OptimConfig

    def cautions(self) -> tuple[str, ...]:
        """Settings that pass every check but were measured to hurt: logged when the stage starts."""
        ...

    def step(self, step: int, state: TrainerState, tracker: Tracker) -> dict[str, Any]:
        """One optimizer step (``step`` counts within the stage); returns its metrics row."""
        ...


def peak_gpu(stats: dict[str, float]) -> dict[str, float]:
    """``peak_gpu_gb`` when the learners ran on GPUs (summed over ranks, as ``peak_rss_gb`` is); no
    column at all on a CPU, where it would be a column of nulls in every CPU run's metrics."""
    return {"peak_gpu_gb": stats["peak_gpu_bytes"] / 1e9} if "peak_gpu_bytes" in stats else {}


def freeze(config: TrainConfig, run_dir: Path, episodes: Sequence[Episode], extra: dict[str, Any]) -> str:
    """Write ``episodes`` to a fresh ledger under ``run_dir`` and return its digest (a leftover of
    an interrupted step is replaced, so it is redone)."""
    extra = {**extra, "arm": episodes[0].key.arm if episodes else None}
    labels = extra.pop("labels", None)
    run = RolloutRun.create(run_dir, to_dict(config), seed=config.seed, labels=labels, extra=extra, replace=True)
    return run.write(episode.row for episode in episodes)


class SFTStage:
    """Supervised steps on gold answers (token-level cross-entropy, optionally a ranking term)."""

    name = "sft"

    def __init__(self, run: RunParts) -> None:
        self.run = run
        self.cfg = run.config.sft
        self.steps: int = self.cfg.steps
        self.arm: str = self.cfg.arm
        self.optim: OptimConfig = self.cfg.optim
        self._examples: list[SftExample] | None = None

    def cautions(self) -> tuple[str, ...]:
        return ()

    def examples(self) -> list[SftExample]:
        """The replayable demonstrations that fit ``sft.max_tokens``, built on first use."""
        if self._examples is None:
            sft, negatives = self.cfg, self.run.config.experimental.ranking.negatives
            examples, unreachable = sft_examples(self.run.demos, sft.arm, self.run.tokenizer, negatives)
            if unreachable:
                log.info("SFT leaves out %d later-decision demonstrations whose earlier attempt ends the episode", unreachable)
            if negatives:
                ranked = sum(1 for e in examples if e.negatives)
                log.info("SFT ranks %d of %d demonstrations above accepted wrong answers", ranked, len(examples))
            limit = sft.max_tokens
            kept = [e for e in examples if len(e.prompt_ids) + max(map(len, (e.answer_ids, *e.negatives))) <= limit]
            if len(kept) < len(examples):
                log.warning(
                    "SFT leaves out %d of %d demonstrations longer than sft.max_tokens=%d",
                    len(examples) - len(kept),
                    len(examples),
                    limit,
                )
            self._examples = kept
        return self._examples

    def step(self, step: int, state: TrainerState, tracker: Tracker) -> dict[str, Any]:
        examples = self.examples()
        if not examples:
            raise ValueError("SFT needs at least one demonstration")
        sft, seed = self.cfg, self.run.config.seed
        batch = [examples[i] for i in batch_indices(seed, self.name, step, len(examples), sft.batch_size)]
        weight = self.run.config.experimental.contrast.decision_weight
        denominator = sum(sft_token_weight(e.answer_ids, weight) for e in batch)
        pairs = float(sum(len(e.negatives) for e in batch))
        start = time.perf_counter()
        stats = self.run.group.sft_step(batch, denominator, pairs)
        elapsed = time.perf_counter() - start
        tokens = sum(len(e.prompt_ids) + len(e.answer_ids) for e in batch)
        ranked = self.run.config.experimental.ranking.negatives
        ranking = {"rank_loss": stats["rank_loss_sum"] / pairs if pairs else None} if ranked else {}
        return {
            **ranking,
            "loss": stats["loss_sum"] / denominator,
            "reward_mean": None,
            "semantic_success": None,
            "grad_norm": stats["grad_norm"],
            "lr": stats["lr"],
            "examples": len(batch),
            "tokens_per_s": tokens / elapsed if elapsed > 0 else 0.0,
            "wall_s": elapsed,
            "peak_rss_gb": stats["peak_rss_bytes"] / 1e9,
            **peak_gpu(stats),
        }


@dataclass(frozen=True)
class AdvantageBatch:
    """A step's samples with their advantages, and how many groups gave them (and gave nothing)."""

    samples: list[PolicySample]
    groups: int
    zero_variance: int

    @property
    def updates(self) -> bool:
        """KL-only samples (a KL term keeps groups without variance) make no update on their own:
        before any drift their gradient is zero, and the weights would not change."""
        return any(sample.advantage for sample in self.samples)


class GRPOStage:
    """Group-relative policy optimisation over whole repair episodes (the module docstring's steps)."""

    name = "grpo"

    def __init__(self, run: RunParts) -> None:
        self.run = run
        cfg = self.cfg = run.config.grpo
        self.steps: int = cfg.steps
        self.arm: str = cfg.arm
        self.optim: OptimConfig = cfg.optim
        # the experiment knobs are read here only; families that leave GRPO no case fail now,
        # before SFT, not after it
        self.experimental = run.config.experimental
        families = self.experimental.grpo_families
        self.cases = grpo_cases(run.train_cases, families.families)
        self.weights = [families.weights.get(case.family, 1.0) for case in self.cases] if families.weights else None
        advantage_estimator(cfg.baseline)  # an unknown baseline fails here, before SFT

    def cautions(self) -> tuple[str, ...]:
        return self.experimental.cautions()

    def step(self, step: int, state: TrainerState, tracker: Tracker) -> dict[str, Any]:
        start = time.perf_counter()
        cases = self.draw(step)
        episodes = self.rollout(cases, step)
        rollout_s = time.perf_counter() - start
        scored, rewards = self.score(episodes, step, state)
        batch = self.advantages(cases, episodes, rewards)
        stats = self.update(batch.samples, step) if batch.updates else {}
        elapsed = time.perf_counter() - start
        tracker.log_episodes("episodes", episode_table(scored, rewards, SAMPLE_EPISODES), state.global_step + 1)
        return grpo_metrics(stats, scored, rewards, batch, len(cases), rollout_s=rollout_s, elapsed=elapsed)

    def draw(self, step: int) -> list[PublicCase]:
        """The step's cases, each unrepairable one followed by its contrast where it has one."""
        seed, size = self.run.config.seed, self.cfg.cases_per_step
        if self.weights is not None:
            indices = weighted_batch_indices(seed, self.name, step, self.weights, size)
        else:  # the default keeps the epochs of earlier runs, and so their ledgers
            indices = batch_indices(seed, self.name, step, len(self.cases), size)
        return with_contrasts([self.cases[i] for i in indices], self.run.contrasts)

    def rollout(self, cases: Sequence[PublicCase], step: int) -> list[Episode]:
        """``grpo.group_size`` episodes per case, sampled with the current weights."""
        cfg, seed = self.cfg, self.run.config.seed
        sampling = SamplingConfig(
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature,
            batch_size=cfg.generation_batch_size,
            seed=derived_seed(seed, self.name, step),
            shield_k=cfg.shield_k,
        )
        policy = GroupPolicy(self.run.group, sampling, name=f"grpo@{step}")
        return EpisodeRunner(policy, self.run.pool, arm=self.arm).run_episodes(cases, group=cfg.group_size, seed=seed)

    def score(self, episodes: Sequence[Episode], step: int, state: TrainerState) -> tuple[Scored, list[RewardBreakdown]]:
        """Freeze the episodes' ledger (its digest joins the run's), then judge and reward them:
        only now, on a frozen ledger, do verdicts exist."""
        run_dir = self.run.out / GRPO_BATCHES / f"step-{state.global_step + 1:06d}"
        state.rollout_digests.append(freeze(self.run.config, run_dir, episodes, {"stage": self.name, "grpo_step": step}))
        scored = self.run.judge.score_run(run_dir)
        return scored, [episode_reward(row, verdict.success, self.run.config.reward) for row, verdict in scored]

    def advantages(
        self, cases: Sequence[PublicCase], episodes: Sequence[Episode], rewards: Sequence[RewardBreakdown]
    ) -> AdvantageBatch:
        """Each group's advantages against the configured baseline, and the samples they give."""
        cfg = self.cfg
        samples: list[PolicySample] = []
        zero_variance = 0
        spans = advantage_spans(cases, cfg.group_size)
        for first, stop in spans:
            group = episodes[first:stop]
            advantages = decision_advantages(
                [r.reward for r in rewards[first:stop]],
                [len(episode.generations) for episode in group],
                scale_std=cfg.scale_std,
                baseline=cfg.baseline,
            )
            zero_variance += without_variance(advantages)
            samples.extend(group_samples([e.generations for e in group], advantages, kl_coef=cfg.kl_coef))
        return AdvantageBatch(samples, len(spans), zero_variance)

    def update(self, samples: Sequence[PolicySample], step: int) -> dict[str, float]:
        """``grpo.epochs`` clipped policy-gradient steps over ``samples``, then the check that the
        rollout policy holds the new weights on every rank."""
        group = self.run.group
        denominator = float(sum(len(s.completion_ids) for s in samples))
        before, _ = group.weights_in_use()
        stats: dict[str, float] = {}
        for _ in range(self.cfg.epochs):
            stats = group.grpo_step(samples, denominator)
        group.after_update()
        rollout_weights, ranks = group.weights_in_use()
        if rollout_weights == before or any(rank != rollout_weights for rank in ranks):
            raise RuntimeError(f"GRPO step {step}: the rollout policy does not hold the updated weights of every rank")
        return stats


def grpo_metrics(
    stats: Mapping[str, float],
    scored: Scored,
    rewards: Sequence[RewardBreakdown],
    batch: AdvantageBatch,
    cases: int,
    *,
    rollout_s: float,
    elapsed: float,
) -> dict[str, Any]:
    """A GRPO step's metrics row (``stats`` is empty when no group had variance: no update)."""
    tokens = sum(int(row["generated_tokens"]) for row, _ in scored)
    n = len(rewards)
    tokens_done = stats.get("tokens", 0.0)
    return {
        "loss": stats["loss_sum"] / stats["tokens"] if stats.get("tokens") else 0.0,
        "reward_mean": sum(r.reward for r in rewards) / n,
        "semantic_success": sum(r.success for r in rewards) / n,
        "collateral_mean": sum(r.collateral for r in rewards) / n,
        "retries_mean": sum(r.retries for r in rewards) / n,
        "masked_mean": sum(r.masked for r in rewards) / n,
        "generated_tokens_mean": tokens / n,
        "kl": stats["kl_sum"] / tokens_done if tokens_done else 0.0,
        "clip_fraction": stats["clipped_tokens"] / tokens_done if tokens_done else 0.0,
        "grad_norm": stats.get("grad_norm", 0.0),
        "lr": stats.get("lr"),
        "updated": batch.updates,
        "advantage_groups": batch.groups,
        "zero_variance_groups": batch.zero_variance,
        "cases": cases,
        "samples": len(batch.samples),
        "episodes_per_s": n / rollout_s if rollout_s > 0 else 0.0,
        "tokens_per_s": tokens / rollout_s if rollout_s > 0 else 0.0,
        "wall_s": elapsed,
        "peak_rss_gb": stats["peak_rss_bytes"] / 1e9 if "peak_rss_bytes" in stats else None,
        **peak_gpu(stats),
    }


def episode_table(scored: Scored, rewards: Sequence[RewardBreakdown], limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` episodes of a step as rows for the tracker's sample table."""
    rows = []
    for (row, verdict), reward in list(zip(scored, rewards, strict=True))[:limit]:
        attempts = row["attempts"]
        rows.append(
            {
                "case_id": row["case_id"],
                "family": row["case_family"],
                "answers": " | ".join(a["raw"][:200] for a in attempts),
                "outcome": row["outcome"],
                "success": bool(verdict.success),
                "reward": round(reward.reward, 4),
            }
        )
    return rows


STAGES: dict[str, Callable[[RunParts], Stage]] = {SFTStage.name: SFTStage, GRPOStage.name: GRPOStage}
"""Each stage named once, by the key ``stages=[...]`` uses."""


def build_stages(names: Sequence[str], run: RunParts) -> list[Stage]:
    """The stages ``names`` lists, in its order; an unknown name is a one-line error naming them all.
    Building a stage checks what it can before any step runs (GRPO's cases, its estimator)."""
    unknown = [name for name in names if name not in STAGES]
    if unknown:
        raise ConfigError(f"unknown stage {unknown[0]!r}: the registered stages are {', '.join(STAGES)}")
    return [STAGES[name](run) for name in names]


__all__ = [
    "STAGES",
    "AdvantageBatch",
    "EpisodeJudge",
    "GRPOStage",
    "RunParts",
    "SFTStage",
    "Stage",
    "build_stages",
    "freeze",
    "grpo_metrics",
]
