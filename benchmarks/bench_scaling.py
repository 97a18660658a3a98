"""The scaling study's results: finished sweeps over model size in, the report and scaling.json out
(``contractrl.analysis.scaling_runs`` holds the command and its usage)."""

from pathlib import Path

from contractrl.analysis.scaling_runs import main

if __name__ == "__main__":
    raise SystemExit(main(default_out=Path(__file__).resolve().parent / "results" / "scaling.json"))
