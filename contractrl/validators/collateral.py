"""Collateral edits: leaf changes a patch made outside the paths its operations name.

A repair should change what the verifier pointed at and nothing else; every other changed leaf is
collateral (the paper's C(p)). Leaves are compared with type-exact JSON equality, and empty
objects/arrays count as leaves so that emptying a container is visible.
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


def collateral_edits(before: Any, after: Any, touched: tuple[Tokens, ...]) -> list[str]:
    """Changed leaves not at or under any subtree the patch operations touched."""
    if before is after:
        return []
    prefixes = [format_pointer(t) for t in touched]
    return [p for p in changed_leaves(before, after) if not any(p == q or p.startswith(q + "/") for q in prefixes)]
