"""How often the shield's grounding rule would refuse a gold repair: its false refusals, per case set and family.

The logic is ``contractrl.experiments.grounding_refusals``; run it over held-out and training case
sets before trusting the rule on new data::

    python benchmarks/grounding_refusals.py runs/main_v6/train/cases/eval runs/cases-bfcl-simple [--json] [--show 3]
"""

from __future__ import annotations

import argparse
import json
import sys

from contractrl.errors import ContractRLError
from contractrl.experiments.grounding_refusals import refusals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="+", metavar="CASE_DIR")
    parser.add_argument("--show", type=int, default=0, help="examples of refused gold repairs per family")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        results = [refusals(d, args.show) for d in args.cases]
    except ContractRLError as exc:
        print(f"grounding_refusals: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(results, indent=2, sort_keys=True, default=str))
        return 0
    for r in results:
        print(f"{r['cases']}: {r['refused']} of {r['repairs']} gold repairs refused {r['by_family']}")
        for e in r["examples"]:
            print(f"    {e['family']}: {e['request']!r} -> {json.dumps(e['target'], default=str)[:160]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
