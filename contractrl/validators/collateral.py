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

from collections.abc import Iterable
from typing import Any

from .jsonvalue import json_equal, leaves
from .pointer import Tokens, escape_token, format_pointer

_ABSENT = object()


def changed_leaves(before: Any, after: Any) -> list[str]:
    """Pointers of leaves added, removed or changed between two documents, sorted.

    Subtrees that are the same object in both documents are skipped without a look: the
    copy-on-write apply shares every untouched subtree, so only the rewritten paths are walked.
    """
    out: set[str] = set()
    _diff(before, after, "", out)
    return sorted(out)


def _diff(a: Any, b: Any, prefix: str, out: set[str]) -> None:
    if a is b:
        return
    ta, tb = type(a), type(b)
    if ta is dict and tb is dict and a and b:
        for key, old in a.items():
            new = b.get(key, _ABSENT)
            if new is old:
                continue
            here = prefix + "/" + escape_token(key)
            if new is _ABSENT:
                out.update(leaves(old, here))
            else:
                _diff(old, new, here, out)
        for key in b.keys() - a.keys():
            out.update(leaves(b[key], prefix + "/" + escape_token(key)))
    elif ta is list and tb is list and a and b:
        common = min(len(a), len(b))
        for i in range(common):
            _diff(a[i], b[i], f"{prefix}/{i}", out)
        for extra in (a[common:], b[common:]):
            for offset, value in enumerate(extra, common):
                out.update(leaves(value, f"{prefix}/{offset}"))
    elif ta is not tb and (ta in (dict, list) or tb in (dict, list)):
        # the value at ``prefix`` changed kind (object, array or scalar): every leaf on both sides
        # changed, even where an object key "0" and an array index 0 flatten to the same pointer
        out.update(leaves(a, prefix))
        out.update(leaves(b, prefix))
    elif ta in (dict, list):
        old, new = leaves(a, prefix), leaves(b, prefix)
        out.update(old.keys() ^ new.keys())
        out.update(p for p in old.keys() & new.keys() if not json_equal(old[p], new[p]))
    elif not json_equal(a, b):
        out.add(prefix)


def outside(changed: list[str], prefixes: Iterable[str]) -> list[str]:
    """The pointers in ``changed`` not at, under or above any of ``prefixes``.

    A changed leaf *above* a prefix is an empty container that was filled (or a container emptied)
    by writing at the prefix: that change is the write itself, not collateral.
    """
    bounds = tuple(prefixes)
    if "" in bounds:
        return []
    return [p for p in changed if not any(p == q or p.startswith(q + "/") or q.startswith(p + "/") or p == "" for q in bounds)]


def collateral_edits(before: Any, after: Any, touched: tuple[Tokens, ...]) -> list[str]:
    """Changed leaves not at or under any location the patch operations named."""
    return outside(changed_leaves(before, after), (format_pointer(t) for t in touched))


def off_pointer_edits(before: Any, after: Any, pointers: tuple[str, ...]) -> list[str]:
    """Changed leaves not at or under any pointer of the report the patch answered."""
    return outside(changed_leaves(before, after), pointers)
