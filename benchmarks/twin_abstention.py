"""How often a GRPO run's policy abstains on each twin of its contrast pairs, block by block
(``contractrl.analysis.twin_abstention`` holds the command and its usage)."""

from contractrl.analysis.twin_abstention import main

if __name__ == "__main__":
    raise SystemExit(main())
