"""Parsing model text into a typed repair action: a bounded RFC 6902 patch, ABSTAIN, or a failure.

Parsing is where most hostile or broken output is stopped, so it is total: any text yields an
action, never an exception. Structural problems are ``patch_malformed``; a well-formed operation
the configuration does not allow is ``op_not_allowed``; a patch longer than the remaining operation
budget is ``op_budget_exceeded`` before any operation is looked at (so 100,000 operations cost
one length check).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .codes import Code
from .pointer import PointerSyntaxError, Tokens, parse_pointer
from .strict_json import DEFAULT_LIMITS, ParseLimits, parse_response

OP_KINDS: tuple[str, ...] = ("add", "remove", "replace", "move", "copy", "test")
_NEEDS_VALUE = frozenset({"add", "replace", "test"})
_NEEDS_FROM = frozenset({"move", "copy"})
NO_VALUE: Any = object()


@dataclass(slots=True)
class PatchOp:
    """One parsed operation; pointers are kept both as text (for ledgers) and as tokens."""

    op: str
    path: str
    path_tokens: Tokens
    value: Any = NO_VALUE
    from_: str | None = None
    from_tokens: Tokens | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"op": self.op, "path": self.path}
        if self.from_ is not None:
            out["from"] = self.from_
        if self.value is not NO_VALUE:
            out["value"] = self.value
        return out


@dataclass(slots=True)
class PatchAction:
    ops: tuple[PatchOp, ...]
    raw: str

    def to_list(self) -> list[dict[str, Any]]:
        return [op.to_dict() for op in self.ops]


@dataclass(slots=True)
class AbstainAction:
    raw: str
    reason: str = ""


@dataclass(slots=True)
class RefusalAction:
    raw: str
    message: str = ""


@dataclass(slots=True)
class InvalidAction:
    """Text that is no admissible action; ``op_index`` names the offending operation if any."""

    code: Code
    message: str
    raw: str
    op_index: int | None = None
    pointer: str = ""


Action = PatchAction | AbstainAction | RefusalAction | InvalidAction


def parse_op(raw: Any, index: int, allowed_ops: frozenset[str]) -> PatchOp | tuple[Code, str, str]:
    """One operation, or (code, message, pointer) saying why it is not one."""
    if not isinstance(raw, dict):
        return Code.PATCH_MALFORMED, f"operation {index} is not an object", ""
    op = raw.get("op")
    if not isinstance(op, str) or op not in OP_KINDS:
        return Code.PATCH_MALFORMED, f"operation {index} has unknown op {op!r}", ""
    path = raw.get("path")
    if not isinstance(path, str):
        return Code.PATCH_MALFORMED, f"operation {index} ({op}) needs a string 'path'", ""
    try:
        tokens = parse_pointer(path)
    except PointerSyntaxError as exc:
        return Code.PATCH_MALFORMED, f"operation {index}: {exc}", ""
    if op in _NEEDS_VALUE and "value" not in raw:
        return Code.PATCH_MALFORMED, f"operation {index} ({op}) needs a 'value'", path
    from_text: str | None = None
    from_tokens: Tokens | None = None
    if op in _NEEDS_FROM:
        raw_from = raw.get("from")
        if not isinstance(raw_from, str):
            return Code.PATCH_MALFORMED, f"operation {index} ({op}) needs a string 'from'", path
        from_text = raw_from
        try:
            from_tokens = parse_pointer(from_text)
        except PointerSyntaxError as exc:
            return Code.PATCH_MALFORMED, f"operation {index} 'from': {exc}", path
    if op not in allowed_ops:
        return Code.OP_NOT_ALLOWED, f"operation {index}: op {op!r} is not allowed here", path
    value = raw["value"] if op in _NEEDS_VALUE else NO_VALUE
    return PatchOp(op, path, tokens, value, from_text, from_tokens)


def parse_action(
    text: str | bytes,
    *,
    allowed_ops: frozenset[str] = frozenset(OP_KINDS),
    max_ops: int,
    limits: ParseLimits = DEFAULT_LIMITS,
    finish_reason: str | None = None,
) -> Action:
    """Turn model text into an action; never raises on any input text."""
    parsed = parse_response(text, limits, finish_reason)
    raw = parsed.raw
    if parsed.code is Code.ABSTAIN:
        return AbstainAction(raw, parsed.message)
    if parsed.code is Code.REFUSAL:
        return RefusalAction(raw, parsed.message)
    if not parsed.is_value:
        return InvalidAction(parsed.code, parsed.message, raw)
    value = parsed.value
    if not isinstance(value, list):
        return InvalidAction(Code.PATCH_MALFORMED, "a patch is a JSON array of operations", raw)
    if not value:
        return InvalidAction(Code.PATCH_MALFORMED, "the patch has no operations", raw)
    if len(value) > max_ops:
        return InvalidAction(Code.OP_BUDGET_EXCEEDED, f"{len(value)} operations exceed the remaining budget of {max_ops}", raw)
    ops: list[PatchOp] = []
    for index, item in enumerate(value):
        result = parse_op(item, index, allowed_ops)
        if not isinstance(result, PatchOp):
            code, message, pointer = result
            return InvalidAction(code, message, raw, index, pointer)
        ops.append(result)
    return PatchAction(tuple(ops), raw)
