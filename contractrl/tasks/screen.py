"""The paper's BFCL mechanism screen: a protocol check of the contract, not a learned result.

Seed 13 picks 64 real BFCL calls: 32 get a required argument removed, 32 get one argument's JSON
type changed. Each comes with one precomputed single-operation patch, replayed through the real
transition (parse -> mask -> apply -> verify). Every case must end schema-valid, equal to the target
object and accepted by BFCL's own checker in one attempt, with zero retries.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputFileError
from ..validators import Budgets, Code, RepairContract, Verifier
from ..validators.jsonvalue import json_equal
from .bfcl import BfclEntry, bfcl_accepts, ground_truth_call, load_bfcl_dir
from .corruptions import retype

SCREEN_NOTE = "protocol check: precomputed single-op patches replayed through the validator; not a learned repair result"


@dataclass(frozen=True)
class ScreenCase:
    entry_id: str
    function: str
    family: str
    candidate: dict[str, Any]
    target: dict[str, Any]
    patch: list[dict[str, Any]]


def build_screen(entries: list[BfclEntry], seed: int = 13, per_family: int = 32) -> list[ScreenCase]:
    rng = random.Random(seed)
    order = sorted(entries, key=lambda e: e.id)
    rng.shuffle(order)
    missing: list[ScreenCase] = []
    wrong: list[ScreenCase] = []
    for entry in order:
        if not entry.ground_truth:
            continue
        name, call = ground_truth_call(entry)
        params = entry.function(name).parameters
        verifier = Verifier.build(params)
        if len(missing) < per_family and len(missing) <= len(wrong):
            required = [k for k in params.get("required", []) if k in call]
            if required:
                key = rng.choice(required)
                candidate = {k: v for k, v in call.items() if k != key}
                if not verifier.verify(candidate).accepted:
                    missing.append(
                        ScreenCase(
                            entry.id,
                            name,
                            "missing_required",
                            candidate,
                            call,
                            [{"op": "add", "path": f"/{key}", "value": call[key]}],
                        )
                    )
                    continue
        if len(wrong) < per_family:
            keys = [k for k, v in call.items() if isinstance(v, (str, int, float, bool))]
            rng.shuffle(keys)
            for key in keys:
                candidate = {**call, key: retype(call[key])}
                report = verifier.verify(candidate)
                if (Code.WRONG_TYPE, f"/{key}") in [(e.code, e.pointer) for e in report.errors]:
                    wrong.append(
                        ScreenCase(
                            entry.id,
                            name,
                            "wrong_type",
                            candidate,
                            call,
                            [{"op": "replace", "path": f"/{key}", "value": call[key]}],
                        )
                    )
                    break
        if len(missing) == per_family and len(wrong) == per_family:
            break
    if len(missing) < per_family or len(wrong) < per_family:
        raise InputFileError(f"BFCL data yields only {len(missing)} missing_required and {len(wrong)} wrong_type screen cases")
    return missing + wrong


def run_screen(bfcl_dir: str | Path, seed: int = 13, per_family: int = 32) -> dict[str, Any]:
    entries = load_bfcl_dir(bfcl_dir)
    by_id = {e.id: e for e in entries}
    cases = build_screen(entries, seed, per_family)
    schema_valid = object_match = bfcl_ok = attempts = retries = unsafe = 0
    for case in cases:
        entry = by_id[case.entry_id]
        params = entry.function(case.function).parameters
        contract = RepairContract(Verifier.build(params), Budgets(max_attempts=2, max_ops=2))
        state = contract.initial_state(case.candidate)
        result = contract.step(state, json.dumps(case.patch))
        used = result.state.attempts_used
        attempts += used
        retries += used - 1
        accepted = result.accepted_object
        unsafe += accepted is not None and not Verifier.build(params, backend="python").verify(accepted).accepted
        schema_valid += accepted is not None
        object_match += accepted is not None and json_equal(accepted, case.target)
        possible = entry.ground_truth[0][case.function]
        bfcl_ok += accepted is not None and bfcl_accepts(accepted, possible, params)[0]
    return {
        "cases": len(cases),
        "missing_required": sum(c.family == "missing_required" for c in cases),
        "wrong_type": sum(c.family == "wrong_type" for c in cases),
        "schema_valid": schema_valid,
        "object_match": object_match,
        "bfcl_accepted": bfcl_ok,
        "attempts": attempts,
        "attempts_per_case": attempts / len(cases),
        "retries": retries,
        "unsafe_dispatches": unsafe,
        "seed": seed,
        "note": SCREEN_NOTE,
    }
