"""How much of the built-in task a policy can solve by copying: the schema-guided heuristic's
held-out success per request style (``verbatim``: values as JSON; ``paraphrase``: values in words).

Generates the same ``--n`` built-in cases in both styles (same seed: same calls, corruptions and
targets; only the request's wording differs), runs the heuristic and oracle replay on each through
the real episode loop, and prints semantic success per family and pooled.

    python benchmarks/bench_request_styles.py [--n 260] [--seed 2] [--out runs/bench_request_styles] [--json]

Record the output in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from contractrl.evidence.judge import Judge
from contractrl.experiments.studies import StudySetup, evaluate
from contractrl.rollout.policies import HeuristicPolicy, ReplayPolicy
from contractrl.rollout.runner import LocalPool
from contractrl.tasks.demonstrations import gold_answer
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.tasks.offline import read_cases
from contractrl.tasks.requests import REQUEST_STYLES
from contractrl.tasks.store import write_case_set


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=260, help="cases per style (20 per family)")
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--out", default="runs/bench_request_styles")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out = Path(args.out)
    pool = LocalPool(1)
    results: dict[str, dict[str, object]] = {}
    for style in REQUEST_STYLES:
        case_dir = out / style / "cases"
        if not (case_dir / "manifest.json").is_file():
            config = GenerateConfig(seed=args.seed, n=args.n, request_style=style)
            write_case_set(generate_cases(config), case_dir, config.to_dict())
        cases = read_cases(case_dir)
        judge = Judge(cases)
        gold = {c.public.case_id: [gold_answer(c, "contractrl")] for c in cases}
        for name, setup in {
            "heuristic": StudySetup(lambda _: HeuristicPolicy(), pool, progress=False),
            "replay": StudySetup(lambda _, gold=gold: ReplayPolicy(gold), pool, progress=False),
        }.items():
            run = evaluate(setup, [c.public for c in cases], out / style / name, {"study": "request_style", "condition": style})
            by_family: dict[str, list[bool]] = defaultdict(list)
            for row, verdict in judge.score_run(run):
                by_family[row["case_family"]].append(verdict.success)
            pooled = [s for v in by_family.values() for s in v]
            results[f"{style}/{name}"] = {
                "semantic_success": sum(pooled) / len(pooled),
                "episodes": len(pooled),
                "per_family": {f: sum(v) / len(v) for f, v in sorted(by_family.items())},
            }
            print(f"{style:<10} {name:<9} success {sum(pooled) / len(pooled):.3f} (n={len(pooled)})", file=sys.stderr)
    if args.json:
        print(json.dumps({"benchmark": "request_styles", "n": args.n, "seed": args.seed, "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
