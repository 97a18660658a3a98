"""The part of a tool schema a repair needs: the subschemas at and above the reported pointers.

A full tool schema is most of a repair prompt (471 of 744 SmolLM2 tokens on the built-in catalog)
and almost all of it is about fields the verifier did not flag. A repair at ``/having/op`` needs
what governs ``/having/op`` (every union branch that can reach it), the ``required`` lists of the
objects on the way (``/``, ``/having``), which of those paths are immutable, and, where a property
is unexpected, which names its parent allows. This module renders exactly that, from the public
schema and the public report, so every arm that is shown it sees the same facts.

Pure functions of (schema, pointers, immutable paths); local ``$ref`` s are followed, unions are
kept as the list of branches that reach the path, and a subschema too long for a prompt is shown
with its deeper levels elided (``"…"``), never silently dropped.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from referencing.exceptions import Unresolvable

from ..errors import SchemaCompileError
from ..validators.codes import Code
from ..validators.jsonvalue import canonical_json
from ..validators.pointer import PointerSyntaxError, Tokens, format_pointer, parse_pointer, resolve
from ..validators.report import VerifierError
from ..validators.schema import compile_schema

# a subschema rendered longer than this is shown with its deeper levels elided
MAX_SUBSCHEMA_CHARS = 480
# the closest branches of a union may take more: which branch fits is what such a repair is about
MAX_UNION_CHARS = 720
# one line of where the value breaks a union's closest branch
MAX_HINT_CHARS = 100
_ALLOWED_VALUE_CODES = (Code.ENUM_MISMATCH, Code.CONST_MISMATCH)
ELIDED = "…"
_UNIONS = ("allOf", "anyOf", "oneOf")
_MAX_REF_HOPS = 16
# a union of more branches than this shows only the ones the value comes closest to
_MAX_BRANCHES = 3
_ABSENT = object()


def _deref(node: Any, root: Any) -> Any:
    """Follow local ``$ref`` s (``#/...``) a bounded number of times; anything else is returned as is."""
    for _ in range(_MAX_REF_HOPS):
        if not (isinstance(node, dict) and isinstance(node.get("$ref"), str) and node["$ref"].startswith("#")):
            return node
        try:
            target = resolve(root, parse_pointer(node["$ref"][1:]), None)
        except PointerSyntaxError:
            return node
        if target is None:
            return node
        rest = {k: v for k, v in node.items() if k != "$ref"}
        node = {**target, **rest} if isinstance(target, dict) and rest else target
    return node


def _branches(node: Any, root: Any) -> list[dict[str, Any]]:
    """The node and every union branch under it (dereferenced), depth first."""
    node = _deref(node, root)
    if not isinstance(node, dict):
        return []
    out = [node]
    for key in _UNIONS:
        for branch in node.get(key, []) if isinstance(node.get(key), list) else []:
            out.extend(_branches(branch, root))
    return out


def _children(node: dict[str, Any], token: str) -> list[Any]:
    """Subschemas that govern the member ``token`` of an instance governed by ``node``."""
    out: list[Any] = []
    props = node.get("properties")
    if isinstance(props, dict) and token in props:
        out.append(props[token])
    elif isinstance(node.get("additionalProperties"), dict):
        out.append(node["additionalProperties"])
    if token.isdigit() or token == "-":
        prefix = node.get("prefixItems")
        if isinstance(prefix, list) and token.isdigit() and int(token) < len(prefix):
            out.append(prefix[int(token)])
        elif isinstance(node.get("items"), dict):
            out.append(node["items"])
    return out


def _unique(nodes: Iterable[Any]) -> list[Any]:
    seen: dict[str, Any] = {}
    for node in nodes:
        seen.setdefault(canonical_json(node), node)
    return list(seen.values())


def declared_types(node: Any) -> set[str]:
    """The type names a subschema declares (``"type": "x"`` or ``"type": [...]``); none for a node
    that declares no type, or is not an object."""
    declared = node.get("type") if isinstance(node, dict) else None
    return {t for t in (declared if isinstance(declared, list) else [declared]) if isinstance(t, str)}


def subschemas_at(schema: Any, tokens: Tokens) -> list[Any]:
    """Every subschema that can govern the value at ``tokens`` (one per union branch that reaches it)."""
    frontier: list[Any] = [schema]
    for token in tokens:
        frontier = _unique(child for node in frontier for branch in _branches(node, schema) for child in _children(branch, token))
        if not frontier:
            return []
    return _unique(_deref(node, schema) for node in frontier)


def _shorten_lists(node: Any, keep: int) -> Any:
    """``node`` with every list of more than ``keep + 2`` scalars (long enums) cut to ``keep`` and a count."""
    if isinstance(node, list):
        if len(node) > keep + 2 and all(not isinstance(item, (dict, list)) for item in node):
            return [*node[:keep], f"{ELIDED}(+{len(node) - keep})"]
        return [_shorten_lists(item, keep) for item in node]
    if isinstance(node, dict):
        return {key: _shorten_lists(value, keep) for key, value in node.items()}
    return node


def _elide(node: Any, depth: int) -> Any:
    """``node`` with every subschema below ``depth`` levels replaced by ``"…"`` (keywords kept)."""
    if isinstance(node, list):
        return [_elide(item, depth) for item in node]
    if not isinstance(node, dict):
        return node
    if depth <= 0:
        return ELIDED
    return {key: _elide(value, depth - 1) if isinstance(value, (dict, list)) else value for key, value in node.items()}


def compact_subschema(node: Any, limit: int = MAX_SUBSCHEMA_CHARS) -> str:
    """Canonical JSON of ``node``. Over ``limit``, long enums are cut first (to 6, 3, then 1 member),
    then the deepest levels give way, one at a time."""
    text = canonical_json(node)
    for keep in (6, 3, 1):
        if len(text) <= limit:
            return text
        node = _shorten_lists(node, keep)
        text = canonical_json(node)
    depth = 8
    while len(text) > limit and depth > 1:
        depth -= 1
        text = canonical_json(_elide(node, depth))
    return text


def _branch_errors(branch: Any, value: Any, root: Any) -> list[VerifierError] | None:
    """Where ``value`` breaks ``branch`` alone, by the reference backend (python-jsonschema, with the
    standard's formats and patterns); None for a branch no value fits or that cannot be checked here."""
    if branch is True:
        return []
    if not isinstance(branch, dict):
        return None
    # the branch is validated on its own: give it the root's definitions, so local $refs resolve
    scoped = {**branch, **{key: root[key] for key in ("$defs", "definitions") if isinstance(root, dict) and key in root}}
    try:  # compiled once per branch (the cache): the same tool schemas come back every decision
        return compile_schema(scoped, "python").errors(value)
    except (SchemaCompileError, Unresolvable, re.error, RecursionError, TypeError, ValueError):
        return None


def _misfit(errors: list[VerifierError] | None) -> int:
    """How many constraints of a branch the value breaks (a branch not checkable here is never closest)."""
    return sys.maxsize if errors is None else len(errors)


@dataclass(frozen=True)
class _UnionFit:
    """A oneOf/anyOf node's branches and, for each, where the value breaks it."""

    key: str
    branches: list[Any]
    errors: list[list[VerifierError] | None]

    @classmethod
    def of(cls, node: dict[str, Any], value: Any, root: Any) -> _UnionFit | None:
        for key in ("oneOf", "anyOf"):
            branches = node.get(key)
            if isinstance(branches, list) and branches:
                return cls(key, branches, [_branch_errors(_deref(b, root), value, root) for b in branches])
        return None

    def closest(self) -> list[int]:
        """Indices of the branches the value breaks fewest constraints of, in schema order."""
        misfits = [_misfit(e) for e in self.errors]
        best = min(misfits)
        return [] if best == sys.maxsize else [i for i, m in enumerate(misfits) if m == best]

    def closest_errors(self) -> list[VerifierError]:
        closest = self.closest()
        return list(self.errors[closest[0]] or []) if len(closest) == 1 else []


def closest_branches(node: dict[str, Any], value: Any, root: Any) -> tuple[str, list[Any], int] | None:
    """For a union of many branches: (keyword, the branches the value breaks fewest constraints of,
    total branches); None when ``node`` is no such union."""
    fit = _UnionFit.of(node, value, root)
    return _kept(fit) if fit is not None else None


def _kept(fit: _UnionFit) -> tuple[str, list[Any], int] | None:
    if len(fit.branches) <= _MAX_BRANCHES:
        return None
    kept = fit.closest()[:_MAX_BRANCHES] or list(range(_MAX_BRANCHES))
    return fit.key, [fit.branches[i] for i in kept], len(fit.branches)


def closest_branch_errors(node: dict[str, Any], value: Any, root: Any) -> list[VerifierError]:
    """Where the value breaks the one union branch it comes closest to (pointers relative to the
    value); empty when ``node`` is no union, the value fits, or no single branch is closest.

    The verifier reports a union failure at the union (``union_mismatch at /where/0``), which says
    that the value fits no branch but not which of its members is wrong; the closest branch's own
    errors do, and they follow from the public schema and call alone.
    """
    fit = _UnionFit.of(node, value, root)
    return fit.closest_errors() if fit is not None else []


def _hint(where: str, error: VerifierError) -> str:
    # the allowed values are in the branch shown just above; the value that missed them is the news
    message = f"{error.code.value}: got {error.actual}" if error.code in _ALLOWED_VALUE_CODES else error.message
    message = message if len(message) <= MAX_HINT_CHARS else message[: MAX_HINT_CHARS - 1] + ELIDED
    return f"{where}{error.pointer} (closest branch): {message}"


def _line(path: Tokens, nodes: Sequence[Any], immutable: bool, value: Any, root: Any) -> str:
    where = format_pointer(path) or "/"
    flag = " (immutable)" if immutable else ""
    if not nodes:
        return f"{where}{flag}: not in the schema"
    if len(nodes) > 1:
        return f"{where}{flag}: one of {len(nodes)} branches: {compact_subschema(list(nodes))}"
    node = nodes[0]
    if not isinstance(node, dict) or value is _ABSENT:
        return f"{where}{flag}: {compact_subschema(node)}"
    fit = _UnionFit.of(node, value, root)
    union = _kept(fit) if fit is not None else None
    if union is None:
        line = f"{where}{flag}: {compact_subschema(node)}"
    else:
        key, kept, total = union
        rest = {k: v for k, v in node.items() if k != key}
        shown = compact_subschema({**rest, key: kept}, MAX_UNION_CHARS)
        line = f"{where}{flag}: {key} of {total} branches, the {len(kept)} closest to the value: {shown}"
    hints = fit.closest_errors()[:_MAX_BRANCHES] if fit is not None else []
    return "\n".join([line, *(_hint(format_pointer(path), error) for error in hints)])


def _parse_all(pointers: Iterable[str]) -> list[Tokens]:
    """Distinct parsed pointers in order; one that is not a pointer (noisy feedback) is skipped."""
    out: list[Tokens] = []
    for pointer in pointers:
        try:
            tokens = parse_pointer(pointer)
        except PointerSyntaxError:
            continue
        if tokens not in out:
            out.append(tokens)
    return out


def schema_excerpt(
    schema: Any,
    pointers: Iterable[str],
    immutable: Iterable[str] = (),
    unexpected: Iterable[str] = (),
    instance: Any = _ABSENT,
) -> str:
    """The lines of the schema a repair at ``pointers`` needs.

    One line per reported path with the subschema that governs it; before them, the ``required``
    list of every object on the way; for ``unexpected`` paths (additional properties), the names
    their parent allows. Paths that are, or lie under, an ``immutable`` path are marked. Given the
    ``instance``, a union of more than three branches shows the ones its value comes closest to.
    """
    frozen = _parse_all(immutable)
    paths = _parse_all(pointers)
    extra = set(_parse_all(unexpected))

    def is_frozen(tokens: Tokens) -> bool:
        return any(tokens[: len(f)] == f for f in frozen)

    context: dict[Tokens, str] = {}
    for tokens in paths:
        for depth in range(len(tokens)):
            parent = tokens[:depth]
            required = sorted(
                {r for node in subschemas_at(schema, parent) for b in _branches(node, schema) for r in b.get("required", [])}
            )
            if required and parent not in context:
                context[parent] = f"{format_pointer(parent) or '/'}: required {canonical_json(required)}"
        if tokens in extra and tokens:
            parent = tokens[:-1]
            names = sorted(
                {
                    name
                    for node in subschemas_at(schema, parent)
                    for b in _branches(node, schema)
                    for name in (b.get("properties") or {})
                }
            )
            key = (*parent, "\0allowed")
            context.setdefault(key, f"{format_pointer(parent) or '/'}: allowed properties {canonical_json(names)}")
    lines = [context[key] for key in sorted(context)]
    lines += [
        _line(tokens, subschemas_at(schema, tokens), is_frozen(tokens), resolve(instance, tokens, _ABSENT), schema)
        for tokens in paths
    ]
    return "\n".join(lines)


__all__ = [
    "MAX_SUBSCHEMA_CHARS",
    "closest_branch_errors",
    "closest_branches",
    "compact_subschema",
    "declared_types",
    "schema_excerpt",
    "subschemas_at",
]
