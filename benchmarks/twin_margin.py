"""Does a policy's ABSTAIN depend on the request? Its probability on each twin of a contrast pair
(``contractrl.experiments.twin_margin`` holds the command and its usage)."""

from contractrl.experiments.twin_margin import main

if __name__ == "__main__":
    raise SystemExit(main())
