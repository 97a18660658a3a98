"""The paper's BFCL mechanism screen: a protocol check of the contract, not a learned result.

Seed 13 picks 64 real BFCL calls: 32 get a required argument removed, 32 get one argument's JSON
type changed. Each comes with one precomputed single-operation patch, replayed through the real
transition (parse -> mask -> apply -> verify). Every case must end schema-valid, equal to the target
object and accepted by BFCL's own checker in one attempt, with zero retries.

Only calls their own schema accepts are screened: a ground truth the schema refuses (BFCL has some)
can never end schema-valid, so replaying it measures the data, not the protocol. Those calls are
passed over where the seeded order meets them, and named in the result under ``skipped``; a case
that fails anyway is named under ``failures``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ContractRLError, InputFileError
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


def build_screen(entries: list[BfclEntry], seed: int = 13, per_family: int = 32) -> tuple[list[ScreenCase], dict[str, list[str]]]:
    """The screen's cases, and the ids of the calls passed over, by reason.

    The seeded order is that of every entry, so passing over a call never reorders the others.
    """
    rng = random.Random(seed)
    order = sorted(entries, key=lambda e: e.id)
    rng.shuffle(order)
    missing: list[ScreenCase] = []
    wrong: list[ScreenCase] = []
    skipped: dict[str, list[str]] = {}
    for entry in order:
        if not entry.ground_truth:
            skipped.setdefault("no possible answer", []).append(entry.id)
            continue
        try:
            name, call = ground_truth_call(entry)
        except KeyError:
            skipped.setdefault("ground truth names no listed function", []).append(entry.id)
            continue
        params = entry.function(name).parameters
        try:
            verifier = Verifier.build(params)
        except ContractRLError:
            skipped.setdefault("schema does not compile strictly", []).append(entry.id)
            continue
        if not verifier.verify(call).accepted:
            skipped.setdefault("ground truth refused by its own schema", []).append(entry.id)
            continue
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
    return missing + wrong, skipped


def run_screen(bfcl_dir: str | Path, seed: int = 13, per_family: int = 32) -> dict[str, Any]:
    entries = load_bfcl_dir(bfcl_dir)
    by_id = {e.id: e for e in entries}
    cases, skipped = build_screen(entries, seed, per_family)
    schema_valid = object_match = bfcl_ok = attempts = retries = unsafe = 0
    failures: list[dict[str, Any]] = []
    for case in cases:
        entry = by_id[case.entry_id]
        params = entry.function(case.function).parameters
        contract = RepairContract(Verifier.build(params), Budgets())
        state = contract.initial_state(case.candidate)
        result = contract.step(state, json.dumps(case.patch))
        used = result.state.attempts_used
        attempts += used
        retries += used - 1
        accepted = result.accepted_object
        reference_refuses = accepted is not None and not Verifier.build(params, backend="python").verify(accepted).accepted
        unsafe += reference_refuses
        schema_valid += accepted is not None
        object_match += accepted is not None and json_equal(accepted, case.target)
        possible = entry.ground_truth[0][case.function]
        accepted_by_bfcl, why = bfcl_accepts(accepted, possible, params) if accepted is not None else (False, "")
        bfcl_ok += accepted_by_bfcl
        failure = _failure(case, result.outcome.value, accepted, accepted_by_bfcl, why, used, reference_refuses)
        if failure is not None:
            failures.append(failure)
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
        "skipped": skipped,
        "failures": failures,
        "note": SCREEN_NOTE,
    }


def _failure(
    case: ScreenCase, outcome: str, accepted: Any, bfcl_ok: bool, why: str, attempts: int, unsafe: bool
) -> dict[str, Any] | None:
    """What went wrong with one case, naming it; None when it passed every check."""
    if accepted is None:
        reason = f"not accepted: {outcome}"
    elif unsafe:
        reason = "dispatched an object the python backend refuses"
    elif not json_equal(accepted, case.target):
        reason = "accepted object differs from the target"
    elif not bfcl_ok:
        reason = f"BFCL's checker refuses it: {why}"
    elif attempts != 1:
        reason = f"took {attempts} attempts"
    else:
        return None
    return {"case": case.entry_id, "function": case.function, "family": case.family, "reason": reason}
