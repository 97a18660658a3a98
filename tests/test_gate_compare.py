"""The three ways of issue 52 section 4 on a hand-built BFCL case, with a scripted agent model:
what counts as executed, when a re-ask stops, how each way is scored and summed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from contractrl.errors import ConfigError
from contractrl.experiments.gate_compare import (
    Reply,
    bfcl_call_text,
    compare,
    reask,
    reask_messages,
    summarize,
)
from contractrl.rollout.policies import Generation, HeuristicPolicy, Observation
from contractrl.tasks.cases import ABSTAIN, Case, OfflineCase, PublicCase
from contractrl.validators import Verifier

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
POSSIBLE = {"city": ["Oslo", "oslo"], "days": [3]}


def _case(candidate: dict[str, Any], case_id: str = "n1") -> Case:
    public = PublicCase(
        case_id=case_id, family="wrong_type", tool="weather.forecast", tool_family="bfcl", schema=SCHEMA,
        schema_sha256=Verifier.build(SCHEMA).schema.sha256, schema_version=1, contract={"rules": []},
        request="What is the weather in Oslo for 3 days?", candidate=candidate,
        report=Verifier.build(SCHEMA).verify(candidate).to_dict(), immutable=(), max_attempts=2, max_ops=2, world_seed=0,
    )  # fmt: skip
    offline = OfflineCase(
        case_id=case_id, target={"city": "Oslo", "days": 3}, target_patch=[], cluster="c",
        expected={"abstain": False, "bfcl_possible": POSSIBLE}, corruption={"natural": True},
    )  # fmt: skip
    return Case(public, offline)


class Scripted:
    """The agent's model, answering from a list; records the chats it was shown."""

    def __init__(self, answers: Sequence[str]) -> None:
        self.answers = list(answers)
        self.seen: list[list[dict[str, str]]] = []

    def answer(self, messages: list[dict[str, str]]) -> Reply:
        self.seen.append(messages)
        return Reply(self.answers[len(self.seen) - 1], prompt_tokens=100 * len(messages), generated_tokens=10)


class Patching:
    """A gate policy that sends one fixed answer, then abstains."""

    name = "patching"

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def generate(self, observations: Sequence[Observation]) -> list[Generation]:
        return [
            Generation(self.answer if not o.state.history else ABSTAIN, generated_tokens=7, prompt_tokens=50)
            for o in observations
        ]


BROKEN = {"city": "Oslo", "days": "3"}


def test_a_reask_sends_the_failed_call_and_errors_and_stops_at_the_first_valid_call() -> None:
    asker = Scripted(["Sure! The weather is nice.", "[weather_forecast(city='Oslo', days=3)]", "never asked"])
    handled = reask(_case(BROKEN), asker, retries=2)
    assert handled.success and handled.dispatched == {"city": "Oslo", "days": 3}
    assert handled.executions == 1 and handled.turns == 2
    assert (handled.prompt_tokens, handled.generated_tokens) == (400 + 600, 20)
    first = asker.seen[0]
    assert first[2] == {"role": "assistant", "content": "[weather.forecast(city='Oslo', days='3')]"}
    assert "/days" in first[3]["content"] and "weather.forecast" in first[0]["content"]
    assert "could not be read as function calls" in asker.seen[1][-1]["content"]  # prose is not executed


def test_a_reask_that_repeats_a_valid_call_executes_it_twice_and_invalid_answers_execute_nothing() -> None:
    twice = reask(_case(BROKEN), Scripted(["[weather.forecast(city='Oslo', days=3), weather.forecast(city='Oslo', days=3)]"]), 2)
    assert twice.executions == 2 and twice.success
    wrong = reask(_case(BROKEN), Scripted(["[weather.forecast(city='Bergen', days=3)]"]), 2)
    assert wrong.executions == 1 and not wrong.success and "BFCL" in wrong.reason  # valid, but not BFCL's answer
    never = reask(_case(BROKEN), Scripted(["[weather.forecast(city='Oslo', days='three')]", "[other(x=1)]"]), 2)
    assert never.executions == 0 and never.dispatched is None and not never.success and never.turns == 2
    assert reask(_case(BROKEN), Scripted([]), 0).turns == 0
    with pytest.raises(ConfigError):
        reask(_case(BROKEN), Scripted([]), -1)


def test_the_gate_ways_execute_at_most_once_and_are_scored_by_bfcl() -> None:
    good = '[{"op":"replace","path":"/days","value":3}]'
    cases = [_case(BROKEN, "a"), _case({"city": "Oslo"}, "b")]
    handled = compare(cases, asker=Scripted(["[weather.forecast(city='Oslo', days=3)]"] * 2), retries=2,
                      heuristic=HeuristicPolicy(), gate_policy=Patching(good))  # fmt: skip
    by = {(h.way, h.case_id): h for h in handled}
    assert by["gate", "a"].success and by["gate", "a"].executions == 1 and by["gate", "a"].generated_tokens == 7
    assert not by["gate", "b"].success and by["gate", "b"].executions == 0  # the patch does not fit: refused
    assert by["heuristic", "a"].success and by["heuristic", "a"].tokens == 0  # "3" -> 3 needs no model
    summary = summarize(handled)
    assert summary["gate"]["success"] == 1 and summary["gate"]["executed_more_than_once"] == 0
    assert summary["reask"]["cases"] == 2 and summary["reask"]["executions"] == 2
    assert bfcl_call_text("f", {"a": "x", "b": [1]}) == "[f(a='x', b=[1])]"
    assert reask_messages(cases[0].public, [])[-1]["role"] == "user"
