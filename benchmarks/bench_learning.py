"""Evidence that the trainer learns: the tiny preset, SFT then GRPO, held-out semantic success.

Trains ``tune_configs/tiny.yaml`` (plus the overrides below and any given on the command line),
then scores the two held-out ledgers the run froze (after SFT, after GRPO) with the judge and
compares them case by case: semantic success per corruption family after each stage, and the
paired difference (GRPO - SFT) with a bootstrap interval over case ids and McNemar's exact test.

    python benchmarks/bench_learning.py --out runs/bench_learning [key=value ...] [--json]

By default it trains and evaluates on the single-field corruption families, the issue's target.
Pass ``data.families=[...]`` to change that. Record the output in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

from contractrl.analysis.judge import Judge
from contractrl.analysis.stats import mcnemar_exact, paired_bootstrap
from contractrl.configtree import load_config, to_dict
from contractrl.trainer.config import TrainConfig
from contractrl.trainer.entry import train

ROOT = Path(__file__).resolve().parents[1]
SINGLE_FIELD = ["missing_required", "wrong_type", "constraint_violation", "nested_field", "array_element"]
DEFAULTS = [f"data.families=[{','.join(SINGLE_FIELD)}]", "data.eval_cases=100", "wandb.mode=disabled"]


def successes(judge: Judge, run_dir: Path) -> dict[str, tuple[str, bool]]:
    """case_id -> (family, semantic success) for a frozen held-out ledger."""
    return {row["case_id"]: (row["case_family"], verdict.success) for row, verdict in judge.score_run(run_dir)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/bench_learning")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args(argv)
    config = load_config(TrainConfig, ROOT / "tune_configs" / "tiny.yaml", [*DEFAULTS, f"out={args.out}", *args.overrides])
    start = time.perf_counter()
    train(config)
    wall = time.perf_counter() - start

    out = Path(config.out)
    judge = Judge.from_case_dir(out / "cases" / "eval")
    after = {stage: successes(judge, out / "eval" / f"after-{stage}") for stage in config.stages}
    ids = sorted(after[config.stages[0]])
    families = sorted({after[config.stages[0]][i][0] for i in ids})
    per_family: dict[str, dict[str, float]] = defaultdict(dict)
    for stage, scores in after.items():
        for family in families:
            wins = [scores[i][1] for i in ids if scores[i][0] == family]
            per_family[family][stage] = sum(wins) / len(wins)
            per_family[family]["n"] = len(wins)
    report: dict[str, object] = {
        "config": to_dict(config),
        "machine": f"{platform.node()} {platform.machine()} python {platform.python_version()}",
        "wall_s": round(wall, 1),
        "per_family": per_family,
        "overall": {stage: sum(s[i][1] for i in ids) / len(ids) for stage, s in after.items()},
    }
    if {"sft", "grpo"} <= set(after):
        sft = [float(after["sft"][i][1]) for i in ids]
        grpo = [float(after["grpo"][i][1]) for i in ids]
        diff = paired_bootstrap(sft, grpo, seed=config.seed)
        report["paired_grpo_minus_sft"] = {
            "n": diff.n,
            "difference": diff.difference,
            "ci95": [diff.low, diff.high],
            "mcnemar_p": mcnemar_exact([bool(x) for x in sft], [bool(x) for x in grpo]),
        }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    stages = list(after)
    print(f"held-out semantic success ({len(ids)} cases, seed {config.seed}, {wall:.0f} s)")
    print("| family | n | " + " | ".join(f"after {s}" for s in stages) + " |")
    print("|---|---|" + "---|" * len(stages))
    for family in families:
        row = per_family[family]
        print(f"| {family} | {int(row['n'])} | " + " | ".join(f"{row[s]:.3f}" for s in stages) + " |")
    print("| all | " + f"{len(ids)} | " + " | ".join(f"{report['overall'][s]:.3f}" for s in stages) + " |")  # type: ignore[index]
    if "paired_grpo_minus_sft" in report:
        p = report["paired_grpo_minus_sft"]
        low, high = p["ci95"]  # type: ignore[index]
        print(f"GRPO - SFT: {p['difference']:+.3f}, 95% CI [{low:+.3f}, {high:+.3f}], McNemar p = {p['mcnemar_p']:.3g}")  # type: ignore[index]
    return 0


if __name__ == "__main__":
    sys.exit(main())
