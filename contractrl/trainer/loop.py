"""The training loop: SFT steps, then GRPO steps over whole repair episodes, with checkpoints.

One GRPO step, in the order the evidence boundary demands:

1. pick the step's cases (a pure function of seed and step, from the training cases of
   ``experimental.grpo_families``, each unrepairable case followed by its minimal contrast with
   ``experimental.contrast.grpo``) and roll out G episodes per case with the current weights, on
   the validator/sandbox workers;
2. append the episodes to a fresh ledger under ``rollouts/step-N`` and *freeze* it;
3. ask the judge for semantic verdicts on the frozen ledger (the only moment the offline half is
   consulted), and compute each episode's reward from its ledger row and verdict;
4. group-relative advantages per case, each decision taking its episode's; groups without
   variance are dropped, or, with a KL term, kept at advantage 0 for the KL term alone;
5. clipped policy-gradient update on every generated turn of the remaining episodes, then check
   that the weights rollouts come from have changed.

The loop takes its collaborators (learner group, worker pool, judge, tracker) from the caller, so
tests can run it in process and :mod:`contractrl.trainer.entry` can run it on Ray.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import shutil
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..configtree import to_dict
from ..errors import ConfigError
from ..rollout.env import RepairEnv
from ..rollout.hf_policy import SamplingConfig
from ..rollout.prompts import render_messages, render_prompt
from ..rollout.run import RolloutRun
from ..rollout.runner import Episode, EpisodeRunner, WorkerPool
from ..tasks.cases import ABSTAIN, PublicCase
from ..tasks.demonstrations import Demonstration
from ..validators import PublicState
from ..validators.jsonvalue import canonical_json
from .checkpoint import (
    EVALS,
    GRPO_BATCHES,
    STAGE_MODELS,
    WEIGHTS_FILE,
    TrainerState,
    checkpoint_dir,
    commit,
    latest_checkpoint,
    read_state,
    scratch_dir,
    write_state,
)
from .config import TrainConfig
from .group import GroupPolicy, LearnerGroup
from .grpo import PolicySample, decision_advantages, group_samples, without_variance
from .ranking import SftExample, ranking_negatives
from .reward import episode_reward
from .tracking import MetricsTable, Tracker

log = logging.getLogger(__name__)
# GRPO episodes a step logs to W&B as a table
SAMPLE_EPISODES = 8


class VerdictLike(Protocol):
    success: bool


class EpisodeJudge(Protocol):
    """Scores the episodes of a frozen ledger (see :class:`contractrl.evidence.judge.Judge`)."""

    def score_run(self, run_dir: str | Path) -> list[tuple[dict[str, Any], VerdictLike]]: ...


def replay_state(demo: Demonstration, arm: str) -> PublicState | None:
    """The state at a demonstration's decision: its earlier attempts replayed through the real
    validator. None when that decision is never reached (an earlier attempt ended the episode) or
    the answer does not fit the operations left."""
    env = RepairEnv(demo.case, arm)
    state = env.reset()
    for text in demo.earlier:
        state, _ = env.step(text)
        if state.done:
            return None
    patch = bool(demo.earlier) and not env.whole_object and demo.answer != ABSTAIN
    return None if patch and len(json.loads(demo.answer)) > state.ops_left else state


def sft_examples(
    demos: Sequence[Demonstration], arm: str, tokenizer: Any, rank_negatives: int = 0
) -> tuple[list[SftExample], int]:
    """The SFT examples of each demonstration whose state can be replayed (prompt ids, answer ids +
    EOS, and with ``rank_negatives`` the accepted wrong answers to rank below it), and the number
    that could not be replayed (a later decision whose earlier attempt ends the episode)."""
    examples = []
    unreachable = 0

    def answer_ids(text: str) -> tuple[int, ...]:
        return (*tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id)

    for demo in demos:
        state = replay_state(demo, arm)
        if state is None:
            unreachable += 1
            continue
        prompt = render_prompt(render_messages(demo.case, state, arm), tokenizer)
        negatives = ranking_negatives(demo, state, arm, rank_negatives)
        examples.append(
            SftExample(
                tuple(tokenizer(prompt, add_special_tokens=False)["input_ids"]),
                answer_ids(demo.answer),
                tuple(answer_ids(text) for text in negatives),
            )
        )
    return examples, unreachable


def sft_token_weight(answer: Sequence[int], decision_weight: float) -> float:
    """An answer's share of the SFT loss's denominator: its tokens, the first (the decision) counted
    ``decision_weight`` times, so the loss stays a weighted mean per token."""
    return len(answer) + (decision_weight - 1.0) if answer else 0.0


def derived_seed(*parts: Any) -> int:
    """A 32-bit seed from any JSON-able parts: batches and sampling depend on (seed, stage, step) only."""
    return int(hashlib.sha256(canonical_json(list(parts)).encode()).hexdigest()[:8], 16)


def grpo_cases(train_cases: Sequence[PublicCase], families: Sequence[str]) -> list[PublicCase]:
    """The training cases GRPO draws from, in their order (all of them under the default families,
    so the batches, and the ledgers, are those of a run without the option)."""
    keep = set(families)
    cases = [case for case in train_cases if case.family in keep]
    if not cases:
        raise ConfigError(
            f"experimental.grpo_families.families {sorted(keep)}: none of the {len(train_cases)} training cases "
            "is of these families"
        )
    return cases


def with_contrasts(cases: Sequence[PublicCase], contrasts: Mapping[str, PublicCase]) -> list[PublicCase]:
    """The step's cases, each followed by its contrast (keyed by the case's id) where it has one:
    the two groups land in one update, whatever the batch size."""
    out: list[PublicCase] = []
    for case in cases:
        out.append(case)
        if (twin := contrasts.get(case.case_id)) is not None:
            out.append(twin)
    return out


def advantage_spans(cases: Sequence[PublicCase], group_size: int) -> list[tuple[int, int]]:
    """The episode ranges whose rewards share a baseline, for ``group_size`` episodes per case in
    the cases' order: each case's episodes, a contrast's too (joining a contrast with its
    unrepairable case was measured neutral and removed)."""
    return [(j * group_size, (j + 1) * group_size) for j in range(len(cases))]


def batch_indices(seed: int, stage: str, step: int, n: int, size: int) -> list[int]:
    """Indices of step ``step``'s batch: epochs of seeded permutations, read in order."""
    out = []
    perms: dict[int, list[int]] = {}
    for position in range(step * size, (step + 1) * size):
        epoch = position // n
        if epoch not in perms:
            order = list(range(n))
            random.Random(derived_seed(seed, stage, epoch)).shuffle(order)
            perms[epoch] = order
        out.append(perms[epoch][position % n])
    return out


def weighted_batch_indices(seed: int, stage: str, step: int, weights: Sequence[float], size: int) -> list[int]:
    """Indices of step ``step``'s batch when cases weigh differently (``experimental.grpo_families.weights``).

    Distinct cases, drawn without replacement with probabilities proportional to ``weights``
    (Efraimidis-Spirakis keys ``log(u) / w``, largest first), from a generator seeded by
    ``(seed, stage, step)`` alone, so a batch does not depend on the steps before it (resume) or on
    the worker count. A batch larger than the pool takes every case, then draws again.
    """
    bad = [(i, w) for i, w in enumerate(weights) if not (w > 0 and math.isfinite(w))]
    if not weights or bad:
        raise ValueError(f"weights must be finite and > 0; got {len(weights)} weights, bad (index, weight): {bad[:3]}")
    rng = random.Random(derived_seed(seed, stage, "weighted", step))
    out: list[int] = []
    while len(out) < size:
        keys = sorted(((math.log(1.0 - rng.random()) / w, i) for i, w in enumerate(weights)), reverse=True)
        out.extend(i for _, i in keys[: size - len(out)])
    return out


@dataclass(frozen=True)
class TrainResult:
    out: str
    global_step: int
    rollout_digest: str
    evals: dict[str, dict[str, Any]]
    model_dir: str
    wandb_dir: str | None


class Trainer:
    def __init__(
        self,
        config: TrainConfig,
        *,
        train_cases: Sequence[PublicCase],
        eval_cases: Sequence[PublicCase],
        demos: Sequence[Demonstration],
        judge: EpisodeJudge,
        group: LearnerGroup,
        pool: WorkerPool,
        tokenizer: Any,
        report: Callable[[dict[str, Any]], None] | None = None,
        progress: bool = True,
        contrasts: Mapping[str, PublicCase] | None = None,
    ) -> None:
        self.config = config
        self.out = Path(config.out)
        self.train_cases = list(train_cases)
        # checked here, so families that leave GRPO no case fail before SFT, not after it
        families = config.experimental.grpo_families.families
        self.grpo_cases = grpo_cases(self.train_cases, families) if "grpo" in config.stages else []
        self.eval_cases = list(eval_cases)
        # an unrepairable training case's id -> its minimal contrast (experimental.contrast.grpo)
        self.contrasts = dict(contrasts or {})
        self.demos = list(demos)
        self.judge = judge
        self.group = group
        self.pool = pool
        self.tokenizer = tokenizer
        self.report = report
        self.progress = progress
        self._examples: list[SftExample] | None = None

    # --- the run -------------------------------------------------------------------------------

    def run(self, run_config: dict[str, Any]) -> TrainResult:
        state = self._restore()
        metrics = MetricsTable(self.out, keep_rows=state.metrics_rows)
        tracker = Tracker(self.config.wandb, self.out, run_config, state.wandb_run_id, name=self.out.name)
        state.wandb_run_id = tracker.run_id
        try:
            for stage in self.config.stages:
                if stage in state.stages_done:
                    continue
                self._run_stage(stage, state, metrics, tracker)
            model_dir = self.group.save_pretrained(str(self.out / ("adapter" if self.config.model.lora.enabled else "model")))
            tracker.summary({"rollout_digest": state.rollout_digest, **_flat_evals(state.evals)})
        finally:
            tracker.finish()
        return TrainResult(str(self.out), state.global_step, state.rollout_digest, state.evals, model_dir, tracker.files_dir)

    def _run_stage(self, stage: str, state: TrainerState, metrics: MetricsTable, tracker: Tracker) -> None:
        steps = self.config.sft.steps if stage == "sft" else self.config.grpo.steps
        if stage == "grpo":
            for caution in self.config.experimental.cautions():
                log.warning(caution)
        self.group.start_stage(stage, steps)
        resumed = latest_checkpoint(self.out) if self.config.resume else None
        if state.stage == stage and state.stage_step > 0 and resumed is not None:
            self.group.load_checkpoint(str(resumed))
        else:
            state.stage, state.stage_step = stage, 0
        bar = _progress(self.progress, steps, state.stage_step, f"{stage}")
        for step in range(state.stage_step, steps):
            row = self._sft_step(step) if stage == "sft" else self._grpo_step(step, state, tracker)
            state.stage_step += 1
            state.global_step += 1
            row = {"step": state.global_step, "stage": stage, "stage_step": state.stage_step, **row}
            metrics.append(row)
            state.metrics_rows = len(metrics.rows)
            tracker.log(row, state.global_step)
            if self.report is not None:
                self.report(row)
            if bar is not None:
                bar.update(1)
                bar.set_postfix({k: f"{row[k]:.3f}" for k in ("loss", "reward_mean") if row.get(k) is not None})
            if state.stage_step % self.config.checkpoint.every == 0 and state.stage_step < steps:
                self._checkpoint(state, engine=True)
        if bar is not None:
            bar.close()
        state.stages_done.append(stage)
        # each stage's weights stay loadable on their own: Patch-SFT is the SFT stage's policy
        self.group.save_pretrained(str(self.out / STAGE_MODELS / stage))
        if self.config.eval.enabled and self.eval_cases:
            state.evals[stage] = self._evaluate(stage, tracker, state.global_step)
        self._checkpoint(state, engine=False)

    # --- steps ---------------------------------------------------------------------------------

    def _sft_examples(self) -> list[SftExample]:
        if self._examples is None:
            sft = self.config.sft
            negatives = self.config.experimental.ranking.negatives
            examples, unreachable = sft_examples(self.demos, sft.arm, self.tokenizer, negatives)
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

    def _sft_step(self, step: int) -> dict[str, Any]:
        examples = self._sft_examples()
        if not examples:
            raise ValueError("SFT needs at least one demonstration")
        batch = [examples[i] for i in batch_indices(self.config.seed, "sft", step, len(examples), self.config.sft.batch_size)]
        weight = self.config.experimental.contrast.decision_weight
        denominator = sum(sft_token_weight(e.answer_ids, weight) for e in batch)
        pairs = float(sum(len(e.negatives) for e in batch))
        start = time.perf_counter()
        stats = self.group.sft_step(batch, denominator, pairs)
        elapsed = time.perf_counter() - start
        tokens = sum(len(e.prompt_ids) + len(e.answer_ids) for e in batch)
        ranked = self.config.experimental.ranking.negatives
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
        }

    def _grpo_step(self, step: int, state: TrainerState, tracker: Tracker) -> dict[str, Any]:
        cfg = self.config.grpo
        start = time.perf_counter()
        pool = self.grpo_cases
        family_weights = self.config.experimental.grpo_families.weights
        if family_weights:
            weights = [family_weights.get(case.family, 1.0) for case in pool]
            indices = weighted_batch_indices(self.config.seed, "grpo", step, weights, cfg.cases_per_step)
        else:  # the default keeps the epochs of earlier runs, and so their ledgers
            indices = batch_indices(self.config.seed, "grpo", step, len(pool), cfg.cases_per_step)
        cases = with_contrasts([pool[i] for i in indices], self.contrasts)
        sampling = SamplingConfig(
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature,
            batch_size=cfg.generation_batch_size,
            seed=derived_seed(self.config.seed, "grpo", step),
            shield_k=cfg.shield_k,
        )
        policy = GroupPolicy(self.group, sampling, name=f"grpo@{step}")
        episodes = EpisodeRunner(policy, self.pool, arm=cfg.arm).run_episodes(cases, group=cfg.group_size, seed=self.config.seed)
        rollout_s = time.perf_counter() - start

        run_dir = self.out / GRPO_BATCHES / f"step-{state.global_step + 1:06d}"
        state.rollout_digests.append(self._freeze(run_dir, episodes, {"stage": "grpo", "grpo_step": step}))
        scored = self.judge.score_run(run_dir)  # only now, on a frozen ledger, do verdicts exist
        rewards = [episode_reward(row, verdict.success, self.config.reward) for row, verdict in scored]

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

        stats: dict[str, float] = {}
        # KL-only samples (a KL term keeps groups without variance) do not make an update on their own:
        # before any drift their gradient is zero, and the weights would not change
        updated = any(sample.advantage for sample in samples)
        if updated:
            denominator = float(sum(len(s.completion_ids) for s in samples))
            before, _ = self.group.weights_in_use()
            for _ in range(cfg.epochs):
                stats = self.group.grpo_step(samples, denominator)
            self.group.after_update()
            rollout_weights, ranks = self.group.weights_in_use()
            if rollout_weights == before or any(rank != rollout_weights for rank in ranks):
                raise RuntimeError(f"GRPO step {step}: the rollout policy does not hold the updated weights of every rank")
        elapsed = time.perf_counter() - start
        tracker.log_episodes("episodes", _episode_table(scored, rewards, SAMPLE_EPISODES), state.global_step + 1)
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
            "updated": updated,
            "advantage_groups": len(spans),
            "zero_variance_groups": zero_variance,
            "cases": len(cases),
            "samples": len(samples),
            "episodes_per_s": n / rollout_s if rollout_s > 0 else 0.0,
            "tokens_per_s": tokens / rollout_s if rollout_s > 0 else 0.0,
            "wall_s": elapsed,
        }

    # --- evaluation ----------------------------------------------------------------------------

    def _evaluate(self, stage: str, tracker: Tracker, global_step: int) -> dict[str, Any]:
        """Greedy decoding on the held-out cases, one episode each, scored after a freeze."""
        cfg = self.config.eval
        sampling = SamplingConfig(
            max_new_tokens=cfg.max_new_tokens,
            do_sample=False,
            batch_size=cfg.batch_size,
            shield_k=cfg.shield_k,
        )
        arm = self.config.sft.arm if stage == "sft" else self.config.grpo.arm
        policy = GroupPolicy(self.group, sampling, name=self.config.model.label)
        bar = _progress(self.progress, len(self.eval_cases), 0, f"eval after {stage}", unit="ep")
        try:
            episodes = EpisodeRunner(policy, self.pool, arm=arm).run_episodes(
                self.eval_cases, group=1, seed=self.config.seed, progress=bar
            )
        finally:
            if bar is not None:
                bar.close()
        run_dir = self.out / EVALS / f"after-{stage}"
        labels = {"study": "main", "stage": stage, "model": self.config.model.label, "mode": "same_information"}
        digest = self._freeze(run_dir, episodes, {"stage": f"eval-after-{stage}", "labels": labels})
        scored = self.judge.score_run(run_dir)
        by_family: dict[str, list[bool]] = defaultdict(list)
        for row, verdict in scored:
            by_family[row["case_family"]].append(verdict.success)
        summary = {
            "episodes": len(scored),
            "semantic_success": sum(v.success for _, v in scored) / len(scored),
            "schema_valid": sum(bool(row["accepted"]) for row, _ in scored) / len(scored),
            "generated_tokens_mean": sum(int(row["generated_tokens"]) for row, _ in scored) / len(scored),
            "per_family": {family: sum(v) / len(v) for family, v in sorted(by_family.items())},
            "families": dict(sorted(Counter(row["case_family"] for row, _ in scored).items())),
            "ledger_sha256": digest,
            "product_dtype": self.group.product_dtype(),  # figures differ with it (benchmarks/RESULTS.md)
        }
        tracker.log({f"eval/{stage}/semantic_success": summary["semantic_success"]}, global_step)
        return summary

    # --- ledgers and checkpoints ---------------------------------------------------------------

    def _freeze(self, run_dir: Path, episodes: Sequence[Episode], extra: dict[str, Any]) -> str:
        extra = {**extra, "arm": episodes[0].key.arm if episodes else None}
        labels = extra.pop("labels", None)
        # replace: a leftover of an interrupted step is redone
        run = RolloutRun.create(run_dir, to_dict(self.config), seed=self.config.seed, labels=labels, extra=extra, replace=True)
        return run.write(episode.row for episode in episodes)

    def _checkpoint(self, state: TrainerState, *, engine: bool) -> None:
        import torch

        scratch = scratch_dir(self.out, state.global_step)
        torch.save(self.group.trainable_state(), scratch / WEIGHTS_FILE)
        if engine:
            self.group.save_checkpoint(str(scratch))
        write_state(scratch, state)
        commit(scratch, checkpoint_dir(self.out, state.global_step), self.config.checkpoint.keep)

    def _restore(self) -> TrainerState:
        """The state of the newest checkpoint (weights loaded), or a fresh state."""
        import torch

        found = latest_checkpoint(self.out) if self.config.resume else None
        if found is None:
            return TrainerState()
        state = read_state(found)
        self.group.load_trainable_state(torch.load(found / WEIGHTS_FILE, weights_only=True))
        # anything written after the checkpoint is redone, so the run matches an uninterrupted one
        for path in sorted((self.out / GRPO_BATCHES).glob("step-*")):
            if int(path.name.removeprefix("step-")) > state.global_step:
                shutil.rmtree(path)
        for path in sorted((self.out / EVALS).glob("after-*")):
            if path.name.removeprefix("after-") not in state.evals:
                shutil.rmtree(path)
        return state


def _episode_table(
    scored: Sequence[tuple[dict[str, Any], VerdictLike]], rewards: Sequence[Any], limit: int
) -> list[dict[str, Any]]:
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


def _flat_evals(evals: dict[str, dict[str, Any]]) -> dict[str, float]:
    return {f"eval/{stage}/semantic_success": e["semantic_success"] for stage, e in evals.items()}


def _progress(enabled: bool, total: int, initial: int, desc: str, unit: str = "step") -> Any:
    if not enabled or total == 0:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True)


__all__ = ["EpisodeJudge", "TrainResult", "Trainer", "batch_indices", "derived_seed", "weighted_batch_indices", "with_contrasts"]
