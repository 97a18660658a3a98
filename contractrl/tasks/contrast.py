"""The minimal contrast of an unrepairable case: the same call and report, the withheld value stated.

An unrepairable case and a missing_required case carry the same report; only the request says
whether the value can be found. A policy that has not learned to read the request for it can only
learn "abstain more" or "abstain less", and measured runs did exactly that (benchmarks/RESULTS.md,
G8 and G13): weighting one family moved the other the opposite way. The contrast makes the request
the *only* difference: the unrepairable case's call, report, schema, budgets and sandbox world, the
withheld value stated in the request, and the repair as its target.

How the request states it is the contrast's ``form``. ``appended`` (the default, and every recorded
run before 2026-12-05) adds ``"<label>: <value>."`` after the request's last clause, which no request
the renderer writes does: a policy trained on many such pairs learned that place, not the value
(benchmarks/RESULTS.md, "A larger share of twins"). ``clause`` writes the value as one more clause
of the request in the renderer's own forms, joined like the others, at a place seeded by the case
id (:func:`~contractrl.tasks.requests.add_clause`), so the value's presence is the only cue.

A BFCL case's request is a person's question with the value redacted (``[not given]``); its
contrast is that question as the person wrote it, recorded in the case's offline half when the case
is made, so a model that reads words (the Qwen rungs) is shown both sides of the same question.

SFT learns from it as a demonstration (``experimental.contrast.sft``); GRPO rolls it out in the same
step as its unrepairable case (``experimental.contrast.grpo``), so within one update abstaining is
paid on one side and charged on the other. It is a complete case with its own id and offline half,
so the judge scores its episodes like any other; it is built for training cases only and never
joins a held-out set.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError
from ..validators.jsonvalue import canonical_json
from ..validators.pointer import format_pointer
from .cases import Case, OfflineCase, cluster_key
from .catalog import get_tool
from .requests import add_clause
from .sources import sandbox_expected

CONTRAST_SUFFIX = "-contrast"
CONTRAST_FAMILY = "missing_required"
CONTRAST_FORMS = ("appended", "clause")


def contrast_case(case: Case, form: str = "appended", *, index: int | None = None) -> Case | None:
    """The minimal contrast of an unrepairable case, or None for any other case.

    A case from people's own words (BFCL) carries its contrast in the offline half (``stated``, by
    :func:`~contractrl.tasks.sources.stated_contrast`): the question as the user wrote it, before
    the value was redacted, whatever ``form`` says. A built-in case's request is the catalog's own
    clauses, so ``form`` writes the value in; ``index`` puts a ``clause`` form's clause at that
    place among the request's clauses instead of the seeded one (``benchmarks/twin_margin.py
    --stated``). Other imported cases (JSON Schema corpora) have neither and get None.
    """
    if form not in CONTRAST_FORMS:
        raise ConfigError(f"unknown contrast form {form!r}; choose from {', '.join(CONTRAST_FORMS)}")
    withheld = case.offline.corruption.get("withheld")
    if case.public.family != "unrepairable" or not isinstance(withheld, str) or not isinstance(case.public.candidate, dict):
        return None
    stated = case.offline.corruption.get("stated")
    if isinstance(stated, dict):
        return _twin(case, withheld, str(stated["request"]), stated["expected"])
    try:
        spec = get_tool(case.public.tool)
    except ConfigError:
        return None
    value = case.offline.corruption["withheld_value"]
    target = {**case.public.candidate, withheld: value}
    expected = sandbox_expected(spec, case.public.world_seed, target)
    if expected is None:  # the withheld value came from a call that ran; guard the invariant all the same
        return None
    case_id = case.public.case_id + CONTRAST_SUFFIX
    if form == "appended":
        request: str | None = f"{case.public.request} {spec.label(withheld)}: {canonical_json(value)}."
    else:
        style = case.offline.corruption.get("request_style", "verbatim")
        seed = int(hashlib.sha256(canonical_json(["contrast", case_id]).encode()).hexdigest()[:16], 16)
        request = add_clause(
            case.public.request, spec, case.public.candidate, withheld, value, random.Random(seed), style=style, index=index
        )
        if request is None:  # not a request the catalog's renderer wrote (edited on disk): no minimal contrast
            return None
    return _twin(case, withheld, request, expected)


def _twin(case: Case, withheld: str, request: str, expected: dict[str, Any]) -> Case:
    """The contrast: ``case`` with ``request`` and the withheld member added back as its repair."""
    assert isinstance(case.public.candidate, dict)
    value = case.offline.corruption["withheld_value"]
    target = {**case.public.candidate, withheld: value}
    case_id = case.public.case_id + CONTRAST_SUFFIX
    public = dataclasses.replace(case.public, case_id=case_id, family=CONTRAST_FAMILY, request=request)
    pointer = format_pointer([withheld])
    offline = OfflineCase(
        case_id=case_id,
        target=target,
        target_patch=[{"op": "add", "path": pointer, "value": value}],
        expected=expected,
        cluster=cluster_key(case.public.tool, target, case.public.candidate),
        corruption={"family": CONTRAST_FAMILY, "expect": [["missing_required", pointer]], "contrast_of": case.public.case_id},
    )
    return Case(public, offline)


def contrast_cases(cases: Sequence[Case], form: str = "appended") -> list[Case]:
    """The contrast of every case that has one, in the cases' order."""
    return [twin for case in cases if (twin := contrast_case(case, form)) is not None]


__all__ = ["CONTRAST_FAMILY", "CONTRAST_FORMS", "CONTRAST_SUFFIX", "contrast_case", "contrast_cases"]
