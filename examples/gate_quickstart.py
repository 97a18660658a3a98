"""The repair gate in front of a built-in tool, with the heuristic policy (no model, no GPU).

Run from the repository root:  python examples/gate_quickstart.py [LEDGER_DIR]

Three calls go through the gate: one valid, one the heuristic repairs (a number sent as text, an
enum member in the wrong case), and one that names a tool the gate does not guard. The decisions
are chained into a ledger, which is frozen and verified at the end.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from contractrl.gate import Dispatch, GateBudgets, RepairGate, builtin_tool
from contractrl.rollout.ledger import read_ledger

TOOL = builtin_tool("create_event")  # an OpenAI function definition, its cross-field contract, immutable paths
VALID = {
    "calendar_id": "cal_0a1b2c",
    "title": "Design review",
    "start": "2026-12-07T10:00:00Z",
    "end": "2026-12-07T11:00:00Z",
    "attendees": ["ana@example.com"],
    "visibility": "private",
}
BROKEN = {**VALID, "visibility": "Private", "reminder": {"minutes": "15", "method": "popup"}}


def main(ledger: Path) -> None:
    gate = RepairGate(
        [TOOL["definition"]],
        "heuristic",
        contracts={"create_event": TOOL["contract"]},
        immutable={"create_event": TOOL["immutable"]},
        budgets=GateBudgets(max_attempts=2, max_ops=4),
        ledger=ledger,
    )
    calls = [
        {"id": "call_1", "type": "function", "function": {"name": "create_event", "arguments": json.dumps(VALID)}},
        {"name": "create_event", "arguments": BROKEN},  # MCP tools/call form
        {"name": "drop_database", "arguments": {}},
    ]
    for call in calls:
        decision = gate.repair(call, request="Book the design review; remind me 15 minutes before by popup.")
        if isinstance(decision, Dispatch):
            print(f"dispatch (repaired={decision.repaired}): {json.dumps(decision.call.arguments, sort_keys=True)}")
        else:
            print(f"refusal {decision.code}: {decision.reason}")
    digest = gate.close(freeze=True)
    rows = read_ledger(ledger)  # verifies the chain, the files and the manifest
    print(f"ledger {digest}: {len(rows)} rows, decisions {[r['code'] for r in rows]}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="gate-")) / "ledger")
