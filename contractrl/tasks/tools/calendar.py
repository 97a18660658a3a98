"""Calendar family: six tools over an in-memory calendar store."""

from __future__ import annotations

import random
from typing import Any

from ..spec import ExecResult, SandboxError, ToolSpec, run_handler
from .common import CopiedState, email, hex_id, id_schema, iso_date, iso_datetime, obj, parse_iso, stable_id, words

WEEKDAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
VISIBILITY = ["public", "private", "busy"]
METHODS = ["email", "popup", "sms"]


class CalendarSandbox(CopiedState):
    """Two calendars with a few events each, rebuilt identically from a seed."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(f"calendar:{seed}")
        self.calendars: dict[str, dict[str, Any]] = {}
        for _ in range(2):
            cal_id = hex_id("cal", rng)
            events = {}
            for _ in range(3):
                start = iso_datetime(rng)
                events[hex_id("evt", rng)] = {
                    "title": words(rng, 2),
                    "start": start,
                    "end": iso_datetime(rng, after=parse_iso(start), max_hours=3),
                    "visibility": rng.choice(VISIBILITY),
                    "attendees": [email(rng) for _ in range(rng.randint(0, 2))],
                    "reminders": [],
                }
            self.calendars[cal_id] = {"owner": email(rng), "events": events}

    def _calendar(self, cal_id: str) -> dict[str, Any]:
        if cal_id not in self.calendars:
            raise SandboxError("not_found", f"no calendar {cal_id}")
        return self.calendars[cal_id]

    def _event(self, cal_id: str, event_id: str) -> dict[str, Any]:
        events = self._calendar(cal_id)["events"]
        if event_id not in events:
            raise SandboxError("not_found", f"no event {event_id} in {cal_id}")
        return events[event_id]

    def execute(self, tool: str, args: dict[str, Any]) -> ExecResult:
        handler = getattr(self, f"_{tool}", None) if isinstance(tool, str) and tool in _TOOL_NAMES else None
        return run_handler(handler, args)

    def _create_event(self, a: dict[str, Any]) -> ExecResult:
        cal = self._calendar(a["calendar_id"])
        event_id = stable_id("evt", a)
        cal["events"][event_id] = {k: a.get(k) for k in ("title", "start", "end", "visibility", "attendees")}
        effects = [f"calendar.create {a['calendar_id']}/{event_id}"]
        effects += [f"calendar.invite {event_id} {m}" for m in a.get("attendees", [])]
        if "reminder" in a:
            effects.append(f"calendar.remind {event_id} {a['reminder']['minutes']}m {a['reminder']['method']}")
        recurrence = a.get("recurrence", {"kind": "none"})
        if recurrence["kind"] == "weekly":
            effects.append(f"calendar.repeat {event_id} weekly {','.join(recurrence['weekdays'])} x{recurrence['count']}")
        return ExecResult(True, {"event_id": event_id, "title": a["title"], "start": a["start"], "end": a["end"]}, tuple(effects))

    def _update_event(self, a: dict[str, Any]) -> ExecResult:
        event = self._event(a["calendar_id"], a["event_id"])
        event.update(a["changes"])
        effects = [f"calendar.update {a['event_id']} {k}={event[k]}" for k in sorted(a["changes"])]
        if a.get("notify_attendees", False):
            effects += [f"calendar.notify {a['event_id']} {m}" for m in event.get("attendees", [])]
        return ExecResult(True, {"event_id": a["event_id"], "updated": sorted(a["changes"])}, tuple(effects))

    def _delete_event(self, a: dict[str, Any]) -> ExecResult:
        event = self._event(a["calendar_id"], a["event_id"])
        del self.calendars[a["calendar_id"]]["events"][a["event_id"]]
        effects = [f"calendar.delete {a['event_id']} reason={a['reason']}"]
        if a.get("notify", True):
            effects += [f"calendar.notify {a['event_id']} {m}" for m in event.get("attendees", [])]
        return ExecResult(True, {"deleted": a["event_id"]}, tuple(effects))

    def _list_events(self, a: dict[str, Any]) -> ExecResult:
        cal = self._calendar(a["calendar_id"])
        found = [
            (ev["start"], eid)
            for eid, ev in cal["events"].items()
            if a["range_start"] <= ev["start"][:10] <= a["range_end"]
            and (a.get("include_private", False) or ev.get("visibility") != "private")
        ]
        ids = [eid for _, eid in sorted(found)][: a.get("limit", 20)]
        return ExecResult(True, {"events": ids, "count": len(ids)})

    def _add_attendee(self, a: dict[str, Any]) -> ExecResult:
        event = self._event(a["calendar_id"], a["event_id"])
        person = a["attendee"]
        event.setdefault("attendees", []).append(person["email"])
        effects = [f"calendar.attendee {a['event_id']} {person['email']} role={person['role']}"]
        if a.get("send_invite", True):
            effects.append(f"calendar.invite {a['event_id']} {person['email']}")
        return ExecResult(True, {"event_id": a["event_id"], "attendees": len(event["attendees"])}, tuple(effects))

    def _set_reminders(self, a: dict[str, Any]) -> ExecResult:
        event = self._event(a["calendar_id"], a["event_id"])
        event["reminders"] = a["reminders"]
        effects = tuple(f"calendar.remind {a['event_id']} {r['minutes']}m {r['method']}" for r in a["reminders"])
        return ExecResult(True, {"event_id": a["event_id"], "reminders": len(a["reminders"])}, effects)


CAL_ID = id_schema("cal")
EVT_ID = id_schema("evt")
DATETIME = {"type": "string", "format": "date-time"}
EMAIL = {"type": "string", "format": "email", "maxLength": 120}
REMINDER = obj(
    {"minutes": {"type": "integer", "minimum": 0, "maximum": 40320}, "method": {"enum": METHODS}}, ["minutes", "method"]
)
RECURRENCE = {
    "oneOf": [
        obj({"kind": {"const": "none"}}, ["kind"]),
        obj(
            {
                "kind": {"const": "weekly"},
                "weekdays": {"type": "array", "items": {"enum": WEEKDAYS}, "minItems": 1, "maxItems": 7, "uniqueItems": True},
                "count": {"type": "integer", "minimum": 1, "maximum": 52},
            },
            ["kind", "weekdays", "count"],
        ),
    ]
}


def _pick_event(rng: random.Random, box: CalendarSandbox) -> tuple[str, str]:
    cal_id = rng.choice(sorted(box.calendars))
    return cal_id, rng.choice(sorted(box.calendars[cal_id]["events"]))


def _sample_create(rng: random.Random, box: CalendarSandbox) -> dict[str, Any]:
    start = iso_datetime(rng)
    args: dict[str, Any] = {
        "calendar_id": rng.choice(sorted(box.calendars)),
        "title": words(rng, rng.randint(1, 3)).title(),
        "start": start,
        "end": iso_datetime(rng, after=parse_iso(start), max_hours=4),
        "visibility": rng.choice(VISIBILITY),
        "attendees": sorted({email(rng) for _ in range(rng.randint(1, 3))}),
        "reminder": {"minutes": rng.choice([5, 10, 15, 30, 60]), "method": rng.choice(METHODS)},
    }
    if rng.random() < 0.5:
        args["recurrence"] = {
            "kind": "weekly",
            "weekdays": sorted(rng.sample(WEEKDAYS[:5], 2), key=WEEKDAYS.index),
            "count": rng.randint(2, 12),
        }
    return args


def _sample_update(rng: random.Random, box: CalendarSandbox) -> dict[str, Any]:
    cal_id, event_id = _pick_event(rng, box)
    start = iso_datetime(rng)
    changes: dict[str, Any] = {"start": start, "end": iso_datetime(rng, after=parse_iso(start), max_hours=3)}
    if rng.random() < 0.5:
        changes["title"] = words(rng, 2).title()
    if rng.random() < 0.5:
        changes["visibility"] = rng.choice(VISIBILITY)
    return {"calendar_id": cal_id, "event_id": event_id, "changes": changes, "notify_attendees": rng.random() < 0.5}


def _sample_delete(rng: random.Random, box: CalendarSandbox) -> dict[str, Any]:
    cal_id, event_id = _pick_event(rng, box)
    return {
        "calendar_id": cal_id,
        "event_id": event_id,
        "reason": rng.choice(["cancelled", "duplicate", "rescheduled"]),
        "notify": rng.random() < 0.5,
    }


def _sample_list(rng: random.Random, box: CalendarSandbox) -> dict[str, Any]:
    start = iso_date(rng, max_days=20)
    return {
        "calendar_id": rng.choice(sorted(box.calendars)),
        "range_start": start,
        "range_end": iso_date(rng, after=parse_iso(start + "T00:00:00Z").date(), max_days=60),
        "limit": rng.randint(1, 50),
        "include_private": rng.random() < 0.5,
    }


def _sample_attendee(rng: random.Random, box: CalendarSandbox) -> dict[str, Any]:
    cal_id, event_id = _pick_event(rng, box)
    return {
        "calendar_id": cal_id,
        "event_id": event_id,
        "attendee": {
            "email": email(rng),
            "role": rng.choice(["required", "optional"]),
            "display_name": rng.choice(("Ana", "Li", "Omar", "Sofia")),
        },
        "send_invite": rng.random() < 0.5,
    }


def _sample_reminders(rng: random.Random, box: CalendarSandbox) -> dict[str, Any]:
    cal_id, event_id = _pick_event(rng, box)
    minutes = sorted(rng.sample([5, 10, 15, 30, 60, 120, 1440], rng.randint(1, 3)))
    return {
        "calendar_id": cal_id,
        "event_id": event_id,
        "reminders": [{"minutes": m, "method": rng.choice(METHODS)} for m in minutes],
    }


_ORDER = {"id": "start_before_end", "kind": "compare", "left": "/start", "op": "<", "right": "/end", "as": "date-time"}

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="create_event",
        family="calendar",
        description="Create an event on a calendar, optionally repeating weekly.",
        schema=obj(
            {
                "calendar_id": CAL_ID,
                "title": {"type": "string", "minLength": 1, "maxLength": 80},
                "start": DATETIME,
                "end": DATETIME,
                "visibility": {"enum": VISIBILITY},
                "attendees": {"type": "array", "items": EMAIL, "maxItems": 8, "uniqueItems": True},
                "reminder": REMINDER,
                "recurrence": RECURRENCE,
            },
            ["calendar_id", "title", "start", "end", "attendees"],
        ),
        contract={"rules": [_ORDER]},
        immutable=("/calendar_id",),
        sample=_sample_create,
        intros=("Please put a new event on my calendar.", "Schedule this for me.", "Add a meeting to the calendar."),
        labels={"start": "start time", "end": "end time"},
        renamed=(("guests", "attendees"),),
    ),
    ToolSpec(
        name="update_event",
        family="calendar",
        description="Change fields of an existing event.",
        schema=obj(
            {
                "calendar_id": CAL_ID,
                "event_id": EVT_ID,
                "changes": obj(
                    {
                        "title": {"type": "string", "minLength": 1, "maxLength": 80},
                        "start": DATETIME,
                        "end": DATETIME,
                        "visibility": {"enum": VISIBILITY},
                    },
                    [],
                    minProperties=1,
                ),
                "notify_attendees": {"type": "boolean"},
            },
            ["calendar_id", "event_id", "changes"],
        ),
        contract={"rules": [{**_ORDER, "left": "/changes/start", "right": "/changes/end"}]},
        immutable=("/calendar_id", "/event_id"),
        sample=_sample_update,
        intros=("Move this event.", "Please update the event.", "I need to reschedule something."),
        labels={"notify_attendees": "notify attendees"},
    ),
    ToolSpec(
        name="delete_event",
        family="calendar",
        description="Delete an event and optionally tell its attendees.",
        schema=obj(
            {
                "calendar_id": CAL_ID,
                "event_id": EVT_ID,
                "reason": {"enum": ["cancelled", "duplicate", "rescheduled"]},
                "notify": {"type": "boolean"},
            },
            ["calendar_id", "event_id", "reason"],
        ),
        immutable=("/calendar_id", "/event_id"),
        sample=_sample_delete,
        intros=("Remove an event from my calendar.", "Please delete this event.", "Cancel the event."),
    ),
    ToolSpec(
        name="list_events",
        family="calendar",
        description="List events between two dates.",
        schema=obj(
            {
                "calendar_id": CAL_ID,
                "range_start": {"type": "string", "format": "date"},
                "range_end": {"type": "string", "format": "date"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                "include_private": {"type": "boolean"},
            },
            ["calendar_id", "range_start", "range_end"],
        ),
        contract={
            "rules": [
                {"id": "range_order", "kind": "compare", "left": "/range_start", "op": "<=", "right": "/range_end", "as": "date"}
            ]
        },
        immutable=("/calendar_id",),
        sample=_sample_list,
        intros=("What is on my calendar?", "Show me my events.", "List the events in this range."),
        labels={"range_start": "from date", "range_end": "to date", "include_private": "include private events"},
        renamed=(("from_date", "range_start"),),
    ),
    ToolSpec(
        name="add_attendee",
        family="calendar",
        description="Invite one person to an event.",
        schema=obj(
            {
                "calendar_id": CAL_ID,
                "event_id": EVT_ID,
                "attendee": obj(
                    {
                        "email": EMAIL,
                        "role": {"enum": ["required", "optional"]},
                        "display_name": {"type": "string", "minLength": 1, "maxLength": 60},
                    },
                    ["email", "role"],
                ),
                "send_invite": {"type": "boolean"},
            },
            ["calendar_id", "event_id", "attendee"],
        ),
        immutable=("/calendar_id", "/event_id"),
        sample=_sample_attendee,
        intros=("Add someone to the meeting.", "Invite a colleague to this event.", "Please add an attendee."),
        labels={"send_invite": "send an invite"},
    ),
    ToolSpec(
        name="set_reminders",
        family="calendar",
        description="Replace the reminders of an event.",
        schema=obj(
            {
                "calendar_id": CAL_ID,
                "event_id": EVT_ID,
                "reminders": {"type": "array", "items": REMINDER, "minItems": 1, "maxItems": 3},
            },
            ["calendar_id", "event_id", "reminders"],
        ),
        contract={"rules": [{"id": "distinct_minutes", "kind": "unique", "array": "/reminders", "field": "/minutes"}]},
        immutable=("/calendar_id", "/event_id"),
        sample=_sample_reminders,
        intros=("Set reminders for this event.", "Remind me before the event.", "Please change the event reminders."),
    ),
)

_TOOL_NAMES = frozenset(spec.name for spec in TOOLS)
