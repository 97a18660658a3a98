"""The repair gate in a pydantic-ai agent, driven by pydantic-ai's scripted FunctionModel (offline).

Run from the repository root:  python examples/gate_pydantic_ai.py [LEDGER_DIR]

The scripted model makes two tool calls in turn: one the heuristic policy repairs (a number sent
as text, an enum member in the wrong case) and one it cannot (a day count written as a word).
The script runs twice: as pydantic-ai handles the calls itself, then with the gate's capability,
which repairs the first before pydantic-ai validates it and answers the second with a ModelRetry
carrying the gate's code and reason. The gate's decisions are chained into a ledger.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic_ai import Agent, Tool
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from contractrl.gate import RepairGate
from contractrl.gate.adapters import gate_capability, pydantic_ai_tool_definitions
from contractrl.rollout.ledger import read_ledger

REQUEST = "Forecast for Oslo, 3 days, metric"
CALLS = [
    ("call_1", '{"city": "Oslo", "days": "3", "units": "Metric"}'),  # as a provider sends it: JSON text
    ("call_2", {"city": "Oslo", "days": "three"}),
]


def forecast(city: str, days: int, units: Literal["metric", "imperial"] = "metric") -> str:
    """Weather forecast for a city."""
    print(f"  tool ran: forecast(city={city!r}, days={days!r}, units={units!r})")
    return f"{days} days of sun in {city} ({units})"


def scripted(messages: list[Any], info: AgentInfo) -> ModelResponse:
    """The model: one call per turn, then a final answer; prints what it is sent back."""
    for part in messages[-1].parts:
        if isinstance(part, ToolReturnPart):
            print(f"  model reads ({part.tool_call_id}, {part.outcome}): {part.content}")
    turn = sum(isinstance(m, ModelResponse) for m in messages)
    if turn < len(CALLS):
        call_id, args = CALLS[turn]
        return ModelResponse(parts=[ToolCallPart("forecast", args, call_id)])
    return ModelResponse(parts=[TextPart("done")])


def run(capabilities: list[Any]) -> None:
    agent = Agent(FunctionModel(scripted), tools=[Tool(forecast)], capabilities=capabilities)
    try:
        print(f"  run output: {agent.run_sync(REQUEST).output}")
    except UnexpectedModelBehavior as exc:
        print(f"  run ended: {type(exc).__name__}: {exc}")


def main(ledger: Path) -> None:
    print("without the gate:")
    run([])
    gate = RepairGate(pydantic_ai_tool_definitions([Tool(forecast)]), "heuristic", ledger=ledger)
    print("with the gate:")
    run([gate_capability(gate)])
    digest = gate.close(freeze=True)
    rows = read_ledger(ledger)
    print(f"ledger {digest}: {len(rows)} rows, decisions {[r['code'] for r in rows]}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="gate-")) / "ledger")
