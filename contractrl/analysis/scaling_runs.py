"""The scaling study's results: finished sweeps over model size in, the report (with its scaling
table and figure) and ``benchmarks/results/scaling.json`` out.

The sweep is ``tune_configs/scaling.yaml`` (``contractrl tune --config tune_configs/scaling.yaml
[--local]``). Each finished trial's run directory is one root of the report, so each trial's
episodes are scored by its own judge, then::

    python benchmarks/bench_scaling.py runs/tune/scaling-local [SWEEP_DIR ...] [--stage sft] [--json]

writes the report under ``<first sweep>/report`` (several sweeps, say one per rank, report
together) and the per-size figures (``sizes``: ``model``,
``params``, ``success``, ``ci_low``, ``ci_high``, ``tokens``, ``p95_s``, ``train_s``,
``peak_rss_gb``) with each larger model's paired difference from the smallest (``paired``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import ContractRLError
from ..rollout.ledger import read_manifest
from .report import build_report
from .results_file import write_result
from .scaling import sizes_json

DEFAULT_OUT = Path("benchmarks") / "results" / "scaling.json"
TRIALS_FILE = "trials.parquet"  # trainer.tune writes it (the trainer sits above analysis)


def finished_trials(sweep_dir: str | Path) -> list[Path]:
    """The run directories of a sweep's finished trials: from its trial table once the sweep ended,
    else every run whose manifest says finished (a sweep still running, or one that was stopped)."""
    directory = Path(sweep_dir)
    table = directory / TRIALS_FILE
    if table.is_file():
        trials = pd.read_parquet(table)
        runs = [Path(r) for r, status in zip(trials["run_dir"], trials["status"], strict=True) if status == "FINISHED"]
    else:
        runs = sorted(p for p in (directory / "runs").glob("*") if read_manifest(p).get("status") == "finished")
    if not runs:
        raise ContractRLError(f"{directory} holds no finished trial (no {TRIALS_FILE}, no finished run under runs/)")
    return runs


def scaling_results(sweep_dirs: Sequence[str | Path], report_out: str | Path, stage: str | None = None) -> dict[str, Any]:
    """Report the sweeps' finished trials together and return ``scaling.json``'s content."""
    trials = [trial for sweep in sweep_dirs for trial in finished_trials(sweep)]
    report = build_report(trials, report_out, use_ray=False, workers=0, progress=False)
    frame = pd.read_parquet(Path(report.out) / "tables" / "scaling.parquet")
    result = sizes_json(frame, stage)
    sweeps = [str(Path(s)) for s in sweep_dirs]
    return {"sweeps": sweeps, "trials": [str(t) for t in trials], "report": str(report.index), **result}


def main(argv: list[str] | None = None, *, default_out: Path = DEFAULT_OUT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", metavar="SWEEP_DIR", help="sweep directories (<out>/<name> of contractrl tune)")
    parser.add_argument("--stage", default=None, help="the stage whose evaluation is compared (default: the last one)")
    parser.add_argument("--report-out", default=None, help="where the report goes (default: the first SWEEP_DIR/report)")
    parser.add_argument("--out", default=str(default_out), help="the JSON written")
    parser.add_argument("--json", action="store_true", help="print the JSON")
    args = parser.parse_args(argv)
    try:
        result = scaling_results(args.sweeps, args.report_out or Path(args.sweeps[0]) / "report", args.stage)
    except ContractRLError as exc:
        print(f"bench_scaling: {exc}", file=sys.stderr)
        return 2
    out = write_result(result, args.out, echo=args.json)
    if not args.json:
        print(f"{'model':<32}{'params':>14}{'success':>10}{'95% CI':>18}{'tokens':>8}{'p95 s':>8}{'train s':>9}{'peak GB':>9}")
        for size in result["sizes"]:
            interval = f"[{size['ci_low']:.3f}, {size['ci_high']:.3f}]"
            train = f"{size['train_s']:.0f}" if size["train_s"] is not None else "-"
            peak = f"{size['peak_rss_gb']:.2f}" if size["peak_rss_gb"] is not None else "-"
            print(
                f"{size['model']:<32}{size['params'] or '-':>14}{size['success']:>10.3f}{interval:>18}"
                f"{size['tokens']:>8.1f}{size['p95_s']:>8.2f}{train:>9}{peak:>9}"
            )
        for row in result["paired"]:
            print(
                f"{row['model']} - {row['baseline']}: {row['difference_mean']:+.3f} "
                f"[{row['ci_low']:+.3f}, {row['ci_high']:+.3f}], McNemar p = {row['mcnemar_p']:.3g} (n = {row['pairs']})"
            )
        print(f"report: {result['report']}\nwritten to {out}")
    return 0


__all__ = ["DEFAULT_OUT", "finished_trials", "main", "scaling_results"]
