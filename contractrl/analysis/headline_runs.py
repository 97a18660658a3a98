"""The headline table: systems x slices, from frozen rollout runs, saved as
``benchmarks/results/headline.json`` (keys ``systems``, ``slices`` and ``paired``).

Rows: heuristic, selector (PPO), full regeneration, constrained decoding, Patch-SFT, ContractRL.
Columns: built-in (paraphrase), BFCL non-live, BFCL live (held out), natural failures. Each cell:
semantic success with its case count and bootstrap interval, tokens, probes, collateral edits and
p95 episode time; ``paired`` is ContractRL minus each other system per slice (diff, interval,
McNemar p). The computation is ``contractrl.analysis.headline``; this script joins the runs (as
``contractrl report`` does) and names which runs are which row and column.

Each slice's cases come from ``contractrl cases generate`` (``--source builtin --request-style
paraphrase``, ``bfcl:simple``, ``bfcl:live_simple``, ``bfcl-results:DIR``); each system's run over
them from ``contractrl rollout ... --label condition=<slice>`` (a run with no condition is the
``built-in`` slice). Then::

    python benchmarks/bench_headline.py RUN_DIR... --cases CASE_DIR... \
        --system heuristic=contractrl:heuristic --system contractrl=contractrl:hf@grpo \
        --slice builtin_paraphrase=built-in --slice natural=natural [--extra NAME=LABEL] \
        [--out benchmarks/results/headline.json] [--json]

A row or column not named stays in the table with ``n`` 0; ``--extra`` rows follow the six.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from contractrl.analysis.headline import SLICES, SYSTEMS, headline, slice_labels
from contractrl.analysis.join import join_runs, read_episodes
from contractrl.analysis.results_file import write_result
from contractrl.errors import ContractRLError

# relative to where it runs; benchmarks/bench_headline.py names it beside itself
DEFAULT_OUT = Path("benchmarks") / "results" / "headline.json"


def _pairs(items: list[str] | None, allowed: tuple[str, ...], what: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, label = item.partition("=")
        if not sep or key not in allowed or not label:
            raise ContractRLError(f"--{what} {item!r}: give NAME=LABEL with NAME one of {', '.join(allowed)}")
        out[key] = label
    return out


def _extra(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, label = item.partition("=")
        if not sep or not re.fullmatch(r"[a-z][a-z0-9_]*", key) or key in SYSTEMS or not label:
            raise ContractRLError(f"--extra {item!r}: give NAME=LABEL with a new row NAME ([a-z0-9_], not {', '.join(SYSTEMS)})")
        out[key] = label
    return out


def table(
    run_dirs: list[str],
    case_dirs: list[str],
    systems: dict[str, str],
    columns: dict[str, str],
    resamples: int,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Join the runs to their cases (in-process) and compute the headline table."""
    with tempfile.TemporaryDirectory(prefix="headline-") as scratch:
        episodes = read_episodes(join_runs(run_dirs, case_dirs, scratch, use_ray=False))
    return headline(episodes.assign(slice=slice_labels(episodes)), systems, columns, extra=extra, resamples=resamples)


def main(argv: list[str] | None = None, *, default_out: Path = DEFAULT_OUT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="frozen rollout runs")
    parser.add_argument("--cases", action="append", required=True, help="a case set the runs were made from (repeatable)")
    parser.add_argument("--system", action="append", help=f"ROW=SYSTEM-LABEL, ROW one of {', '.join(SYSTEMS)}")
    parser.add_argument("--slice", action="append", help=f"COLUMN=SLICE-LABEL, COLUMN one of {', '.join(SLICES)}")
    parser.add_argument(
        "--extra", action="append", help="NAME=SYSTEM-LABEL: one more row after the six (the recipe on a larger model)"
    )
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples")
    parser.add_argument("--out", default=str(default_out))
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    args = parser.parse_args(argv)
    try:
        result = table(
            args.runs,
            args.cases,
            _pairs(args.system, SYSTEMS, "system"),
            _pairs(args.slice, SLICES, "slice"),
            args.resamples,
            _extra(args.extra),
        )
    except ContractRLError as exc:
        print(f"bench_headline: {exc}", file=sys.stderr)
        return 2
    out = write_result(result, args.out, echo=args.json)
    if not args.json:
        print(f"{'system':<12}" + "".join(f"{c:>22}" for c in SLICES))
        for system, cells in result["systems"].items():
            text = [f"{cells[c]['success']:.3f} (n={cells[c]['n']})" if cells[c]["n"] else "-" for c in SLICES]
            print(f"{system:<12}" + "".join(f"{t:>22}" for t in text))
        print(f"written to {out}")
    return 0
