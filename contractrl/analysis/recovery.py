"""Per-case outcomes of recorded runs whose rollouts are gone, recovered exactly from their record.

A comparison that ``bench_learning.py --pair`` saved lists, for every pair, the cases each side
alone solved (``gained`` and ``lost``) and both sides' success rates. That is all of a run's
per-case semantic success once one side of a pair is known case by case again: the other side is
the known side with exactly those cases flipped. A deterministic run re-made on the same case set
(the heuristic: same seed, same cases, same episodes) is such an anchor, and every run joined to it
by recorded pairs, directly or through other recovered runs, follows. So a policy whose weights were
lost can still be paired, case by case, against a run made later on the same cases.

The recovery refuses rather than guesses: the anchor must have the recorded success rate and the
recorded outcome on every discordant case the record names; each recovered run must have both
rates its pairs record; a run reached by two paths must come out the same on both.

    python benchmarks/recover_outcomes.py --record benchmarks/results/learning-smollm2-central-paired.json \\
        --report runs/cc/heur1 --report runs/cc/heur2 --report runs/cc/heur3 --out runs/cc/recovered

writes ``OUT/episodes.parquet`` (run, case_id, case_family, model, semantic_success: the columns a
pair needs) and ``OUT/recovered.json`` (each run, its rate and the pair it came from), so that
``bench_learning.py --report NEW --report OUT --pair RECOVERED NEW`` pairs them. Only success is
recovered: tokens, collateral and latency of a recovered run are the record's per-run means.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from contractrl.analysis.learning import matching_runs, read_reports, run_episodes

# rates in a record are floats of counts over at most a few thousand cases: equal to well within this
RATE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class RecordedPair:
    """One pair as recorded: who solved which discordant cases, and each side's rate."""

    baseline: str
    candidate: str
    n: int
    rate_baseline: float
    rate_candidate: float
    gained: frozenset[str]  # candidate solved, baseline did not
    lost: frozenset[str]  # baseline solved, candidate did not


def recorded_pairs(record: Any) -> Iterator[RecordedPair]:
    """Every single pair anywhere in a saved result (stacked pairs, named ``A1 + A2``, are left out:
    they repeat their parts)."""
    if isinstance(record, Mapping):
        if {"baseline", "candidate", "pooled", "gained", "lost"} <= set(record) and " + " not in record["baseline"]:
            pooled = record["pooled"]
            yield RecordedPair(
                baseline=record["baseline"],
                candidate=record["candidate"],
                n=int(pooled["n"]),
                rate_baseline=float(pooled["a"]),
                rate_candidate=float(pooled["b"]),
                gained=frozenset(record["gained"]),
                lost=frozenset(record["lost"]),
            )
        for value in record.values():
            yield from recorded_pairs(value)
    elif isinstance(record, list):
        for value in record:
            yield from recorded_pairs(value)


def _rate(outcome: pd.Series) -> float:
    return float(outcome.astype(float).mean())


def _check_rate(run: str, outcome: pd.Series, expected: float, pair: RecordedPair) -> None:
    rate = _rate(outcome)
    if abs(rate - expected) > RATE_TOLERANCE:
        raise SystemExit(
            f"{run} solves {rate:.6f} of its {len(outcome)} cases, but the pair "
            f"{pair.baseline} / {pair.candidate} records {expected:.6f}: not the run the record scored"
        )


def other_side(known: pd.Series, pair: RecordedPair, known_is_baseline: bool) -> tuple[str, pd.Series]:
    """The pair's other run and its outcomes case by case: ``known`` (bool by case id) flipped on the
    pair's discordant cases, after checking that ``known`` is the side the record describes."""
    if known_is_baseline:
        run, other_run = pair.baseline, pair.candidate
        rate, other_rate = pair.rate_baseline, pair.rate_candidate
        solved_by_known, solved_by_other = pair.lost, pair.gained
    else:
        run, other_run = pair.candidate, pair.baseline
        rate, other_rate = pair.rate_candidate, pair.rate_baseline
        solved_by_known, solved_by_other = pair.gained, pair.lost
    if len(known) != pair.n:
        raise SystemExit(f"{run} has {len(known)} cases here, the pair {pair.baseline} / {pair.candidate} {pair.n}")
    _check_rate(run, known, rate, pair)
    missing = sorted((solved_by_known | solved_by_other) - set(known.index))
    if missing:
        raise SystemExit(f"the pair {pair.baseline} / {pair.candidate} names cases {run} did not run: {missing[:5]}")
    wrong = sorted(c for c in solved_by_known if not known[c]) + sorted(c for c in solved_by_other if known[c])
    if wrong:
        raise SystemExit(f"{run} differs from its record on discordant cases {wrong[:5]}: not the run the record scored")
    other = known.copy()
    other.loc[sorted(solved_by_other)] = True
    other.loc[sorted(solved_by_known)] = False
    _check_rate(other_run, other, other_rate, pair)
    return other_run, other


def recover(known: Mapping[str, pd.Series], pairs: Sequence[RecordedPair]) -> dict[str, tuple[pd.Series, RecordedPair]]:
    """Every run reachable from the ``known`` runs (their per-case success, by case id) through
    ``pairs``, with the pair it was first recovered from; every other path is checked against it."""
    outcomes: dict[str, pd.Series] = dict(known)
    found: dict[str, tuple[pd.Series, RecordedPair]] = {}
    pending = list(pairs)
    while pending:
        progressed = False
        for pair in list(pending):
            if pair.baseline not in outcomes and pair.candidate not in outcomes:
                continue
            pending.remove(pair)
            progressed = True
            from_baseline = pair.baseline in outcomes
            target, derived = other_side(outcomes[pair.baseline if from_baseline else pair.candidate], pair, from_baseline)
            if target in outcomes:
                if not outcomes[target].sort_index().equals(derived.sort_index()):
                    raise SystemExit(f"{target} comes out differently through {pair.baseline} / {pair.candidate}")
                continue
            outcomes[target] = derived
            found[target] = (derived, pair)
        if not progressed:
            break
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", required=True, help="a result saved by bench_learning.py --pair ... --save")
    parser.add_argument(
        "--report",
        action="append",
        required=True,
        help="a report holding anchor runs re-made on the recorded cases; repeat it, one per case set",
    )
    parser.add_argument("--out", required=True, help="directory for episodes.parquet and recovered.json")
    args = parser.parse_args(argv)
    record = json.loads(Path(args.record).read_text())
    pairs = list(recorded_pairs(record))
    episodes = read_reports([Path(r) for r in args.report])
    names = {p.baseline for p in pairs} | {p.candidate for p in pairs}
    anchors: dict[str, pd.DataFrame] = {}
    for name in sorted(names):
        if matching_runs(episodes, name):  # re-made; the others are recovered, where they can be
            anchors[name] = run_episodes(episodes, name)
    if not anchors:
        raise SystemExit(f"none of the record's runs is in the reports: re-make one of {', '.join(sorted(names))}")
    found = recover({n: f["semantic_success"].astype(bool) for n, f in anchors.items()}, pairs)
    family = pd.concat([f["case_family"] for f in anchors.values()])
    family = family[~family.index.duplicated()]
    model = record.get("model", "")
    frames = [
        pd.DataFrame(
            {
                "run": run,
                "case_id": s.index,
                "case_family": family.loc[s.index].to_numpy(),
                "model": model,
                "semantic_success": s.to_numpy(),
            }
        )
        for run, (s, _) in sorted(found.items())
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pd.concat(frames, ignore_index=True).to_parquet(out / "episodes.parquet", index=False)
    summary = {
        "record": args.record,
        "anchors": {name: _rate(f["semantic_success"]) for name, f in sorted(anchors.items())},
        "recovered": {
            run: {"cases": len(s), "semantic_success": _rate(s), "from": [pair.baseline, pair.candidate]}
            for run, (s, pair) in sorted(found.items())
        },
        "not_recovered": sorted(names - set(anchors) - set(found)),
    }
    (out / "recovered.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0
