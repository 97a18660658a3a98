"""Collateral edits: leaf changes a patch made outside the places it was meant to change.

Two views, both over changed leaves (type-exact comparison; empty objects/arrays are leaves so
that emptying a container is visible):

- :func:`collateral_edits` is C(p) of the reward: changes not at or under a location an operation
  named. Renumbered array elements after a mid-array insert/remove count, since no operation
  named them.
- :func:`off_pointer_edits` is the pointer-relative metric (paper C.8): changes not at or under any
  pointer of the verifier report the patch answered. It exposes wrong-path repairs and coarse
  edits, such as replacing a whole parent object to fix one field.
"""

from __future__ import annotations

from typing import Any

from .jsonvalue import json_equal, leaves
from .pointer import Tokens, format_pointer


def changed_leaves(before: Any, after: Any) -> list[str]:
    """Pointers of leaves added, removed or changed between two documents, sorted."""
    a, b = leaves(before), leaves(after)
    changed = {p for p in a.keys() ^ b.keys()}
    changed.update(p for p in a.keys() & b.keys() if not json_equal(a[p], b[p]))
    return sorted(changed)


def _outside(changed: list[str], prefixes: list[str]) -> list[str]:
    return [p for p in changed if not any(p == q or p.startswith(q + "/") for q in prefixes)]


def collateral_edits(before: Any, after: Any, touched: tuple[Tokens, ...]) -> list[str]:
    """Changed leaves not at or under any location the patch operations named."""
    if before is after:
        return []
    return _outside(changed_leaves(before, after), [format_pointer(t) for t in touched])


def off_pointer_edits(before: Any, after: Any, pointers: tuple[str, ...]) -> list[str]:
    """Changed leaves not at or under any pointer of the report the patch answered."""
    if before is after:
        return []
    return _outside(changed_leaves(before, after), list(pointers))
