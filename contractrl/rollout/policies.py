"""Policies behind one batched interface: observations in, generated action texts out.

The non-learned references live here: oracle replay (precomputed attempts; a mechanism check
whose patches the *caller* supplies, so this module never opens the offline half) and a
schema-guided heuristic repairer that every comparison table includes as a baseline.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import get_close_matches
from typing import Any, Protocol

from ..errors import ConfigError
from ..tasks.arms import DEFAULT_ARM, arm_spec
from ..tasks.cases import ABSTAIN, PublicCase
from ..tasks.catalog import all_tools
from ..validators import PublicState
from ..validators.apply import apply_patch
from ..validators.jsonvalue import canonical_json, json_equal
from ..validators.patch import PatchAction, parse_action
from ..validators.pointer import format_pointer, parse_pointer, resolve


@dataclass(frozen=True)
class Observation:
    """What a policy sees of one episode: the public case, the current public state and the arm it
    answers as (the one place a policy learns its arm: prompt, answer form and grammar follow it)."""

    case: PublicCase
    state: PublicState
    sample: int
    arm: str = DEFAULT_ARM


@dataclass(frozen=True)
class Generation:
    """One generated action: text plus the generator's own accounting."""

    text: str
    finish_reason: str = "stop"
    generated_tokens: int = 0
    prompt_tokens: int = 0
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    prompt_ids: tuple[int, ...] = ()  # what the model was conditioned on (for the policy-gradient pass)
    # wall seconds of generating this answer: its share of the batched call that produced it
    gen_s: float = 0.0
    # candidate answers checked on the public contract before this one was committed (the shield)
    probes: int = 0


class Policy(Protocol):
    name: str

    def generate(self, observations: Sequence[Observation]) -> list[Generation]: ...


class ReplayPolicy:
    """Replays precomputed attempt texts per case (attempt t gets the t-th text, then ABSTAIN)."""

    name = "replay"

    def __init__(self, attempts: dict[str, list[str]]) -> None:
        self.attempts = attempts

    def generate(self, observations: Sequence[Observation]) -> list[Generation]:
        out = []
        for obs in observations:
            texts = self.attempts.get(obs.case.case_id)
            if texts is None:
                raise ConfigError(f"replay policy has no attempts for case {obs.case.case_id}")
            turn = len(obs.state.history)
            out.append(Generation(texts[turn] if turn < len(texts) else ABSTAIN))
        return out


_VALUE_AFTER = ("{label}: ", "set the {label} to ", "the {label} should be ", "{label} = ")
_CLAUSE_START = ("; ", ". ", "- ", "? ", "! ")
_DECODER = json.JSONDecoder()


def argument_labels(case: PublicCase) -> dict[str, str]:
    """How the request names each top-level argument (the catalog's labels, else the key in words)."""
    for spec in all_tools():
        if spec.name == case.tool:
            return {key: spec.label(key) for key in case.schema.get("properties", {})}
    return {key: key.replace("_", " ") for key in case.schema.get("properties", {})}


def _decode_at(text: str, index: int) -> tuple[Any, int] | None:
    try:
        return _DECODER.raw_decode(text, index)
    except json.JSONDecodeError:
        return None


def request_values(request: str, labels: dict[str, str]) -> dict[str, Any]:
    """Argument values stated in a request, by argument name (only clearly delimited statements)."""
    found: dict[str, Any] = {}
    for key, label in labels.items():
        for template in _VALUE_AFTER:
            prefix = template.format(label=label)
            for match in re.finditer(re.escape(prefix), request):
                start = match.start()
                clause_initial = template.startswith("{label}") and (start == 0 or request[start - 2 : start] in _CLAUSE_START)
                if template.startswith("{label}") and not clause_initial:
                    continue
                decoded = _decode_at(request, match.end())
                if decoded is not None:
                    found[key] = decoded[0]
                    break
            if key in found:
                break
        if key in found:
            continue
        suffix = f" as the {label}"
        for match in re.finditer(r"use ", request):
            decoded = _decode_at(request, match.end())
            if decoded is not None and request.startswith(suffix, decoded[1]):
                after = decoded[1] + len(suffix)
                if after == len(request) or request[after] in ";.\n":
                    found[key] = decoded[0]
                    break
    return found


def _coerce(value: Any, expected: str) -> Any:
    """A same-information value of the expected JSON type, or None."""
    try:
        if "integer" in expected and isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            return int(value)
        if "number" in expected and isinstance(value, str):
            return float(value) if "." in value else int(value)
        if "boolean" in expected and isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        if "string" in expected and isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
            return value[0]
        if "array" in expected and isinstance(value, str):
            return [v.strip() for v in value.split(",")]
        if "object" in expected and isinstance(value, str):
            parsed = json.loads(value)
            return parsed if isinstance(parsed, dict) else None
    except (ValueError, json.JSONDecodeError):
        return None
    return None


class HeuristicPolicy:
    """Schema-guided repair without learning: read the value from the request, else coerce the
    offending value, else pick the nearest enum member; ABSTAIN when nothing fits or an immutable
    path is at fault."""

    name = "heuristic"

    def generate(self, observations: Sequence[Observation]) -> list[Generation]:
        return [Generation(self.respond(obs)) for obs in observations]

    def respond(self, obs: Observation) -> str:
        """A patch for the patch arms; for the whole-object arms, the candidate with that patch applied."""
        text = self.act(obs.case, obs.state)
        if not arm_spec(obs.arm).whole_object or text == ABSTAIN:
            return text
        action = parse_action(text, max_ops=len(json.loads(text)))
        applied = apply_patch(obs.state.candidate, action.ops) if isinstance(action, PatchAction) else None
        return canonical_json(applied.document) if applied is not None and applied.ok else ABSTAIN

    def act(self, case: PublicCase, state: PublicState) -> str:
        immutable = tuple(parse_pointer(p) for p in case.immutable)
        stated = request_values(case.request, argument_labels(case))
        ops: dict[str, dict[str, Any]] = {}
        for error in state.report.errors:
            try:
                tokens = parse_pointer(error.pointer)
            except ValueError:
                return ABSTAIN
            if not tokens:  # feedback without a location: fix what disagrees with the request
                ops.update(self._disagreements(state.candidate, stated, immutable, case.schema))
                continue
            if any(tokens[: len(i)] == i for i in immutable):
                return ABSTAIN
            op = self._fix(error.code.value, tokens, error.expected, state.candidate, stated, case.schema)
            if op is None:
                return ABSTAIN
            ops.setdefault(op["path"], op)
        chosen = [ops[p] for p in sorted(ops)][: state.ops_left]
        if not chosen or len(ops) > state.ops_left:
            return ABSTAIN
        return json.dumps(chosen)

    @staticmethod
    def _disagreements(
        candidate: Any, stated: dict[str, Any], immutable: tuple[tuple[str, ...], ...], schema: dict[str, Any]
    ) -> dict[str, dict[str, Any]]:
        ops = {}
        for key, value in stated.items():
            if (key,) in immutable or key not in schema.get("properties", {}) or not isinstance(candidate, dict):
                continue
            path = format_pointer((key,))
            if key not in candidate:
                ops[path] = {"op": "add", "path": path, "value": value}
            elif not json_equal(candidate[key], value):
                ops[path] = {"op": "replace", "path": path, "value": value}
        return ops

    @staticmethod
    def _fix(
        code: str, tokens: tuple[str, ...], expected: str, candidate: Any, stated: dict[str, Any], schema: dict[str, Any]
    ) -> dict[str, Any] | None:
        top = tokens[0]
        top_path = format_pointer((top,))
        props = schema.get("properties", {})
        if code == "additional_property" and len(tokens) == 1 and top not in props:
            missing = [k for k in schema.get("required", []) if k not in candidate]
            if len(missing) == 1:
                return {"op": "move", "from": top_path, "path": format_pointer((missing[0],))}
            return {"op": "remove", "path": top_path}
        if top in stated and top in props:
            op = "replace" if isinstance(candidate, dict) and top in candidate else "add"
            return {"op": op, "path": top_path, "value": stated[top]}
        current = resolve(candidate, tokens, None)
        path = format_pointer(tokens)
        if code == "wrong_type" and current is not None:
            value = _coerce(current, expected)
            return None if value is None else {"op": "replace", "path": path, "value": value}
        if code == "enum_mismatch" and isinstance(current, str) and expected.startswith("one of "):
            try:
                options = [o for o in json.loads(expected[len("one of ") :]) if isinstance(o, str)]
            except json.JSONDecodeError:
                return None
            lowered = {o.lower(): o for o in options}
            match = lowered.get(current.lower()) or next(iter(get_close_matches(current, options, n=1, cutoff=0.6)), None)
            return None if match is None else {"op": "replace", "path": path, "value": match}
        return None
