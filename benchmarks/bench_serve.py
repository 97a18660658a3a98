"""``contractrl serve`` under load, on loopback: requests/s and p50/p99 latency per policy and per
number of concurrent clients, and that nothing is lost.

For each policy (``--policies``: ``heuristic``, ``selector:DIR`` or ``selector:untrained``,
``hf:ADAPTER``) the gate is
deployed on Ray Serve (a local Ray instance of the script's own, a free loopback port, the built-in
tool catalog), then for each client count (``--clients 1,8,32``) that many HTTP clients send
catalog calls of every corruption family with their requests (the case generator, seed 52), plus
one malformed body in every ``--malformed-every``. A level stops sending after ``--requests``
requests (``--hf-requests`` for an ``hf:`` policy) or ``--budget-s`` seconds, whichever comes
first; what was sent is awaited. Each level sends the next calls of the generator (``--skip N``
starts at its N-th call). Reported per level: requests/s over the level's wall time,
client-side p50/p99 latency, and the answers by kind. "Nothing lost": every request got an answer
(a dispatch, a refusal or a typed 4xx error; no 5xx, no timeout), and after the graceful shutdown
the frozen replica shards hold exactly one verified row per well-formed request.

    nice -n 15 python benchmarks/bench_serve.py --policies heuristic,selector:DIR,hf:runs/main_v6/train/adapter \
        --clients 1,8,32 --requests 96 --hf-requests 8 --json --out runs/bench_serve

Loopback only: the server binds 127.0.0.1 and the clients call it there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from contractrl.configtree import derive
from contractrl.gate import serve
from contractrl.gate.options import ServeOptions
from contractrl.gate.service import read_shards
from contractrl.tasks.generate import CaseGenerator, GenerateConfig

MALFORMED = b'{"call": {"name": "create_event", "arguments": {}}, "call": {}}'  # a duplicate key: a typed 400


def bodies(n: int, seed: int, malformed_every: int) -> list[bytes]:
    """``n`` request bodies: catalog cases as MCP calls with their requests, every ``malformed_every``-th malformed."""
    generator = CaseGenerator(GenerateConfig(seed=seed, n=max(n, 1)))
    out = []
    for i in range(n):
        if malformed_every and i % malformed_every == malformed_every - 1:
            out.append(MALFORMED)
            continue
        public = generator.case(i).public
        call = {"id": f"call-{i}", "name": public.tool, "arguments": public.candidate}
        out.append(json.dumps({"call": call, "request": public.request}).encode())
    return out


def untrained_selector(directory: Path, size: int = 8, seed: int = 0) -> str:
    """A selector saved as ``train-selector`` saves one, with untrained weights (the features and the
    mask alone; tests/test_gate.py does the same): the ``selector:untrained`` of ``--policies``."""
    import gymnasium as gym
    import torch

    from contractrl.selector.features import CANDIDATE_FEATURES, STATE_FEATURES
    from contractrl.selector.module import SelectorModule
    from contractrl.selector.policy import save_selector

    torch.manual_seed(seed)
    spaces = gym.spaces.Dict(
        {
            "observations": gym.spaces.Box(0.0, 1.0, (len(STATE_FEATURES),), np.float32),
            "candidates": gym.spaces.Box(0.0, 1.0, (size, len(CANDIDATE_FEATURES)), np.float32),
            "action_mask": gym.spaces.Box(0.0, 1.0, (size,), np.float32),
        }
    )
    module = SelectorModule(observation_space=spaces, action_space=gym.spaces.Discrete(size), model_config={"hidden": 16})
    save_selector(module, directory, size)
    return f"selector:{directory}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def post(url: str, body: bytes, timeout_s: float) -> tuple[str, float]:
    """(what came back, seconds): dispatch, refusal, a 4xx error code, or ``lost:<why>``."""
    start = time.perf_counter()
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            answer = json.loads(response.read())
        kind = "dispatch" if "dispatch" in answer else "refusal" if "refusal" in answer else "lost:unknown-body"
    except urllib.error.HTTPError as error:
        try:
            code = json.loads(error.read())["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = "untyped"
        kind = f"error:{code}" if error.code < 500 and code != "untyped" else f"lost:{error.code}:{code}"
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        kind = f"lost:{type(exc).__name__}"
    return kind, time.perf_counter() - start


def load(url: str, payloads: list[bytes], clients: int, budget_s: float, timeout_s: float) -> dict[str, Any]:
    """``clients`` threads take the next payload until none is left or the budget is spent."""
    results: list[tuple[int, str, float]] = []
    lock = threading.Lock()
    cursor = iter(range(len(payloads)))
    stop_at = time.monotonic() + budget_s

    def client() -> None:
        while time.monotonic() < stop_at:
            with lock:
                index = next(cursor, None)
            if index is None:
                return
            kind, seconds = post(url, payloads[index], timeout_s)
            with lock:
                results.append((index, kind, seconds))

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    latencies = np.array([s for _, _, s in results]) if results else np.zeros(1)
    kinds = Counter(kind for _, kind, _ in results)
    return {
        "clients": clients,
        "sent": len(results),
        "wall_s": round(wall, 3),
        "requests_per_s": round(len(results) / wall, 2) if wall else None,
        "p50_s": round(float(np.percentile(latencies, 50)), 4),
        "p99_s": round(float(np.percentile(latencies, 99)), 4),
        "answers": dict(sorted(kinds.items())),
        "decided": sum(n for k, n in kinds.items() if k in ("dispatch", "refusal")),
        "lost": sum(n for k, n in kinds.items() if k.startswith("lost")),
    }


def bench_policy(policy: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    hf = policy.startswith("hf:")
    name = policy.split(":", 1)[0]
    # a replica finishes the calls in flight before it freezes its shard, however long they take
    base = {
        "graceful_shutdown_timeout_s": args.timeout_s,
        "policy": policy,
        "ledger": str(root / f"ledger-{name}"),
        "port": free_port(),
        "replica_cpus": 1.0,
        "flush_every_s": 2.0,
    }
    options = derive(derive(ServeOptions(), base), args.overrides)
    started = time.perf_counter()
    info = serve.start(options)
    ready_s = time.perf_counter() - started
    url = info["url"] + "/repair"
    levels = []
    offset = args.skip
    for clients in args.clients:
        n = max(args.hf_requests, clients) if hf else args.requests  # every client sends at least one
        payloads = bodies(offset + n, args.seed, args.malformed_every)[offset:]
        level = load(url, payloads, clients, args.budget_s, args.timeout_s)
        offset += n
        level["well_formed_sent"] = sum(1 for i in range(level["sent"]) if payloads[i] != MALFORMED)
        levels.append(level)
        print(json.dumps({"policy": policy, **level}), flush=True)
    with urllib.request.urlopen(info["url"] + "/healthz", timeout=args.timeout_s) as response:
        health = json.loads(response.read())
    stopped = time.perf_counter()
    shards = serve.stop(options.ledger)
    stop_s = time.perf_counter() - stopped
    frozen = all(shard["ledger_sha256"] for shard in shards)
    # frozen shards: every digest and chain verified; a shard whose replica was killed: its chain
    rows = read_shards(options.ledger, require_frozen=frozen)
    decided = sum(level["decided"] for level in levels)
    return {
        "policy": policy,
        "replicas": options.num_replicas,
        "batching": {"max_batch_size": options.max_batch_size, "wait_s": options.batch_wait_timeout_s} if hf else None,
        "model_batches": {k: health[k] for k in ("model_calls", "observations_per_model_call") if k in health},
        "deploy_s": round(ready_s, 1),
        "shutdown_s": round(stop_s, 1),
        "levels": levels,
        "ledger_rows": len(rows),
        "decisions_answered": decided,
        "lost": sum(level["lost"] for level in levels),
        "rows_equal_decisions": len(rows) == decided,
        "shards_frozen": frozen,
        "shards": shards,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default="heuristic", help="comma-separated policy specs")
    parser.add_argument("--clients", default="1,8,32", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--requests", type=int, default=96, help="requests per level (heuristic, selector)")
    parser.add_argument(
        "--hf-requests", type=int, default=8, help="requests per level for an hf: policy (at least one per client)"
    )
    parser.add_argument("--budget-s", type=float, default=300.0, help="a level sends no new request after this")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="a client's wait for one answer")
    parser.add_argument("--malformed-every", type=int, default=16, help="one malformed body in N (0: none)")
    parser.add_argument("--seed", type=int, default=52)
    parser.add_argument(
        "--skip", type=int, default=0, help="start at this generated call (to send a level of an earlier run the same calls)"
    )
    parser.add_argument("--ray-cpus", type=int, default=2)
    parser.add_argument("--out", help="directory for the ledgers and results.json (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("overrides", nargs="*", help="serve options for every policy, e.g. max_batch_size=4")
    args = parser.parse_args()

    import ray

    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-serve-"))
    root.mkdir(parents=True, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="crl-ray-", dir="/tmp")  # a Ray instance of this script's own
    ray.init(address="local", num_cpus=args.ray_cpus, include_dashboard=False, _temp_dir=scratch, log_to_driver=False)
    try:
        policies = [p for p in args.policies.split(",") if p]
        policies = [untrained_selector(root / "selector-untrained") if p == "selector:untrained" else p for p in policies]
        results = [bench_policy(policy, args, root) for policy in policies]
    finally:
        ray.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (loadavg {os.getloadavg()[0]:.1f} at the end)",
        "python": platform.python_version(),
        "ray_cpus": args.ray_cpus,
        "results": results,
    }
    (root / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    if args.json:
        print(json.dumps(report, indent=2))
    for result in results:
        for level in result["levels"]:
            print(
                f"{result['policy'][:40]:40s} clients={level['clients']:3d} sent={level['sent']:4d} "
                f"req/s={level['requests_per_s']} p50={level['p50_s']}s p99={level['p99_s']}s lost={level['lost']}"
            )
        print(
            f"  ledger rows {result['ledger_rows']} == decisions {result['decisions_answered']}: {result['rows_equal_decisions']}"
        )


if __name__ == "__main__":
    main()
