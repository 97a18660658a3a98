"""The repair gate's cost per decision: the heuristic policy on catalog calls, in process.

Cases of every corruption family on the built-in tools (``contractrl cases generate``'s generator,
seed 52) are sent through one :class:`~contractrl.gate.RepairGate` as tool calls with their
requests, first from one thread, then from ``--threads`` threads sharing the gate. Reported:
decisions per second, p50/p99 latency (the ``latency_s`` each decision carries), the share of
dispatches, repairs and refusals, and that the ledger holds one verified row per call.

    python benchmarks/bench_gate.py --calls 520 --threads 1,8 --json

An untimed pass first compiles every schema (a per-process cache), so the runs compare alike.
By default no model is loaded: the figures are the gate's own overhead (parsing, the episode, the
re-verification, the ledger) plus the heuristic, a floor under what a learned policy adds.
``--policy hf:ADAPTER`` puts a model behind the gate (loaded once per run, outside the timing) and
``--hf-threads`` sets its torch threads (``HFOptions.threads``; 0: torch's default):

    python benchmarks/bench_gate.py --calls 3 --threads 1 --policy hf:runs/main_v6/train/adapter --hf-threads 0
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from contractrl.gate import Dispatch, GateBudgets, HFOptions, RepairGate
from contractrl.rollout.ledger import read_ledger
from contractrl.tasks.catalog import all_tools
from contractrl.tasks.generate import CaseGenerator, GenerateConfig


def calls(n: int, seed: int) -> list[tuple[dict[str, Any], str]]:
    generator = CaseGenerator(GenerateConfig(seed=seed, n=n))
    out = []
    for i in range(n):
        public = generator.case(i).public
        out.append(({"name": public.tool, "arguments": public.candidate}, public.request))
    return out


def gate(ledger: Path, policy: str = "heuristic", hf: HFOptions | None = None) -> RepairGate:
    tools = [spec for spec in all_tools()]
    definitions = [{"name": t.name, "description": t.description, "inputSchema": t.schema} for t in tools]
    return RepairGate(
        definitions,
        policy,
        contracts={t.name: t.contract for t in tools},
        immutable={t.name: list(t.immutable) for t in tools},
        budgets=GateBudgets(max_attempts=2, max_ops=2),
        ledger=ledger,
        hf=hf or HFOptions(),
    )


def run(
    work: list[tuple[dict[str, Any], str]], threads: int, ledger: Path, policy: str = "heuristic", hf: HFOptions | None = None
) -> dict[str, Any]:
    g = gate(ledger, policy, hf)
    decisions: list[Any] = [None] * len(work)

    def worker(slot: int) -> None:
        for index in range(slot, len(work), threads):
            call, request = work[index]
            decisions[index] = g.repair(call, request)

    start = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(slot,)) for slot in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    wall = time.perf_counter() - start
    g.close(freeze=True)
    rows = read_ledger(ledger)
    latency = np.array([d.latency_s for d in decisions]) * 1000
    kinds = Counter(
        ("repaired" if d.repaired else "valid as sent") if isinstance(d, Dispatch) else f"refused {d.code}" for d in decisions
    )
    return {
        "threads": threads,
        "calls": len(work),
        "decisions_per_s": round(len(work) / wall, 1),
        "policy": policy,
        "latency_ms_mean": round(float(latency.mean()), 3),
        "latency_ms_p50": round(float(np.percentile(latency, 50)), 3),
        "latency_ms_p99": round(float(np.percentile(latency, 99)), 3),
        "outcomes": dict(sorted(kinds.items())),
        "ledger_rows": len(rows),
        "ledger_rows_equal_calls": len(rows) == len(work),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=520)
    parser.add_argument("--threads", default="1,8")
    parser.add_argument("--seed", type=int, default=52)
    parser.add_argument("--policy", default="heuristic", help="heuristic, selector:DIR or hf:MODEL")
    parser.add_argument("--hf-threads", type=int, default=HFOptions().threads, help="torch threads of an hf: policy")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = calls(args.calls, args.seed)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        run(work, 1, Path(tmp) / "warmup")  # schemas compile once per process: keep that out of every run
        for threads in (int(t) for t in args.threads.split(",")):  # repeat a count to see the noise
            results.append(run(work, threads, Path(tmp) / f"run{len(results)}", args.policy, HFOptions(threads=args.hf_threads)))
    report = {
        "machine": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "load": [round(x, 2) for x in os.getloadavg()],
        "runs": results,
    }
    print(json.dumps(report, indent=2) if args.json else "\n".join(json.dumps(r) for r in results))


if __name__ == "__main__":
    main()
