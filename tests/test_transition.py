"""The CR-MDP transition: budgets, abstain, retries with the next report, attempt classes."""

from __future__ import annotations

import json

import pytest

from contractrl.errors import ConfigError
from contractrl.validators import AttemptClass, Budgets, Code, RepairContract, Verifier, classify_attempt

SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "n": {"type": "integer", "minimum": 1},
        "mode": {"enum": ["a", "b"]},
    },
    "required": ["id", "n"],
    "additionalProperties": False,
}
CANDIDATE = {"id": "x1", "n": "3", "mode": "c"}


def _contract(**budgets: object) -> RepairContract:
    return RepairContract(Verifier.build(SCHEMA), Budgets(**budgets), immutable=["/id"])


def _patch(*ops: dict) -> str:
    return json.dumps(list(ops))


FIX_N = {"op": "replace", "path": "/n", "value": 3}
FIX_MODE = {"op": "replace", "path": "/mode", "value": "a"}


def test_initial_state_exposes_primary_error() -> None:
    state = _contract().initial_state(CANDIDATE)
    assert (state.error_code, state.pointer) == (Code.ENUM_MISMATCH, "/mode")
    assert state.attempts_left == 2 and state.ops_left == 2 and not state.done
    assert state.immutable == ("/id",)


def test_valid_candidate_starts_accepted() -> None:
    state = _contract().initial_state({"id": "x", "n": 1})
    assert state.done and state.outcome is Code.ACCEPTED


def test_one_attempt_repair_is_accepted_and_dispatchable() -> None:
    contract = _contract()
    result = contract.step(contract.initial_state(CANDIDATE), _patch(FIX_N, FIX_MODE))
    assert result.outcome is Code.ACCEPTED
    assert result.accepted_object == {"id": "x1", "n": 3, "mode": "a"}
    assert result.state.done and result.state.outcome is Code.ACCEPTED
    assert result.state.attempts_left == 1 and result.state.ops_left == 0
    assert result.record.attempt_class is AttemptClass.ACCEPTED
    assert result.record.validator_calls == 1 and result.record.ops_applied == 2
    assert result.collateral == ()


def test_partial_fix_exposes_next_report_then_retry_succeeds() -> None:
    contract = _contract()
    first = contract.step(contract.initial_state(CANDIDATE), _patch(FIX_MODE))
    assert first.outcome is Code.WRONG_TYPE and first.accepted_object is None
    assert first.state.candidate["mode"] == "a"  # the admitted patch is kept: x_{t+1} = x_t ⊕ p_t
    assert (first.state.error_code, first.state.pointer) == (Code.WRONG_TYPE, "/n")
    second = contract.step(first.state, _patch(FIX_N))
    assert second.outcome is Code.ACCEPTED
    assert [h.attempt for h in second.state.history] == [1, 2]
    assert second.state.attempts_used == 2


def test_invalid_action_consumes_attempt_and_leaves_candidate() -> None:
    contract = _contract()
    state = contract.initial_state(CANDIDATE)
    result = contract.step(state, _patch({"op": "replace", "path": "/id", "value": "y"}))
    assert result.outcome is Code.PATH_IMMUTABLE
    assert result.state.candidate is state.candidate
    assert result.state.report == state.report
    assert result.state.attempts_left == 1 and result.state.ops_left == 2
    assert result.record.pointer == "/id"


def test_exhaustion_ends_episode_without_dispatch() -> None:
    contract = _contract()
    state = contract.initial_state(CANDIDATE)
    for _ in range(2):
        result = contract.step(state, "not json")
        state = result.state
        assert result.accepted_object is None
    assert state.done and state.outcome is Code.ATTEMPTS_EXHAUSTED
    late = contract.step(state, _patch(FIX_N, FIX_MODE))
    assert late.outcome is Code.ATTEMPTS_EXHAUSTED
    assert late.record.attempt_class is AttemptClass.EXHAUSTED
    assert late.accepted_object is None and late.state.candidate == CANDIDATE
    assert late.record.raw == _patch(FIX_N, FIX_MODE)


def test_abstain_keeps_budget_and_ends() -> None:
    contract = _contract()
    result = contract.step(contract.initial_state(CANDIDATE), "ABSTAIN: the mode is not in the request")
    assert result.outcome is Code.ABSTAIN and result.state.done
    assert result.state.attempts_left == 2 and result.state.attempts_used == 0
    assert result.record.message == "the mode is not in the request"
    assert result.record.attempt_class is AttemptClass.REFUSAL


def test_refusal_ends_episode() -> None:
    contract = _contract()
    result = contract.step(contract.initial_state(CANDIDATE), "I'm sorry, I can't help with that.")
    assert result.outcome is Code.REFUSAL and result.state.done and result.accepted_object is None


def test_operation_budget_spans_attempts() -> None:
    contract = _contract(max_attempts=3, max_ops=2)
    first = contract.step(contract.initial_state(CANDIDATE), _patch(FIX_MODE, {"op": "add", "path": "/extra", "value": 1}))
    assert first.outcome is Code.ADDITIONAL_PROPERTY and first.state.ops_left == 0
    second = contract.step(first.state, _patch(FIX_N))
    assert second.outcome is Code.OP_BUDGET_EXCEEDED
    assert second.state.attempts_left == 1


def test_truncated_generation_is_its_own_class() -> None:
    contract = _contract()
    result = contract.step(contract.initial_state(CANDIDATE), _patch(FIX_N, FIX_MODE), finish_reason="length")
    assert result.outcome is Code.TRUNCATED
    assert result.record.attempt_class is AttemptClass.TRUNCATION


def test_collateral_and_off_pointer_edits_are_recorded() -> None:
    schema = {"type": "object", "properties": {"cfg": {"type": "object", "properties": {"level": {"type": "integer"}}}}}
    contract = RepairContract(Verifier.build(schema), Budgets(), ())
    state = contract.initial_state({"cfg": {"level": "2", "name": "a"}, "other": 1})
    assert state.pointer == "/cfg/level"
    coarse = contract.step(state, _patch({"op": "replace", "path": "/cfg", "value": {"level": 2, "name": "b"}}))
    assert coarse.outcome is Code.ACCEPTED
    assert coarse.record.collateral == ()
    assert coarse.record.off_pointer == ("/cfg/name",)
    wrong_path = contract.step(state, _patch({"op": "replace", "path": "/other", "value": 2}))
    assert wrong_path.record.off_pointer == ("/other",)


def test_attempt_classes_cover_every_code() -> None:
    for code in Code:
        assert isinstance(classify_attempt(code), AttemptClass)
    assert classify_attempt(Code.DUPLICATE_KEY) is AttemptClass.MALFORMED
    assert classify_attempt(Code.PATH_UNAVAILABLE) is AttemptClass.SCHEMA_VIOLATION
    assert classify_attempt(Code.CROSS_FIELD) is AttemptClass.SCHEMA_VIOLATION


@pytest.mark.parametrize("kwargs", [{"max_attempts": 0}, {"max_ops": 0}, {"allowed_ops": frozenset({"merge"})}])
def test_bad_budgets_are_config_errors(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        Budgets(**kwargs)


def test_bad_immutable_pointer_is_config_error() -> None:
    with pytest.raises(ConfigError, match="immutable path"):
        RepairContract(Verifier.build(SCHEMA), Budgets(), immutable=["id"])


# --- whole-object arms (full regeneration, constrained decoding) ------------------------------


def test_whole_object_response_is_verified_like_a_patched_object() -> None:
    contract = _contract()
    state = contract.initial_state(CANDIDATE)
    result = contract.step_object(state, json.dumps({"id": "x1", "n": 3, "mode": "a"}))
    assert result.outcome is Code.ACCEPTED and result.accepted_object == {"id": "x1", "n": 3, "mode": "a"}
    assert result.state.ops_left == state.ops_left  # operation budgets do not apply to whole objects
    partial = contract.step_object(state, json.dumps({"id": "x1", "n": 3, "mode": "c"}))
    assert partial.outcome is Code.ENUM_MISMATCH and partial.accepted_object is None


def test_whole_object_must_keep_immutable_paths_and_be_an_object() -> None:
    contract = _contract()
    state = contract.initial_state(CANDIDATE)
    moved = contract.step_object(state, json.dumps({"id": "other", "n": 3, "mode": "a"}))
    assert moved.outcome is Code.PATH_IMMUTABLE and moved.record.pointer == "/id" and moved.accepted_object is None
    dropped = contract.step_object(state, json.dumps({"n": 3, "mode": "a"}))
    assert dropped.outcome is Code.PATH_IMMUTABLE
    assert contract.step_object(state, "[1, 2]").outcome is Code.WRONG_TYPE
    assert contract.step_object(state, '{"id": "x1", "id": "x1"}').outcome is Code.DUPLICATE_KEY
    assert contract.step_object(state, "ABSTAIN").outcome is Code.ABSTAIN


def test_regenerating_fields_that_were_right_is_collateral() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}
    contract = RepairContract(Verifier.build(schema), Budgets(), ())
    state = contract.initial_state({"a": "1", "b": "keep"})
    result = contract.step_object(state, json.dumps({"a": 1, "b": "changed"}))
    assert result.outcome is Code.ACCEPTED
    assert result.record.collateral == ("/b",)
