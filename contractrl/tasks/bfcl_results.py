"""BFCL's own result and score files: finding them, reading them (bounded) and decoding answers.

``bfcl generate`` writes one ``BFCL_v4_<category>_result.json`` per category (JSON Lines: ``id``
and ``result``, the model's raw answer, nested as ``result/<model>/<group>/``) and ``bfcl
evaluate`` one ``BFCL_v4_<category>_score.json`` (a header line with ``accuracy``,
``correct_count`` and ``total_count``, then one line per answer BFCL refused, with its
``error_type``). Files are untrusted: every read goes through the bounded readers and a bad file is
a one-line :class:`~contractrl.errors.InputFileError` naming the file and line. Answers are decoded
as BFCL decodes them, but only literals are read: nothing in an answer is ever evaluated. What the
answers become is :mod:`.natural`'s job.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InputFileError
from ..validators.strict_json import ParseLimits, parse_json_text
from .bfcl import read_jsonl
from .bfcl_wheel import CATEGORIES, HELD_OUT

_RESULT_FILE = re.compile(r"^BFCL_v4_(?P<category>[A-Za-z0-9_]+)_result\.json$")
_SCORE_FILE = re.compile(r"^BFCL_v4_(?P<category>[A-Za-z0-9_]+)_score\.json$")
# BFCL's test category (the file name's middle) -> the wheel's category name
_TEST_CATEGORY = {question[len("BFCL_v4_") : -len(".json")]: name for name, question in CATEGORIES.items()}
# Java and JavaScript answers are in those languages' call syntax, not Python's
_PYTHON_ONLY = frozenset({"simple_java", "simple_javascript"})
MAX_FILES = 256
MAX_ANSWER_CHARS = 65_536  # one model answer; BFCL answers are a few hundred characters
MAX_CALLS = 64  # calls in one answer
_ARG_LIMITS = ParseLimits(max_bytes=MAX_ANSWER_CHARS, max_depth=64)


class DecodeError(ValueError):
    """A model answer that is not a list of calls with literal arguments."""


def find_result_files(directory: str | Path, live: bool, skipped: dict[str, int]) -> list[tuple[str, Path, Path | None]]:
    """(wheel category, result file, score file or None) for every usable result file under
    ``directory``; the answers of the others are counted in ``skipped``, by reason.

    ``bfcl generate`` nests files as ``result/<model>/<group>/``, so the folder is searched
    recursively; it must hold one model's run (two result files of one category are refused).
    """
    root = Path(directory)
    if not root.is_dir():
        raise InputFileError(f"BFCL results directory not found: {root}")
    results = _by_category(root, _RESULT_FILE, "result")
    scores = _by_category(root, _SCORE_FILE, "score")
    if not results:
        raise InputFileError(f"no BFCL result files (BFCL_v4_<category>_result.json) under {root}")
    found = []
    for test_category, path in sorted(results.items()):
        name = _TEST_CATEGORY.get(test_category)
        if name is None or test_category in _PYTHON_ONLY:
            _skip(skipped, f"unsupported category {test_category}", _count_lines(path))
            continue
        if (name in HELD_OUT) != live:
            why = "held out: live category (read with bfcl-results-live:DIR)" if not live else "not a live category"
            _skip(skipped, why, _count_lines(path))
            continue
        found.append((name, path, scores.get(test_category)))
    if not found:
        kinds = "live" if live else "non-live"
        raise ConfigError(f"no {kinds} BFCL result files of a supported category under {root} (skipped: {skipped})")
    return found


def _skip(skipped: dict[str, int], reason: str, count: int) -> None:
    skipped[reason] = skipped.get(reason, 0) + count


def _by_category(root: Path, pattern: re.Pattern[str], what: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for n, path in enumerate(sorted(root.rglob("BFCL_v4_*.json"))):
        if n >= MAX_FILES:
            raise InputFileError(f"over {MAX_FILES} BFCL files under {root}: point at one model's run")
        match = pattern.match(path.name)
        if not match:
            continue
        category = match["category"]
        if category in out:
            raise InputFileError(
                f"two BFCL {what} files for {category} under {root} ({out[category]}, {path}): point at one model's run"
            )
        out[category] = path
    return out


def _count_lines(path: Path) -> int:
    return sum(1 for _ in read_jsonl(path))


def read_results(path: str | Path) -> list[tuple[str, Any]]:
    """(id, raw answer) of every line of a result file, in file order."""
    out = []
    seen: set[str] = set()
    for lineno, raw in read_jsonl(path):
        entry_id = raw.get("id")
        if not isinstance(entry_id, str) or "result" not in raw:
            raise InputFileError(f"{path}:{lineno}: a BFCL result line needs a string 'id' and a 'result'")
        if entry_id in seen:
            raise InputFileError(f"{path}:{lineno}: id {entry_id!r} appears twice")
        seen.add(entry_id)
        out.append((entry_id, raw["result"]))
    return out


def read_scores(path: str | Path) -> dict[str, str]:
    """BFCL's verdicts: the ``error_type`` of every answer it refused, by id."""
    refused: dict[str, str] = {}
    header = False
    for lineno, raw in read_jsonl(path):
        if not header:
            if not all(isinstance(raw.get(k), (int, float)) for k in ("accuracy", "correct_count", "total_count")):
                raise InputFileError(f"{path}:{lineno}: a BFCL score file starts with accuracy, correct_count and total_count")
            header = True
            continue
        entry_id = raw.get("id")
        if not isinstance(entry_id, str) or raw.get("valid") is not False:
            raise InputFileError(f"{path}:{lineno}: a BFCL score line needs a string 'id' and 'valid': false")
        refused[entry_id] = str(raw.get("error_type", "unknown"))
    return refused


# --- decoding answers ----------------------------------------------------------------------------


def decode_calls(result: Any) -> list[tuple[str, dict[str, Any]]]:
    """The (function, arguments) calls of one BFCL answer; literals only, nothing evaluated.

    A string is a prompting model's Python call list (``[f(a=1), g(b='x')]``), decoded as BFCL's
    ``default_decode_ast_prompting`` does but refusing any argument that is not a literal (BFCL
    evaluates arithmetic; a file from elsewhere must not run code here). A list is a
    function-calling model's ``[{name: arguments}]``, the arguments an object or its JSON text.
    """
    if isinstance(result, str):
        return _decode_python(result)
    if isinstance(result, list) and result and all(isinstance(item, dict) and len(item) == 1 for item in result):
        if len(result) > MAX_CALLS:
            raise DecodeError(f"over {MAX_CALLS} calls")
        calls = []
        for item in result:
            ((name, args),) = item.items()
            if isinstance(args, str):
                parsed = parse_json_text(args, _ARG_LIMITS)
                if not parsed.is_value:
                    raise DecodeError(f"arguments of {name} are not strict JSON")
                args = parsed.value
            if not isinstance(args, dict):
                raise DecodeError(f"arguments of {name} are not an object")
            calls.append((str(name), args))
        return calls
    raise DecodeError("neither a call list nor a list of {name: arguments}")


def _decode_python(text: str) -> list[tuple[str, dict[str, Any]]]:
    if len(text) > MAX_ANSWER_CHARS:
        raise DecodeError(f"answer over {MAX_ANSWER_CHARS} characters")
    text = text.strip("`\n ")
    if not text.startswith("["):
        text = "[" + text
    if not text.endswith("]"):
        text += "]"
    try:
        body = ast.parse(text.strip().strip("'"), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise DecodeError(f"not a Python call list ({type(exc).__name__})") from None
    nodes = [body] if isinstance(body, ast.Call) else getattr(body, "elts", None)
    if not nodes or len(nodes) > MAX_CALLS or not all(isinstance(n, ast.Call) for n in nodes):
        raise DecodeError("not a non-empty list of calls")
    return [_call(node) for node in nodes]


def _call(node: ast.Call) -> tuple[str, dict[str, Any]]:
    parts = []
    func: ast.expr = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name) or node.args:
        raise DecodeError("a call must name a function and pass keyword arguments only")
    parts.append(func.id)
    args = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise DecodeError("**kwargs is not an argument")
        args[kw.arg] = _literal(kw.value, 0)
    return ".".join(reversed(parts)), args


def _literal(node: ast.expr, depth: int) -> Any:
    """A JSON value from an argument's syntax; a bare name reads as its text, as in BFCL."""
    if depth > 64:
        raise DecodeError("argument nested too deep")
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (str, int, float, bool))):
        if isinstance(node.value, float) and not math.isfinite(node.value):
            raise DecodeError("a non-finite number")
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        value = node.operand.value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(v, depth + 1) for v in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values, strict=True):
            key = _literal(k, depth + 1) if k is not None else None
            if not isinstance(key, str):
                raise DecodeError("an object key that is not a string")
            out[key] = _literal(v, depth + 1)
        return out
    if isinstance(node, ast.Name):
        return node.id
    raise DecodeError(f"argument is not a literal ({type(node).__name__})")


__all__ = [
    "MAX_ANSWER_CHARS",
    "MAX_CALLS",
    "MAX_FILES",
    "DecodeError",
    "decode_calls",
    "find_result_files",
    "read_results",
    "read_scores",
]
