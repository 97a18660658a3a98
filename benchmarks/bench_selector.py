"""The candidate-selection policy (RLlib PPO, no language model) against the heuristic and the LM.

For each request style (``verbatim``, then ``paraphrase``) the script trains a selector with
``contractrl train-selector`` (``tune_configs/selector.yaml``, resumable: a finished run is kept),
then evaluates on its held-out cases, same budgets and validator, into frozen ledgers:

- the selector (greedy over its candidates), the schema-guided heuristic, and a uniform-random
  choice among the admissible candidates (what the mask alone buys);
- the greedy selector with untrained weights, five initialisations: what the features alone give;
- the learned language-model policy, when ``--lm-runs`` holds evaluation ledgers of the same
  held-out cases (byte-identical ``public.parquet``; the default data section makes the same cases
  as ``benchmarks/bench_learning.py``). Its ledgers are read, not re-run.

Per system and family: semantic success, abstention accuracy (abstained where the answer is
ABSTAIN, did not where it is not), retries and episode latency (validation + generation). It also
records the training time to the best held-out evaluation. ``contractrl report`` over
``OUT/<style>/runs`` puts the same runs in the report's tables.

    python benchmarks/bench_selector.py --out runs/bench_selector --json \
        [--lm-runs runs/bench_learning/train/eval] [--styles verbatim,paraphrase]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from contractrl.configtree import load_config
from contractrl.evidence.judge import Judge
from contractrl.experiments.studies import StudySetup, evaluate
from contractrl.rollout.ledger import read_ledger
from contractrl.rollout.policies import Generation, HeuristicPolicy, Observation
from contractrl.rollout.runner import LocalPool
from contractrl.selector.config import SelectorConfig
from contractrl.selector.observe import contract_for, decide
from contractrl.selector.policy import SelectorPolicy
from contractrl.selector.train import train_selector
from contractrl.tasks.offline import read_cases

ROOT = Path(__file__).resolve().parent.parent


class RandomMaskedPolicy:
    """A uniform choice among the candidates the contract admits (seeded per case and attempt)."""

    name = "random_masked"

    def __init__(self, size: int, seed: int = 0) -> None:
        self.size, self.seed = size, seed

    def generate(self, observations: Sequence[Observation]) -> list[Generation]:
        out = []
        for obs in observations:
            start = time.perf_counter()  # its decision time counts, as the selector's does
            decision = decide(obs.case, contract_for(obs.case), obs.state, self.size)
            key = hashlib.sha256(f"{self.seed}/{obs.case.case_id}/{len(obs.state.history)}".encode()).digest()
            rng = np.random.default_rng(int.from_bytes(key[:8], "little"))
            text = decision.text(int(rng.choice(np.flatnonzero(decision.obs["action_mask"]))))
            out.append(Generation(text, gen_s=time.perf_counter() - start))
        return out


def untrained_success(case_dir: Path, size: int, hidden: int, seeds: int = 5) -> list[float]:
    """Held-out success of the greedy selector with freshly initialised weights, one per torch seed:
    what the features alone give before PPO."""
    import torch

    from contractrl.selector.env import SelectorEnv
    from contractrl.selector.module import SelectorModule
    from contractrl.selector.policy import greedy

    env = SelectorEnv(case_dir=str(case_dir), candidates=size)
    out = []
    for seed in range(seeds):
        torch.manual_seed(seed)
        module = SelectorModule(
            observation_space=env.observation_space, action_space=env.action_space, model_config={"hidden": hidden}
        )
        wins = []
        for index in range(len(env.cases)):
            obs, _ = env.reset(options={"index": index})
            done = False
            while not done:
                with torch.no_grad():
                    logits = module.logits({k: torch.as_tensor(v)[None] for k, v in obs.items()}).numpy()
                obs, _, done, _, info = env.step(int(greedy(logits)[0]))
            wins.append(info["success"])
        out.append(round(float(np.mean(wins)), 3))
    return out


def _summary(judge: Judge, rows: list[dict[str, Any]]) -> dict[str, Any]:
    fam: dict[str, list[bool]] = defaultdict(list)
    abstain_ok, retries, latency = [], [], []
    for row in rows:
        verdict = judge.verdict(row)
        fam[row["case_family"]].append(verdict.success)
        should = judge.offline(row["case_id"]).should_abstain
        abstain_ok.append(bool(row["abstained"]) == should)
        retries.append(row["retries"])
        latency.append(float(row.get("wall_s", 0.0)) + float(row.get("gen_s", 0.0)))
    n = len(rows)
    return {
        "episodes": n,
        "semantic_success": sum(sum(v) for v in fam.values()) / n,
        "per_family": {f: round(sum(v) / len(v), 3) for f, v in sorted(fam.items())},
        "abstention_accuracy": float(np.mean(abstain_ok)),
        "retries": float(np.mean(retries)),
        "latency_mean_s": float(np.mean(latency)),
        "latency_p95_s": float(np.percentile(latency, 95)),
    }


def _same_cases(a: Path, b: Path) -> bool:
    def digest(p: Path) -> str:
        return hashlib.sha256((p / "public.parquet").read_bytes()).hexdigest()

    return (a / "public.parquet").is_file() and (b / "public.parquet").is_file() and digest(a) == digest(b)


def run_style(style: str, out: Path, lm_runs: Path | None, overrides: list[str]) -> dict[str, Any]:
    config = load_config(
        SelectorConfig,
        ROOT / "tune_configs" / "selector.yaml",
        # every iteration is evaluated, so the time to the best held-out success is exact
        [f"out={out / 'train'}", f"data.request_style={style}", "wandb.mode=disabled", "resume=true", "eval.every=1", *overrides],
    )
    start = time.perf_counter()
    trained = train_selector(config, progress=True)
    train_wall = time.perf_counter() - start
    held_out = Path(trained.out) / "cases" / "eval"
    cases = read_cases(held_out)
    judge = Judge(cases)
    public = [c.public for c in cases]
    pool = LocalPool(1)
    size = config.model.candidates
    systems = {
        "selector": StudySetup(lambda _: SelectorPolicy.load(trained.selector_dir), pool, model="selector", stage="ppo"),
        "heuristic": StudySetup(lambda _: HeuristicPolicy(), pool),
        "random_masked": StudySetup(lambda _: RandomMaskedPolicy(size), pool),
    }
    results: dict[str, Any] = {}
    for name, setup in systems.items():
        run = evaluate(setup, public, out / "runs" / name, {"condition": f"requests={style}"})
        results[name] = _summary(judge, read_ledger(run))
    if lm_runs is not None and _same_cases(held_out, lm_runs.parent / "cases" / "eval"):
        for stage in ("after-sft", "after-grpo"):
            if (lm_runs / stage / "manifest.json").is_file():
                results[f"lm_{stage}"] = _summary(judge, read_ledger(lm_runs / stage))
    return {
        "style": style,
        "cases": len(cases),
        "train_cases": config.data.train_cases,
        "iterations": trained.iterations,
        "best_iteration": trained.best_iteration,
        "seconds_to_best": round(trained.best_wall_s, 1),
        "train_wall_s": round(train_wall, 1),
        "evals": {k: round(v["semantic_success"], 3) for k, v in trained.evals.items()},
        "untrained_success": untrained_success(held_out, size, config.model.hidden),
        "systems": results,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/bench_selector")
    parser.add_argument("--styles", default="verbatim,paraphrase", help="request styles, comma-separated")
    parser.add_argument("--lm-runs", default="runs/bench_learning/train/eval", help="the LM's held-out evaluation runs")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON line at the end")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="selector config overrides")
    args = parser.parse_args(argv)
    lm_runs = Path(args.lm_runs) if args.lm_runs and Path(args.lm_runs).is_dir() else None
    start = time.perf_counter()
    styles = [run_style(s, Path(args.out) / s, lm_runs, args.overrides) for s in args.styles.split(",") if s]
    for entry in styles:
        print(f"\n{entry['style']}: {entry['cases']} held-out cases, best at iteration {entry['best_iteration']} "
              f"after {entry['seconds_to_best']} s of training; untrained weights: {entry['untrained_success']}",
              file=sys.stderr)  # fmt: skip
        for name, r in entry["systems"].items():
            print(
                f"  {name:<15} success {r['semantic_success']:.3f}  abstention acc {r['abstention_accuracy']:.3f}  "
                f"retries {r['retries']:.3f}  latency {r['latency_mean_s'] * 1000:.2f} ms (p95 {r['latency_p95_s'] * 1000:.2f})",
                file=sys.stderr,
            )
    report = {
        "benchmark": "selector",
        "styles": styles,
        "machine": f"{platform.processor() or platform.machine()}, python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "wall_s": round(time.perf_counter() - start, 1),
    }
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
