"""Evidence: offline verdicts on frozen, verified ledgers (the judge), used by training and analysis.

The one place, besides the case store, that opens the offline half of cases. It sits above the
rollout layer (which writes ledgers and never sees targets) and below training and analysis.
"""
