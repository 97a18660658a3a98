"""Transfer from the built-in catalog to real tool calls: a policy trained on built-in cases,
evaluated on held-out cases built from BFCL (its simple and multiple categories).

Generates ``--n`` BFCL cases (every family BFCL data can host, equal shares) with
``contractrl cases generate --source bfcl:DIR``, then evaluates, on the same cases, budgets and
validator: the trained model (a LoRA adapter or model directory written by ``contractrl train`` /
``contractrl run``), the schema-guided heuristic and oracle replay. Every run is frozen under
``--out`` with the report's transfer labels, so ``contractrl report OUT --out OUT/report`` shows
them in the transfer table. Prints per system: semantic success (= BFCL acceptance of the
dispatched call, or a correct abstention), success per family, abstention accuracy on the
unrepairable cases, false abstentions on repairable ones and generated tokens per episode.

    python benchmarks/bench_transfer.py --model runs/bench_learning/train/adapter \
        --out runs/bench_transfer [--bfcl ../shared/data/bfcl] [--n 110] [--seed 7] [--json]

Record the output in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from contractrl.evidence.judge import Judge
from contractrl.experiments.studies import StudySetup, evaluate
from contractrl.rollout.hf_policy import HFPolicy, SamplingConfig
from contractrl.rollout.policies import HeuristicPolicy, ReplayPolicy
from contractrl.rollout.runner import LocalPool
from contractrl.tasks.demonstrations import gold_answer
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.tasks.offline import read_cases
from contractrl.tasks.sources import source_families
from contractrl.tasks.store import write_case_set


def _cases(bfcl: Path, n: int, seed: int, out: Path) -> Path:
    case_dir = out / "cases" / "heldout"
    if not (case_dir / "manifest.json").is_file():
        source = f"bfcl:{bfcl}"
        config = GenerateConfig(seed=seed, n=n, families=source_families(source), source=source)
        write_case_set(generate_cases(config), case_dir, config.to_dict())
    return case_dir


def _summary(judge: Judge, run_dir: Path) -> dict[str, Any]:
    by_family: dict[str, list[bool]] = defaultdict(list)
    tokens = abstain_right = abstain_cases = false_abstain = repairable = 0
    for row, verdict in judge.score_run(run_dir):
        by_family[row["case_family"]].append(verdict.success)
        tokens += int(row["generated_tokens"])
        if judge.offline(row["case_id"]).should_abstain:
            abstain_cases += 1
            abstain_right += bool(row["abstained"])
        else:
            repairable += 1
            false_abstain += bool(row["abstained"])
    n = sum(len(v) for v in by_family.values())
    return {
        "episodes": n,
        "semantic_success": sum(sum(v) for v in by_family.values()) / n,
        "per_family": {f: sum(v) / len(v) for f, v in sorted(by_family.items())},
        "abstention_accuracy": abstain_right / abstain_cases if abstain_cases else None,
        "unrepairable_cases": abstain_cases,
        "false_abstentions": false_abstain / repairable if repairable else None,
        "generated_tokens": tokens / n,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a trained adapter or model directory (or a preset name)")
    parser.add_argument("--arm", default="contractrl", help="the arm the model was trained as")
    parser.add_argument("--out", default="runs/bench_transfer")
    parser.add_argument("--bfcl", default="../shared/data/bfcl", help="BFCL data: question files and possible_answer/")
    parser.add_argument("--n", type=int, default=110, help="held-out cases (equal shares of the families BFCL hosts)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--json", action="store_true", help="print the results as one JSON line at the end")
    args = parser.parse_args(argv)

    from contractrl.trainer.presets import load_model

    out = Path(args.out)
    start = time.perf_counter()
    case_dir = _cases(Path(args.bfcl), args.n, args.seed, out)
    cases = read_cases(case_dir)
    public = [c.public for c in cases]
    judge = Judge(cases)
    labels = {"study": "transfer", "heldout_tool_family": "bfcl", "train_tool_families": "builtin", "condition": "heldout=bfcl"}
    pool = LocalPool(1)
    model, tokenizer = load_model(args.model)
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, do_sample=False, batch_size=16)
    model_name = Path(args.model).name if Path(args.model).exists() else args.model
    systems = {
        "learned": StudySetup(
            lambda fb: HFPolicy(model, tokenizer, feedback=fb, sampling=sampling, name="smollm2"),
            pool,
            arm=args.arm,
            model=model_name,
            stage="grpo",
        ),
        "heuristic": StudySetup(lambda _: HeuristicPolicy(), pool),
        "replay": StudySetup(lambda _: ReplayPolicy({c.public.case_id: [gold_answer(c, "contractrl")] for c in cases}), pool),
    }
    results: dict[str, Any] = {}
    for name, setup in systems.items():
        t0 = time.perf_counter()
        run = evaluate(setup, public, out / "runs" / name, labels)
        results[name] = {**_summary(judge, run), "wall_s": round(time.perf_counter() - t0, 1)}
    report = {
        "benchmark": "transfer",
        "model": str(args.model),
        "arm": args.arm,
        "heldout": "bfcl simple+multiple",
        "cases": len(cases),
        "families": list(source_families(f"bfcl:{args.bfcl}")),
        "systems": results,
        "machine": f"{platform.processor() or platform.machine()}, python {platform.python_version()}",
        "wall_s": round(time.perf_counter() - start, 1),
    }
    for name, r in results.items():
        print(
            f"{name:<10} success {r['semantic_success']:.3f}  abstention acc {r['abstention_accuracy']}  "
            f"false abstain {r['false_abstentions']:.3f}  tokens {r['generated_tokens']:.1f}",
            file=sys.stderr,
        )
        print("  " + "  ".join(f"{f} {v:.2f}" for f, v in r["per_family"].items()), file=sys.stderr)
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
