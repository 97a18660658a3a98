"""One replica's serve path without Ray: ``GateService`` as the Serve deployment calls it, under
concurrent request groups or one request at a time, with the shield's teacher-forced forwards
counted.

``GateService.from_options`` builds what a replica holds (``build_gate``'s ``BatchingPolicy`` for
an ``hf:`` policy, the pool of worker threads, the replica's ledger shard). The script hands it
bench_serve's request bodies (the same generator, seed 52, one malformed in 16) from ``--skip``
on, in ``handle_many`` groups of ``--group`` that are all in flight at once, as ``@serve.batch``
hands a replica requests that arrive together; or, with ``--one-at-a-time``, each after the
previous answer, timing each request's CPU seconds. Then it closes the service (freezing the shard)
and reads the shard back. Reported: wall and CPU seconds, the answers by kind, ledger rows against
decisions, the model batches, every teacher-forced forward's rows x longest answer
(``rollout/decode.py``'s ``score_chunks``), and the peak RSS. CPU seconds are the figure to compare
on a shared machine; wall seconds include waiting for the CPU.

    nice -n 15 env OMP_NUM_THREADS=1 python benchmarks/bench_serve_inprocess.py --skip 32 --requests 16 --group 8
    nice -n 15 env OMP_NUM_THREADS=1 python benchmarks/bench_serve_inprocess.py --skip 32 --requests 16 --one-at-a-time

Nothing listens on a port: this measures the replica's own work, not Ray Serve's HTTP path
(bench_serve.py measures that).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from contractrl.configtree import derive
from contractrl.gate.options import ServeOptions
from contractrl.gate.service import GateService, Reply, read_shards
from contractrl.rollout import decode, hf_policy

sys.path.insert(0, str(Path(__file__).parent))
from bench_serve import bodies  # the load test's own request bodies


def count_forwards(into: list[tuple[int, int]]) -> None:
    """Record (rows, longest answer) of every teacher-forced forward the shield runs."""
    scored = hf_policy.score_texts

    def counted(model: Any, prefix: Any, items: Any, temperature: float = 1.0) -> Any:
        lengths = [len(ids) for _, ids in items]
        for chunk in decode.score_chunks(lengths, decode.SCORE_CHUNK, decode.SCORE_TOKENS):
            into.append((len(chunk), max(1, *(lengths[i] for i in chunk))))
        return scored(model, prefix, items, temperature)

    hf_policy.score_texts = counted


def kind(reply: Reply) -> str:
    body = reply.body
    return "dispatch" if "dispatch" in body else "refusal" if "refusal" in body else f"error:{body['error']['code']}"


async def send(service: GateService, payloads: list[bytes], group: int, one_at_a_time: bool) -> tuple[list[Reply], list[float]]:
    """The replies in request order, and each request's CPU seconds (one at a time) or nothing."""
    requests = [("POST", "/repair", body) for body in payloads]
    if one_at_a_time:
        replies, cpu = [], []
        for request in requests:
            start = time.process_time()
            replies.extend(await service.handle_many([request]))
            cpu.append(round(time.process_time() - start, 1))
        return replies, cpu
    groups = [requests[s : s + group] for s in range(0, len(requests), group)]
    answered = await asyncio.gather(*(service.handle_many(g) for g in groups))
    return [reply for replies in answered for reply in replies], []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="hf:runs/main_v6/train/adapter")
    parser.add_argument("--skip", type=int, default=0, help="start at this generated call (bench_serve's --skip)")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--group", type=int, default=8, help="requests per handle_many group (@serve.batch's max_batch_size)")
    parser.add_argument("--one-at-a-time", action="store_true", help="one client: each request after the previous answer")
    parser.add_argument("--seed", type=int, default=52)
    parser.add_argument("overrides", nargs="*", help="serve options, e.g. max_batch_size=4")
    args = parser.parse_args()

    forwards: list[tuple[int, int]] = []
    count_forwards(forwards)
    ledger = Path(tempfile.mkdtemp(prefix="bench-serve-inprocess-"))
    options = derive(derive(ServeOptions(), {"policy": args.policy, "ledger": str(ledger)}), args.overrides)
    started = time.perf_counter()
    service = GateService.from_options(options, "r0")
    load_s = time.perf_counter() - started
    payloads = bodies(args.skip + args.requests, args.seed, 16)[args.skip :]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    replies, cpu_each = asyncio.run(send(service, payloads, args.group, args.one_at_a_time))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    health = service.health().body
    digest = service.close()
    rows = read_shards(ledger)
    decided = sum(1 for reply in replies if reply.status == 200)
    report = {
        "policy": args.policy,
        "requests": len(payloads),
        "mode": "one at a time" if args.one_at_a_time else f"groups of {args.group}, all in flight",
        "load_s": round(load_s, 1),
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "cpu_s_per_request": cpu_each or None,
        "answers": dict(Counter(kind(reply) for reply in replies)),
        "ledger_rows": len(rows),
        "decided": decided,
        "rows_equal_decisions": len(rows) == decided,
        "ledger_sha256": digest,
        "model_calls": health.get("model_calls"),
        "observations_per_model_call": health.get("observations_per_model_call"),
        "forwards_rows_x_longest": forwards,
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
