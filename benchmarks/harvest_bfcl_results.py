"""Harvest natural failures: a project model answers BFCL questions zero-shot, as ``bfcl generate``
would, and the natural-failures source reads its answers back.

Writes ``BFCL_v4_<category>_result.json`` under ``--out`` (default
``<data cache>/bfcl-results/<model>``, i.e. ``runs/data/bfcl-results/smollm2``), then reads the run
with ``bfcl-results:DIR`` and prints what it gave: answers, BFCL's failures (recomputed by BFCL's
acceptance: no score file is written), how many of those the verifier sees, the natural failures
kept per family and the calls skipped, by reason. The logic is in
``contractrl.experiments.bfcl_harvest``; this script only parses arguments and prints.

    nice -n 15 python benchmarks/harvest_bfcl_results.py --model smollm2 --categories simple --limit 40 [--json]

Then ``contractrl cases generate --source bfcl-results:runs/data/bfcl-results/smollm2 --n N ...``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections import Counter
from typing import Any

from tqdm import tqdm

from contractrl.errors import ContractRLError
from contractrl.experiments.bfcl_harvest import NON_LIVE, HarvestConfig, harvest, questions
from contractrl.tasks.natural import NaturalSource


def run(config: HarvestConfig) -> dict[str, Any]:
    """Harvest, then read the run back as a case source."""
    start = time.perf_counter()
    total = sum(len(questions(config, c)) for c in config.categories)
    # a live bar on a terminal, a line every 30 s in a log: a 258-question run takes 10-15 min here
    with tqdm(total=total, desc="answers", unit="q", file=sys.stderr, mininterval=0.1 if sys.stderr.isatty() else 30.0) as bar:
        written = harvest(config, progress=bar.update)
    elapsed = time.perf_counter() - start
    try:
        source = NaturalSource(written["out"])
        natural: dict[str, Any] = {
            **source.report(),
            "families": dict(sorted(Counter(f.family for f in source.failures).items())),
        }
    except ContractRLError as exc:  # no verifier-rejected call at all is a result too
        natural = {"used": 0, "error": str(exc)}
    return {
        **written,
        "natural_failures": natural,
        "harvest_s": round(elapsed, 1),
        "machine": platform.machine(),
        "python": platform.python_version(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="tiny | smollm2 | hf:<name-or-path> | a model directory")
    parser.add_argument("--categories", default="simple", help=f"comma-separated, from {', '.join(NON_LIVE)} (live ones too)")
    parser.add_argument("--limit", type=int, default=40, help="questions per category (the first ones)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--out", default="", help="the run folder (default <data cache>/bfcl-results/<model>)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    try:
        config = HarvestConfig(
            model=args.model,
            categories=tuple(c.strip() for c in args.categories.split(",") if c.strip()),
            limit=args.limit,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.batch_size,
            out=args.out,
        )
        result = run(config)
    except ContractRLError as exc:
        print(f"harvest_bfcl_results: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        natural = result["natural_failures"]
        print(f"model {result['model']}: answers in {result['out']} ({result['harvest_s']} s)")
        print(f"source: {result['source']}")
        print(f"natural failures kept: {natural.get('used', 0)} {natural.get('families', '')}")
        print(f"BFCL: {natural.get('bfcl', natural.get('error'))}")
        print(f"skipped: {natural.get('skipped', {})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
