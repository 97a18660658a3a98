"""Evaluation throughput with generation in the driver, on 1 policy actor and on 2.

Greedy held-out rollouts of ``--n`` built-in cases with an ``hf`` model (the tiny preset, SmolLM2,
or a trained adapter directory), validation in-process, the same cases and seed each time. Checks
that 1 and 2 actors give one ledger digest (and reports whether generation in the driver gives it
too: an actor computes with one thread, the driver with all, and bf16 products may round
differently), and prints episodes per second and the 2-vs-1 ratio.

    python benchmarks/bench_policy_actors.py --model tiny --n 52 [--max-new-tokens 32] --json

With ``--json`` the last line is one JSON object whose ``ratio_2_vs_1`` is 2 actors against 1.
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

from contractrl.rollout.hf_policy import SamplingConfig
from contractrl.rollout.policy_pool import ActorPolicy, PolicySpec
from contractrl.rollout.run import write_run
from contractrl.rollout.runner import EpisodeRunner, LocalPool
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.trainer.model_cache import MODELS_DIR
from contractrl.trainer.presets import PRESETS, load_model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="tiny", help="a preset (tiny, smollm2, qwen2.5-coder-0.5b, ...) or a model/adapter directory"
    )
    parser.add_argument("--n", type=int, default=52)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    target = args.model if args.model in PRESETS else f"hf:{Path(args.model).resolve()}"
    load = functools.partial(load_model, target, cache_dir=MODELS_DIR.resolve())
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, do_sample=False, batch_size=args.batch_size)
    spec = PolicySpec(load, sampling=sampling, name=Path(args.model).name)
    cases = [c.public for c in generate_cases(GenerateConfig(seed=11, n=args.n))]
    rates, digests = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for actors in (0, 1, 2):
            policy = spec.build() if actors == 0 else ActorPolicy(spec, actors)
            runner = EpisodeRunner(policy, LocalPool(1))
            runner.run(cases[: args.batch_size])  # warm: the first batch pays for lazy initialisation
            start = time.perf_counter()
            digests[actors] = write_run(Path(tmp) / f"run-{actors}", {"bench": "policy_actors"}, runner, cases, group=1, seed=0)
            rates[actors] = len(cases) / (time.perf_counter() - start)
            if isinstance(policy, ActorPolicy):
                policy.shutdown()
            print(f"{actors} actors: {rates[actors]:.2f} episodes/s", file=sys.stderr)
    if digests[1] != digests[2]:
        raise SystemExit(f"ledger digests differ by actor count: {digests}")
    result = {
        "model": args.model,
        "episodes": len(cases),
        "driver_per_s": round(rates[0], 3),
        "actors_1_per_s": round(rates[1], 3),
        "actors_2_per_s": round(rates[2], 3),
        "same_digest_1_2_actors": True,
        "same_digest_as_driver": digests[0] == digests[1],
        "machine": f"{platform.machine()}, python {platform.python_version()}",
        "ratio_2_vs_1": round(rates[2] / rates[1], 2),
    }
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
