"""The runtime repair gate (issue 52): definitions, fail-closed decisions, the ledger, async, threads.

The central property is the gate's reason to exist: whatever the tools, the call and the policy's
answers, a :class:`Dispatch` only ever carries an object that an independent reference (python-
jsonschema with ECMA-262 regexes, and a separate reading of the contract language, both from
tests/fuzzing.py) accepts, with the immutable paths as the call had them.
"""

from __future__ import annotations

import asyncio
import functools
import json
import runpy
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from contractrl.errors import ConfigError, ContractRLError, ContractSpecError, SchemaCompileError
from contractrl.gate import Dispatch, GateBudgets, Refusal, RepairGate, ToolCall, builtin_tool, parse_tools
from contractrl.gate import gate as gate_module
from contractrl.rollout.env import RepairEnv
from contractrl.rollout.ledger import LedgerFrozenError, read_ledger, scan_ledger
from contractrl.rollout.policies import Generation, Observation
from contractrl.tasks.cases import ABSTAIN
from contractrl.tasks.generate import CaseGenerator, GenerateConfig
from contractrl.validators import Verifier, load_contract

from .fuzzing import ReferenceFailed, ReferenceInconclusive, _at, generate, reference_contract, reference_schema_accepts

PROPS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "units": {"enum": ["metric", "imperial"]},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
OPENAI = {"type": "function", "function": {"name": "forecast", "description": "Weather.", "parameters": SCHEMA}}
MCP = {"name": "forecast", "description": "Weather.", "inputSchema": SCHEMA}
VALID = {"city": "Oslo", "days": 3}
BROKEN = {"city": "Oslo", "days": "3", "units": "Metric"}  # a number as text, an enum member's case
CATALOG_CASES = 60
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


class Scripted:
    """A policy that answers from a list, in order, then ABSTAIN; counts its calls."""

    name = "scripted"

    def __init__(self, answers: Sequence[str], tokens: int = 0) -> None:
        self.answers = list(answers)
        self.tokens = tokens
        self.calls = 0

    def generate(self, observations: Sequence[Observation]) -> list[Generation]:
        out = []
        for obs in observations:
            turn = len(obs.state.history)
            self.calls += 1
            out.append(Generation(self.answers[turn] if turn < len(self.answers) else ABSTAIN, generated_tokens=self.tokens))
        return out


class Failing:
    name = "failing"

    def generate(self, observations: Sequence[Observation]) -> list[Generation]:
        raise RuntimeError("the model server went away\nwith a traceback")


def _gate(tmp_path: Path, policy: Any = "heuristic", name: str = "ledger", **kwargs: Any) -> RepairGate:
    return RepairGate([OPENAI], policy, ledger=tmp_path / name, **kwargs)


# -- definitions and calls ------------------------------------------------------------------------


def test_openai_mcp_and_plain_schema_definitions_give_the_same_tool() -> None:
    forms = [parse_tools([OPENAI]), parse_tools([MCP]), parse_tools({"forecast": SCHEMA})]
    for tools in forms:
        (tool,) = tools.values()
        assert tool.name == "forecast" and tool.schema == SCHEMA
        assert tool.verifier.verify(VALID).accepted
        assert [e.code.value for e in tool.verifier.verify(BROKEN).errors] == ["wrong_type", "enum_mismatch"]
    assert forms[0]["forecast"].digest == forms[1]["forecast"].digest  # the contract, not the wrapper
    assert forms[0]["forecast"].description == "Weather."


def test_an_openai_function_without_parameters_takes_no_arguments() -> None:
    (tool,) = parse_tools([{"type": "function", "function": {"name": "ping"}}]).values()
    assert tool.verifier.verify({}).accepted
    assert not tool.verifier.verify({"x": 1}).accepted


@pytest.mark.parametrize(
    ("definitions", "kwargs", "error"),
    [
        ("forecast", {}, ConfigError),  # not a list or a mapping
        ([], {}, ConfigError),
        ([42], {}, ConfigError),
        ([{"type": "function", "function": "forecast"}], {}, ConfigError),
        ([{"description": "no name", "inputSchema": SCHEMA}], {}, ConfigError),
        ([{"name": "forecast", "schema": SCHEMA}], {}, ConfigError),  # neither wrapper
        ([{"name": "forecast", "inputSchema": "object"}], {}, SchemaCompileError),
        ([{"name": "forecast", "inputSchema": SCHEMA, "properties": {}}], {}, SchemaCompileError),  # schema keys beside it
        ([{"name": "forecast", "description": 3, "inputSchema": SCHEMA}], {}, ConfigError),
        ([MCP, OPENAI], {}, ConfigError),  # defined twice
        ([{"name": "f", "inputSchema": {"type": "object", "propertys": {}}}], {}, SchemaCompileError),  # unknown keyword
        ({"": SCHEMA}, {}, ConfigError),
        ({"forecast": [SCHEMA]}, {}, ConfigError),
        ([MCP], {"contracts": {"other": {"rules": []}}}, ConfigError),  # a contract that would guard nothing
        ([MCP], {"contracts": {"forecast": {"rules": [{"kind": "bogus"}]}}}, ContractSpecError),
        ([MCP], {"immutable": {"forecast": "/city"}}, ConfigError),
        ([MCP], {"immutable": {"nope": ["/city"]}}, ConfigError),
    ],
)
def test_malformed_definitions_are_typed_one_line_errors(definitions: Any, kwargs: dict[str, Any], error: type) -> None:
    with pytest.raises(error) as caught:
        parse_tools(definitions, **kwargs)
    assert isinstance(caught.value, ContractRLError)
    assert "\n" not in str(caught.value) and str(caught.value)


@pytest.mark.parametrize("call", [None, "forecast", {"arguments": {}}, {"name": ""}, {"name": "forecast", "id": 7}])
def test_a_call_without_a_tool_name_is_a_typed_error_and_records_nothing(tmp_path: Path, call: Any) -> None:
    gate = _gate(tmp_path)
    with pytest.raises(ConfigError):
        gate.repair(call)
    with pytest.raises(ConfigError):
        gate.repair({"name": "forecast", "arguments": VALID}, request=b"bytes")  # type: ignore[arg-type]
    assert gate.decisions == 0


def test_openai_mcp_and_toolcall_forms_are_one_call(tmp_path: Path) -> None:
    gate = _gate(tmp_path)
    openai = {"id": "call_9", "type": "function", "function": {"name": "forecast", "arguments": json.dumps(BROKEN)}}
    decisions = [gate.repair(c) for c in (openai, {"name": "forecast", "arguments": BROKEN}, ToolCall("forecast", BROKEN))]
    assert all(isinstance(d, Dispatch) and d.repaired for d in decisions)
    assert [d.call.arguments for d in decisions] == [{"city": "Oslo", "days": 3, "units": "metric"}] * 3  # type: ignore[union-attr]
    assert decisions[0].call.id == "call_9" and decisions[1].call.id is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "code"),
    [('{"city": "Oslo", "city": "Rome", "days": 3}', "duplicate_key"), ('{"city": "Oslo", "days": NaN}', "non_finite_number"),
     ('{"city": "Oslo", "days": 3', "truncated"), ('{"city": Oslo, "days": 3}', "malformed_json")],
)  # fmt: skip
def test_argument_text_is_parsed_strictly_and_a_bad_text_is_refused_with_its_code(tmp_path: Path, text: str, code: str) -> None:
    gate = _gate(tmp_path)
    decision = gate.repair({"type": "function", "function": {"name": "forecast", "arguments": text}})
    assert isinstance(decision, Refusal) and decision.code == code
    gate.close()
    (row,) = read_ledger(tmp_path / "ledger", require_frozen=False)
    assert row["code"] == code and row["received"] == text and row["dispatched"] is None


def test_arguments_that_are_no_json_value_are_refused_before_any_policy_sees_them(tmp_path: Path) -> None:
    policy = Scripted([])
    gate = _gate(tmp_path, policy)
    for arguments in ({"city": {"Oslo"}, "days": 3}, {"city": "Oslo", "days": float("nan")}, b'{"city": "Oslo", "days": 3}'):
        decision = gate.repair({"name": "forecast", "arguments": arguments})
        if isinstance(arguments, bytes):  # bytes are text: parsed strictly like a string
            assert isinstance(decision, Dispatch)
        else:
            assert isinstance(decision, Refusal) and decision.code == "malformed_json"
    assert policy.calls == 0
    gate.close()
    rows = read_ledger(tmp_path / "ledger", require_frozen=False)
    assert rows[0]["received"] == "<not a JSON value: dict>" and rows[2]["received"] == '{"city": "Oslo", "days": 3}'
    gate.close()  # closing twice is harmless
    with pytest.raises(LedgerFrozenError):  # a decision that could not be recorded is not made
        gate.repair({"name": "forecast", "arguments": VALID})


# -- decisions ------------------------------------------------------------------------------------


def test_valid_calls_pass_untouched_and_unknown_tools_are_refused(tmp_path: Path) -> None:
    policy = Scripted([])
    gate = _gate(tmp_path, policy)
    valid = gate.repair({"name": "forecast", "arguments": VALID})
    assert isinstance(valid, Dispatch) and not valid.repaired and valid.attempts == 0 and valid.call.arguments == VALID
    unknown = gate.repair({"name": "rm_rf", "arguments": {}})
    assert isinstance(unknown, Refusal) and unknown.code == "unknown_tool" and "forecast" in unknown.reason
    assert policy.calls == 0  # neither needed the policy


def test_an_abstention_and_exhausted_attempts_are_refusals_with_the_episodes_code(tmp_path: Path) -> None:
    abstain = _gate(tmp_path, Scripted([ABSTAIN]), "a").repair({"name": "forecast", "arguments": BROKEN})
    assert isinstance(abstain, Refusal) and abstain.code == "abstain" and abstain.attempts == 1
    wrong = '[{"op": "replace", "path": "/days", "value": 99}]'
    exhausted = _gate(tmp_path, Scripted([wrong, wrong, wrong]), "b", budgets=GateBudgets(max_attempts=2)).repair(
        {"name": "forecast", "arguments": BROKEN}
    )
    assert isinstance(exhausted, Refusal) and exhausted.code == "attempts_exhausted" and exhausted.attempts == 2


def test_the_token_budget_stops_generation(tmp_path: Path) -> None:
    wrong = '[{"op": "replace", "path": "/days", "value": 99}]'
    right = '[{"op": "replace", "path": "/days", "value": 3}, {"op": "replace", "path": "/units", "value": "metric"}]'
    policy = Scripted([wrong, right], tokens=50)
    budgets = GateBudgets(max_attempts=3, max_ops=4, max_tokens=40)
    decision = _gate(tmp_path, policy, "a", budgets=budgets).repair({"name": "forecast", "arguments": BROKEN})
    assert isinstance(decision, Refusal) and decision.code == "token_budget" and policy.calls == 1
    roomy = _gate(
        tmp_path, Scripted([wrong, right], tokens=50), "b", budgets=GateBudgets(max_attempts=3, max_ops=4, max_tokens=100)
    )
    assert isinstance(roomy.repair({"name": "forecast", "arguments": BROKEN}), Dispatch)
    with pytest.raises(ConfigError):
        GateBudgets(max_tokens=0)
    with pytest.raises(ConfigError):
        GateBudgets(max_attempts=0)


def test_a_policy_that_raises_is_a_refusal_recorded_in_the_ledger(tmp_path: Path) -> None:
    gate = _gate(tmp_path, Failing())
    decision = gate.repair({"name": "forecast", "arguments": BROKEN})
    assert isinstance(decision, Refusal) and decision.code == "policy_error"
    assert decision.reason == "RuntimeError: the model server went away"  # one line
    gate.close()
    assert [r["code"] for r in read_ledger(tmp_path / "ledger", require_frozen=False)] == ["policy_error"]


def test_an_environment_that_raises_is_a_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: RepairEnv, *args: Any, **kwargs: Any) -> Any:
        raise KeyError("corrupted state")

    monkeypatch.setattr(RepairEnv, "step", boom)
    decision = _gate(tmp_path).repair({"name": "forecast", "arguments": BROKEN})
    assert isinstance(decision, Refusal) and decision.code == "internal_error" and "corrupted state" in decision.reason


def test_an_object_the_episode_accepted_wrongly_is_refused_by_the_re_verification(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail-closed at the exit: if the environment ever claimed acceptance of an invalid object
    (a bug in a transition, a mutated candidate), the gate's own verification still refuses it."""

    class Lying(RepairEnv):
        def step(self, text: str | bytes, **kwargs: Any) -> Any:
            state, record = super().step(text, **kwargs)
            self.log.dispatched = {"city": "", "days": 99}  # what a broken transition might let through
            return state, record

    monkeypatch.setattr(gate_module, "RepairEnv", Lying)
    right = '[{"op": "replace", "path": "/days", "value": 3}, {"op": "replace", "path": "/units", "value": "metric"}]'
    decision = _gate(tmp_path, Scripted([right])).repair({"name": "forecast", "arguments": BROKEN})
    assert isinstance(decision, Refusal) and decision.code == "unverified"


def test_the_dispatched_object_is_a_copy_the_caller_cannot_alias(tmp_path: Path) -> None:
    arguments = {"city": "Oslo", "days": 3, "units": "metric"}
    decision = _gate(tmp_path).repair({"name": "forecast", "arguments": arguments})
    assert isinstance(decision, Dispatch) and decision.call.arguments == arguments
    assert decision.call.arguments is not arguments


def test_immutable_paths_hold_through_the_gate(tmp_path: Path) -> None:
    """A patch that would rewrite an immutable path is masked; the gate refuses rather than dispatch."""
    rewrite = '[{"op": "replace", "path": "/city", "value": "Rome"}, {"op": "replace", "path": "/days", "value": 3}]'
    gate = _gate(tmp_path, Scripted([rewrite, rewrite]), immutable={"forecast": ["/city"]})
    decision = gate.repair({"name": "forecast", "arguments": {"city": "Oslo", "days": "x"}})
    assert isinstance(decision, Refusal) and decision.code == "attempts_exhausted"


# -- the fail-closed property ----------------------------------------------------------------------


def _judge(case: Any, original: Any, arguments: Any) -> None:
    """The reference verdicts on a dispatched object (an inconclusive reference decides nothing)."""
    try:
        assert reference_schema_accepts(case.schema, case.dialect, arguments), arguments
        assert reference_contract(case.contract, arguments), arguments
    except (ReferenceInconclusive, ReferenceFailed):
        return
    for pointer in case.immutable:
        assert json.dumps(_at(original, pointer), sort_keys=True, default=repr) == json.dumps(
            _at(arguments, pointer), sort_keys=True, default=repr
        )


@PROPS
@given(
    seed=st.integers(min_value=0, max_value=2**63), arm=st.sampled_from(["contractrl", "full_regen"]), extra=st.text(max_size=40)
)
def test_nothing_invalid_leaves_the_gate(seed: int, arm: str, extra: str) -> None:
    """Drawn schemas, contracts, immutable paths and calls (tests/fuzzing.py), with drawn answers:
    the harness's patch or whole object, hostile text, and the heuristic's own repair."""
    case = generate(seed)
    answers = [case.text if arm == "contractrl" else case.whole, extra]
    with tempfile.TemporaryDirectory() as tmp:
        try:
            gate = RepairGate(
                {"t": case.schema},
                Scripted(answers),
                contracts={"t": case.contract},
                immutable={"t": list(case.immutable)},
                budgets=GateBudgets(max_attempts=2, max_ops=case.max_ops),
                arm=arm,
                ledger=Path(tmp) / "a",
            )
        except ContractRLError:  # a schema or contract refused at build time: nothing to gate
            assume(False)
            return
        heuristic = RepairGate(
            {"t": case.schema}, "heuristic", contracts={"t": case.contract}, immutable={"t": list(case.immutable)},
            budgets=GateBudgets(max_attempts=2, max_ops=case.max_ops), ledger=Path(tmp) / "b",
        )  # fmt: skip
        text = case.text.decode("utf-8", "replace") if isinstance(case.text, bytes) else case.text
        calls = [{"name": "t", "arguments": case.candidate}, {"name": "t", "arguments": text}]
        for g in (gate, heuristic):
            for call in calls:
                decision = g.repair(call)
                assert isinstance(decision, (Dispatch, Refusal))
                if isinstance(decision, Dispatch):
                    assert g.tools["t"].verifier.verify(decision.call.arguments).accepted
                    sent = call["arguments"]
                    _judge(case, json.loads(sent) if isinstance(sent, str) else sent, decision.call.arguments)
            assert g.decisions == len(calls)
            g.close()


@functools.cache
def _catalog_cases() -> tuple[Any, ...]:
    """Cases of every corruption family on the built-in tools, with their gold answers."""
    generator = CaseGenerator(GenerateConfig(seed=52, n=CATALOG_CASES))
    return tuple(generator.case(i) for i in range(CATALOG_CASES))


def _catalog_gate(public: Any, policy: Any, arm: str, ledger: Path) -> RepairGate:
    return RepairGate(
        {public.tool: public.schema},
        policy,
        contracts={public.tool: public.contract},
        immutable={public.tool: list(public.immutable)},
        budgets=GateBudgets(max_attempts=public.max_attempts, max_ops=public.max_ops),
        arm=arm,
        ledger=ledger,
    )


def _answer(case: Any, arm: str, mutate: tuple[int, Any] | None) -> str:
    """The gold answer for ``arm``, or one with a drawn value written into it (a near miss)."""
    off = case.offline
    if off.target_patch == ABSTAIN:
        return ABSTAIN
    if arm == "full_regen":
        whole = json.loads(json.dumps(off.target))
        if mutate is not None and whole:
            key = sorted(whole)[mutate[0] % len(whole)]
            whole[key] = mutate[1]
        return json.dumps(whole)
    ops = json.loads(json.dumps(off.target_patch))
    if mutate is not None:
        op = ops[mutate[0] % len(ops)]
        if "value" in op:
            op["value"] = mutate[1]
    return json.dumps(ops)


@PROPS
@given(
    index=st.integers(min_value=0, max_value=CATALOG_CASES - 1),
    arm=st.sampled_from(["contractrl", "full_regen"]),
    mutate=st.none() | st.tuples(st.integers(0, 9), JSON_VALUES),
    second=st.sampled_from(["gold", "heuristic-like", "garbage"]),
)
def test_near_miss_repairs_of_catalog_calls_never_leave_invalid(index: int, arm: str, mutate: Any, second: str) -> None:
    """Built-in tools (formats, patterns, cross-field rules, immutable ids) and answers that are the
    gold repair or a drawn near miss of it, over two attempts: a dispatch is always valid by the
    schema reference and keeps the immutable paths; a refusal is always typed. (The harness's
    contract reading covers the fuzzer's rules, not the catalog's ``required_if`` fields, so the
    cross-field rules are judged here by the verifier on the other schema backend.)"""
    case = _catalog_cases()[index]
    public = case.public
    answers = [_answer(case, arm, mutate), {"gold": _answer(case, arm, None), "heuristic-like": ABSTAIN, "garbage": "[{"}[second]]
    with tempfile.TemporaryDirectory() as tmp:
        gate = _catalog_gate(public, Scripted(answers), arm, Path(tmp) / "l")
        decision = gate.repair({"name": public.tool, "arguments": public.candidate}, request=public.request)
        gate.close()
    if isinstance(decision, Dispatch):
        event("dispatch (repaired)" if decision.repaired else "dispatch (valid as sent)")
        arguments = decision.call.arguments
        assert reference_schema_accepts(public.schema, "2020", arguments), arguments
        assert Verifier.build(public.schema, load_contract(public.contract), backend="python").verify(arguments).accepted
        for pointer in public.immutable:
            assert _at(arguments, pointer) == _at(public.candidate, pointer)
    else:
        event(f"refusal {decision.code}")
        assert decision.code and decision.reason


def test_gold_repairs_dispatch_and_unrepairable_calls_are_refused() -> None:
    """The property above is not vacuous: on the catalog cases the gold patch is dispatched (and is
    what the reference accepts), the cases whose gold answer is ABSTAIN are refused."""
    outcomes = {"dispatched": 0, "refused": 0}
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(_catalog_cases()):
            public = case.public
            gate = _catalog_gate(public, Scripted([_answer(case, "contractrl", None)]), "contractrl", Path(tmp) / str(i))
            decision = gate.repair({"name": public.tool, "arguments": public.candidate}, request=public.request)
            gate.close()
            if case.offline.target_patch == ABSTAIN:
                assert isinstance(decision, Refusal) and decision.code == "abstain"
                outcomes["refused"] += 1
            else:
                assert isinstance(decision, Dispatch) and decision.repaired, (public.family, decision)
                assert reference_schema_accepts(public.schema, "2020", decision.call.arguments)
                outcomes["dispatched"] += 1
    assert outcomes["dispatched"] >= CATALOG_CASES * 3 // 4 and outcomes["refused"] >= 5


# -- the ledger -----------------------------------------------------------------------------------


def _mixed_calls() -> list[dict[str, Any]]:
    return [
        {"name": "forecast", "arguments": VALID},
        {"name": "forecast", "arguments": BROKEN},
        {"name": "forecast", "arguments": {"city": "Oslo", "days": 3, "extra": 1}},
        {"name": "weather", "arguments": VALID},
        {"type": "function", "function": {"name": "forecast", "arguments": "{"}},
        {"name": "forecast", "arguments": {"days": 3}},  # nothing says which city: the heuristic abstains
    ]


def test_every_decision_is_one_chained_row(tmp_path: Path) -> None:
    gate = _gate(tmp_path, shard_rows=4)  # several shards
    decisions = [gate.repair(call, request="Five days in Oslo") for call in _mixed_calls()]
    digest = gate.close(freeze=True)
    rows = read_ledger(tmp_path / "ledger")  # the chain, the files and the manifest verified
    assert len(rows) == len(decisions) and len(digest or "") == 64
    assert [r["row_hash"] for r in rows] == [d.row_hash for d in decisions]
    assert [r["decision"] for r in rows] == ["dispatch" if isinstance(d, Dispatch) else "refusal" for d in decisions]
    assert [r["code"] for r in rows] == [
        "accepted" if isinstance(d, Dispatch) else d.code for d in decisions
    ]  # fmt: skip
    assert {r["kind"] for r in rows} == {"contractrl.gate"} and [r["sample"] for r in rows] == list(range(len(rows)))
    assert [r["latency_s"] for r in rows] == [d.latency_s for d in decisions]  # timing: stored, not chained
    for row, decision in zip(rows, decisions, strict=True):
        if isinstance(decision, Dispatch):
            assert row["dispatched"] == decision.call.arguments
        assert len(row["attempts"]) == decision.attempts


def test_the_same_calls_give_the_same_ledger_digest(tmp_path: Path) -> None:
    digests = []
    for name in ("a", "b"):
        gate = _gate(tmp_path, name=name)
        for call in _mixed_calls():
            gate.repair(call, request="Five days in Oslo")
        digests.append(gate.close(freeze=True))
    assert digests[0] == digests[1]


def test_a_gate_resumes_its_own_ledger_and_refuses_another_configuration(tmp_path: Path) -> None:
    first = _gate(tmp_path)
    first.repair({"name": "forecast", "arguments": VALID})
    first.close()
    second = _gate(tmp_path)
    assert second.decisions == 1
    second.repair({"name": "forecast", "arguments": BROKEN})
    second.close(freeze=True)
    assert [r["sample"] for r in read_ledger(tmp_path / "ledger")] == [0, 1]
    with pytest.raises(ConfigError):
        _gate(tmp_path, name="other", budgets=GateBudgets(max_attempts=2)).close()
        _gate(tmp_path, name="other", budgets=GateBudgets(max_attempts=3))


# -- async and threads ----------------------------------------------------------------------------


def test_the_async_form_decides_as_the_sync_form(tmp_path: Path) -> None:
    calls = _mixed_calls()
    sync = [_gate(tmp_path, name="sync").repair(c) for c in calls]

    async def run() -> list[Any]:
        gate = _gate(tmp_path, name="async")
        try:
            return list(await asyncio.gather(*(gate.arepair(c) for c in calls)))
        finally:
            gate.close()

    concurrent = asyncio.run(run())
    assert [d.to_dict()["decision"] for d in concurrent] == [d.to_dict()["decision"] for d in sync]
    assert [getattr(d, "code", None) for d in concurrent] == [getattr(d, "code", None) for d in sync]
    assert [getattr(d, "call", None) for d in concurrent] == [getattr(d, "call", None) for d in sync]
    assert len(read_ledger(tmp_path / "async", require_frozen=False)) == len(calls)


class Slow(Scripted):
    """Yields the interpreter inside generate, so threads interleave where the state is shared."""

    def generate(self, observations: Sequence[Observation]) -> list[Generation]:
        threading.Event().wait(0.001)
        return super().generate(observations)


def test_concurrent_threads_lose_no_decision_and_keep_one_chain(tmp_path: Path) -> None:
    right = '[{"op": "replace", "path": "/days", "value": 3}, {"op": "replace", "path": "/units", "value": "metric"}]'
    gate = _gate(tmp_path, Slow([right]), shard_rows=7)
    calls = _mixed_calls()
    threads, per_thread = 8, 12
    results: list[Any] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        for i in range(per_thread):
            decision = gate.repair(calls[(index + i) % len(calls)])
            with lock:
                results.append(decision)

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    gate.close(freeze=True)
    rows = read_ledger(tmp_path / "ledger")  # raises on a broken chain
    assert len(rows) == len(results) == threads * per_thread
    assert sorted(r["sample"] for r in rows) == list(range(threads * per_thread))
    assert {r["row_hash"] for r in rows} == {d.row_hash for d in results}
    assert scan_ledger(tmp_path / "ledger").failure is None


# -- policies -------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["random", "hf:", "selector:/nonexistent/selector"])
def test_an_unknown_or_missing_policy_is_a_config_error(tmp_path: Path, spec: str) -> None:
    with pytest.raises(ConfigError):
        _gate(tmp_path, spec)


def test_a_builtin_tool_with_its_contract_repairs_through_the_heuristic(tmp_path: Path) -> None:
    tool = builtin_tool("create_event")
    gate = RepairGate(
        [tool["definition"]], "heuristic", contracts={"create_event": tool["contract"]},
        immutable={"create_event": tool["immutable"]}, budgets=GateBudgets(max_ops=4), ledger=tmp_path / "l",
    )  # fmt: skip
    call = {
        "calendar_id": "cal_0a1b2c", "title": "Review", "start": "2026-12-07T10:00:00Z", "end": "2026-12-07T11:00:00Z",
        "attendees": [], "reminder": {"minutes": "15", "method": "popup"},
    }  # fmt: skip
    decision = gate.repair({"name": "create_event", "arguments": call})
    assert isinstance(decision, Dispatch) and decision.call.arguments["reminder"]["minutes"] == 15
    backwards = {**call, "reminder": {"minutes": 15, "method": "popup"}, "end": "2026-12-07T09:00:00Z"}
    refused = gate.repair({"name": "create_event", "arguments": backwards})  # the contract: end after start
    assert isinstance(refused, Refusal)
    with pytest.raises(ConfigError):
        builtin_tool("no_such_tool")


@pytest.mark.slow
def test_the_tiny_model_behind_the_gate_is_fail_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``hf:tiny`` through the same spec path as ``rollout --policy`` (shielded, greedy): an
    untrained model repairs little, but whatever it answers, only verified objects leave."""
    monkeypatch.chdir(tmp_path)
    gate = _gate(tmp_path, "hf:tiny")
    decisions = [gate.repair(call, request="Five days in Oslo") for call in _mixed_calls()]
    for decision in decisions:
        if isinstance(decision, Dispatch):
            assert gate.tools["forecast"].verifier.verify(decision.call.arguments).accepted
    gate.close(freeze=True)
    assert len(read_ledger(tmp_path / "ledger")) == len(decisions)


def test_the_quickstart_example_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = runpy.run_path(str(Path(__file__).resolve().parents[1] / "examples" / "gate_quickstart.py"))
    example["main"](tmp_path / "ledger")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("dispatch (repaired=False)") and lines[1].startswith("dispatch (repaired=True)")
    assert lines[2].startswith("refusal unknown_tool") and "3 rows" in lines[3]
    assert len(read_ledger(tmp_path / "ledger")) == 3


@pytest.mark.slow
def test_a_selector_directory_behind_the_gate_is_fail_closed(tmp_path: Path) -> None:
    """``selector:DIR`` through the rollout spec path: a selector saved as ``train-selector`` saves
    one (untrained weights: the features and the mask alone) decides catalog calls; whatever it
    chooses, a dispatch passes the verifier on the other backend and every call has its row."""
    import gymnasium as gym
    import numpy as np
    import torch

    from contractrl.selector.features import CANDIDATE_FEATURES, STATE_FEATURES
    from contractrl.selector.module import SelectorModule
    from contractrl.selector.policy import save_selector

    size = 8
    torch.manual_seed(0)
    spaces = gym.spaces.Dict(
        {
            "observations": gym.spaces.Box(0.0, 1.0, (len(STATE_FEATURES),), np.float32),
            "candidates": gym.spaces.Box(0.0, 1.0, (size, len(CANDIDATE_FEATURES)), np.float32),
            "action_mask": gym.spaces.Box(0.0, 1.0, (size,), np.float32),
        }
    )
    module = SelectorModule(observation_space=spaces, action_space=gym.spaces.Discrete(size), model_config={"hidden": 16})
    save_selector(module, tmp_path / "selector", size)
    cases = _catalog_cases()[:26]
    tools = {c.public.tool: c.public for c in cases}
    gate = RepairGate(
        {name: p.schema for name, p in tools.items()},
        f"selector:{tmp_path / 'selector'}",
        contracts={name: p.contract for name, p in tools.items()},
        immutable={name: list(p.immutable) for name, p in tools.items()},
        ledger=tmp_path / "ledger",
    )
    decisions = [gate.repair({"name": c.public.tool, "arguments": c.public.candidate}, c.public.request) for c in cases]
    repaired = 0
    for case, decision in zip(cases, decisions, strict=True):
        if isinstance(decision, Dispatch):
            public = case.public
            checker = Verifier.build(public.schema, load_contract(public.contract), backend="python")
            assert checker.verify(decision.call.arguments).accepted
            repaired += decision.repaired
    gate.close(freeze=True)
    rows = read_ledger(tmp_path / "ledger")
    assert len(rows) == len(cases) and {r["policy"] for r in rows} == {f"selector:{tmp_path / 'selector'}"}
    assert repaired > 0  # the candidates it chooses among are real repairs
