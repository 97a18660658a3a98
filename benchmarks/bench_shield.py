"""Shielded decoding: K, the enumerated candidates, and their cost, measured on one trained policy.

Each variant rolls the same model out greedily on the same held-out cases into a frozen ledger,
then scores it with the judge:

- ``blind``: today's decoding, one answer sent as it is (K = 0);
- ``k<K>``: K proposals (the greedy one and K - 1 samples) and the enumerated candidates, scored by
  the model and probed on the public contract before one is committed (rollout/shield.py);
- ``k<K>-own``: the same without the enumerated candidates (the model's own proposals only);
- ``k<K>-defer``: the enumerated candidates weighed first, the K proposals decoded only where none of
  them settles the decision (``defer``, the default of every command; ``k<K>`` always decodes).

Per variant: semantic success with its case count, per-family success, generated tokens, probes,
and mean / p95 episode time (generation + checks) per episode; every variant paired with the first
(cases gained / lost, paired bootstrap interval, exact McNemar). Every variant runs in this one
process, one after the other, so their times are comparable.

    python benchmarks/bench_shield.py --model runs/main/train/stages/grpo --cases runs/main/train/cases/eval \
        --variants blind,k1,k2,k4,k2-own --out runs/bench_shield --json
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

import numpy as np

from contractrl.analysis.stats import mcnemar_exact, paired_bootstrap
from contractrl.evidence.judge import Judge
from contractrl.experiments.studies import StudySetup, evaluate
from contractrl.rollout.hf_policy import HFPolicy, SamplingConfig
from contractrl.rollout.runner import LocalPool
from contractrl.tasks.store import read_public
from contractrl.trainer.presets import load_model


def parse_variant(name: str) -> tuple[int, bool, bool]:
    """(K, enumerate, defer): ``blind`` -> (0, False, False); ``k4`` -> (4, True, False); ``k4-own``
    -> (4, False, False); ``k4-defer`` -> (4, True, True)."""
    if name == "blind":
        return 0, False, False
    body, _, suffix = name.partition("-")
    if not body.startswith("k") or not body[1:].isdigit() or int(body[1:]) < 1 or suffix not in ("", "own", "defer"):
        raise SystemExit(f"unknown variant {name!r}: use blind, k<K>, k<K>-own or k<K>-defer (K >= 1)")
    return int(body[1:]), suffix != "own", suffix == "defer"


def summarize(scored: list[tuple[dict[str, Any], Any]]) -> dict[str, Any]:
    n = len(scored)
    times = np.array([float(r.get("wall_s") or 0) + float(r.get("gen_s") or 0) for r, _ in scored])
    by_family: dict[str, list[bool]] = defaultdict(list)
    for row, verdict in scored:
        by_family[row["case_family"]].append(verdict.success)
    return {
        "n": n,
        "success": sum(v.success for _, v in scored) / n,
        "per_family": {f: round(sum(v) / len(v), 3) for f, v in sorted(by_family.items())},
        "tokens": float(np.mean([r["generated_tokens"] for r, _ in scored])),
        "probes": float(np.mean([r.get("probes", 0) for r, _ in scored])),
        "abstained": float(np.mean([bool(r["abstained"]) for r, _ in scored])),
        "episode_s_mean": float(times.mean()),
        "episode_s_p95": float(np.percentile(times, 95)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a trained model or adapter directory (stages/<stage>)")
    parser.add_argument("--cases", required=True, help="the held-out case directory (public and offline halves)")
    parser.add_argument("--arm", default="contractrl")
    parser.add_argument("--variants", default="blind,k1,k2,k4", help="comma-separated: blind, k<K>, k<K>-own, k<K>-defer")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--out", default="runs/bench_shield")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    settings = {v: parse_variant(v) for v in variants}
    model, tokenizer = load_model(str(Path(args.model).resolve()))
    cases = read_public(args.cases)
    judge = Judge.from_case_dir(args.cases)
    out = Path(args.out)
    results: dict[str, Any] = {}
    outcomes: dict[str, list[bool]] = {}
    for name in variants:
        k, enumerate_, defer = settings[name]
        sampling = SamplingConfig(
            max_new_tokens=args.max_new_tokens,
            do_sample=False,
            batch_size=args.batch_size,
            shield_k=k,
            shield_enumerate=enumerate_,
            shield_defer=defer,
        )
        policy = HFPolicy(model, tokenizer, sampling=sampling, name=f"shield-{name}")
        setup = StudySetup(lambda _, p=policy: p, LocalPool(1), arm=args.arm, model=Path(args.model).name, stage=name)
        start = time.perf_counter()
        run_dir = evaluate(setup, cases, out / name, {"study": "shield", "variant": name})
        scored = judge.score_run(run_dir)
        results[name] = {
            **summarize(scored),
            "k": k,
            "enumerate": enumerate_,
            "defer": defer,
            "wall_s": time.perf_counter() - start,
        }
        outcomes[name] = [v.success for _, v in sorted(scored, key=lambda rv: rv[0]["case_id"])]
        print(f"{name}: success {results[name]['success']:.3f} of {results[name]['n']}", file=sys.stderr)
    base = variants[0]
    for name in variants[1:]:
        a, b = np.array(outcomes[base], dtype=float), np.array(outcomes[name], dtype=float)
        boot = paired_bootstrap(a, b, seed=0)
        results[name]["vs_" + base] = {
            "gained": int(((b == 1) & (a == 0)).sum()),
            "lost": int(((b == 0) & (a == 1)).sum()),
            "diff": float(b.mean() - a.mean()),
            "ci_low": boot.low,
            "ci_high": boot.high,
            "mcnemar_p": mcnemar_exact(outcomes[name], outcomes[base]),
            "time_ratio": results[name]["episode_s_mean"] / max(results[base]["episode_s_mean"], 1e-9),
        }
    record = {
        "command": "python benchmarks/bench_shield.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": f"{platform.processor() or platform.machine()}, {platform.system()}",
        "date": time.strftime("%Y-%m-%d"),
        "variants": results,
    }
    if args.json:
        print(json.dumps(record, indent=2))
    else:
        for name, r in results.items():
            cost = f"tokens {r['tokens']:.1f}  probes {r['probes']:.1f}  mean {r['episode_s_mean']:.2f}s"
            print(f"{name:10s} {r['success']:.3f}  {cost}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
