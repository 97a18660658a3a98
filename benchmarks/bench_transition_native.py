"""What a native core would buy the CR-MDP transition, measured on a prototype (issue 16, section 3).

The prototype is the project's own validator package (``contractrl/validators``, every module)
compiled to C extensions with mypyc, unchanged: the same strict parsing, masking, copy-on-write
apply, typed reports, collateral accounting and records, with the interpreter's dispatch taken out.
The script:

1. copies the ``contractrl`` package into a scratch folder and compiles its validator modules there
   (the checkout is never touched, so an editable install keeps running the ``.py`` files);
2. runs the validator test files against the compiled copy, so the figure is for a core that
   behaves like the interpreted one (mypyc checks type annotations at run time, so a loose
   annotation shows up here as a ``TypeError``);
3. runs ``bench_transition.py --json`` twice, interpreted and compiled, one after the other. Each
   run measures its own naive stack, so each ratio is measured within one run.

It needs mypy (which ships mypyc) and a C compiler; ``pip install mypy`` if it says so. Compiling
takes about a minute on 2 cores.

    python benchmarks/bench_transition_native.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# the test files that exercise the validator package; run against the compiled copy
VALIDATOR_TESTS = (
    "tests/test_transition.py",
    "tests/test_patch_and_mask.py",
    "tests/test_strict_json.py",
    "tests/test_verifier.py",
    "tests/test_contracts.py",
    "tests/test_fail_closed.py",
    "tests/test_dialects.py",
    "tests/test_conformance.py",
    "tests/test_properties.py",
    "tests/test_bad_input.py",
)


def _compile(scratch: Path) -> float:
    """Copy the package into ``scratch`` and compile its validator modules there; seconds taken."""
    try:
        import mypyc  # noqa: F401
    except ImportError:
        raise SystemExit("mypyc is not installed: pip install mypy (it ships mypyc), then run this again") from None
    shutil.copytree(ROOT / "contractrl", scratch / "contractrl", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    modules = sorted(str(p.relative_to(scratch)) for p in (scratch / "contractrl" / "validators").glob("*.py"))
    modules = [m for m in modules if not m.endswith("__init__.py")]
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "mypyc", "--ignore-missing-imports", *modules],
        cwd=scratch,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"mypyc failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return time.perf_counter() - start


def _env(pythonpath: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _check_compiled(scratch: Path) -> None:
    probe = "import contractrl.validators.transition as t; print(t.__file__)"
    where = subprocess.run(
        [sys.executable, "-c", probe], cwd=scratch, env=_env(scratch), capture_output=True, text=True, check=True
    ).stdout.strip()
    if not where.endswith(".so"):
        raise SystemExit(f"the compiled copy is not the one imported (got {where}); is contractrl installed non-editable?")


def _tests(scratch: Path) -> dict[str, Any]:
    """The validator test files against the compiled copy: pytest's last line and its exit code.

    The tests are copied beside the compiled package: pytest puts the folder above a test package
    first on ``sys.path``, so tests run from the checkout would import the checkout's ``.py`` files.
    """
    shutil.copytree(ROOT / "tests", scratch / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", scratch / "pyproject.toml")
    env = _env(scratch)
    shared = ROOT.parent / "shared" / "data"  # the conformance tests' public data, where the checkout has it
    if shared.is_dir():
        env.setdefault("CONTRACTRL_SHARED_DATA", str(shared))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *VALIDATOR_TESTS],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return {"exit_code": done.returncode, "summary": lines[-1] if lines else done.stderr[-400:]}


def _bench(pythonpath: Path | None, seconds: float) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_transition.py"), "--json", "--seconds", str(seconds)],
        env=_env(pythonpath),
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--seconds", type=float, default=8.0, help="measuring time per stack (default 8)")
    parser.add_argument("--skip-tests", action="store_true", help="do not run the validator tests on the compiled copy")
    parser.add_argument("--keep", type=Path, default=None, help="compile into this folder and keep it")
    args = parser.parse_args()
    scratch_parent = args.keep or Path(tempfile.mkdtemp(prefix="contractrl-mypyc-"))
    scratch_parent.mkdir(parents=True, exist_ok=True)
    try:
        compile_s = _compile(scratch_parent)
        _check_compiled(scratch_parent)
        tests = None if args.skip_tests else _tests(scratch_parent)
        interpreted = _bench(None, args.seconds)
        compiled = _bench(scratch_parent, args.seconds)
    finally:
        if args.keep is None:
            shutil.rmtree(scratch_parent, ignore_errors=True)
    result = {
        "interpreted_per_s": interpreted["ours_per_s"],
        "interpreted_ratio_vs_naive": interpreted["ratio_vs_naive"],
        "compiled_per_s": compiled["ours_per_s"],
        "compiled_ratio_vs_naive": compiled["ratio_vs_naive"],
        "floor_ratio_vs_naive": compiled["floor_ratio_vs_naive"],
        "compiled_vs_interpreted": round(compiled["ours_per_s"] / interpreted["ours_per_s"], 2),
        "compile_s": round(compile_s, 1),
        "validator_tests": tests,
        "python": interpreted["python"],
    }
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
