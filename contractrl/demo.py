"""A walk through the repair contract on one built-in tool, every outcome shown once.

This is the mechanism demo of the validator layer: scripted actions (not a learned policy) go
through the real parser, action mask, atomic apply and verifier, so a new user sees each typed
outcome and the fail-closed rule in a few seconds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .validators import Budgets, RepairContract, Verifier, load_contract

DEMO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "event_id": {"type": "string", "pattern": "^evt_[0-9a-f]{6}$"},
        "owner": {"type": "string", "format": "email"},
        "title": {"type": "string", "minLength": 1, "maxLength": 80},
        "start": {"type": "string", "format": "date-time"},
        "end": {"type": "string", "format": "date-time"},
        "visibility": {"enum": ["public", "private", "busy"]},
        "attendees": {"type": "array", "items": {"type": "string", "format": "email"}, "maxItems": 20},
        "reminder_minutes": {"type": "integer", "minimum": 0, "maximum": 1440},
    },
    "required": ["event_id", "owner", "title", "start", "end"],
    "additionalProperties": False,
}
DEMO_CONTRACT = load_contract(
    {"rules": [{"id": "end_after_start", "kind": "compare", "left": "/end", "op": ">", "right": "/start", "as": "date-time"}]}
)
DEMO_IMMUTABLE = ("/event_id", "/owner")
DEMO_CANDIDATE: dict[str, Any] = {
    "event_id": "evt_00a1b2",
    "owner": "ana@example.com",
    "title": "Design review",
    "start": "2026-12-01T10:00:00+00:00",
    "end": "2026-12-01T11:00:00+00:00",
    "visibility": "team",
    "attendees": ["li@example.com"],
    "reminder_minutes": "15",
}


@dataclass(frozen=True)
class DemoRow:
    scenario: str
    action: str
    outcome: str
    attempt_class: str
    pointer: str
    attempts_left: int
    dispatched: bool


_SCENARIOS: tuple[tuple[str, list[str]], ...] = (
    (
        "repair in one attempt",
        ['[{"op":"replace","path":"/visibility","value":"private"},{"op":"replace","path":"/reminder_minutes","value":15}]'],
    ),
    (
        "retry after a partial fix",
        ['[{"op":"replace","path":"/visibility","value":"busy"}]', '[{"op":"replace","path":"/reminder_minutes","value":15}]'],
    ),
    (
        "immutable path is masked",
        ['[{"op":"replace","path":"/owner","value":"eve@example.com"}]', "ABSTAIN: the owner may not change"],
    ),
    ("path that does not exist", ['[{"op":"replace","path":"/location","value":"Room 1"}]']),
    (
        "malformed and truncated text",
        ['[{"op":"replace","path":"/visibility"', '[{"op":"replace","path":"/visibility","value":"busy"},]'],
    ),
    ("duplicate key in the patch", ['[{"op":"replace","op":"remove","path":"/visibility","value":"busy"}]']),
    (
        "over the operation budget",
        ['[{"op":"remove","path":"/visibility"},{"op":"remove","path":"/attendees"},{"op":"remove","path":"/reminder_minutes"}]'],
    ),
    (
        "cross-field contract",
        [
            '[{"op":"replace","path":"/visibility","value":"busy"},{"op":"replace","path":"/end","value":"2026-12-01T09:00:00+00:00"}]'
        ],
    ),
    ("abstain keeps the budget", ["ABSTAIN: not enough information"]),
)


def run_demo(budgets: Budgets = Budgets()) -> list[DemoRow]:
    """Run every scripted scenario from the same corrupted candidate."""
    contract = RepairContract(Verifier.build(DEMO_SCHEMA, DEMO_CONTRACT), budgets, DEMO_IMMUTABLE)
    rows: list[DemoRow] = []
    for name, actions in _SCENARIOS:
        state = contract.initial_state(DEMO_CANDIDATE)
        for text in actions:
            if state.done:
                break
            result = contract.step(state, text)
            state = result.state
            rows.append(
                DemoRow(
                    scenario=name,
                    action=text if len(text) <= 60 else text[:57] + "...",
                    outcome=result.outcome.value,
                    attempt_class=result.record.attempt_class.value,
                    pointer=result.record.pointer,
                    attempts_left=state.attempts_left,
                    dispatched=result.accepted_object is not None,
                )
            )
    return rows


def format_rows(rows: list[DemoRow]) -> str:
    headers = ("scenario", "outcome", "class", "pointer", "left", "dispatched", "action")
    table = [
        (r.scenario, r.outcome, r.attempt_class, r.pointer, str(r.attempts_left), "yes" if r.dispatched else "no", r.action)
        for r in rows
    ]
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in table)
    return "\n".join(lines)


def initial_report_json() -> str:
    contract = RepairContract(Verifier.build(DEMO_SCHEMA, DEMO_CONTRACT), Budgets(), DEMO_IMMUTABLE)
    return json.dumps(contract.initial_state(DEMO_CANDIDATE).report.to_dict(), indent=2)
