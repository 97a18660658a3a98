"""Strict-mode schema refusals on a JSON Schema corpus: how many schemas strict compilation
refuses, per subset, and why (the first refusal of each schema).

    python benchmarks/strict_refusals.py [--corpus ../shared/data/jsonschemabench/maskbench] [--json]

The same decisions are pinned per schema in tests/fixtures/maskbench_conformance.json. Record the
output in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

from contractrl.errors import SchemaCompileError
from contractrl.validators import normalize_schema


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="../shared/data/jsonschemabench/maskbench")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    subsets = sorted(p for p in Path(args.corpus).iterdir() if p.is_dir())
    if not subsets:
        print(f"no subsets under {args.corpus}", file=sys.stderr)
        return 2
    result = {}
    for subset in subsets:
        files = sorted(subset.glob("*.json"))
        reasons: Counter[str] = Counter()
        for path in files:
            try:
                normalize_schema(json.loads(path.read_text())["schema"])
            except SchemaCompileError as exc:
                reasons[re.sub(r" \(at schema pointer .*\)$", "", str(exc))] += 1
        result[subset.name] = {"schemas": len(files), "refused": sum(reasons.values()), "reasons": dict(reasons.most_common())}
        print(
            f"{subset.name:<12} {sum(reasons.values()):>4} of {len(files):>5} refused: {dict(reasons.most_common())}",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps({"benchmark": "strict_refusals", "subsets": result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
