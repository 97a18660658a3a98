"""The gate's agent-framework adapters (issue 52 section 3), each against its real package.

Every framework is driven by a scripted model (pydantic-ai's ``FunctionModel``, scripted
AIMessages into a LangGraph ToolNode, the Agents SDK's ``ScriptedModel``; the examples, run here
too, drive LangGraph with langchain-core's fake chat model) emitting the same three calls in turn:
a valid one, one the heuristic repairs (a number sent as text, an enum member in the wrong case)
and one it cannot (a day count written as a word). Each test checks what the tool
received, that a refused call never ran it, what the model was told, and that the ledger holds one
row per call with the decision the framework acted on. A control per framework runs the same
script without the gate, so the repaired call is known to be one the framework itself rejects.
"""

from __future__ import annotations

import asyncio
import json
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import pytest

from contractrl.gate import RepairGate
from contractrl.gate.adapters import (
    GateToolCallWrapper,
    MissingExtraError,
    gate_capability,
    gate_function_tool,
    gated_tool_node,
    langchain_tool_definitions,
    openai_agents_tool_definitions,
    pydantic_ai_tool_definitions,
)
from contractrl.rollout.ledger import read_ledger

REQUEST = "Forecast for Oslo, 3 days, metric"
VALID = {"city": "Bergen", "days": 2, "units": "imperial"}
BROKEN = {"city": "Oslo", "days": "3", "units": "Metric"}
REPAIRED = {"city": "Oslo", "days": 3, "units": "metric"}
HOPELESS = {"city": "Oslo", "days": "three"}  # nothing in the request or the schema says which number
SCRIPT = [("c0", VALID), ("c1", BROKEN), ("c2", HOPELESS)]
CODES = ["accepted", "accepted", "abstain"]  # the ledger's decisions for SCRIPT, in order


class Forecast:
    """The tool: ``fn`` is the function a framework wraps (frameworks read its name, signature and
    docstring); ``runs`` records every execution, so a refused call is seen not to have run."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []

        def forecast(city: str, days: int, units: Literal["metric", "imperial"] = "metric") -> str:
            """Weather forecast for a city.

            Args:
                city: the city
                days: how many days, 1 to 14
                units: metric or imperial
            """
            self.runs.append({"city": city, "days": days, "units": units})
            return f"{days} days in {city} ({units})"

        self.fn = forecast


def _gate(definitions: list[dict[str, Any]], ledger: Path) -> RepairGate:
    return RepairGate(definitions, "heuristic", ledger=ledger)


def _ledger(gate: RepairGate, ledger: Path) -> list[dict[str, Any]]:
    gate.close(freeze=True)
    return read_ledger(ledger)


def _assert_gated(tool: Forecast, rows: list[dict[str, Any]], told: str) -> None:
    """What every adapter must come to on SCRIPT: the valid and the repaired call ran with
    verifier-accepted arguments, the hopeless one did not run, and the model was told why."""
    assert tool.runs == [VALID, REPAIRED]
    assert [r["code"] for r in rows] == CODES
    assert [r["call_id"] for r in rows] == ["c0", "c1", "c2"]
    assert [r["dispatched"] for r in rows] == [VALID, REPAIRED, None]
    assert [json.loads(r["received"]) for r in rows] == [VALID, BROKEN, HOPELESS]
    assert all(r["request"] == REQUEST for r in rows)  # the policy could read the user's request
    assert "refused" in told and "(abstain)" in told and "/days" in told


# -- pydantic-ai -------------------------------------------------------------------------------------


def _pydantic_ai_run(capabilities: list[Any]) -> tuple[Forecast, list[str], Any]:
    """Run SCRIPT through a pydantic-ai agent (one call per model turn, the arguments of c1 as JSON
    text the way providers send them); returns the tool, what the model was sent back, and the
    run's output or the exception that ended it."""
    from pydantic_ai import Agent, Tool
    from pydantic_ai.exceptions import UnexpectedModelBehavior
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    tool = Forecast()
    told: list[str] = []

    def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
        told.extend(str(p.content) for p in messages[-1].parts if isinstance(p, ToolReturnPart))
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn < len(SCRIPT):
            call_id, args = SCRIPT[turn]
            return ModelResponse(parts=[ToolCallPart("forecast", json.dumps(args) if call_id == "c1" else args, call_id)])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(model), tools=[Tool(tool.fn)], capabilities=capabilities)
    try:
        return tool, told, agent.run_sync(REQUEST).output
    except UnexpectedModelBehavior as exc:
        return tool, told, exc


def test_pydantic_ai_without_the_gate_retries_until_the_cap_ends_the_run() -> None:
    from pydantic_ai.exceptions import UnexpectedModelBehavior

    tool, told, ended = _pydantic_ai_run([])
    assert tool.runs == [VALID]  # c1 fails pydantic-ai's own validation: a retry prompt
    assert "Input should be 'metric' or 'imperial'" in told[1]
    assert isinstance(ended, UnexpectedModelBehavior)  # c2 fails too: past the tool's retry cap of 1


def test_pydantic_ai_capability_repairs_or_retries(tmp_path: Path) -> None:
    from pydantic_ai import Tool

    definitions = pydantic_ai_tool_definitions([Tool(Forecast().fn)])
    gate = _gate(definitions, tmp_path / "ledger")
    tool, told, output = _pydantic_ai_run([gate_capability(gate)])
    assert output == "done"  # one refusal: within the tool's retry cap
    _assert_gated(tool, _ledger(gate, tmp_path / "ledger"), told[2])
    assert told[:2] == ["2 days in Bergen (imperial)", "3 days in Oslo (metric)"]


def test_pydantic_ai_no_arguments_are_an_empty_object(tmp_path: Path) -> None:
    """A model may send "" for a tool without parameters; pydantic-ai reads it as {}, and so must
    the gate (strict JSON would call "" malformed and refuse a valid call)."""
    from pydantic_ai import Agent, Tool
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    ran: list[str] = []

    def clock() -> str:
        """The time."""
        ran.append("clock")
        return "noon"

    def model(messages: list[Any], info: Any) -> ModelResponse:
        first = len(messages) == 1
        return ModelResponse(parts=[ToolCallPart("clock", "", "n1")] if first else [TextPart("done")])

    gate = _gate(pydantic_ai_tool_definitions([Tool(clock)]), tmp_path / "ledger")
    Agent(FunctionModel(model), tools=[Tool(clock)], capabilities=[gate_capability(gate)]).run_sync("time?")
    assert ran == ["clock"]
    assert [r["dispatched"] for r in _ledger(gate, tmp_path / "ledger")] == [{}]


# -- LangGraph ---------------------------------------------------------------------------------------


def _langgraph_run(node: Any, *, use_async: bool) -> list[Any]:
    """SCRIPT through a graph holding only the ToolNode (the examples run it in an agent -> tools
    loop), one scripted AIMessage per turn on the growing message list; returns the ToolMessages."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import START, MessagesState, StateGraph

    graph = StateGraph(MessagesState)
    graph.add_node("tools", node)
    graph.add_edge(START, "tools")
    app = graph.compile()
    messages: list[Any] = [HumanMessage(REQUEST)]
    for call_id, args in SCRIPT:
        state = {"messages": [*messages, AIMessage("", tool_calls=[{"name": "forecast", "args": args, "id": call_id}])]}
        messages = asyncio.run(app.ainvoke(state))["messages"] if use_async else app.invoke(state)["messages"]
    return [m for m in messages if m.type == "tool"]


def test_langgraph_without_the_gate_returns_an_error_message() -> None:
    from langchain_core.tools import tool as as_tool
    from langgraph.prebuilt import ToolNode

    tool = Forecast()
    messages = _langgraph_run(ToolNode([as_tool(tool.fn)]), use_async=False)
    assert tool.runs == [VALID]
    assert [m.status for m in messages] == ["success", "error", "error"]


@pytest.mark.parametrize("use_async", [False, True], ids=["invoke", "ainvoke"])
def test_langgraph_tool_node_repairs_or_answers_an_error(tmp_path: Path, use_async: bool) -> None:
    from langchain_core.tools import tool as as_tool

    tool = Forecast()
    gate = _gate(langchain_tool_definitions([as_tool(tool.fn)]), tmp_path / "ledger")
    messages = _langgraph_run(gated_tool_node([as_tool(tool.fn)], gate), use_async=use_async)
    assert [m.status for m in messages] == ["success", "success", "error"]
    assert [m.tool_call_id for m in messages] == ["c0", "c1", "c2"]
    _assert_gated(tool, _ledger(gate, tmp_path / "ledger"), messages[2].content)


# -- OpenAI Agents SDK -------------------------------------------------------------------------------


def _agents_run(wrap: Any) -> tuple[Forecast, list[str]]:
    """SCRIPT through ``Runner.run`` with the SDK's ``ScriptedModel`` (tracing off: no exporter, no
    network); returns the tool and the outputs of the tool calls as the model saw them."""
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    tool = Forecast()
    forecast = wrap(function_tool(tool.fn))
    steps = [[function_call("forecast", args, call_id=call_id)] for call_id, args in SCRIPT]
    agent = Agent(name="weather", model=ScriptedModel([*steps, [assistant_message("done")]]), tools=[forecast])
    result = asyncio.run(Runner.run(agent, REQUEST, run_config=RunConfig(tracing_disabled=True)))
    assert result.final_output == "done"
    return tool, [str(item.output) for item in result.new_items if item.type == "tool_call_output_item"]


def test_openai_agents_without_the_gate_hides_the_error() -> None:
    tool, outputs = _agents_run(lambda t: t)
    assert tool.runs == [VALID]
    assert outputs[1] == outputs[2] and "An error occurred while running the tool" in outputs[1]


def test_openai_agents_function_tool_repairs_or_refuses(tmp_path: Path) -> None:
    from agents import function_tool

    definitions = openai_agents_tool_definitions([function_tool(Forecast().fn)])
    gate = _gate(definitions, tmp_path / "ledger")
    tool, outputs = _agents_run(lambda t: gate_function_tool(t, gate))
    assert outputs[:2] == ["2 days in Bergen (imperial)", "3 days in Oslo (metric)"]
    _assert_gated(tool, _ledger(gate, tmp_path / "ledger"), outputs[2])


def test_openai_agents_no_arguments_are_an_empty_object(tmp_path: Path) -> None:
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    ran: list[str] = []

    def clock() -> str:
        """The time."""
        ran.append("clock")
        return "noon"

    tool = function_tool(clock)
    gate = _gate(openai_agents_tool_definitions([tool]), tmp_path / "ledger")
    model = ScriptedModel([[function_call("clock", "", call_id="n1")], [assistant_message("done")]])
    agent = Agent(name="clock", model=model, tools=[gate_function_tool(tool, gate)])
    asyncio.run(Runner.run(agent, "time?", run_config=RunConfig(tracing_disabled=True)))
    assert ran == ["clock"]
    assert [r["dispatched"] for r in _ledger(gate, tmp_path / "ledger")] == [{}]


def test_openai_agents_refuses_to_wrap_an_approval_tool(tmp_path: Path) -> None:
    from agents import function_tool

    from contractrl.errors import ConfigError

    tool = function_tool(Forecast().fn, needs_approval=True)
    gate = _gate(openai_agents_tool_definitions([tool]), tmp_path / "ledger")
    with pytest.raises(ConfigError, match="needs approval"):
        gate_function_tool(tool, gate)
    with pytest.raises(ConfigError, match="FunctionTool"):
        gate_function_tool(Forecast().fn, gate)


# -- the examples ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gate_pydantic_ai", "gate_langgraph", "gate_openai_agents"])
def test_the_framework_examples_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    """Each example prints the framework's own handling, then the gate's: the repaired call ran
    once (only with the gate), the hopeless one never, and the ledger holds both decisions."""
    example = runpy.run_path(str(Path(__file__).resolve().parents[1] / "examples" / f"{name}.py"))
    example["main"](tmp_path / "ledger")
    out = capsys.readouterr().out
    without, with_gate = out.split("with the gate:\n")
    assert "tool ran" not in without
    assert with_gate.count("tool ran") == 1 and "tool ran: forecast(city='Oslo', days=3, units='metric')" in with_gate
    assert "refused this call to 'forecast' (abstain)" in with_gate
    assert "2 rows, decisions ['accepted', 'abstain']" in with_gate
    assert [r["code"] for r in read_ledger(tmp_path / "ledger")] == ["accepted", "abstain"]


# -- without the frameworks --------------------------------------------------------------------------


def test_the_adapters_import_no_framework() -> None:
    code = (
        "import sys, contractrl.gate.adapters\n"
        "print(sorted(m for m in ('pydantic_ai', 'langgraph', 'langchain_core', 'agents') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parents[1])
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("missing", "build", "package"),
    [
        ("pydantic_ai", lambda gate: gate_capability(gate), "pydantic-ai-slim"),
        ("langgraph.prebuilt", lambda gate: GateToolCallWrapper(gate), "langgraph"),
        ("agents", lambda gate: gate_function_tool(object(), gate), "openai-agents"),
    ],
    ids=["pydantic-ai", "langgraph", "openai-agents"],
)
def test_a_missing_framework_is_one_typed_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missing, build, package) -> None:
    gate = _gate([{"type": "function", "function": {"name": "noop"}}], tmp_path / "ledger")
    monkeypatch.setitem(sys.modules, missing, None)  # what an absent package looks like to import
    with pytest.raises(MissingExtraError) as caught:
        build(gate)
    message = str(caught.value)
    assert "\n" not in message and package in message and "contractrl[agents]" in message
    assert gate.decisions == 0
