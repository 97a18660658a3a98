"""Strict JSON value helpers: type-exact equality, deep copy, leaf flattening and hashing.

Python conflates ``True == 1``; JSON does not. Every comparison in the contract (patch ``test``,
collateral edits, final-object match) goes through :func:`json_equal` so that a boolean never
passes for a number.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .pointer import escape_token


def json_equal(a: Any, b: Any) -> bool:
    """RFC 6902 §4.6 equality: same JSON type and value; numbers compare numerically."""
    if a is b:
        return True
    ta, tb = type(a), type(b)
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if ta in (int, float) and tb in (int, float):
        return a == b
    if ta is not tb:
        return False
    if ta is dict:
        return a.keys() == b.keys() and all(json_equal(v, b[k]) for k, v in a.items())
    if ta is list:
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def json_identical(a: Any, b: Any) -> bool:
    """Same JSON type and value at every depth: unlike :func:`json_equal`, ``1`` is not ``1.0``.

    Immutable fields are identity (ids, amounts owned by someone else): a whole-object answer that
    turns ``1`` into ``1.0`` changed the value a typed tool receives, though RFC 6902 calls them equal.
    """
    if a is b:
        return True
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is dict:
        return a.keys() == b.keys() and all(json_identical(v, b[k]) for k, v in a.items())
    if ta is list:
        return len(a) == len(b) and all(json_identical(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def deep_copy(value: Any) -> Any:
    """Copy a JSON value; much faster than :func:`copy.deepcopy` for plain JSON trees."""
    t = type(value)
    if t is dict:
        return {k: deep_copy(v) for k, v in value.items()}
    if t is list:
        return [deep_copy(v) for v in value]
    return value


def leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    """Map every leaf pointer to its value; an empty object or array is itself a leaf."""
    out: dict[str, Any] = {}
    _collect_leaves(value, prefix, out)
    return out


def _collect_leaves(value: Any, prefix: str, out: dict[str, Any]) -> None:
    t = type(value)
    if t is dict and value:
        for k, v in value.items():
            _collect_leaves(v, prefix + "/" + escape_token(k), out)
    elif t is list and value:
        for i, v in enumerate(value):
            _collect_leaves(v, f"{prefix}/{i}", out)
    else:
        out[prefix] = value


def canonical_json(value: Any) -> str:
    """Canonical text of a JSON value: sorted keys, no spaces, UTF-8 kept, so hashes are stable."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_json(value: Any) -> str:
    """SHA-256 hex digest of :func:`canonical_json`."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def json_type_name(value: Any) -> str:
    """The JSON Schema type name of a Python value (``integer`` for integral ints only)."""
    t = type(value)
    if t is bool:
        return "boolean"
    if t is int:
        return "integer"
    if t is float:
        return "number"
    if t is str:
        return "string"
    if t is list:
        return "array"
    if t is dict:
        return "object"
    if value is None:
        return "null"
    return t.__name__
