"""Case generation throughput: 10,000 cases over the built-in catalog (target: under 60 s here).

python benchmarks/bench_cases.py --n 10000 --json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter

from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.tasks.store import write_case_set


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    config = GenerateConfig(seed=args.seed, n=args.n)
    start = time.perf_counter()
    cases = generate_cases(config)
    generated = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as out:
        write_case_set(cases, out, config.to_dict())
    total = time.perf_counter() - start
    result = {
        "cases": len(cases),
        "generate_s": round(generated, 2),
        "total_with_parquet_s": round(total, 2),
        "cases_per_s": round(len(cases) / total),
        "tool_families": dict(sorted(Counter(c.public.tool_family for c in cases).items())),
    }
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
