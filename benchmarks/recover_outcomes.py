"""Per-case outcomes of recorded runs whose rollouts are gone, recovered exactly from their record
(``contractrl.analysis.recovery`` holds the command and its usage)."""

from contractrl.analysis.recovery import main

if __name__ == "__main__":
    raise SystemExit(main())
