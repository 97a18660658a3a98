"""The long fuzz run of issue 13: N generated schema / contract / candidate / answer cases.

Each seed is one case of ``tests/fuzzing.py`` (the same generator and references the suite runs
under hypothesis), run through both backends' patch and whole-object transitions. The run counts
uncaught exceptions, transitions slower than the per-transition bound (5 s), and accepted
objects that python-jsonschema (Draft 2020-12, ECMA-262 patterns via ``regress``) or the
independent reading of the contract rejects; every finding is printed with its seed, and
``generate(seed)`` reproduces it.

    nice -n 10 .venv/bin/python benchmarks/fuzz_contract.py --seeds 100000 --json > fuzz.json
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzzing import TIME_BOUND_S, Report, check, generate


class _Watchdog(BaseException):  # not an Exception: check() must not count it as an uncaught error
    pass


def _alarm(*_: object) -> None:
    raise _Watchdog


def _cpu() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        return next(
            (line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), platform.processor()
        )
    except OSError:
        return platform.processor()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100_000)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON summary")
    args = parser.parse_args()
    report = Report()
    watchdog_hangs = []
    signal.signal(signal.SIGALRM, _alarm)
    began = time.perf_counter()
    for seed in range(args.start, args.start + args.seeds):
        signal.alarm(int(4 * TIME_BOUND_S))  # a whole case (four transitions) past this is a hang
        try:
            check(generate(seed), report)
        except _Watchdog:
            watchdog_hangs.append(seed)
        finally:
            signal.alarm(0)
        done = seed - args.start + 1
        if done % 10_000 == 0:
            print(f"{done} cases, {len(report.findings)} findings, {time.perf_counter() - began:.0f} s", file=sys.stderr)
    kinds = collections.Counter(f["kind"] for f in report.findings)
    summary = {
        "cases": args.seeds,
        "seeds": [args.start, args.start + args.seeds - 1],
        "transitions": report.transitions,
        "accepted_objects": report.accepted,
        "refused_schemas_or_contracts": report.refused_schemas,
        "uncaught_exceptions": kinds["uncaught"],
        "hangs_past_bound": kinds["hang"] + len(watchdog_hangs),
        "accepted_but_schema_reference_rejects": kinds["schema"],
        "accepted_but_contract_reference_rejects": kinds["contract"],
        "immutable_changed": kinds["immutable"],
        "accepted_over_limits": kinds["bounds"],
        "time_bound_s": TIME_BOUND_S,
        "slowest_transition_s": round(report.slowest_s, 4),
        "wall_s": round(time.perf_counter() - began, 1),
        "outcomes": dict(sorted(report.outcomes.items(), key=lambda kv: -kv[1])),
        "findings": report.findings[:50],
        "watchdog_seeds": watchdog_hangs,
        "machine": {"cpu": _cpu(), "python": platform.python_version()},
    }
    print(json.dumps(summary, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
