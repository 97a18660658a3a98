"""The grounding rule's false refusals over a case set: gold repairs it would not let the shield send.

The rule (:mod:`contractrl.rollout.grounding`) keeps a repair from adding a value the request, a
freed value of the call or the schema's values do not state. A gold repair it refuses is a value
the request states only in other words, where the shield then abstains. ``benchmarks/grounding_refusals.py``
prints this per case set.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from ..rollout.grounding import invents
from ..tasks.offline import read_cases


def refusals(case_dir: str | Path, show: int = 0) -> dict[str, Any]:
    """Gold repairs of ``case_dir`` the rule refuses, by family, with up to ``show`` examples each."""
    refused: Counter[str] = Counter()
    repairs = 0
    examples: list[dict[str, Any]] = []
    for case in read_cases(case_dir):
        if case.offline.target is None:  # ABSTAIN is right: nothing is added
            continue
        repairs += 1
        if invents(case.public.candidate, case.offline.target, case.public.request, case.public.schema):
            refused[case.public.family] += 1
            if refused[case.public.family] <= show:
                example = {"family": case.public.family, "request": case.public.request[:160], "target": case.offline.target}
                examples.append(example)
    total = sum(refused.values())
    return {"cases": str(case_dir), "repairs": repairs, "refused": total, "by_family": dict(refused), "examples": examples}


__all__ = ["refusals"]
