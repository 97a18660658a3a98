"""SFT step time by micro-batch size, on the main job's demonstrations.

    python benchmarks/bench_sft_micro_batch.py [--arm contractrl|patch_sft|full_regen] [--steps 12]
        [--micro 4 2 1] [--ranked-only] [--json] [key=value ...]

A micro-batch pads every sequence to its longest one, and on a CPU the padded positions cost as
much as real ones. The loss is token-level and divided by the step's answer-token count, so a step
gives the same gradient at any micro-batch size (up to float summation order); only the time
changes. This runs the first ``--steps`` SFT steps of the main job's training (its config,
``key=value`` overrides on top) on one in-process learner, once per micro-batch size, each from the
same initial weights, and reports seconds per step, the padding share of the token positions, and
the largest difference in loss against the first size. ``--ranked-only`` times the batches that
hold ranking negatives instead (the main job's ``experimental.ranking.negatives=2``), whose answers
share one prompt per row (``trainer/packing.py``). Record the output in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from contractrl.pipeline import load_main_job_config
from contractrl.trainer.config import TrainConfig
from contractrl.trainer.entry import config_tokenizer, prepare_cases, sft_demonstrations
from contractrl.trainer.learner import Learner
from contractrl.trainer.loop import batch_indices, sft_examples, sft_token_weight
from contractrl.trainer.packing import packed_length
from contractrl.trainer.ranking import SftExample


def main_job_examples(config: TrainConfig, tokenizer: Any) -> list[SftExample]:
    """The SFT examples of ``config``'s training run (ranking negatives included), as its trainer builds them."""
    with tempfile.TemporaryDirectory() as scratch:
        train, _ = prepare_cases(replace(config.data, eval_cases=0), Path(scratch))
    negatives = config.experimental.ranking.negatives
    examples, _ = sft_examples(sft_demonstrations(train, config), config.sft.arm, tokenizer, negatives)
    return [e for e in examples if len(e.prompt_ids) + max(map(len, (e.answer_ids, *e.negatives))) <= config.sft.max_tokens]


def padding_share(batches: Sequence[Sequence[SftExample]], micro: int) -> float:
    """The share of token positions that are padding when each batch is cut into sorted micro-batches."""
    real = padded = 0
    for batch in batches:
        lengths = sorted(packed_length(e) for e in batch)
        for first in range(0, len(lengths), micro):
            chunk = lengths[first : first + micro]
            real += sum(chunk)
            padded += max(chunk) * len(chunk)
    return 1 - real / padded


def time_steps(config: TrainConfig, batches: Sequence[Sequence[SftExample]]) -> dict[str, Any]:
    learner = Learner(config)
    learner.init_distributed()  # a DeepSpeed engine needs a process group, even of one rank
    learner.start_stage("sft", len(batches))
    seconds, losses = [], []
    for batch in batches:
        denominator = sum(sft_token_weight(e.answer_ids, config.experimental.contrast.decision_weight) for e in batch)
        pairs = float(sum(len(e.negatives) for e in batch))
        start = time.perf_counter()
        stats = learner.sft_step(batch, denominator, pairs)
        seconds.append(time.perf_counter() - start)
        losses.append(stats["loss_sum"] / denominator + (stats["rank_loss_sum"] / pairs if pairs else 0.0))
    steady = seconds[1:] or seconds  # the first step also builds the optimizer state
    return {"s_per_step": round(statistics.mean(steady), 3), "first_step_s": round(seconds[0], 3), "losses": losses}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arm", default="contractrl", choices=("contractrl", "patch_sft", "full_regen"), help="the SFT arm")
    parser.add_argument("--steps", type=int, default=12, help="SFT steps timed per micro-batch size")
    parser.add_argument("--micro", type=int, nargs="+", default=[4, 2, 1], help="micro-batch sizes, the first is the reference")
    parser.add_argument(
        "--ranked-only",
        action="store_true",
        help="time the first --steps batches that hold ranking negatives (the steps packing changes), not the first steps",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the main job's config")
    args = parser.parse_args(argv)

    # SFT only: a whole-object arm takes no GRPO stage after it
    job = load_main_job_config(
        overrides=[f"train.sft.arm={args.arm}", "train.stages=[sft]", "train.wandb.mode=disabled", *args.overrides]
    )
    base = job.train
    examples = main_job_examples(base, config_tokenizer(base))
    batches: list[list[SftExample]] = []
    step = 0
    while len(batches) < args.steps and step < 100 * args.steps:
        batch = [examples[i] for i in batch_indices(base.seed, "sft", step, len(examples), base.sft.batch_size)]
        if not args.ranked_only or any(e.negatives for e in batch):
            batches.append(batch)
        step += 1
    runs: dict[int, dict[str, Any]] = {}
    for micro in args.micro:
        config = replace(base, sft=replace(base.sft, micro_batch_size=micro))
        runs[micro] = {"padding_share": round(padding_share(batches, micro), 3), **time_steps(config, batches)}
        print(f"micro-batch {micro}: {runs[micro]['s_per_step']} s/step, padding {runs[micro]['padding_share']}", file=sys.stderr)
    first = runs[args.micro[0]]["losses"]
    result = {
        "arm": args.arm,
        "model": base.model.name,
        "steps": args.steps,
        "batch_size": base.sft.batch_size,
        "ranked_only": args.ranked_only,
        "demonstrations": len(examples),
        "with_negatives": sum(1 for e in examples if e.negatives),
        "micro_batches": {
            str(micro): {
                "s_per_step": run["s_per_step"],
                "first_step_s": run["first_step_s"],
                "padding_share": run["padding_share"],
                "max_loss_diff": round(max(abs(a - b) for a, b in zip(run["losses"], first, strict=True)), 6),
            }
            for micro, run in runs.items()
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{args.arm}: {len(examples)} demonstrations, batches of {base.sft.batch_size}, {args.steps} steps")
        print("| micro-batch | s/step | padding share | max |loss diff| vs the first |")
        print("|---|---|---|---|")
        for micro, row in result["micro_batches"].items():
            print(f"| {micro} | {row['s_per_step']} | {row['padding_share']} | {row['max_loss_diff']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
