"""Natural failures: the calls a model really made on BFCL, read from BFCL's own result and score files.

The files (``BFCL_v4_<category>_result.json`` from ``bfcl generate``, ``_score.json`` from ``bfcl
evaluate``) are found, read and decoded by :mod:`.bfcl_results`. This is what a user brings: their
own model's BFCL run. Each call is paired with the ground-truth call of the same function (the
k-th call of a function with its k-th ground-truth call) and checked by the public verifier. The
calls it rejects (wrong types, missing required arguments, enum violations, renamed keys such as
``from`` for ``_from``) are kept as repair cases; the calls it accepts are skipped and counted,
since no repair policy is ever asked about them. The share of BFCL's failures the verifier can see
at all is reported beside them (:class:`NaturalCounts`).

A Python function refuses a keyword it does not declare, and so does BFCL's checker; the root of
every schema is therefore closed (``additionalProperties: false``) unless it says otherwise, so a
renamed key is an error the verifier reports. Semantic success is BFCL's acceptance over every
possible answer (:func:`~.bfcl.bfcl_accepts`), as for the BFCL source; the target kept for the
gold patch keeps every value of the model's call that BFCL already accepts.

The ``live_*`` categories are held out: ``bfcl-results:DIR`` reads only the non-live result files
under ``DIR`` (the live ones are counted as skipped), and ``bfcl-results-live:DIR`` reads only the
live ones and is refused for training (:func:`~.bfcl_wheel.check_trainable`).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ContractRLError, InputFileError, SchemaCompileError
from ..validators import Verifier
from ..validators.jsonvalue import canonical_json
from ..validators.pointer import escape_token
from .bfcl import BfclEntry, bfcl_accepts, ground_truth_call, load_bfcl
from .bfcl_results import DecodeError, decode_calls, find_result_files, read_results, read_scores
from .bfcl_wheel import CATEGORIES, category_dir
from .cases import Case, OfflineCase, PublicCase, cluster_key

RESULTS = "bfcl-results"
RESULTS_LIVE = "bfcl-results-live"
_SCHEMA_CODES_BY_FAMILY = {
    "missing_required": "missing_required",
    "wrong_type": "wrong_type",
}
ACCEPTED = "verifier accepts the call"


@dataclass(frozen=True)
class NaturalFailure:
    """One call a model made that the public verifier rejects, with what scoring needs."""

    entry_id: str
    category: str
    position: int  # which call of the model's answer (0-based)
    calls: int  # how many calls the answer had
    function: str
    schema: dict[str, Any]  # strict, normalised, root closed
    schema_sha256: str
    question: str
    candidate: dict[str, Any]
    target: dict[str, Any]
    possible: dict[str, Any]
    report: dict[str, Any]
    family: str
    codes: tuple[str, ...]
    bfcl_error: str  # BFCL's error_type for the whole answer ("" where BFCL accepted it)

    @property
    def key(self) -> tuple[str, int]:
        return self.entry_id, self.position


@dataclass
class NaturalCounts:
    """What a run's files gave: answers read, BFCL's failures, and how many of those the verifier sees."""

    answers: int = 0
    bfcl_failed: int = 0  # answers BFCL refuses
    verifier_visible: int = 0  # of those, answers with at least one call the verifier rejects
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str, count: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + count

    def to_dict(self) -> dict[str, Any]:
        share = self.verifier_visible / self.bfcl_failed if self.bfcl_failed else None
        return {
            "answers": self.answers,
            "bfcl_failed": self.bfcl_failed,
            "verifier_visible": self.verifier_visible,
            "visible_share": share,
        }


# --- verifying and pairing -----------------------------------------------------------------------


def closed(parameters: dict[str, Any]) -> dict[str, Any]:
    """The parameters schema with its root closed: a function refuses a keyword it does not declare."""
    if "properties" in parameters and "additionalProperties" not in parameters:
        return {**parameters, "additionalProperties": False}
    return parameters


def classify(errors: list[dict[str, Any]]) -> str:
    """The corruption family a natural failure is filed under, from the verifier's report.

    One error at a top-level argument is ``missing_required``, ``wrong_type`` or (any other
    constraint, an enum or a bound) ``constraint_violation``; one error deeper is ``nested_field``
    or, inside an array, ``array_element``; several errors (a renamed key is an unknown key plus
    a missing one) are ``multi_field``.
    """
    if len(errors) != 1:
        return "multi_field"
    code, pointer = str(errors[0].get("code")), str(errors[0].get("pointer", ""))
    tokens = pointer.split("/")[1:]
    if len(tokens) >= 2:
        return "array_element" if any(t.isdigit() for t in tokens) else "nested_field"
    if code in _SCHEMA_CODES_BY_FAMILY:
        return _SCHEMA_CODES_BY_FAMILY[code]
    if code == "additional_property":
        return "multi_field"  # an unknown key alone: the repair removes it, and may add another
    return "constraint_violation"


def repair_target(
    candidate: dict[str, Any], concrete: dict[str, Any], possible: dict[str, Any], schema: dict[str, Any]
) -> dict[str, Any]:
    """The nearest call BFCL accepts: the model's values where BFCL already accepts them, the
    first acceptable value where it does not, an optional argument the model left out still left
    out, and no argument outside the possible answer."""
    required = schema.get("required", [])
    target: dict[str, Any] = {}
    for name, value in candidate.items():
        if name in possible and bfcl_accepts({name: value}, {name: possible[name]}, schema)[0]:
            target[name] = value
    for name, value in concrete.items():
        options = possible.get(name)
        omittable = "" in (options if isinstance(options, list) else [options]) and name not in required
        if name not in target and not (omittable and name not in candidate):
            target[name] = value
    return target


def gold_patch(candidate: dict[str, Any], target: dict[str, Any]) -> list[dict[str, Any]]:
    """Top-level operations from the model's call to the target, in path order."""
    ops = []
    for name in sorted(set(candidate) | set(target)):
        path = "/" + escape_token(name)
        if name not in target:
            ops.append({"op": "remove", "path": path})
        elif name not in candidate:
            ops.append({"op": "add", "path": path, "value": target[name]})
        elif canonical_json(candidate[name]) != canonical_json(target[name]):
            ops.append({"op": "replace", "path": path, "value": target[name]})
    return ops


def _verifier(parameters: dict[str, Any], cache: dict[str, Verifier]) -> Verifier:
    key = canonical_json(parameters)
    if key not in cache:
        strict = Verifier.build(closed(parameters), dialect="bfcl")
        cache[key] = Verifier.build(strict.schema.normalized.schema)  # as rollout builds it from the case
    return cache[key]


def _object_schema(verifier: Verifier) -> dict[str, Any]:
    schema = verifier.schema.normalized.schema
    if not isinstance(schema, dict):  # a boolean schema: no arguments to check or repair
        raise SchemaCompileError("a function's parameters must be an object schema")
    return schema


def _answer_fails(entry: BfclEntry, calls: list[tuple[str, dict[str, Any]]], verifiers: dict[str, Verifier]) -> str:
    """BFCL's verdict where no score file is given: an error type, or "" when accepted.

    Calls are matched to ground-truth calls of the same function in order (BFCL's parallel
    checker matches in any order; an answer it accepts in another order is counted as failed).
    """
    if len(calls) != len(entry.ground_truth):
        return "count_mismatch"
    for (name, args), answer in zip(calls, _pairs(entry, calls), strict=True):
        if answer is None:
            return "wrong_function"
        try:
            schema = _object_schema(_verifier(entry.function(name).parameters, verifiers))
        except (KeyError, ContractRLError):
            return "wrong_function"
        if not bfcl_accepts(args, entry.ground_truth[answer][name], schema)[0]:
            return "value_error"
    return ""


def _listed_name(entry: BfclEntry, name: str) -> str:
    """The listed function a call names: function-calling models get ``math.factorial`` as
    ``math_factorial`` (tool names cannot hold dots), and BFCL's checker maps it back."""
    if any(f.name == name for f in entry.functions):
        return name
    return next((f.name for f in entry.functions if f.name.replace(".", "_") == name), name)


def _pairs(entry: BfclEntry, calls: list[tuple[str, dict[str, Any]]]) -> list[int | None]:
    """The ground-truth index each call is paired with: the k-th call of a function with its k-th answer."""
    used: dict[str, int] = {}
    out: list[int | None] = []
    for name, _ in calls:
        indices = [i for i, gt in enumerate(entry.ground_truth) if name in gt]
        k = used.get(name, 0)
        used[name] = k + 1
        out.append(indices[k] if k < len(indices) else None)
    return out


def natural_failures(directory: str | Path, live: bool = False) -> tuple[list[NaturalFailure], NaturalCounts]:
    """Every verifier-rejected call of one model's BFCL run under ``directory``, and the counts."""
    counts = NaturalCounts()
    failures: list[NaturalFailure] = []
    verifiers: dict[str, Verifier] = {}
    for category, result_path, score_path in find_result_files(directory, live, counts.skipped):
        data = category_dir(category)
        question_file = data / CATEGORIES[category]
        entries = {e.id: e for e in load_bfcl(question_file, data / "possible_answer" / CATEGORIES[category])}
        refused = read_scores(score_path) if score_path is not None else None
        answers = read_results(result_path)
        if refused is not None and set(refused) - {i for i, _ in answers}:
            raise InputFileError(f"{score_path} scores ids its result file {result_path} lacks: not the same run")
        for entry_id, result in answers:
            counts.answers += 1
            entry = entries.get(entry_id)
            if entry is None or not entry.ground_truth:
                counts.skip("id not in the BFCL data with a possible answer")
                continue
            verdict = refused.get(entry_id, "") if refused is not None else None
            try:
                calls = decode_calls(result)
            except DecodeError:
                counts.skip("answer not decodable as calls")
                counts.bfcl_failed += 1 if verdict is None or verdict else 0
                continue
            calls = [(_listed_name(entry, name), args) for name, args in calls]
            if verdict is None:
                verdict = _answer_fails(entry, calls, verifiers)
            kept = _entry_failures(category, entry, calls, verdict, verifiers, counts)
            failures.extend(kept)
            if verdict:
                counts.bfcl_failed += 1
                counts.verifier_visible += bool(kept)
    return failures, counts


def _entry_failures(
    category: str,
    entry: BfclEntry,
    calls: list[tuple[str, dict[str, Any]]],
    verdict: str,
    verifiers: dict[str, Verifier],
    counts: NaturalCounts,
) -> list[NaturalFailure]:
    out = []
    for position, ((name, args), answer) in enumerate(zip(calls, _pairs(entry, calls), strict=True)):
        try:
            function = entry.function(name)
        except KeyError:
            counts.skip("function not listed for the question")
            continue
        try:
            verifier = _verifier(function.parameters, verifiers)
            schema = _object_schema(verifier)
        except ContractRLError:
            counts.skip("schema does not compile strictly")
            continue
        report = verifier.verify(args)
        if report.accepted:
            counts.skip(ACCEPTED)
            continue
        if answer is None:
            counts.skip("function not in the possible answer")
            continue
        possible = entry.ground_truth[answer][name]
        _, concrete = ground_truth_call(entry, answer)
        target = repair_target(args, concrete, possible, schema)
        if not (verifier.verify(target).accepted and bfcl_accepts(target, possible, schema)[0]):
            target = concrete
        if not verifier.verify(target).accepted:
            counts.skip("ground truth refused by its own schema")
            continue
        question = entry.user_text
        if len(calls) > 1:
            question += f"\n\n(Repair call {position + 1} of {len(calls)}: {name}.)"
        errors = report.to_dict()["errors"]
        out.append(
            NaturalFailure(
                entry_id=entry.id,
                category=category,
                position=position,
                calls=len(calls),
                function=name,
                schema=schema,
                schema_sha256=verifier.schema.sha256,
                question=question,
                candidate=args,
                target=target,
                possible=possible,
                report=report.to_dict(),
                family=classify(errors),
                codes=tuple(str(e["code"]) for e in errors),
                bfcl_error=verdict,
            )
        )
    return out


# --- cases ---------------------------------------------------------------------------------------


def failure_case(failure: NaturalFailure, max_attempts: int, max_ops: int) -> Case:
    """One natural failure as a repair case; its id depends on the call, not on the seed drawing it."""
    patch = gold_patch(failure.candidate, failure.target)
    digest = hashlib.sha256(
        canonical_json(["natural", failure.entry_id, failure.position, failure.function, failure.candidate]).encode()
    ).hexdigest()
    case_id = "n" + digest[:15]
    public = PublicCase(
        case_id=case_id,
        family=failure.family,
        tool=failure.function,
        tool_family="bfcl",  # its sandbox records the call (catalog.IMPORTED_TOOL_FAMILIES)
        schema=failure.schema,
        schema_sha256=failure.schema_sha256,
        schema_version=1,
        contract={"rules": []},
        request=failure.question,
        candidate=failure.candidate,
        report=failure.report,
        immutable=(),
        max_attempts=max_attempts,
        max_ops=max(max_ops, len(patch)),
        world_seed=int(digest[16:23], 16),
    )

    offline = OfflineCase(
        case_id=case_id,
        target=failure.target,
        target_patch=patch,
        expected={"abstain": False, "bfcl_possible": failure.possible},
        cluster=cluster_key(failure.function, failure.target, failure.candidate),
        corruption={
            "family": failure.family,
            "natural": True,
            "bfcl_id": failure.entry_id,
            "bfcl_category": failure.category,
            "bfcl_error": failure.bfcl_error,
            "call": [failure.position, failure.calls],
            "codes": list(failure.codes),
        },
    )
    return Case(public, offline)


class NaturalSource:
    """A model's BFCL run as a case source: its verifier-rejected calls, taken in a seeded order."""

    def __init__(self, directory: str | Path, live: bool = False) -> None:
        self.name = f"{RESULTS_LIVE if live else RESULTS}:{directory}"
        self.failures, self.counts = natural_failures(directory, live)
        if not self.failures:
            raise ConfigError(
                f"no natural failures in {self.name}: the verifier rejects none of its calls ({self.counts.skipped})"
            )

    @property
    def skipped(self) -> dict[str, int]:
        return self.counts.skipped

    def families(self) -> tuple[str, ...]:
        from .corruptions import CORRUPTION_FAMILIES

        present = {f.family for f in self.failures}
        return tuple(f for f in CORRUPTION_FAMILIES if f in present)

    def ordered(self, seed: int, families: tuple[str, ...]) -> list[NaturalFailure]:
        """The failures of ``families`` in the seed's order (the data's order never matters)."""
        pool = sorted((f for f in self.failures if f.family in families), key=lambda f: f.key)
        random.Random(f"natural:{seed}").shuffle(pool)
        return pool

    def report(self) -> dict[str, Any]:
        return {"used": len(self.failures), "skipped": dict(sorted(self.skipped.items())), "bfcl": self.counts.to_dict()}


__all__ = [
    "ACCEPTED",
    "RESULTS",
    "RESULTS_LIVE",
    "NaturalCounts",
    "NaturalFailure",
    "NaturalSource",
    "classify",
    "closed",
    "failure_case",
    "gold_patch",
    "natural_failures",
    "repair_target",
]
