"""Strict parsing of model text into JSON, ABSTAIN or a refusal, never repairing it.

The stdlib parser is lenient in ways a contract must not be: it keeps the last of duplicate keys,
accepts ``NaN``/``Infinity``, turns ``1e400`` into ``inf`` and recurses until the interpreter stack
overflows. Each of those becomes a typed outcome here, and truncation (text that ends inside a
value, or a generator that stopped on its length limit) is told apart from malformed text, because
a policy repairs the two differently. The raw text is always kept.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from .codes import Code

# A string runs to its closing quote or, unterminated, to the end of the text: every match succeeds,
# so the scan is linear even on text full of escaped quotes.
_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\\?\Z)', re.DOTALL)
_BRACKET_RE = re.compile(r"[\[\]{}]")
_SURROGATE_ESCAPE_RE = re.compile(r"\\u[dD][89a-fA-F]")
_ABSTAIN_RE = re.compile(r"\s*ABSTAIN\b(?:\s*[:\-]\s*(?P<reason>.*))?\s*\Z", re.IGNORECASE | re.DOTALL)
_REFUSAL_RE = re.compile(
    r"\s*(?:I'?m sorry|I am sorry|sorry\b|I can(?:not|'t|’t)\b|I won'?t\b|I will not\b|I am unable|"
    r"I'?m unable|I'?m not able|I am not able|As an AI)",
    re.IGNORECASE,
)
_LITERALS = ("true", "false", "null")


@dataclass(frozen=True, slots=True)
class ParseLimits:
    """Bounds that keep parsing linear and memory-bounded on hostile text."""

    max_bytes: int = 1_000_000
    max_depth: int = 64

    def __post_init__(self) -> None:
        if self.max_bytes < 1 or self.max_depth < 1:
            raise ValueError("parse limits must be positive")


DEFAULT_LIMITS = ParseLimits()


@dataclass(slots=True)
class ParsedResponse:
    """What a response text turned out to be.

    ``code`` is ``accepted`` when the text is one well-formed JSON value (then ``value`` holds it),
    ``abstain`` or ``refusal`` for an explicit stop, and a response failure code otherwise.
    """

    code: Code
    raw: str
    value: Any = None
    message: str = ""

    @property
    def is_value(self) -> bool:
        return self.code is Code.ACCEPTED


class _Reject(Exception):
    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _pairs_to_dict(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Reject(Code.DUPLICATE_KEY, f"duplicate key {key!r} in one object")
            seen.add(key)
    return result


def _reject_constant(name: str) -> Any:
    raise _Reject(Code.NON_FINITE_NUMBER, f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    """A JSON number with a fraction or exponent, as the float that names the same decimal.

    Overflow to infinity is refused, and so is rounding past the float's shortest decimal:
    ``1e-400`` would become ``0.0`` and satisfy ``{"maximum": 0}``, ``1.00000000000000000001``
    would become ``1.0`` and satisfy ``{"maximum": 1}``. A released float's shortest decimal equals
    the text, so every ordered comparison on released numbers is the comparison of their texts.
    """
    value = float(text)
    if not math.isfinite(value):
        raise _Reject(Code.NON_FINITE_NUMBER, f"number {text[:40]!r} overflows to a non-finite float")
    if (len(text) > 15 or "e" in text or "E" in text) and Decimal(text) != Decimal(repr(value)):
        what = "underflows to 0.0" if value == 0.0 else f"would be rounded to {value!r}"
        raise _Reject(Code.NON_FINITE_NUMBER, f"number {text[:40]!r} {what}; it cannot be compared exactly")
    return value


def _bounded_int(text: str) -> int:
    try:
        return int(text)
    except ValueError as exc:  # more digits than the interpreter converts
        raise _Reject(Code.TOO_LARGE, f"integer with {len(text)} digits is too large") from exc


_DECODER = json.JSONDecoder(
    object_pairs_hook=_pairs_to_dict,
    parse_constant=_reject_constant,
    parse_float=_finite_float,
    parse_int=_bounded_int,
    strict=True,
)


def _max_depth_exceeded(text: str, max_depth: int) -> bool:
    """Whether brackets outside strings nest deeper than ``max_depth``; linear, no recursion."""
    if text.count("[") + text.count("{") <= max_depth:
        return False
    depth = 0
    for bracket in _BRACKET_RE.findall(_STRING_RE.sub("", text)):
        if bracket in "[{":
            depth += 1
            if depth > max_depth:
                return True
        else:
            depth -= 1
    return False


def _contains_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _looks_truncated(text: str, error: json.JSONDecodeError) -> bool:
    """A decode error is truncation when the text ran out inside a value, not when it went wrong."""
    if error.msg.startswith("Unterminated string"):
        return True
    end = len(text.rstrip())
    if error.pos >= end:
        return True
    rest = text[error.pos : end]
    return error.msg == "Expecting value" and any(lit.startswith(rest) and lit != rest for lit in _LITERALS)


def _decode_text(raw: str | bytes) -> str:
    if isinstance(raw, bytes):
        try:
            return raw.decode("utf-8", errors="strict")
        except UnicodeDecodeError as exc:
            raise _Reject(Code.MALFORMED_JSON, f"invalid UTF-8 at byte {exc.start}") from exc
    return raw


def parse_json_text(raw: str | bytes, limits: ParseLimits = DEFAULT_LIMITS, finish_reason: str | None = None) -> ParsedResponse:
    """Parse exactly one JSON value, or say precisely why not."""
    if isinstance(raw, bytes):
        size = len(raw)
    else:
        try:
            size = len(raw.encode("utf-8"))
        except UnicodeEncodeError as exc:
            size = len(raw.encode("utf-8", errors="surrogatepass"))
            if size <= limits.max_bytes:
                return ParsedResponse(Code.MALFORMED_JSON, raw, message=f"unpaired UTF-16 surrogate at character {exc.start}")
    if size > limits.max_bytes:
        return ParsedResponse(
            Code.TOO_LARGE, _keep(raw, limits.max_bytes), message=f"{size} bytes exceeds the limit of {limits.max_bytes}"
        )
    try:
        text = _decode_text(raw)
    except _Reject as rej:
        return ParsedResponse(rej.code, _keep(raw), message=rej.message)
    if finish_reason == "length":
        return ParsedResponse(Code.TRUNCATED, text, message="the generator stopped on its length limit")
    if not text.strip():
        return ParsedResponse(Code.MALFORMED_JSON, text, message="empty response")
    if _max_depth_exceeded(text, limits.max_depth):
        return ParsedResponse(Code.TOO_DEEP, text, message=f"nesting deeper than {limits.max_depth}")
    try:
        value, end = _DECODER.raw_decode(text, _skip_ws(text, 0))
    except _Reject as rej:
        return ParsedResponse(rej.code, text, message=rej.message)
    except json.JSONDecodeError as exc:
        if _looks_truncated(text, exc):
            return ParsedResponse(Code.TRUNCATED, text, message=f"text ends inside a value: {exc.msg}")
        return ParsedResponse(Code.MALFORMED_JSON, text, message=f"{exc.msg} at line {exc.lineno} column {exc.colno}")
    except RecursionError:
        return ParsedResponse(Code.TOO_DEEP, text, message="nesting exceeds the interpreter stack")
    if _skip_ws(text, end) != len(text):
        return ParsedResponse(Code.MALFORMED_JSON, text, message=f"trailing data after the JSON value at offset {end}")
    if "\\u" in text and _SURROGATE_ESCAPE_RE.search(text) and _contains_lone_surrogate(value):
        return ParsedResponse(Code.MALFORMED_JSON, text, message="string holds an unpaired UTF-16 surrogate")
    return ParsedResponse(Code.ACCEPTED, text, value=value)


def parse_response(raw: str | bytes, limits: ParseLimits = DEFAULT_LIMITS, finish_reason: str | None = None) -> ParsedResponse:
    """Classify model text as ABSTAIN, an explicit refusal, or strict JSON (see parse_json_text).

    Bytes (a file, a socket) are read as UTF-8 first, so ``ABSTAIN`` means the same whether it
    arrives as text or as bytes; undecodable bytes go on to be reported by the JSON parser."""
    text: str | None = raw if isinstance(raw, str) else None
    if isinstance(raw, bytes) and len(raw) <= limits.max_bytes:
        with contextlib.suppress(UnicodeDecodeError):
            text = raw.decode("utf-8", errors="strict")
    if text is not None and text[:1] not in ("[", "{") and len(text) <= limits.max_bytes:
        abstain = _ABSTAIN_RE.match(text)
        if abstain:
            return ParsedResponse(Code.ABSTAIN, text, message=(abstain.group("reason") or "").strip())
        if _REFUSAL_RE.match(text):
            return ParsedResponse(Code.REFUSAL, text, message="explicit refusal")
    parsed = parse_json_text(raw, limits, finish_reason)
    if parsed.is_value and isinstance(parsed.value, dict) and set(parsed.value) == {"refusal"}:
        return ParsedResponse(Code.REFUSAL, parsed.raw, message=str(parsed.value["refusal"])[:200])
    return parsed


def _skip_ws(text: str, pos: int) -> int:
    n = len(text)
    while pos < n and text[pos] in " \t\n\r":
        pos += 1
    return pos


def _keep(raw: str | bytes, limit: int | None = None) -> str:
    """The raw text as a str for the ledger; undecodable bytes are kept visibly escaped.

    Text over the size limit is kept up to the limit and marked as cut: a ledger row must not
    grow with whatever a generator or an attacker produced.
    """
    total = len(raw)
    if limit is not None and total > limit:
        raw = raw[:limit]
    text = raw.decode("utf-8", errors="backslashreplace") if isinstance(raw, bytes) else raw
    if limit is not None and total > limit:
        unit = "bytes" if isinstance(raw, bytes) else "characters"
        text += f"...<cut: {total} {unit} in all>"
    return text
