"""The repair gate in a LangGraph agent, driven by langchain-core's fake chat model (offline).

Run from the repository root:  python examples/gate_langgraph.py [LEDGER_DIR]

An agent -> tools graph: the scripted model makes two tool calls in turn, one the heuristic policy
repairs (a number sent as text, an enum member in the wrong case) and one it cannot (a day count
written as a word). The graph runs twice: with LangGraph's own ToolNode, then with
``gated_tool_node``, whose wrapper repairs the first call before the tool runs and answers the
second with an error ToolMessage carrying the gate's code and reason. The gate's decisions are
chained into a ledger.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from contractrl.gate import RepairGate
from contractrl.gate.adapters import gated_tool_node, langchain_tool_definitions
from contractrl.rollout.ledger import read_ledger

REQUEST = "Forecast for Oslo, 3 days, metric"
REPLIES = [  # the scripted model's turns: a call the heuristic repairs, one it cannot, an answer
    AIMessage("", tool_calls=[{"name": "forecast", "args": {"city": "Oslo", "days": "3", "units": "Metric"}, "id": "call_1"}]),
    AIMessage("", tool_calls=[{"name": "forecast", "args": {"city": "Oslo", "days": "three"}, "id": "call_2"}]),
    AIMessage("done"),
]


@tool
def forecast(city: str, days: int, units: Literal["metric", "imperial"] = "metric") -> str:
    """Weather forecast for a city."""
    print(f"  tool ran: forecast(city={city!r}, days={days!r}, units={units!r})")
    return f"{days} days of sun in {city} ({units})"


def run(tool_node: Callable[[list[Any]], Any]) -> None:
    model = GenericFakeChatModel(messages=iter([m.model_copy() for m in REPLIES]))
    graph = StateGraph(MessagesState)
    graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    graph.add_node("tools", tool_node([forecast]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    out = graph.compile().invoke({"messages": [HumanMessage(REQUEST)]})
    for message in out["messages"]:
        if message.type == "tool":
            content = " ".join(str(message.content).split())
            print(f"  model reads ({message.tool_call_id}, status={message.status}): {content}")
    print(f"  final message: {out['messages'][-1].content}")


def main(ledger: Path) -> None:
    print("without the gate:")
    run(ToolNode)
    gate = RepairGate(langchain_tool_definitions([forecast]), "heuristic", ledger=ledger)
    print("with the gate:")
    run(lambda tools: gated_tool_node(tools, gate))
    digest = gate.close(freeze=True)
    rows = read_ledger(ledger)
    print(f"ledger {digest}: {len(rows)} rows, decisions {[r['code'] for r in rows]}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="gate-")) / "ledger")
