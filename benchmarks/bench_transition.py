"""Full CR-MDP transitions per second against a naive stack, in one run.

ours:  RepairContract.step = strict parse -> action mask -> copy-on-write apply -> schema +
       cross-field validation (jsonschema-rs) -> collateral edits -> next public state.
naive: json.loads + jsonpatch.apply_patch + python-jsonschema Draft202012Validator.iter_errors
       (validator compiled once, as a fair baseline).
floor: the calls any Python-driven transition makes and nothing else: json.loads, a copy of the
       containers on the written path, one jsonschema-rs verdict. No strictness, no mask, no report,
       no records: what is left of a transition once its own logic costs nothing.

The workload is BFCL-sized tool calls (5-12 arguments, one nested object or array) with a mix of
accepted repairs, still-invalid repairs and masked actions. Runs on one core in well under 40 s.

    python benchmarks/bench_transition.py --json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from typing import Any

import jsonpatch
import jsonschema
import jsonschema_rs

from contractrl.validators import Budgets, RepairContract, Verifier

SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 1},
            "country": {"type": "string", "pattern": "^[A-Z]{2}$"},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "units": {"enum": ["metric", "imperial"]},
            "include_hourly": {"type": "boolean"},
            "fields": {"type": "array", "items": {"enum": ["temp", "wind", "rain", "uv"]}, "maxItems": 4},
        },
        "required": ["city", "days"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "table": {"type": "string"},
            "columns": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "conditions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "field": {"type": "string"},
                        "operation": {"enum": ["<", ">", "=", ">=", "<="]},
                        "value": {"type": "string"},
                    },
                    "required": ["field", "operation", "value"],
                },
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
            "order_by": {"type": "string"},
            "descending": {"type": "boolean"},
        },
        "required": ["table", "columns"],
    },
    {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 80},
            "start": {"type": "string", "format": "date-time"},
            "end": {"type": "string", "format": "date-time"},
            "attendees": {"type": "array", "items": {"type": "string", "format": "email"}, "maxItems": 10},
            "location": {"type": "object", "properties": {"room": {"type": "string"}, "floor": {"type": "integer"}}},
            "reminder_minutes": {"type": "integer", "minimum": 0},
            "visibility": {"enum": ["public", "private"]},
            "calendar_id": {"type": "string"},
        },
        "required": ["title", "start", "end", "calendar_id"],
        "additionalProperties": False,
    },
]

# (candidate, patch) pairs per schema: accepted repair, still-invalid repair, masked action.
WORKLOAD: list[tuple[int, dict[str, Any], list[dict[str, Any]]]] = [
    (0, {"city": "Paris", "country": "FR", "days": "3", "units": "metric", "include_hourly": False, "fields": ["temp"]},
     [{"op": "replace", "path": "/days", "value": 3}]),
    (0, {"city": "Paris", "country": "fr", "days": 30, "units": "metric"}, [{"op": "replace", "path": "/days", "value": 3}]),
    (1, {"table": "users", "columns": ["name", "age"], "limit": 10,
         "conditions": [{"field": "age", "operation": "~", "value": "25"}]},
     [{"op": "replace", "path": "/conditions/0/operation", "value": ">"}]),
    (1, {"table": "users", "columns": ["name"], "limit": "10", "descending": True},
     [{"op": "replace", "path": "/missing", "value": 1}]),
    (2, {"title": "Review", "start": "2026-12-01T10:00:00Z", "end": "2026-12-01T11:00:00Z", "attendees": ["a@example.com"],
         "location": {"room": "B2", "floor": "3"}, "reminder_minutes": 10, "visibility": "private", "calendar_id": "c1"},
     [{"op": "replace", "path": "/location/floor", "value": 3}]),
    (2, {"title": "Review", "start": "2026-12-01T10:00:00Z", "end": "2026-12-01T11:00:00Z", "calendar_id": "c1"},
     [{"op": "add", "path": "/visibility", "value": "team"}]),
]  # fmt: skip


def _ours() -> Callable[[], int]:
    contracts = [RepairContract(Verifier.build(s, backend="rs"), Budgets(), immutable=()) for s in SCHEMAS]
    items = [(contracts[i], contracts[i].initial_state(c), json.dumps(p)) for i, c, p in WORKLOAD]

    def run() -> int:
        accepted = 0
        for contract, state, text in items:
            accepted += contract.step(state, text).accepted_object is not None
        return accepted

    return run


def _naive() -> Callable[[], int]:
    validators = [
        jsonschema.Draft202012Validator(s, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER) for s in SCHEMAS
    ]
    items = [(validators[i], c, json.dumps(p)) for i, c, p in WORKLOAD]

    def run() -> int:
        accepted = 0
        for validator, candidate, text in items:
            try:
                patched = jsonpatch.apply_patch(candidate, json.loads(text))
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
                continue
            accepted += not list(validator.iter_errors(patched))
        return accepted

    return run


def _floor_apply(document: dict[str, Any], op: dict[str, Any]) -> dict[str, Any]:
    """``op`` (add/replace) written into a copy of the containers on its path; no checks at all."""
    tokens = op["path"].split("/")[1:]
    root = node = dict(document)
    for token in tokens[:-1]:
        child = node[token] if type(node) is dict else node[int(token)]
        child = dict(child) if type(child) is dict else list(child)
        if type(node) is dict:
            node[token] = child
        else:
            node[int(token)] = child
        node = child
    if type(node) is dict:
        node[tokens[-1]] = op["value"]
    else:
        node[int(tokens[-1])] = op["value"]
    return root


def _floor() -> Callable[[], int]:
    validators = [jsonschema_rs.validator_for(s, validate_formats=True, ignore_unknown_formats=False) for s in SCHEMAS]
    items = [(validators[i], c, json.dumps(p)) for i, c, p in WORKLOAD]

    def run() -> int:
        accepted = 0
        for validator, candidate, text in items:
            patched = candidate
            for op in json.loads(text):
                patched = _floor_apply(patched, op)
            accepted += validator.is_valid(patched)
        return accepted

    return run


def _rate(fn: Callable[[], int], seconds: float) -> tuple[float, int]:
    fn()  # warm caches
    n = 0
    accepted = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        accepted = fn()
        n += len(WORKLOAD)
    return n / elapsed, accepted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--seconds", type=float, default=8.0, help="measuring time per stack (default 8)")
    args = parser.parse_args()
    ours_rate, ours_ok = _rate(_ours(), args.seconds)
    naive_rate, naive_ok = _rate(_naive(), args.seconds)
    floor_rate, floor_ok = _rate(_floor(), args.seconds)
    if not ours_ok == naive_ok == floor_ok:
        raise SystemExit(f"stacks disagree on the workload: ours accepted {ours_ok}, naive {naive_ok}, floor {floor_ok}")
    result = {
        "ours_per_s": round(ours_rate),
        "naive_per_s": round(naive_rate),
        "floor_per_s": round(floor_rate),
        "floor_ratio_vs_naive": round(floor_rate / naive_rate, 2),
        "ratio_vs_naive": round(ours_rate / naive_rate, 2),
        "accepted_per_round": ours_ok,
        "workload": len(WORKLOAD),
        "python": platform.python_version(),
    }
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
