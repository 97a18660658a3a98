"""Single-bit flips in a frozen ledger shard: how many does ``contractrl ledger verify`` let through?

Issue 13 measured 23 of 61 flips passing verification (22 changed no decoded row, 1 changed the
unhashed ``wall_s``). This script repeats the experiment on any version of the package (it only
uses ``contractrl cases generate``, ``contractrl rollout`` and ``contractrl ledger verify``): it
makes a small heuristic rollout, freezes it, then flips one bit at each of ``--flips`` evenly
spaced byte positions of the first shard (bit = position mod 8) and counts what ``ledger verify``
did: passed (exit 0), refused (exit 1 with JSON), or crashed (an exception or no JSON).

    python benchmarks/ledger_bitflips.py --flips 61 --json
    PYTHONPATH=<old checkout> python benchmarks/ledger_bitflips.py --flips 61   # the "before" figure
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import tempfile
from pathlib import Path


def _verify(run: Path) -> str:
    from contractrl.cli import main

    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(["ledger", "verify", str(run)])
        json.loads(out.getvalue())
    except Exception:  # what the experiment counts as a crash: a traceback or no JSON
        return "crashed"
    return "passed" if code == 0 else "refused"


def run(flips: int, cases: int) -> dict[str, object]:
    from contractrl.cli import main

    root = Path(tempfile.mkdtemp(prefix="bitflips-"))
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(["cases", "generate", "--seed", "5", "--n", str(cases), "--out", str(root / "cases")])
            main(
                ["rollout", "--cases", str(root / "cases"), "--policy", "heuristic", "--workers", "0", "--out", str(root / "run")]
            )
        shard = root / "run" / "ledger" / "shard-00000.parquet"
        original = shard.read_bytes()
        positions = sorted({(len(original) - 1) * k // (flips - 1) for k in range(flips)})
        counts = {"passed": 0, "refused": 0, "crashed": 0}
        passed_at = []
        for position in positions:
            data = bytearray(original)
            data[position] ^= 1 << (position % 8)
            shard.write_bytes(bytes(data))
            verdict = _verify(root / "run")
            counts[verdict] += 1
            if verdict == "passed":
                passed_at.append(position)
        shard.write_bytes(original)
        return {
            "shard_bytes": len(original),
            "flips": len(positions),
            **counts,
            "passed_at": passed_at,
            "clean": _verify(root / "run"),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flips", type=int, default=61)
    parser.add_argument("--cases", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.flips, args.cases)
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
