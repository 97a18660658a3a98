"""The long fuzz run of issue 13: N generated schema / contract / candidate / answer cases.

Each seed is one case of ``tests/fuzzing.py`` (the same generator and references the suite runs
under hypothesis), run through both backends' patch and whole-object transitions. The run counts
uncaught exceptions, transitions slower than the per-transition bound (5 s), and accepted
objects that python-jsonschema (Draft 2020-12, ECMA-262 patterns via ``regress``) or the
independent reading of the contract rejects; every finding is printed with its seed, and
``generate(seed)`` reproduces it.

``--bombs`` runs resource bombs instead (``tests/bombs.py``: ``$ref`` fan-out, counted repeats,
pattern size, many searches, large enums in reports, ``uniqueItems``, float bounds past 2^53),
each through both backends, in a process capped at ``--memory-cap-gib`` of address space. It
counts uncaught exceptions, verifications past the CPU bound, accepted objects the bomb's known
verdict rejects, and the peak resident memory. An abort inside native code ends the run: the
exit status then is the finding.

    nice -n 10 .venv/bin/python benchmarks/fuzz_contract.py --seeds 100000 --json > fuzz.json
    nice -n 10 .venv/bin/python benchmarks/fuzz_contract.py --bombs --seeds 100000 --json > bombs.json
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import resource
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


def run_bombs(seeds: range, memory_cap_gib: float) -> dict[str, object]:
    """Every bomb of ``seeds`` through both backends, under an address-space cap."""
    from contractrl.errors import ContractRLError, SchemaCompileError
    from contractrl.validators import Code, Verifier
    from contractrl.validators.guard import guard
    from tests.bombs import generate_bomb

    cap = int(memory_cap_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    outcomes: collections.Counter[str] = collections.Counter()
    slowest: dict[str, float] = collections.defaultdict(float)
    findings: list[dict[str, object]] = []
    began = time.perf_counter()
    for done, seed in enumerate(seeds, 1):
        bomb = generate_bomb(seed)
        for backend in ("rs", "python"):
            start = time.process_time()
            try:
                report = Verifier.build(bomb.schema, backend=backend).verify(bomb.instance)
                outcome = "too_large" if report.codes == (Code.TOO_LARGE,) else report.status
                if report.accepted and not bomb.valid:
                    findings.append({"kind": "accepted_invalid", "seed": seed, "backend": backend})
            except SchemaCompileError:
                outcome = "schema_refused"
            except ContractRLError as exc:
                outcome = "refused"
                findings.append({"kind": "unexpected_refusal", "seed": seed, "backend": backend, "error": str(exc)[:200]})
            except Exception as exc:  # an uncaught error is exactly what this run counts
                outcome = "uncaught"
                findings.append({"kind": "uncaught", "seed": seed, "backend": backend, "error": repr(exc)[:200]})
            spent = time.process_time() - start
            if spent > TIME_BOUND_S:
                findings.append({"kind": "over_cpu_bound", "seed": seed, "backend": backend, "cpu_s": round(spent, 2)})
            outcomes[f"{bomb.kind}:{outcome}"] += 1
            slowest[bomb.kind] = max(slowest[bomb.kind], spent)
        if done % 1000 == 0:
            print(f"{done} bombs, {len(findings)} findings, {time.perf_counter() - began:.0f} s", file=sys.stderr)
    kinds = collections.Counter(str(f["kind"]) for f in findings)
    return {
        "bombs": len(seeds),
        "seeds": [seeds.start, seeds.stop - 1],
        "verifications": 2 * len(seeds),
        "uncaught_exceptions": kinds["uncaught"],
        "over_cpu_bound": kinds["over_cpu_bound"],
        "accepted_invalid": kinds["accepted_invalid"],
        "cpu_bound_s": TIME_BOUND_S,
        "slowest_cpu_s_by_kind": {k: round(v, 3) for k, v in sorted(slowest.items())},
        "memory_cap_gib": memory_cap_gib,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "guard_child_peak_rss_mib": guard().child_peak_rss_mib(),
        "guard_children_started": guard().started,
        "wall_s": round(time.perf_counter() - began, 1),
        "outcomes": dict(sorted(outcomes.items())),
        "findings": findings[:50],
        "machine": {"cpu": _cpu(), "python": platform.python_version()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100_000)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON summary")
    parser.add_argument("--bombs", action="store_true", help="run resource bombs (tests/bombs.py) instead")
    parser.add_argument("--memory-cap-gib", type=float, default=2.0, help="address-space cap of a --bombs run")
    args = parser.parse_args()
    if args.bombs:
        summary = run_bombs(range(args.start, args.start + args.seeds), args.memory_cap_gib)
        print(json.dumps(summary, indent=None if args.json else 2))
        return
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
