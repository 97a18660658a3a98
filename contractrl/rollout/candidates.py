"""The enumerated candidates of one decision: ABSTAIN and small patches built from the public report.

The RLlib selector chooses one of these, and the shielded language-model policy scores them beside
its own proposals (:mod:`contractrl.rollout.shield`). Each candidate is built only from what a
language-model policy is shown (the request, the schema, the failed call, the report and its
pointers, the immutable paths, the budgets), never from the case's family label or its offline
half, so a selector that wins has won on the same evidence. Sources, in the order they are listed:

- ``request``: the value the request states for the argument at (or above) a reported pointer;
- ``mention``: for a missing argument the request names no value for, the numbers and quoted
  spans it states in its own words that fit the argument's declared type and that the call does
  not already hold, never a ``[not given]`` marker nor a quoted JSON key ("the multiplication of
  3 and 2" with ``a`` = 3 offers ``b`` = 2; "the 'R vs Adams' legal case" offers ``case_id`` =
  "R vs Adams");
- ``disagree``: an argument whose value in the failed call differs from what the request states,
  wherever the report points (the report may point at the wrong place);
- ``enum``/``const``/``default``: the schema's own values at the pointer: the one member the
  current value means alone (its type conversion, ``"true"`` for true; or its spelling in another
  case, with other word separators, wrapped in a one-element array, or misspelt,
  :data:`NEAR_MISS`); else the members the request names, then those closest to the current value;
- ``convert``: a type conversion of the current value (``"3"`` -> 3, ``3`` -> ``"3"``, ``"true"`` ->
  true, ``[x]`` -> x, x -> ``[x]``, ``{"k": x}`` -> x);
- ``remove``/``rename``: an unexpected property removed, or moved to a missing required name, or,
  when it is an object holding the enclosing object's own properties (arguments wrapped one level
  too deep, ``{"params": {"x": 1}}``), its members moved up and the wrapper removed;
- ``combined``: the first candidate of each reported pointer in one patch (each pointer once,
  though the report names it under two codes), when the report names several and the operation
  budget allows.

A caller that may consult the public verifier (the shield) passes its own errors for the current
call as ``verified``: their pointers are tried after the reported ones, so a report that points at
the wrong place, or says nothing usable, still leads to the field that is wrong.

Pure functions of the public case and state, in a deterministic order, deduplicated by the patch's
canonical text.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher, get_close_matches
from typing import Any

from ..tasks.cases import ABSTAIN, PublicCase
from ..tasks.requests import read_value
from ..tasks.sources import REDACTED
from ..validators import PublicState
from ..validators.codes import Code
from ..validators.jsonvalue import canonical_json, json_type_name, leaves
from ..validators.pointer import PointerSyntaxError, Tokens, format_pointer, parse_pointer, resolve
from ..validators.report import VerifierError
from .policies import argument_labels, request_values
from .schema_excerpt import declared_types, subschemas_at

SOURCES: tuple[str, ...] = (
    "abstain",
    "request",
    "mention",
    "disagree",
    "enum",
    "const",
    "default",
    "convert",
    "remove",
    "rename",
    "combined",
)
OP_KINDS: tuple[str, ...] = ("add", "replace", "remove", "move")
# how many enum members one pointer may offer (the closest to the current value first)
MAX_ENUM_OPTIONS = 4
# the most characters one enum's search for members the request names may read, about 30 ms here:
# each member is one search of the whole request, and an untrusted schema and request together
# (20,000 members, 50 KB) would otherwise take 16 s; members past it keep the closeness order
MENTION_SCAN_CHARS = 2_000_000
# a current value at least this close in spelling to an enum member (difflib's ratio, case and word
# separators aside: :func:`_spelling`) is that member, misspelt: "customer_i" for customer_id,
# "FICTION" for Fiction, "SALA" for SALAD. Only that member is offered: the call's author meant it,
# and offering the members the request names beside it let SmolLM2 pick another (built-in case
# c3191344: "id"; BFCL live: "dontcare" for "COMEDY", "celsius" for "FAHRENHEIT")
NEAR_MISS = 0.8
# the most request mentions one missing argument is offered, in the request's order
MAX_MENTIONS = 3
# the most digits a mentioned number may have: one longer is no argument's value, and Python refuses
# to read an int of more than 4,300 digits (or reads a float of 400 as inf, which JSON cannot write)
MAX_MENTION_DIGITS = 18
_ABSENT = object()
# a number the request states, thousands separators included ("$2,000,000" is one number, not 2 and
# 0); never part of a word, an identifier, a version or a date ("v2", "3.1.4", "x-5"); "1,2,3" is three
_NUMBER = re.compile(r"(?<![\w.-])(-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)(?!\w|\.\d|,\d{3}(?!\d))")
# a quoted span: quotes that open and close outside a word, so "It's" quotes nothing
_QUOTED = re.compile(r"(?<!\w)(['\"])(\S(?:.{0,198}?\S)?)\1(?!\w)")
# what follows a quoted JSON key
_KEY_END = re.compile(r"\s*:")
# what separates a value's words: "age_range", "age-range", "age range"
_SEPARATORS = re.compile(r"[\s_\-]+")
# a paraphrased clause: "<label>: <words>" up to the clause's end (see tasks.requests._CLAUSES)
_CLAUSE_END = r"(?=; |\. |\n- |\.$|$)"
# a value's words: never across a clause separator
_IN_CLAUSE = r"((?:(?!; |\. |\n- ).)+?)"
# the clause forms of tasks.requests._CLAUSES, as (text before the value, text after it)
_PARAPHRASE_CLAUSES = (
    ("{label}: ", ""),
    ("set the {label} to ", ""),
    ("the {label} should be ", ""),
    ("use ", " as the {label}"),
    ("{label} = ", ""),
)


@dataclass(frozen=True)
class Candidate:
    """One action the selector may choose: the text sent to the contract, and where it came from."""

    text: str
    source: str
    ops: tuple[dict[str, Any], ...] = ()

    @property
    def is_abstain(self) -> bool:
        return self.text == ABSTAIN

    @property
    def op_kind(self) -> str:
        return self.ops[0]["op"] if len(self.ops) == 1 else "combined" if self.ops else "abstain"


ABSTAIN_CANDIDATE = Candidate(ABSTAIN, "abstain")


def stated_values(case: PublicCase) -> dict[str, Any]:
    """Top-level argument values the request states: JSON values, or words :func:`read_value` reads."""
    labels = argument_labels(case)
    found = request_values(case.request, labels)
    properties = case.schema.get("properties", {}) if isinstance(case.schema, dict) else {}
    for key, label in labels.items():
        if key in found:
            continue
        for before, after in _PARAPHRASE_CLAUSES:
            pattern = re.escape(before.format(label=label)) + _IN_CLAUSE + re.escape(after.format(label=label)) + _CLAUSE_END
            match = re.search(pattern, case.request)
            if match is None:
                continue
            try:
                value = read_value(match.group(1), properties.get(key, {}) if isinstance(properties, dict) else {})
            except (ValueError, TypeError):
                continue
            if value is not None:
                found[key] = value
                break
    return found


def disagrees(candidate: dict[str, Any], key: str, value: Any) -> bool:
    """The call's argument differs from a stated value, by JSON value (``1`` is not ``true``); a
    missing argument differs."""
    current = candidate.get(key, _ABSENT)
    return current is _ABSENT or canonical_json(current) != canonical_json(value)


def _pointer_tokens(pointer: str) -> Tokens | None:
    try:
        return parse_pointer(pointer)
    except PointerSyntaxError:
        return None


def _write(candidate: Any, tokens: Tokens, value: Any) -> dict[str, Any]:
    """``add`` where nothing is, ``replace`` where something is."""
    exists = resolve(candidate, tokens, _ABSENT) is not _ABSENT
    return {"op": "replace" if exists else "add", "path": format_pointer(tokens), "value": value}


def _conversions(value: Any) -> Iterator[Any]:
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"-?\d+", text):
            yield int(text)
        elif re.fullmatch(r"-?\d+\.\d+", text):
            yield float(text)
        if text.lower() in ("true", "false"):
            yield text.lower() == "true"
        yield [value]
    elif isinstance(value, bool):
        yield "true" if value else "false"
    elif isinstance(value, (int, float)):
        yield str(value)
        if isinstance(value, float) and value.is_integer():
            yield int(value)
    elif isinstance(value, list) and len(value) == 1:
        yield value[0]
    elif isinstance(value, dict) and len(value) == 1:
        yield next(iter(value.values()))


def _spelling(text: str) -> str:
    """A value's words, lower case, one space apart: "AVERAGE_REVIEW_RATING", "average review rating"
    and "Average-Review-Rating" spell one value."""
    return " ".join(word for word in _SEPARATORS.split(text.casefold()) if word)


def _as_text(value: Any) -> str | None:
    """The string a value holds: itself, or the one string of a one-element array (``["age_range"]``)."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    return value if isinstance(value, str) else None


def _mentions(request: str, member: str) -> bool:
    """The request names an enum member as words of their own, in any case and with any word
    separators ("the burger": BURGER; "age range": age_range)."""
    words = [re.escape(word) for word in _SEPARATORS.split(member) if word]
    pattern = r"[\s_\-]+".join(words)
    return bool(words) and re.search(rf"(?<!\w){pattern}(?!\w)", request, re.IGNORECASE) is not None


def _named(request: str, members: list[str]) -> list[str]:
    """The first :data:`MAX_ENUM_OPTIONS` distinct members the request names, searched in enum
    order within :data:`MENTION_SCAN_CHARS` (more could not be offered)."""
    found: dict[str, None] = {}
    spent = 0
    for member in members:
        spent += len(request) + len(member)
        if spent > MENTION_SCAN_CHARS or len(found) == MAX_ENUM_OPTIONS:
            break
        if _mentions(request, member):
            found[member] = None
    return list(found)


def _closest(text: str | None, members: list[str]) -> tuple[list[str], float] | None:
    """The :data:`MAX_ENUM_OPTIONS` members closest in spelling to ``text``, closest first, and the
    closest one's ratio; None without a string to compare."""
    if text is None or not members:
        return None
    spelt: dict[str, str] = {}
    for member in members:
        spelt.setdefault(_spelling(member), member)
    target = _spelling(text)
    close = get_close_matches(target, list(spelt), n=MAX_ENUM_OPTIONS, cutoff=0.0)
    if not close:
        return None
    return [spelt[c] for c in close], SequenceMatcher(None, target, close[0]).ratio()


def _schema_values(nodes: list[Any], current: Any, request: str = "") -> Iterator[tuple[str, Any]]:
    """The schema's values at the pointer. A member the current value spells or converts to is
    offered alone, and a default never replaces a value that says something (one that means a
    member, converts to the declared type, or is a non-empty object or array): both would change
    what the call says where the verifier objected only to how it says it (BFCL live: the default
    "dontcare" offered for "COMEDY", ``{}`` for ``{"sort": "des"}``, false for ``"true"``)."""
    for node in nodes:
        if not isinstance(node, dict):
            continue
        if "const" in node:
            yield "const", node["const"]
        members = node.get("enum")
        meant: Any = _ABSENT
        if isinstance(members, list) and members:
            texts = [m for m in members if isinstance(m, str)]
            close = _closest(_as_text(current), texts)
            meant = _converted_member(current, members)
            if meant is _ABSENT and close is not None and close[1] >= NEAR_MISS:
                meant = close[0][0]
            if meant is not _ABSENT:
                yield "enum", meant
            else:
                named = _named(request, texts) if request else []
                ordered: dict[str, Any] = {}
                for member in [*named, *(close[0] if close else ()), *members]:
                    ordered.setdefault(canonical_json(member), member)
                for member in list(ordered.values())[:MAX_ENUM_OPTIONS]:
                    yield "enum", member
        says = meant is not _ABSENT or (isinstance(current, (dict, list)) and current) or _converts_to_type(current, node)
        if "default" in node and not says:
            yield "default", node["default"]


def _converts_to_type(current: Any, node: dict[str, Any]) -> bool:
    """A type conversion of the current value has a type the node declares (``"true"`` for a boolean):
    the ``convert`` source offers it, and a default in its place would change the value."""
    names = declared_types(node)
    if current is _ABSENT or not names:
        return False
    found = {json_type_name(value) for value in _conversions(current)}
    return bool(found & names) or ("integer" in found and "number" in names)


def _converted_member(current: Any, members: list[Any]) -> Any:
    """The member a type conversion of the current value is (``"true"`` for true, ``"3"`` for 3,
    ``[x]`` for x); ``_ABSENT`` when none is."""
    if current is _ABSENT:
        return _ABSENT
    keys = {canonical_json(member): member for member in members}
    for value in _conversions(current):
        found = keys.get(canonical_json(value), _ABSENT)
        if found is not _ABSENT:
            return found
    return _ABSENT


def _mentioned(request: str, candidate: dict[str, Any], nodes: list[Any]) -> list[Any]:
    """The values a request states in its own words for one missing argument: its numbers and quoted
    spans of a type the argument declares, less those the call already holds anywhere (each use takes
    one mention, as grounding counts them). Never a redaction marker (BFCL's ``[not given]`` is where
    a value was taken out: sending it is the unrepairable family's failure) nor a quoted key of a
    JSON object the request spells out (``{"active": "true"}`` names no path). Nothing for an
    argument with an enum or a const: the schema's own values are the candidates there."""
    types: set[str] = set()
    for node in nodes:
        if not isinstance(node, dict) or "enum" in node or "const" in node:
            return []
        types |= declared_types(node)
    text = request.replace(REDACTED, "\x00")
    found: list[Any] = []
    if types & {"integer", "number"}:
        for match in _NUMBER.finditer(text):
            digits = match.group(1).replace(",", "")
            if sum(c.isdigit() for c in digits) > MAX_MENTION_DIGITS:
                continue
            number = float(digits) if "." in digits else int(digits)
            if "number" in types or isinstance(number, int):
                found.append(number)
    if "string" in types:
        for match in _QUOTED.finditer(text):
            if "\x00" not in match.group(2) and not _KEY_END.match(text, match.end()):
                found.append(match.group(2))
    used = Counter(canonical_json(value) for value in leaves(candidate).values())
    offered: dict[str, Any] = {}
    for value in found:
        key = canonical_json(value)
        if used[key] > 0:
            used[key] -= 1
        elif key not in offered:
            offered[key] = value
            if len(offered) == MAX_MENTIONS:  # a request of 10,000 numbers costs no more than one of three
                break
    return list(offered.values())


def _hoist(schema: Any, candidate: Any, tokens: Tokens) -> tuple[dict[str, Any], ...]:
    """Moves that lift an unexpected object's members into the enclosing object, then the wrapper's
    removal: a call that wrapped its arguments one level too deep (``{"params": {"x": 1}}``) keeps
    the values it had. Only members the enclosing object's schema names and the object lacks move;
    () when none does."""
    wrapper = resolve(candidate, tokens, _ABSENT)
    parent = resolve(candidate, tokens[:-1], _ABSENT)
    if not (isinstance(wrapper, dict) and isinstance(parent, dict)):
        return ()
    names: set[str] = set()
    for node in subschemas_at(schema, tokens[:-1]):
        if isinstance(node, dict) and isinstance(node.get("properties"), dict):
            names.update(node["properties"])
    moves = tuple(
        {"op": "move", "from": format_pointer((*tokens, key)), "path": format_pointer((*tokens[:-1], key))}
        for key in wrapper
        if key in names and key not in parent
    )
    return (*moves, {"op": "remove", "path": format_pointer(tokens)}) if moves else ()


def _at_pointer(case: PublicCase, state: PublicState, tokens: Tokens, code: str, stated: dict[str, Any]) -> Iterator[Candidate]:
    candidate = state.candidate
    if not tokens:
        return
    top = tokens[0]
    if top in stated:
        yield Candidate("", "request", (_write(candidate, (top,), stated[top]),))
    if code == Code.ADDITIONAL_PROPERTY.value:
        path = format_pointer(tokens)
        yield Candidate("", "remove", ({"op": "remove", "path": path},))
        hoisted = _hoist(case.schema, candidate, tokens)
        if hoisted:
            yield Candidate("", "rename", hoisted)
        if len(tokens) == 1 and isinstance(candidate, dict):
            required = case.schema.get("required", []) if isinstance(case.schema, dict) else []
            for name in required:
                if isinstance(name, str) and name not in candidate:
                    yield Candidate("", "rename", ({"op": "move", "from": path, "path": format_pointer((name,))},))
        return
    current = resolve(candidate, tokens, _ABSENT)
    nodes = subschemas_at(case.schema, tokens)
    for source, value in _schema_values(nodes, current, case.request):
        yield Candidate("", source, (_write(candidate, tokens, value),))
    if current is _ABSENT and len(tokens) == 1 and top not in stated and isinstance(candidate, dict):
        for value in _mentioned(case.request, candidate, nodes):
            yield Candidate("", "mention", (_write(candidate, tokens, value),))
    if current is not _ABSENT:
        for value in _conversions(current):
            yield Candidate("", "convert", ({"op": "replace", "path": format_pointer(tokens), "value": value},))


def enumerate_candidates(
    case: PublicCase, state: PublicState, limit: int, verified: Sequence[VerifierError] = ()
) -> list[Candidate]:
    """ABSTAIN first, then up to ``limit - 1`` distinct patches, each within the operation budget;
    ``verified`` adds the pointers of the verifier's own errors that the report did not name."""
    stated = stated_values(case)
    found: list[Candidate] = []
    per_pointer: dict[str, Candidate] = {}  # each named pointer's first candidate, once per pointer
    for error in state.report.errors:
        tokens = _pointer_tokens(error.pointer)
        if tokens is None:
            continue
        listed = list(_at_pointer(case, state, tokens, error.code.value, stated))
        found.extend(listed)
        if listed:
            per_pointer.setdefault(error.pointer, listed[0])
    if isinstance(state.candidate, dict):
        for key in sorted(stated):
            if disagrees(state.candidate, key, stated[key]):
                found.append(Candidate("", "disagree", (_write(state.candidate, (key,), stated[key]),)))
    if len(per_pointer) > 1:
        ops = tuple(op for c in per_pointer.values() for op in c.ops)
        found.append(Candidate("", "combined", ops))
    # the verifier's own pointers last, so what the report alone lists keeps its places
    reported = {(e.pointer, e.code) for e in state.report.errors}
    for error in verified:
        tokens = _pointer_tokens(error.pointer)
        if tokens is not None and (error.pointer, error.code) not in reported:
            found.extend(_at_pointer(case, state, tokens, error.code.value, stated))
    out = [ABSTAIN_CANDIDATE]
    seen = {ABSTAIN}
    for item in found:
        if len(item.ops) > state.ops_left:
            continue
        text = json.dumps(list(item.ops), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        if text in seen:
            continue
        seen.add(text)
        out.append(Candidate(text, item.source, item.ops))
        if len(out) == limit:
            break
    return out


__all__ = ["ABSTAIN_CANDIDATE", "OP_KINDS", "SOURCES", "Candidate", "disagrees", "enumerate_candidates", "stated_values"]
