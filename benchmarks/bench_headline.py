"""The headline table: systems x slices, from frozen rollout runs (``contractrl.analysis.headline_runs``
holds the command and its usage)."""

from pathlib import Path

from contractrl.analysis.headline_runs import main

if __name__ == "__main__":
    raise SystemExit(main(default_out=Path(__file__).resolve().parent / "results" / "headline.json"))
