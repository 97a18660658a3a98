"""Natural-language requests from which every argument of a call can be recovered.

A request is an intro sentence plus one clause per argument, in seeded random order and phrasing.
In the ``verbatim`` style values are written as JSON (strings quoted), so a repair can copy them.
In the ``paraphrase`` style a value is written as people write it where that is unambiguous:
numbers in words ("forty-two", "12 thousand"), booleans as yes/no, dates in words ("March 5,
2026"), enum members without underscores; :func:`read_value` reads each form back exactly, so a
correct repair needs understanding, not copying. Either way a missing or broken argument is
recoverable from the request, unless the case deliberately omits it (the unrepairable family), in
which case the value appears nowhere in the request.
"""

from __future__ import annotations

import calendar
import dataclasses
import json
import random
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..validators.jsonvalue import canonical_json
from .spec import ToolSpec

REQUEST_STYLES = ("verbatim", "paraphrase")

_CLAUSES = (
    "{label}: {value}",
    "set the {label} to {value}",
    "the {label} should be {value}",
    "use {value} as the {label}",
    "{label} = {value}",
)
_JOINERS = ("; ", ". ", "\n- ")
TOOL_OUTPUT_HEADING = "\n\nOutput of the previous tool call:\n"  # before an earlier tool's output, in any source's request


def render_request(
    spec: ToolSpec,
    args: dict[str, Any],
    rng: random.Random,
    *,
    omit: Iterable[str] = (),
    tool_output: str | None = None,
    style: str = "verbatim",
) -> str:
    """The user's request for ``args`` with the keys in ``omit`` left out entirely."""
    if style not in REQUEST_STYLES:
        raise ConfigError(f"unknown request style {style!r}; choose from {', '.join(REQUEST_STYLES)}")
    skipped = set(omit)
    keys = [k for k in args if k not in skipped]
    rng.shuffle(keys)
    clauses = [rng.choice(_CLAUSES).format(label=spec.label(k), value=_written(spec, k, args[k], style)) for k in keys]
    joiner = rng.choice(_JOINERS)
    body = joiner.join(clauses)
    lead = "\n- " if joiner == "\n- " else " "
    text = f"{rng.choice(spec.intros)}{lead}{body}."
    if tool_output is not None:
        text += f"{TOOL_OUTPUT_HEADING}{tool_output}"
    return text


@dataclass(frozen=True)
class RequestParts:
    """A request as :func:`render_request` builds it: ``intro + lead + joiner.join(clauses) + "." + tail``."""

    intro: str
    lead: str
    joiner: str
    clauses: tuple[str, ...]
    tail: str  # the earlier tool's output, or ""

    def text(self) -> str:
        return f"{self.intro}{self.lead}{self.joiner.join(self.clauses)}.{self.tail}"


def add_clause(
    request: str,
    spec: ToolSpec,
    stated: Mapping[str, Any],
    key: str,
    value: Any,
    rng: random.Random,
    *,
    style: str = "verbatim",
    index: int | None = None,
) -> str | None:
    """``request``, as :func:`render_request` wrote it for the arguments ``stated``, with one more
    clause stating ``key``'s ``value``: one of the renderer's own forms, joined like the other
    clauses, at a seeded place among them (or at ``index``: 0 before the first, -1 after the last).
    Every other character stays where it was, so the two requests differ by that clause alone and
    the new one reads like any request the renderer writes; a value appended after the last clause
    instead is a cue of its own, which a policy learned in place of the value
    (benchmarks/RESULTS.md, "A larger share of twins"). None when ``request`` is not a text the
    renderer writes for ``stated``."""
    parts = parse_request(request, spec, stated, style=style)
    if parts is None:
        return None
    form = rng.choice(_CLAUSES).format(label=spec.label(key), value=_written(spec, key, value, style))
    places = len(parts.clauses) + 1
    at = rng.randrange(places) if index is None else index if index >= 0 else places + index
    if not 0 <= at < places:
        raise ValueError(f"index {index} is outside the request's {places} places")
    clauses = (*parts.clauses[:at], form, *parts.clauses[at:])
    return dataclasses.replace(parts, clauses=clauses).text()


def parse_request(request: str, spec: ToolSpec, stated: Mapping[str, Any], *, style: str = "verbatim") -> RequestParts | None:
    """The parts of a text :func:`render_request` wrote for the arguments ``stated``, or None. Each
    clause is matched whole against the forms its key's value can take, so a separator inside a
    value cannot split one."""
    if style not in REQUEST_STYLES:
        raise ConfigError(f"unknown request style {style!r}; choose from {', '.join(REQUEST_STYLES)}")
    head, mark, output = request.partition(TOOL_OUTPUT_HEADING)
    if not head.endswith("."):
        return None
    forms = {k: [c.format(label=spec.label(k), value=_written(spec, k, v, style)) for c in _CLAUSES] for k, v in stated.items()}
    for intro in spec.intros:
        for lead, joiners in ((" ", ("; ", ". ")), ("\n- ", ("\n- ",))):
            if not head.startswith(intro + lead):
                continue
            body = head[len(intro) + len(lead) : -1]
            for joiner in joiners:
                clauses = _match_clauses(body, 0, joiner, forms)
                if clauses is not None:
                    return RequestParts(intro, lead, joiner, tuple(clauses), mark + output)
    return None


def _written(spec: ToolSpec, key: str, value: Any, style: str) -> str:
    if style == "paraphrase":
        return paraphrase_value(value, spec.schema.get("properties", {}).get(key, {}))
    return canonical_json(value)


def _match_clauses(body: str, start: int, joiner: str, forms: Mapping[str, list[str]]) -> list[str] | None:
    """The clauses of ``body[start:]``, one per key of ``forms`` in some order, or None."""
    if not forms:
        return [] if start == len(body) else None
    for key, options in forms.items():
        rest = {k: v for k, v in forms.items() if k != key}
        for clause in options:
            end = start + len(clause)
            if not body.startswith(clause, start) or (rest and not body.startswith(joiner, end)):
                continue
            tail = _match_clauses(body, end + len(joiner) if rest else end, joiner, rest)
            if tail is not None:
                return [clause, *tail]
    return None


# --- the paraphrase style: forms people write, each read back exactly by read_value ----------------

_ONES = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
)  # fmt: skip
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_WORD_NUMBERS = {
    **{w: i for i, w in enumerate(_ONES)},
    **{_TENS[t]: t * 10 for t in range(2, 10)},
    **{f"{_TENS[t]}-{_ONES[u]}": t * 10 + u for t in range(2, 10) for u in range(1, 10)},
}
_NUMBER_WORDS = {v: k for k, v in _WORD_NUMBERS.items()}
_MONTHS = list(calendar.month_name)  # ["", "January", ...]
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_DATE_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})Z")
_DATE_WORDS = re.compile(r"([A-Z][a-z]+) (\d{1,2}), (\d{4})")
_DATE_TIME_WORDS = re.compile(r"([A-Z][a-z]+) (\d{1,2}), (\d{4}) at (\d{2}):(\d{2}):(\d{2}) UTC")
_THOUSANDS = re.compile(r"(-?\d+) thousand")


def _date_words(year: str, month: str, day: str) -> str | None:
    y, m, d = int(year), int(month), int(day)
    if y < 1 or not 1 <= m <= 12 or not 1 <= d <= calendar.monthrange(y, m)[1]:
        return None  # not a calendar date ("0000-01-01", "2026-02-30"): stays JSON
    return f"{_MONTHS[m]} {d}, {year}"


def paraphrase_value(value: Any, schema: dict[str, Any]) -> str:
    """``value`` as a person would write it, when :func:`read_value` can read that form back to
    exactly ``value`` under ``schema``; otherwise its JSON text."""
    text = canonical_json(value)
    form: str | None = None
    if isinstance(value, bool):
        form = "yes" if value else "no"
    elif isinstance(value, int):
        if value in _NUMBER_WORDS:
            form = _NUMBER_WORDS[value]
        elif -value in _NUMBER_WORDS:
            form = f"minus {_NUMBER_WORDS[-value]}"
        elif value % 1000 == 0:
            form = f"{value // 1000} thousand"
        elif abs(value) >= 10_000:
            form = f"{value:,}"
    elif isinstance(value, str) and _DATE_TIME.fullmatch(value):
        y, mo, d, hh, mm, ss = _DATE_TIME.fullmatch(value).groups()  # type: ignore[union-attr]
        day = _date_words(y, mo, d)
        form = f"{day} at {hh}:{mm}:{ss} UTC" if day else None
    elif isinstance(value, str) and _DATE.fullmatch(value):
        form = _date_words(*_DATE.fullmatch(value).groups())  # type: ignore[union-attr]
    elif isinstance(value, str) and "_" in value and value in schema.get("enum", ()):
        form = value.replace("_", " ")
    if form is not None and read_value(form, schema) == value and type(read_value(form, schema)) is type(value):
        return form
    return text


def read_value(text: str, schema: dict[str, Any]) -> Any:
    """The value a request phrase states: JSON text, or one of :func:`paraphrase_value`'s forms."""
    phrase = text.strip()
    try:
        return json.loads(phrase)
    except ValueError:
        pass
    types = schema.get("type")
    allowed = set(types) if isinstance(types, list) else {types} if types else set()
    if phrase in ("yes", "no") and (not allowed or "boolean" in allowed):
        return phrase == "yes"
    number = _number(phrase)
    if number is not None:
        return number
    if match := _DATE_TIME_WORDS.fullmatch(phrase):
        month, day, year, hh, mm, ss = match.groups()
        return f"{year}-{_MONTHS.index(month):02d}-{int(day):02d}T{hh}:{mm}:{ss}Z"
    if match := _DATE_WORDS.fullmatch(phrase):
        month, day, year = match.groups()
        return f"{year}-{_MONTHS.index(month):02d}-{int(day):02d}"
    for member in schema.get("enum", ()):
        if isinstance(member, str) and member.replace("_", " ") == phrase:
            return member
    raise ValueError(f"no value can be read from {phrase!r}")


def _number(phrase: str) -> int | None:
    negative = phrase.startswith("minus ")
    word = phrase.removeprefix("minus ")
    if word in _WORD_NUMBERS:
        return -_WORD_NUMBERS[word] if negative else _WORD_NUMBERS[word]
    if match := _THOUSANDS.fullmatch(phrase):
        return int(match.group(1)) * 1000
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+", phrase):
        return int(phrase.replace(",", ""))
    return None
