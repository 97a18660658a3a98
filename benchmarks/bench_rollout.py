"""Episode throughput with the heuristic policy: a single-process loop, then 1 and 2 Ray workers.

Also measures what the ledger costs per episode (chaining, hashing and parquet writing).
``--group G`` plays G episodes per case, as a GRPO batch does (the G episodes of a case dispatch
into the same world, which each worker builds once and copies).

    python benchmarks/bench_rollout.py --n 1300 [--group 4] --json

With ``--json`` the last line is one JSON object whose ``ratio_2_vs_1`` is 2 workers against 1.
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


def _single_process(cases: list, policy: HeuristicPolicy, group: int) -> tuple[float, list[dict]]:
    start = time.perf_counter()
    rows = []
    for case in cases:
        for sample in range(group):
            env = RepairEnv(case)
            state = env.reset()
            while not env.done:
                state, _ = env.step(policy.generate([Observation(case, state, sample)])[0].text)
            rows.append(episode_row(case, env.log, arm="contractrl", policy=policy.name, seed=0, sample=sample))
    return time.perf_counter() - start, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1300)
    parser.add_argument("--group", type=int, default=1, help="episodes per case")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cases = [c.public for c in generate_cases(GenerateConfig(seed=7, n=args.n))]
    warm = [c.public for c in generate_cases(GenerateConfig(seed=8, n=50))]  # other worlds than the timed ones
    policy = HeuristicPolicy()
    _single_process(warm, policy, 1)  # warm caches (compiled schemas)
    single_s, rows = _single_process(cases, policy, args.group)

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
        runner.run(warm)  # warm the actors
        start = time.perf_counter()
        runner.run(cases, group=args.group)
        rates[workers] = len(rows) / (time.perf_counter() - start)
        pool.shutdown()
    single_rate = len(rows) / single_s
    result = {
        "episodes": len(rows),
        "group": args.group,
        "single_process_per_s": round(single_rate, 1),
        "ray_1_worker_per_s": round(rates[1], 1),
        "ray_2_workers_per_s": round(rates[2], 1),
        "ratio_2_vs_1": round(rates[2] / rates[1], 2),
        "ray_overhead_1_worker": round(1 - rates[1] / single_rate, 3),
        "ledger_ms_per_episode": round(1000 * ledger_s / len(rows), 3),
    }
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
