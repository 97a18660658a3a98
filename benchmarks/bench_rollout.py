"""Episode throughput with the heuristic policy: a single-process loop, then 1 and 2 Ray workers.

Also measures what the ledger costs per episode (chaining, hashing and parquet writing).

    python benchmarks/bench_rollout.py --n 1300 --json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from contractrl.rollout.env import RepairEnv, episode_row
from contractrl.rollout.ledger import LedgerWriter
from contractrl.rollout.policies import HeuristicPolicy, Observation
from contractrl.rollout.pool import RayPool, ensure_ray
from contractrl.rollout.runner import EpisodeRunner
from contractrl.tasks.generate import GenerateConfig, generate_cases


def _single_process(cases: list, policy: HeuristicPolicy) -> tuple[float, list[dict]]:
    start = time.perf_counter()
    rows = []
    for case in cases:
        env = RepairEnv(case)
        state = env.reset()
        while not env.done:
            state, _ = env.step(policy.generate([Observation(case, state, 0)])[0].text)
        rows.append(episode_row(case, env.log, arm="contractrl", policy=policy.name, seed=0, sample=0))
    return time.perf_counter() - start, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cases = [c.public for c in generate_cases(GenerateConfig(seed=7, n=args.n))]
    policy = HeuristicPolicy()
    _single_process(cases[:50], policy)  # warm caches (compiled schemas)
    single_s, rows = _single_process(cases, policy)

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "manifest.json").write_text("{}")
        start = time.perf_counter()
        writer = LedgerWriter(tmp)
        for row in rows:
            writer.append(row)
        writer.freeze()
        ledger_s = time.perf_counter() - start

    ensure_ray(num_cpus=2)
    rates = {}
    for workers in (1, 2):
        pool = RayPool(workers)
        runner = EpisodeRunner(policy, pool, max_inflight=512)
        runner.run(cases[:50])  # warm the actors
        start = time.perf_counter()
        runner.run(cases)
        rates[workers] = len(cases) / (time.perf_counter() - start)
        pool.shutdown()
    single_rate = len(cases) / single_s
    result = {
        "episodes": len(cases),
        "single_process_per_s": round(single_rate, 1),
        "ray_1_worker_per_s": round(rates[1], 1),
        "ray_2_workers_per_s": round(rates[2], 1),
        "scaling_2_vs_1": round(rates[2] / rates[1], 2),
        "ray_overhead_1_worker": round(1 - rates[1] / single_rate, 3),
        "ledger_ms_per_episode": round(1000 * ledger_s / len(rows), 3),
    }
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
