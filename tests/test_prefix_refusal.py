"""Stopping a proposal whose prefix the shield would refuse (``rollout/prefix_refusal.py``).

The stop must never cut short an answer the shield could commit, so hypothesis hunts for one
against the shield itself: every prefix of an answer that :func:`probe` and :func:`choose` would
let through (or that :func:`mended` would turn into one) must be let through by the judge. And the
stop must earn its keep: the answers the shield refuses for an invented value are stopped before
the value ends.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contractrl.rollout.env import RepairEnv, contract_for
from contractrl.rollout.grounding import Evidence
from contractrl.rollout.prefix_refusal import PrefixJudge
from contractrl.rollout.shield import enumerated_answers, mended, probe
from contractrl.tasks.arms import arm_spec
from contractrl.tasks.cases import PublicCase
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.validators import PublicState
from contractrl.validators.jsonvalue import leaves

CASES = generate_cases(GenerateConfig(seed=71, n=130))
PARAPHRASED = generate_cases(GenerateConfig(seed=73, n=60, request_style="paraphrase"))
ARMS = ("contractrl", "full_regen")


def _committable(case: PublicCase, state: PublicState, text: str, arm: str) -> bool:
    """Whether the shield's rules 2 and 3 could commit ``text`` (module docstring of shield.py)."""
    p = probe(contract_for(case), case, state, text, arm)
    return p.admissible and not p.invents and (p.accepted or (state.attempts_left > 1 and not p.seen_rejected))


def _respaced(text: str, spaced: bool) -> str:
    """The same answer as a model may space it."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": ") if spaced else (",", ":"))


@st.composite
def answers(draw: st.DrawFn) -> tuple[PublicCase, PublicState, str, str]:
    """An answer a policy may write from a case's first state: an enumerated candidate, one of its
    values swapped for a word of the request, a call value or an invented one, the wrong verb, a
    second operation that renames a member, or a member added."""
    case = draw(st.sampled_from(CASES + PARAPHRASED)).public
    arm = draw(st.sampled_from(ARMS))
    state = RepairEnv(case, arm=arm).reset()
    listed = enumerated_answers(case, state, arm, contract=contract_for(case))[1:]
    words = case.request.replace('"', " ").split()
    pool = st.sampled_from(words) if words else st.just("x")
    call_values = list(leaves(state.candidate).values()) or ["x"]
    replacement = draw(pool | st.sampled_from(call_values) | st.text(alphabet="qzjx ", min_size=1, max_size=6))
    text = draw(st.sampled_from(listed)) if listed else "[]"
    value = json.loads(text)
    kind = draw(st.sampled_from(["as is", "swap", "verb", "rename", "add"]))
    if arm_spec(arm).whole_object and isinstance(value, dict):
        if kind == "swap" and value:
            value[draw(st.sampled_from(sorted(value)))] = replacement
        elif kind == "add":
            value[draw(st.sampled_from(["zz", "note", "city"]))] = replacement
    elif isinstance(value, list) and value:
        op = value[0]
        if kind == "swap" and "value" in op:
            op["value"] = replacement
        elif kind == "verb" and op.get("op") == "add":
            op["op"] = "replace"
        elif kind == "rename" and isinstance(state.candidate, dict) and state.candidate:
            old = draw(st.sampled_from(sorted(state.candidate)))
            value = [{"op": "add", "path": "/renamed", "value": state.candidate[old]}, {"op": "remove", "path": f"/{old}"}]
        elif kind == "add":
            value.append({"op": "add", "path": "/zz", "value": replacement})
    return case, state, _respaced(json.dumps(value, ensure_ascii=False), draw(st.booleans())), arm


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers())
def test_no_prefix_of_an_answer_the_shield_could_commit_is_stopped(answer: tuple) -> None:
    case, state, text, arm = answer
    mend = mended(text, state, arm)
    if not (_committable(case, state, text, arm) or (mend is not None and _committable(case, state, mend, arm))):
        return
    judge = PrefixJudge.of(contract_for(case), case, state, arm)
    for end in range(len(text) + 1):
        assert not judge.refuses(text[:end]), (case.case_id, arm, text, text[:end])


def _unrepairable() -> list[tuple[PublicCase, str, Any]]:
    """Built-in unrepairable cases (the withheld value is in no evidence) and their fills."""
    out = []
    for case in CASES:
        corruption = case.offline.corruption
        if case.public.family == "unrepairable" and isinstance(corruption.get("withheld_value"), str):
            out.append((case.public, corruption["withheld"], corruption["withheld_value"]))
    return out


@pytest.mark.parametrize("arm", ARMS)
def test_an_invented_value_is_stopped_before_it_ends(arm: str) -> None:
    """The fill of an unrepairable case, which the shield refuses for inventing, is stopped while
    its value is still being written, in either output form, where no evidence states it at all
    (the judge leaves to the shield a value the request states but another member already uses)."""
    checked = 0
    for case, key, value in _unrepairable():
        state = RepairEnv(case, arm=arm).reset()
        if Evidence.of(case.request, case.schema, state.candidate).may_state(value):
            continue
        if arm_spec(arm).whole_object:
            text = json.dumps({**state.candidate, key: value}, ensure_ascii=False, separators=(",", ":"))
        else:
            text = json.dumps([{"op": "add", "path": f"/{key}", "value": value}], ensure_ascii=False, separators=(",", ":"))
        assert probe(contract_for(case), case, state, text, arm).invents, case.case_id
        judge = PrefixJudge.of(contract_for(case), case, state, arm)
        stops = [end for end in range(len(text) + 1) if judge.refuses(text[:end])]
        assert stops and stops[0] < text.index(json.dumps(value, ensure_ascii=False)) + len(json.dumps(value)) - 1, (
            case.case_id,
            text,
        )
        checked += 1
    assert checked >= 3


def _judge(schema: dict[str, Any], call: dict[str, Any], request: str, immutable: tuple[str, ...] = (), arm: str = "contractrl"):
    case = dataclasses.replace(
        CASES[0].public, schema=schema, contract={"rules": []}, candidate=call, request=request, immutable=immutable, max_ops=2
    )
    state = RepairEnv(case, arm=arm).reset()
    return PrefixJudge.of(contract_for(case), case, state, arm)


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}, "id": {"type": "string"}},
    "required": ["city", "id"],
}


@pytest.mark.parametrize(
    "prefix, refused",
    [
        ('[{"op":"add","path":"/city","value":"San', True),  # "san" is nowhere in the request
        ('[{"op":"add","path":"/city","value":"Lon', False),  # "London" is
        ('[{"op": "add", "path": "/city", "value": "lon', False),  # any case, any spacing
        ('[{"op":"replace","path":"/city","value":"Paris', True),  # the verb the shield mends to add
        ('[{"op":"add","path":"/city","value":"celsius', False),  # a schema value
        ('[{"op":"add","path":"/city","value":"2026-0', False),  # may become a date a request spells in words
        ('[{"op":"add","path":"/city","value":"2026-01-18T09:3', False),  # or a date-time
        ('[{"op":"add","path":"/city","value":"20260', True),  # but not any run of digits
        ('[{"op":"add","path":"/id","value":"x', True),  # the mask: an immutable path, whatever the value
        ('[{"op":"add","path":"/city","op"', True),  # a duplicate key
        ('[{"op":"upsert"', True),  # no such operation
        ('[{"op":"add","path":"city"', True),  # not a pointer
        ('[{"op":"add","path":"/a/b/c","value":', True),  # nowhere to add it
        ('[{"op":"add","path":"/city","value":"London"},{"op":"add","path":"/unit","value":"celsius"},{', True),  # budget
        ('{"op":"add"', True),  # a patch is an array
        ('[{"op":"add","path":"/city","value":"[{"desc', True),  # no longer JSON
        ('[{"op":"add","path":"/city","value":"', False),  # nothing written of the value yet
        ("ABSTAIN", False),
        ('[{"op":"add","path":"/ci', False),  # the path is still being written
    ],
)
def test_patch_prefixes(prefix: str, refused: bool) -> None:
    judge = _judge(SCHEMA, {"id": "c-1", "unit": "celsius"}, "Weather in London please", immutable=("/id",))
    assert judge.refuses(prefix) is refused


@pytest.mark.parametrize(
    "prefix, refused",
    [
        ('{"id":"c-1","city":"San', True),
        ('{"id":"c-1","city":"Lon', False),
        ('{"id":"c-2",', True),  # an immutable member changed
        ('{"id":"c-', False),  # still being written
        ('{"unit":"celsius","city":"London","note":"x', True),
        ("[", False),  # a wrong type is the verifier's to report
    ],
)
def test_whole_object_prefixes(prefix: str, refused: bool) -> None:
    judge = _judge(SCHEMA, {"id": "c-1", "unit": "celsius"}, "Weather in London please", immutable=("/id",), arm="full_regen")
    assert judge.refuses(prefix) is refused


def test_a_rename_by_add_and_remove_is_not_stopped() -> None:
    """The renamed member's value is the call's: freed by the remove that follows, so not invented."""
    judge = _judge(SCHEMA, {"id": "c-1", "town": "Zagreb"}, "Weather please")
    text = '[{"op":"add","path":"/city","value":"Zagreb"},{"op":"remove","path":"/town"}]'
    assert not any(judge.refuses(text[:end]) for end in range(len(text) + 1))


def test_a_prefix_nested_past_the_parser_limit_is_stopped_without_recursing() -> None:
    """Nesting only grows, and the strict parser refuses past its depth limit: stopped there, and
    judged in bounded time and stack however deep the text goes."""
    judge = _judge(SCHEMA, {"id": "c-1"}, "Weather in London please")
    limit = judge.limits.max_depth
    opening = '[{"op":"add","path":"/city","value":'
    assert not judge.refuses(opening + "[" * (limit - 2))
    assert judge.refuses(opening + "[" * (limit - 1))
    assert judge.refuses(opening + "[" * 50_000)


_FRAGMENTS = [
    '{"op":"add","path":"/',
    '{"op":"replace","path":"/',
    '{"op":"move","from":"/',
    '{"op":"test","path":"/',
    '"value":',
    '"path":"/',
    '"from":"/',
    'city"',
    'id"',
    'list/1/q"',
    '-"',
    "~1",
    '{"a":',
    "[",
    "]",
    "}",
    ",",
    '"Lon',
    "1.",
    "nul",
    "\\u00",
]


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from("[{"),
    st.lists(st.sampled_from(_FRAGMENTS) | st.text(alphabet='[]{}",:.-e0123456789 \\', max_size=3), max_size=12),
    st.sampled_from(ARMS),
)
def test_the_judge_answers_every_text_without_raising(start: str, parts: list[str], arm: str) -> None:
    """It runs inside the decoding loop, where an exception would end a rollout: every text it is
    shown gets a yes or a no."""
    judge = _judge(SCHEMA, {"id": "c-1", "list": [1, {"q": 2}]}, "Weather in London", ("/id", "/list/1/q"), arm)
    assert judge.refuses(start + "".join(parts)) in (True, False)
