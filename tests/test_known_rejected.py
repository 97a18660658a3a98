"""Answers an episode has already seen rejected: recognised exactly, and never an answer the
validator would accept (checked against the real validator on generated cases)."""

from __future__ import annotations

import json
import random
from functools import cache

import pytest

from contractrl.rollout.env import RepairEnv
from contractrl.rollout.known_rejected import known_rejected, rejected_objects
from contractrl.tasks.arms import ARMS, arm_spec
from contractrl.tasks.cases import Case
from contractrl.tasks.corruptions import iter_leaves
from contractrl.tasks.demonstrations import rejected_attempt
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.validators.jsonvalue import canonical_json

SINGLE = ("wrong_type", "constraint_violation", "nested_field", "array_element")


@cache
def _cases() -> tuple[Case, ...]:
    return tuple(generate_cases(GenerateConfig(seed=23, n=260)))


def _first(family: str) -> Case:
    return next(c for c in _cases() if c.public.family == family)


def _patch(path: str, value: object) -> str:
    return json.dumps([{"op": "replace", "path": path, "value": value}])


def test_a_patch_that_leaves_the_failed_call_as_it_was_is_known_to_fail() -> None:
    case = _first("wrong_type")
    env = RepairEnv(case.public)
    state = env.reset()
    pointer = state.report.errors[0].pointer
    bad = json.loads(rejected_attempt(case, "contractrl") or "[]")[0]["value"]
    # no history yet, but the failed call itself is an object the validator rejected
    assert known_rejected(_patch(pointer, bad), case.public, state, "contractrl")
    put_back = json.loads(_patch(pointer, bad))[0]
    assert known_rejected(json.dumps([put_back, put_back]), case.public, state, "contractrl")
    assert not known_rejected(json.dumps(case.offline.target_patch), case.public, state, "contractrl")
    assert not known_rejected("ABSTAIN", case.public, state, "contractrl")
    assert not known_rejected("not json", case.public, state, "contractrl")


def test_resubmitting_a_rejected_patch_in_any_spelling_is_known_to_fail() -> None:
    case = _first("nested_field")
    env = RepairEnv(case.public)
    state = env.reset()
    pointer = state.report.errors[0].pointer
    first = _patch(pointer, [[["of no type a schema here asks for"]]])
    state, record = env.step(first)
    assert record.ops_applied == 1 and not env.done  # applied, re-verified, rejected
    assert len(rejected_objects(case.public, state, "contractrl")) == 2
    op = json.loads(first)[0]
    for again in (
        first,
        canonical_json([op]),
        json.dumps([{"op": "test", "path": pointer, "value": op["value"]}]),
    ):
        assert known_rejected(again, case.public, state, "contractrl"), again
    assert not known_rejected(json.dumps(case.offline.target_patch), case.public, state, "contractrl")


def test_a_patch_the_mask_refused_is_known_to_fail_on_the_same_call_only() -> None:
    case = _first("wrong_type")
    env = RepairEnv(case.public)
    env.reset()
    refused = _patch("/no_such_member", 1)
    state, record = env.step(refused)
    assert record.outcome == "path_unavailable"
    assert known_rejected(refused, case.public, state, "contractrl")
    assert not known_rejected(_patch("/another_missing_member", 1), case.public, state, "contractrl")


def _dropped_brace(answer: str) -> str:
    """The answer with its last closing brace (else its last character) lost: the malformed text
    SmolLM2 resent verbatim."""
    cut = answer.rfind("}")
    cut = cut if cut >= 0 else len(answer) - 1
    return answer[:cut] + answer[cut + 1 :]


@pytest.mark.parametrize("arm", ARMS)
def test_a_text_the_parser_refused_is_known_to_fail_when_resent_verbatim(arm: str) -> None:
    case = _first("missing_required")
    env = RepairEnv(case.public, arm)
    state = env.reset()
    gold = json.dumps(case.offline.target if arm_spec(arm).whole_object else case.offline.target_patch)
    malformed = _dropped_brace(gold)
    assert not known_rejected(malformed, case.public, state, arm)  # never sent: not judged
    state, record = env.step(malformed)
    assert record.outcome in ("malformed_json", "truncated") and not env.done
    assert known_rejected(malformed, case.public, state, arm)
    assert known_rejected(f"  {malformed}\n", case.public, state, arm)
    assert not known_rejected(_dropped_brace(malformed), case.public, state, arm)  # another text: not judged
    assert not known_rejected(gold, case.public, state, arm)
    _, again = env.step(malformed)
    assert again.outcome == record.outcome


@pytest.mark.parametrize("arm", [arm for arm in ARMS if arm_spec(arm).whole_object])
def test_whole_object_arms_know_the_failed_call_and_their_rejected_objects(arm: str) -> None:
    case = _first("constraint_violation")
    env = RepairEnv(case.public, arm)
    state = env.reset()
    assert known_rejected(json.dumps(case.public.candidate), case.public, state, arm)
    wrong = {**case.offline.target, "unexpected_member": 1}
    state, record = env.step(json.dumps(wrong))
    assert record.outcome != "accepted" and not env.done
    assert known_rejected(json.dumps(wrong, indent=2), case.public, state, arm)
    assert not known_rejected(json.dumps(case.offline.target), case.public, state, arm)


def _answers(case: Case, rng: random.Random) -> list[str]:
    """Answers a policy might give at its second decision: repeats, variants and random edits."""
    answers = [json.dumps(case.offline.target_patch)]
    earlier = rejected_attempt(case, "contractrl")
    if earlier:
        op = json.loads(earlier)[0]
        answers += [earlier, json.dumps([op, op])]
    leaves = list(iter_leaves({}, case.public.candidate)) if isinstance(case.public.candidate, dict) else []
    for leaf in rng.sample(leaves, min(4, len(leaves))):
        other = rng.choice(leaves)
        answers.append(_patch(leaf.pointer, other.value))
        answers.append(_patch(leaf.pointer, leaf.value))
    return answers


@pytest.mark.parametrize("arm", ARMS)
def test_an_answer_known_to_fail_is_never_one_the_validator_accepts(arm: str) -> None:
    """The rule against the reference: the real validator, stepped with every flagged answer."""
    rng = random.Random(5)
    flagged = 0
    for case in _cases():
        earlier = rejected_attempt(case, arm)
        if earlier is None:
            continue
        gold = json.dumps(case.offline.target if arm_spec(arm).whole_object else case.offline.target_patch)
        answers = _answers(case, rng) if not arm_spec(arm).whole_object else [earlier, gold]
        # every answer after a typical rejected first attempt and after a malformed one, that attempt resent too
        for first_text in (earlier, _dropped_brace(gold)):
            env = RepairEnv(case.public, arm)
            env.reset()
            state, _ = env.step(first_text)
            if env.done:
                continue
            for answer in [*answers, first_text]:
                if not known_rejected(answer, case.public, state, arm):
                    continue
                flagged += 1
                replay = RepairEnv(case.public, arm)
                replay.reset()
                replay.step(first_text)
                _, record = replay.step(answer)
                assert record.outcome != "accepted", (case.public.case_id, first_text, answer)
    assert flagged >= 100  # the rule is exercised, not vacuous
