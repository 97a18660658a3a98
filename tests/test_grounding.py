"""Grounding: the shield never sends a repair that adds a value the public evidence does not state.

It is a refusal rule, so hypothesis hunts for additions it lets through against a reference built
by construction: every value is drawn either from a pool the request states or from a pool marked
with a character no evidence contains, so whether a repair invents is known before the rule runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contractrl.experiments.grounding_refusals import refusals
from contractrl.rollout.env import RepairEnv, contract_for
from contractrl.rollout.grounding import Evidence, added_members, invents, schema_values
from contractrl.rollout.shield import choose, probe
from contractrl.tasks.cases import ABSTAIN
from contractrl.tasks.contrast import contrast_case
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.tasks.store import write_case_set
from contractrl.validators.codes import Code
from contractrl.validators.jsonvalue import leaves

MARK = "\u00a4"  # in no request, call or schema the tests build
STATED = ["New York", "cal_63c06c", "metric", 42, 3.5, 300000, "2026-01-18", 24]
REQUEST = (
    'Directions from New York, id "cal_63c06c", in metric; 42 km at 3.5; budget 300,000; by January 18, 2026; limit twenty-four'
)

stated_values = st.sampled_from(STATED) | st.booleans() | st.none()
invented_values = st.text(alphabet="abcxyz", min_size=1, max_size=6).map(lambda s: s + MARK)
keys = st.sampled_from(["a", "b", "c", "d", "e"])


def _value(leaf: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3), max_leaves=6)


@st.composite
def repairs(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """(call, repaired call, whether the repair adds an invented value), known by construction:
    members kept or replaced in place carry any value; an added member's value is drawn wholly
    from one pool, so it invents exactly when it holds a marked leaf."""
    # the failed call holds stated values (a value it held and the repair moves is evidence:
    # test_a_renamed_member_keeps_its_value)
    before = draw(st.dictionaries(keys, _value(stated_values), max_size=4))
    # a value replaced in place (a scalar or a list: an object would add members inside it)
    flat = st.lists(stated_values | invented_values, max_size=3) | stated_values | invented_values
    after = {k: draw(flat) if draw(st.booleans()) else v for k, v in before.items()}
    invented = False
    for key in draw(st.lists(keys, max_size=3, unique=True)):
        if key in before:
            continue
        after[key] = draw(_value(invented_values) if draw(st.booleans()) else _value(stated_values))
        invented = invented or _holds_mark(after[key])  # an empty list or object adds no value
    # one level down: a member added inside an object both calls have
    nested = [k for k in before if isinstance(before[k], dict) and isinstance(after[k], dict)]
    if nested and draw(st.booleans()):
        inner_key = "z"
        if inner_key not in before[nested[0]]:
            added = draw(invented_values if draw(st.booleans()) else stated_values)
            after[nested[0]] = {**after[nested[0]], inner_key: added}
            invented = invented or _holds_mark(added)
    return before, after, invented


def _holds_mark(value: Any) -> bool:
    return MARK in json.dumps(value, ensure_ascii=False)


@settings(max_examples=400, deadline=None)
@given(repairs())
def test_an_added_invented_value_is_always_caught_and_a_stated_one_never(repair: tuple) -> None:
    before, after, invented = repair
    # the request states each stated value twice, so striking out what the other members use
    # (one occurrence each, at most four members with three leaves) never strikes a value away
    assert invents(before, after, " | ".join([REQUEST] * 16), {}) == invented, (before, after)


@settings(max_examples=400, deadline=None)
@given(repairs(), st.sampled_from([REQUEST, "", "New York | 42"]))
def test_what_the_rule_lets_through_the_evidence_may_state_from_its_first_character(repair: tuple, request: str) -> None:
    """The evidence a prefix is judged by (rollout/prefix_refusal.py) holds at least what the rule
    allows: every value of a repair the rule lets through, and every start of each of its strings."""
    before, after, _ = repair
    if invents(before, after, request, {}):
        return
    evidence = Evidence.of(request, {}, before)
    for path, value in added_members(before, after):
        for leaf in leaves(value).values():
            assert evidence.may_state(leaf), (path, leaf)
            if isinstance(leaf, str):
                assert all(evidence.may_state_start(leaf[:end]) for end in range(len(leaf) + 1)), (path, leaf)


def test_a_string_whose_start_no_evidence_holds_is_judged_at_that_start() -> None:
    evidence = Evidence.of(REQUEST, {"enum": ["imperial_units"]}, {"id": "cal_63c06c"})
    for start in ["new y", "New  Yo", "cal_63", "imperial_u", "2026-01-1", "2026-01-18T0", "  ", "Σx"]:
        assert evidence.may_state_start(start), start
    for start in ["Los", "new yorkshire", "cal_64", "imperial u", "2026-01-18 ", "123456"]:
        assert not evidence.may_state_start(start), start


@given(st.dictionaries(keys, _value(stated_values | invented_values), max_size=4))
def test_replacing_or_keeping_members_never_invents(call: dict[str, Any]) -> None:
    assert list(added_members(call, call)) == []
    assert not invents(call, {k: f"{MARK}new" for k in call}, "", {})


@given(st.dictionaries(keys, _value(stated_values | invented_values), min_size=1, max_size=4), st.sampled_from("vwxy"))
def test_a_renamed_member_keeps_its_value(call: dict[str, Any], new_key: str) -> None:
    """A value the repair moves from a member it removes is freed, so it grounds the new member."""
    old_key = sorted(call)[0]
    renamed = {new_key if k == old_key else k: v for k, v in call.items()}
    assert not invents(call, renamed, "", {})


def test_the_spellings_a_request_uses_ground_a_value() -> None:
    schema = {"properties": {"units": {"enum": ["imperial_units"], "description": "a building name"}}}
    for value in [*STATED, "new york", "imperial_units", True, None, "", [42, "metric"], {"x": 3.5}]:
        assert not invents({}, {"v": value}, REQUEST, schema), value
    for value in ["Los Angeles", 43, "2026-01-19", ["metric", "SI"], {"x": 7}, "[not given]x", "building"]:
        assert invents({}, {"v": value}, REQUEST, schema), value
    assert sorted(schema_values({"anyOf": [{"const": 3}, {"default": [1, "a"]}], "examples": ["e"]}), key=str) == [1, 3, "a", "e"]


def test_a_value_the_call_already_uses_does_not_ground_another_member() -> None:
    """BFCL's unrepairable case "directions from New York to [not given]": the start is New York, so
    New York is no evidence for the end; a number the request gives once, for another argument,
    is none for a new one; stated twice, it is."""
    request = "Get me the directions from New York to [not given] avoiding highways."
    assert invents({"start": "New York"}, {"start": "New York", "end": "New York"}, request, {})
    assert not invents({"end": "Boston"}, {"end": "Boston", "start": "New York"}, request, {})
    assert invents({}, {"identifier": "not given"}, "Reschedule event '[not given]' to November 1", {})
    income = "a net income of $2,000,000 and equity of [not given]"
    assert invents({"net_income": 2000000}, {"net_income": 2000000, "equity": 2000000}, income, {})
    assert not invents({"net_income": 2000000}, {"net_income": 2000000, "equity": 2000000}, income + ", i.e. 2000000", {})


def test_the_shield_abstains_rather_than_send_an_invented_value() -> None:
    """A built-in unrepairable case (the value is in no evidence): a fill the verifier accepts is
    not sent, so the decision is ABSTAIN; its minimal contrast (the value stated) is repaired."""
    cases = generate_cases(GenerateConfig(seed=61, n=130))
    checked = 0
    for case in cases:
        twin = contrast_case(case)
        if twin is None:
            continue
        key, value = case.offline.corruption["withheld"], case.offline.corruption["withheld_value"]
        fill = json.dumps([{"op": "add", "path": f"/{key}", "value": value}])
        for public, invented in ((case.public, True), (twin.public, False)):
            state = RepairEnv(public).reset()
            verdicts = [probe(contract_for(public), public, state, text, "contractrl") for text in (ABSTAIN, fill)]
            assert verdicts[1].accepted and verdicts[1].invents is invented, public.case_id
            choice = choose([ABSTAIN, fill], [-5.0, -0.1], verdicts, state.attempts_left)
            assert choice.index == (0 if invented else 1) and verdicts[0].outcome is Code.ABSTAIN
        checked += 1
    assert checked >= 5


@pytest.mark.parametrize("style", ["verbatim", "paraphrase"])
def test_no_gold_repair_of_the_catalog_is_refused(style: str, tmp_path: Path) -> None:
    """The catalog's requests state every value a repair adds (in JSON or in the paraphrases'
    words), so the rule refuses none of its gold repairs; ``benchmarks/grounding_refusals.py``
    counts the same over a case set on disk."""
    cases = generate_cases(GenerateConfig(seed=67, n=260, request_style=style))
    repairs = [c for c in cases if c.offline.target is not None]
    assert len(repairs) > 200
    refused = [
        c.public.case_id for c in repairs if invents(c.public.candidate, c.offline.target, c.public.request, c.public.schema)
    ]
    assert not refused
    write_case_set(cases[:40], tmp_path / "cases", GenerateConfig(seed=67, n=40, request_style=style).to_dict())
    result = refusals(tmp_path / "cases")
    assert result["refused"] == 0 and result["repairs"] == sum(c.offline.target is not None for c in cases[:40])
