"""Grounding: a repair may add a member the call lacks only with a value the public evidence states.

The verifier accepts any well-typed value for a missing required member, so it cannot tell a
value read from the request from one the model invented; a model that reads words (the Qwen
rungs) fills BFCL's redacted questions with plausible values, and an invented value reaches the
tool as if the user had said it. The evidence a new value may come from is the public half the
case offers, read for *that* member:

- the request, less its ``[not given]`` markers (where BFCL's cases took a value out: a model
  that copies the marker's words has invented them), where each use of the same value by another
  member of the repaired call takes one of its mentions: "directions from New York to [not given]"
  grounds ``start`` = "New York" but not ``end`` = "New York" beside it, nor a second use of a
  number the request gives once for another argument;
- values the repair freed: what the call held at a place the repaired call no longer has (a
  renamed or moved member carries its value with it);
- the schema's own values (``enum``, ``const``, ``default``, ``examples``), not its prose.

That is the evidence the unrepairable family is defined by (a value in neither the request, the
call nor the schema: ``tasks/corruptions.py``), so the rule refuses what that family exists to
catch and leaves every other repair alone: values replaced in place, members moved or renamed,
booleans and nulls (a request states "avoid highways", not ``true``). Matching is lenient
(case-insensitive substrings, a number or date in its usual spellings) because a false refusal
costs an abstention where a false grounding sends a guess; a value a request states only in other
words ("english" for a review written in English) is refused, and the shield then abstains.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..tasks.requests import paraphrase_value
from ..tasks.sources import REDACTED
from ..validators.jsonvalue import canonical_json, leaves
from ..validators.pointer import format_pointer

_SCHEMA_VALUE_KEYS = ("enum", "const", "default", "examples")
# the date-time form a request may state in words (tasks/requests.py: paraphrase_value), "d" a digit
_DATE_FORM = "dddd-dd-ddTdd:dd:ddZ"


def added_members(before: Any, after: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, value) of each member ``after`` has and ``before`` lacks, looking into objects both have."""
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return
    for key, value in after.items():
        if key not in before:
            yield (*path, key), value
        else:
            yield from added_members(before[key], value, (*path, key))


def invents(before: Any, after: Any, request: str, schema: Any) -> bool:
    """Whether going from ``before`` to ``after`` adds a member whose value the evidence for it
    (the module docstring) does not state."""
    added = list(added_members(before, after))
    if not added:
        return False
    new_pointers = [format_pointer(list(path)) for path, _ in added]
    text = _evidence_text(request)
    after_leaves = leaves(after)
    # each use of a value by another member of the repaired call takes one of the request's mentions
    used = Counter(_key(v) for pointer, v in after_leaves.items() if not any(_under(pointer, new) for new in new_pointers))
    # held where the repaired call holds no value any more (gone, or an empty list or object now)
    freed = [v for pointer, v in leaves(before).items() if _empty(after_leaves.get(pointer, []))]
    allowed = {_key(v) for v in freed} | {_key(v) for v in schema_values(schema)}
    for _, value in added:
        for leaf in leaves(value).values():
            if _free(leaf) or _key(leaf) in allowed:
                continue
            if _mentions(leaf, text) <= used[_key(leaf)]:
                return True
            used[_key(leaf)] += 1
    return False


@dataclass(frozen=True)
class Evidence:
    """What any value added to ``call`` could be read from, for deciding before an answer is
    finished (``rollout/prefix_refusal.py``) that it will invent one. A superset of what
    :func:`invents` allows: every value the call holds counts as freed (a later operation may
    remove its member) and no mention counts as used (a later member may be the one that reuses
    it), so a value it cannot state, :func:`invents` refuses too."""

    text: str  # the request, lower-cased, its [not given] markers blanked
    keys: frozenset[str]  # the call's values and the schema's, as :func:`_key` spells them

    @classmethod
    def of(cls, request: str, schema: Any, call: Any) -> Evidence:
        keys = {_key(v) for v in leaves(call).values()} | {_key(v) for v in schema_values(schema)}
        return cls(_evidence_text(request), frozenset(keys))

    def may_state(self, leaf: Any) -> bool:
        """Whether this evidence may ground ``leaf``, a complete value."""
        return _free(leaf) or _key(leaf) in self.keys or _mentions(leaf, self.text) > 0

    def may_state_start(self, written: str) -> bool:
        """Whether some string that begins with ``written`` (a string still being written) is one
        this evidence may ground: by a spelling the request contains, or a value of the call or
        the schema. Each of those spellings of a string begins with the same spelling of its
        start, so the start must appear where the whole would; Greek capital sigma, whose lower
        case depends on the letter after it, and what may become a date, which a request may spell
        in words, are given the benefit of the doubt."""
        if not written.strip() or "\u03a3" in written or _may_become_a_date(written):
            return True
        quoted = canonical_json(written)[:-1].lower()
        if any(key.startswith(quoted) for key in self.keys):
            return True
        forms = {written.lower(), quoted} | {form.lower() for form in _word_forms(written)}
        return any(form in self.text for form in forms)


def _evidence_text(request: str) -> str:
    """The request as values are matched in it: lower-cased, and a request that says "[not given]"
    states no value there."""
    return request.lower().replace(REDACTED, "\x00")


def _word_forms(value: str) -> set[str]:
    """A string as words: its whitespace runs as one space, its underscores as spaces (each begins
    with the same form of the string's start, which :meth:`Evidence.may_state_start` relies on)."""
    return {" ".join(value.split()), value.replace("_", " ")}


def _may_become_a_date(written: str) -> bool:
    """Whether ``written`` begins a date (``2026-01-18``) or a date-time (``...T09:30:00Z``)."""
    return len(written) <= len(_DATE_FORM) and all(
        char in "0123456789" if form == "d" else char == form for char, form in zip(written, _DATE_FORM, strict=False)
    )


def schema_values(schema: Any) -> Iterator[Any]:
    """Every leaf value a schema names (``enum``, ``const``, ``default``, ``examples``)."""
    if isinstance(schema, dict):
        for key, item in schema.items():
            if key in _SCHEMA_VALUE_KEYS:
                yield from leaves(item).values()
            else:
                yield from schema_values(item)
    elif isinstance(schema, list):
        for item in schema:
            yield from schema_values(item)


def _free(value: Any) -> bool:
    """Values a request states without spelling them: yes/no choices, nothing, an empty string,
    an empty list or object."""
    if isinstance(value, str):
        return not value.strip()
    return isinstance(value, bool) or value is None or _empty(value)


def _empty(value: Any) -> bool:
    return isinstance(value, (list, dict)) and not value


def _under(pointer: str, member: str) -> bool:
    return pointer == member or pointer.startswith(member + "/")


def _mentions(value: Any, text: str) -> int:
    """How many times ``text`` states ``value``, in any of its spellings (non-overlapping: a
    quoted mention is one mention, not one of the quotes and one of the words)."""
    if not isinstance(value, (str, int, float)):
        return 0
    forms = sorted(_spellings(value), key=len, reverse=True)
    return len(re.findall("|".join(map(re.escape, forms)), text)) if forms else 0


def _key(value: Any) -> str:
    return canonical_json(value).lower()


def _spellings(value: str | int | float) -> set[str]:
    """How a request may state ``value``, lower-cased: as written, as JSON, as the catalog's
    paraphrases write it ("twenty-four", "January 18, 2026"), an enum member with spaces for
    underscores, a number with thousands separators or without a float's ``.0``."""
    forms = {canonical_json(value), paraphrase_value(value, {})}
    if isinstance(value, str):
        forms |= _word_forms(value)
    else:
        forms.add(str(value))
        if isinstance(value, float) and value.is_integer():
            forms.add(str(int(value)))
        if abs(value) >= 1000:
            forms.add(f"{value:,}")
    return {form.lower() for form in forms if form.strip()}


__all__ = ["Evidence", "added_members", "invents", "schema_values"]
