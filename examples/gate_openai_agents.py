"""The repair gate in an OpenAI Agents SDK agent, driven by the SDK's ScriptedModel (offline).

Run from the repository root:  python examples/gate_openai_agents.py [LEDGER_DIR]

The scripted model makes two tool calls in turn: one the heuristic policy repairs (a number sent
as text, an enum member in the wrong case) and one it cannot (a day count written as a word).
``Runner.run`` runs the script twice (tracing off: nothing leaves the machine): with the SDK's
own FunctionTool, then with ``gate_function_tool``, which repairs the first call before the
function runs and returns the second's refusal, with the gate's code and reason, as the tool's
output. The gate's decisions are chained into a ledger.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal

from agents import Agent, FunctionTool, RunConfig, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from contractrl.gate import RepairGate
from contractrl.gate.adapters import gate_function_tool, openai_agents_tool_definitions
from contractrl.rollout.ledger import read_ledger

REQUEST = "Forecast for Oslo, 3 days, metric"
STEPS: list[Any] = [  # the scripted model's turns: a call the heuristic repairs, one it cannot, an answer
    [function_call("forecast", {"city": "Oslo", "days": "3", "units": "Metric"}, call_id="call_1")],
    [function_call("forecast", {"city": "Oslo", "days": "three"}, call_id="call_2")],
    [assistant_message("done")],
]


@function_tool
def forecast(city: str, days: int, units: Literal["metric", "imperial"] = "metric") -> str:
    """Weather forecast for a city."""
    print(f"  tool ran: forecast(city={city!r}, days={days!r}, units={units!r})")
    return f"{days} days of sun in {city} ({units})"


def run(tool: FunctionTool) -> None:
    agent = Agent(name="weather", model=ScriptedModel(STEPS), tools=[tool])
    result = asyncio.run(Runner.run(agent, REQUEST, run_config=RunConfig(tracing_disabled=True)))
    for item in result.new_items:
        if item.type == "tool_call_output_item":
            print(f"  model reads ({item.raw_item['call_id']}): {item.output}")
    print(f"  final output: {result.final_output}")


def main(ledger: Path) -> None:
    print("without the gate:")
    run(forecast)
    gate = RepairGate(openai_agents_tool_definitions([forecast]), "heuristic", ledger=ledger)
    print("with the gate:")
    run(gate_function_tool(forecast, gate))
    digest = gate.close(freeze=True)
    rows = read_ledger(ledger)
    print(f"ledger {digest}: {len(rows)} rows, decisions {[r['code'] for r in rows]}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="gate-")) / "ledger")
