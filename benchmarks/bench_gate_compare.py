"""Re-asking the agent's model, heuristic repair and the repair gate on the same invalid calls
(issue 52, section 4); the logic is contractrl/experiments/gate_compare.py.

    python benchmarks/bench_gate_compare.py \\
        --slice natural=runs/cases-natural-live-qwen --slice natural=runs/cases-natural-qwen \\
        --slice bfcl_simple_synthetic=runs/cases-bfcl-simple --limit bfcl_simple_synthetic=8 \\
        --agent smollm2 --gate hf:runs/main_v6/train/adapter --retries 2 --json

Each ``--slice NAME=DIR`` adds a case set to a slice (several may share a name); ``--limit
NAME=N`` keeps its first N cases. Models load once, before any timing; decoding runs on
``--threads`` torch threads (gate/policy.py says why one).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time

from contractrl.experiments.gate_compare import ModelReAsker, compare, handled_row, summarize
from contractrl.gate.policy import MODELS_DIR, HFOptions, policy_from_spec
from contractrl.rollout.policies import HeuristicPolicy
from contractrl.tasks.offline import read_cases


def _pairs(values: list[str], what: str) -> list[tuple[str, str]]:
    out = []
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest:
            sys.exit(f"{what} takes NAME=VALUE, got {value!r}")
        out.append((name, rest))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slice", action="append", default=[], help="NAME=CASE_DIR (repeatable)")
    parser.add_argument("--limit", action="append", default=[], help="NAME=N: the slice's first N cases")
    parser.add_argument("--agent", default="smollm2", help="the re-asked model (a preset or hf: path); 'none' skips")
    parser.add_argument("--gate", default="hf:runs/main_v6/train/adapter", help="the gate's policy spec; 'none' skips")
    parser.add_argument("--retries", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    slices: dict[str, list] = {}
    for name, directory in _pairs(args.slice, "--slice"):
        slices.setdefault(name, []).extend(read_cases(directory))
    for name, n in _pairs(args.limit, "--limit"):
        slices[name] = slices.get(name, [])[: int(n)]
    if not slices:
        sys.exit("give at least one --slice NAME=CASE_DIR")

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    asker = gate_policy = None
    load_start = time.perf_counter()
    if args.agent != "none":
        from contractrl.gate.policy import hf_model_target
        from contractrl.trainer.presets import load_model

        model, tokenizer = load_model(hf_model_target(args.agent)[0], cache_dir=MODELS_DIR.resolve())
        asker = ModelReAsker(model, tokenizer, args.max_new_tokens)
    if args.gate != "none":
        gate_policy = policy_from_spec(args.gate, hf=HFOptions(threads=args.threads))
    load_s = time.perf_counter() - load_start

    report = {
        "command": " ".join(sys.argv),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
        },
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "torch_threads": torch.get_num_threads(),
        "model_load_s": round(load_s, 1),
        "agent": args.agent,
        "gate": args.gate,
        "retries": args.retries,
        "slices": {},
    }
    for name, cases in slices.items():
        start = time.perf_counter()
        handled = compare(cases, asker=asker, retries=args.retries, heuristic=HeuristicPolicy(), gate_policy=gate_policy)
        report["slices"][name] = {
            "cases": len(cases),
            "wall_s": round(time.perf_counter() - start, 1),
            "ways": summarize(handled),
            "rows": [handled_row(h) for h in handled],
        }
        print(f"{name}: {json.dumps(report['slices'][name]['ways'])}", file=sys.stderr, flush=True)
    report["load_after"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        for name, data in report["slices"].items():
            for way, summary in data["ways"].items():
                print(name, way, json.dumps(summary))


if __name__ == "__main__":
    main()
