"""Prompt length per arm, in tokens of a preset's tokenizer, on generated cases (first decisions).

    python benchmarks/bench_prompts.py [--n 200] [--seed 0] [--model smollm2] [--json]

Prompt tokens are most of what a CPU spends per SFT example and per generated answer, so this is
the figure to watch when a prompt block changes. Record the output in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence

from contractrl.rollout.env import RepairEnv
from contractrl.rollout.prompts import MODES, render_blocks, render_messages, render_prompt
from contractrl.tasks.arms import ARMS
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.trainer.presets import load_tokenizer, model_path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="smollm2", help="a preset or model directory whose tokenizer counts")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    tokenizer = load_tokenizer(model_path(args.model))
    cases = generate_cases(GenerateConfig(seed=args.seed, n=args.n))

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    result: dict[str, object] = {"model": args.model, "cases": len(cases), "seed": args.seed}
    for mode in MODES:
        for arm in ARMS:
            lengths = []
            for case in cases:
                state = RepairEnv(case.public, arm).reset()
                lengths.append(count(render_prompt(render_messages(case.public, state, arm, mode), tokenizer)))
            result[f"{mode}/{arm}"] = {"mean": round(statistics.mean(lengths), 1), "max": max(lengths)}
    blocks: dict[str, list[int]] = {}
    for case in cases:
        for name, text in render_blocks(case.public, RepairEnv(case.public).reset(), "contractrl").items():
            blocks.setdefault(name, []).append(count(text))
    result["blocks"] = {name: round(statistics.mean(v), 1) for name, v in blocks.items()}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"prompt tokens ({args.model} tokenizer, {len(cases)} cases, seed {args.seed})")
    print("| mode | arm | mean | max |\n|---|---|---|---|")
    for key, value in result.items():
        if "/" in key and isinstance(value, dict):
            mode, arm = key.split("/")
            print(f"| {mode} | {arm} | {value['mean']} | {value['max']} |")
    print("blocks (mean tokens, contractrl, same-information): " + ", ".join(f"{k} {v}" for k, v in result["blocks"].items()))  # type: ignore[union-attr]
    return 0


if __name__ == "__main__":
    sys.exit(main())
