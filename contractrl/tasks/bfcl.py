"""Loading Berkeley Function-Calling Leaderboard (BFCL) question and possible-answer files.

BFCL files are JSON Lines despite their ``.json`` suffix. A possible answer maps every argument to
a list of acceptable values, where ``""`` means "may be omitted", and nests the same convention
inside object-valued arguments. :func:`ground_truth_call` turns that into one concrete call.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputFileError
from ..io import read_lines
from ..validators.strict_json import ParseLimits, parse_json_text

_LINE_LIMITS = ParseLimits(max_bytes=16_000_000, max_depth=128)


@dataclass(frozen=True, slots=True)
class BfclFunction:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class BfclEntry:
    """One question with its candidate functions and, when known, its possible answers."""

    id: str
    question: tuple[dict[str, Any], ...]
    functions: tuple[BfclFunction, ...]
    ground_truth: tuple[dict[str, dict[str, list[Any]]], ...] = ()

    def function(self, name: str) -> BfclFunction:
        for fn in self.functions:
            if fn.name == name:
                return fn
        raise KeyError(f"{self.id}: no function named {name!r}")

    @property
    def user_text(self) -> str:
        """The user turns of the first conversation, joined: the request the call must satisfy."""
        turns = self.question[0] if self.question and isinstance(self.question[0], list) else self.question
        return "\n".join(str(t.get("content", "")) for t in turns if isinstance(t, dict) and t.get("role") == "user")


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Strictly parsed objects of a JSON Lines file, with 1-based line numbers for error messages."""
    p = Path(path)
    for lineno, line in read_lines(p, "BFCL", _LINE_LIMITS.max_bytes):
        if not line.strip():
            continue
        parsed = parse_json_text(line, _LINE_LIMITS)
        if not parsed.is_value or not isinstance(parsed.value, dict):
            raise InputFileError(f"{p}:{lineno}: not a JSON object ({parsed.code.value}: {parsed.message})")
        yield lineno, parsed.value


def _function(raw: Any, where: str) -> BfclFunction:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not isinstance(raw.get("parameters"), dict):
        raise InputFileError(f"{where}: a function needs a string 'name' and an object 'parameters'")
    return BfclFunction(raw["name"], str(raw.get("description", "")), raw["parameters"])


def load_bfcl(question_file: str | Path, answer_file: str | Path | None = None) -> list[BfclEntry]:
    """Entries of a BFCL category, joined to its possible answers by id when an answer file is given."""
    answers: dict[str, tuple[dict[str, dict[str, list[Any]]], ...]] = {}
    if answer_file is not None:
        for lineno, raw in read_jsonl(answer_file):
            gt = raw.get("ground_truth")
            if not isinstance(raw.get("id"), str) or not isinstance(gt, list):
                raise InputFileError(f"{answer_file}:{lineno}: needs 'id' and a 'ground_truth' list")
            answers[raw["id"]] = tuple(gt)
    entries = []
    for lineno, raw in read_jsonl(question_file):
        where = f"{question_file}:{lineno}"
        entry_id = raw.get("id")
        functions = raw.get("function")
        if not isinstance(entry_id, str) or not isinstance(functions, list) or not functions:
            raise InputFileError(f"{where}: needs a string 'id' and a non-empty 'function' list")
        question = raw.get("question", [])
        entries.append(
            BfclEntry(
                entry_id,
                tuple(question) if isinstance(question, list) else (),
                tuple(_function(f, where) for f in functions),
                answers.get(entry_id, ()),
            )
        )
    return entries


def load_bfcl_dir(bfcl_dir: str | Path) -> list[BfclEntry]:
    """Every question file in ``bfcl_dir`` that has a possible-answer file, in name order."""
    folder = Path(bfcl_dir)
    answers = folder / "possible_answer"
    if not answers.is_dir():
        raise InputFileError(f"{folder} has no possible_answer/ folder: not a BFCL data directory")
    entries: list[BfclEntry] = []
    for question in sorted(folder.glob("*.json")):
        if (answers / question.name).is_file():
            entries.extend(load_bfcl(question, answers / question.name))
    if not entries:
        raise InputFileError(f"no BFCL question files with possible answers in {folder}")
    return entries


def _first_value(alternatives: list[Any]) -> Any:
    value = next(v for v in alternatives if v != "")
    return _resolve_nested(value)


def _resolve_nested(value: Any) -> Any:
    """Object-valued arguments list alternatives per field too; lists of such objects likewise."""
    if isinstance(value, dict):
        return _pick_arguments(value, required=())
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return [_pick_arguments(v, required=()) for v in value]
    return value


def _pick_arguments(args: dict[str, Any], required: tuple[str, ...] | list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, alternatives in args.items():
        if not isinstance(alternatives, list):
            out[name] = alternatives
            continue
        omittable = not alternatives or alternatives[0] == "" or all(v == "" for v in alternatives)
        if omittable and (name not in required or all(v == "" for v in alternatives)):
            continue
        out[name] = _first_value(alternatives)
    return out


def ground_truth_call(entry: BfclEntry, index: int = 0) -> tuple[str, dict[str, Any]]:
    """The function name and one concrete, acceptable argument object of answer ``index``.

    Per argument the first listed value is taken; an argument whose first value is ``""`` (may be
    omitted) is left out, unless the schema requires it, in which case its first non-empty value is
    used.
    """
    if not entry.ground_truth:
        raise KeyError(f"{entry.id}: no possible answer loaded")
    (name, args), *_ = entry.ground_truth[index].items()
    required = entry.function(name).parameters.get("required", [])
    return name, _pick_arguments(args, required)


_LOOSE = re.compile(r"[ ,./\-_*^]")


def _loose(text: str) -> str:
    """BFCL's string normalisation: case, spaces and some punctuation do not count."""
    return _LOOSE.sub("", text).lower().replace("'", '"')


def _type_of(schema: dict[str, Any]) -> str | None:
    declared = schema.get("type")
    return declared if isinstance(declared, str) else None


def _value_matches(value: Any, expected: Any, schema: dict[str, Any]) -> bool:
    if isinstance(expected, dict):
        return isinstance(value, dict) and bfcl_accepts(value, expected, schema)[0]
    if isinstance(expected, list):
        if not isinstance(value, list) or len(value) != len(expected):
            return False
        items = schema.get("items", {}) if isinstance(schema.get("items"), dict) else {}
        return all(_value_matches(v, e, items) for v, e in zip(value, expected, strict=True))
    if isinstance(expected, bool) or isinstance(value, bool):
        return type(value) is type(expected) and value == expected
    if isinstance(expected, (int, float)):
        if not isinstance(value, (int, float)):
            return False
        if isinstance(value, float) and isinstance(expected, int) and _type_of(schema) == "integer":
            return False
        if isinstance(value, int) and isinstance(expected, float) and _type_of(schema) not in ("float", "number", None):
            return False
        return float(value) == float(expected)
    if isinstance(expected, str):
        return isinstance(value, str) and _loose(value) == _loose(expected)
    return value == expected


def bfcl_accepts(call: dict[str, Any], possible: dict[str, list[Any]], schema: dict[str, Any]) -> tuple[bool, str]:
    """BFCL's acceptance rule for one call's arguments against its possible answers.

    Arguments outside the ground truth are rejected; an argument whose alternatives include ``""``
    may be omitted; strings compare loosely; an int is accepted where a float is declared; object
    arguments are checked recursively with the same rules.
    """
    props = schema.get("properties", {})
    for name in call:
        if name not in possible:
            return False, f"argument {name!r} is not in the ground truth"
    for name, alternatives in possible.items():
        options = alternatives if isinstance(alternatives, list) else [alternatives]
        if name not in call:
            if "" in options or not options:
                continue
            return False, f"argument {name!r} is missing"
        sub = props.get(name, {}) if isinstance(props.get(name), dict) else {}
        if not any(_value_matches(call[name], option, sub) for option in options if option != ""):
            return False, f"argument {name!r} matches none of {len(options)} acceptable values"
    return True, "accepted"
