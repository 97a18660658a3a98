"""Static cost bounds: what compiling a schema and verifying an instance against it may cost.

A schema is untrusted input, and a few hundred bytes of one can cost a validator gigabytes or
minutes: ``$defs`` levels that each ``anyOf`` two references to the next double the work per
level (2^20 paths from 1.3 KB), counted repeats multiply inside a pattern
(``(?:a{65535}){65535}``), and a thousand ``patternProperties`` meet ten thousand keys. Neither
backend can be interrupted once it runs (jsonschema-rs is native code), so the budget is
checked *before* anything runs, from the schema and the instance alone:

- :func:`pattern_size` bounds a pattern's program size (its counted repeats multiplied out);
- :func:`schema_cost` bounds how many keyword checks one instance location can cost (the
  in-place *fan-out* through ``$ref``/``allOf``/``anyOf``/...) and, level by level down to the
  instance depth limit, how many schema nodes one path through an instance can meet (*reach*);
- :func:`verification_work` multiplies the instance's size by that reach: an upper bound of the
  keyword checks one verification makes.

Each bound over its limit is a typed refusal: :class:`~contractrl.errors.SchemaCompileError` for a
schema (never compiled), ``too_large`` for a verification (the object is refused, never passed).
The limits and what they cost on this project's machine are in docs/contract.md ("Budgets").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import SchemaCompileError

# Applicators whose subschemas check the same instance location as their parent.
IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
IN_PLACE_ONE = ("not", "if", "then", "else")
# Applicators whose subschemas check a child of the instance location.
DESCEND_ONE = ("items", "contains", "additionalProperties", "propertyNames", "unevaluatedItems", "unevaluatedProperties")
DESCEND_MAPS = ("properties", "patternProperties")
_SATURATE = 1 << 62  # costs are clamped here: a bound past every limit needs no exact value


@dataclass(frozen=True, slots=True)
class Budget:
    """The limits a schema and a verification must stay within (docs/contract.md, "Budgets").

    ``max_fanout`` bounds the keyword checks at one instance location; ``max_reach`` the schema
    nodes one path from the root of an instance meets, down to ``instance_depth`` levels;
    ``max_work`` the checks of one whole verification (instance nodes x reach); ``max_pattern``
    a pattern's size with its repeats multiplied out.
    """

    max_fanout: int = 10_000
    max_reach: int = 1_000_000
    max_work: int = 4_000_000
    max_pattern: int = 100_000
    instance_depth: int = 64


DEFAULT_BUDGET = Budget()


@dataclass(frozen=True, slots=True)
class SchemaCost:
    """What one schema costs per instance location (``fanout``) and per instance path (``reach``)."""

    fanout: int
    reach: int
    large_enum: bool
    pattern_units: int = 0  # the schema's patterns' sizes together: what its compiled programs weigh

    def work(self, instance_nodes: int) -> int:
        return min(instance_nodes * self.reach, _SATURATE)


# ---------------------------------------------------------------- patterns


def pattern_size(pattern: str) -> int:
    """An upper bound of a (syntactically valid ECMA-262) pattern's size with repeats multiplied out.

    Atoms count 1, a ``\\p{...}`` property 64 (its compiled class is large), a group the sum of its
    alternatives; ``{n,m}`` multiplies its atom by ``m`` (``n + 1`` when open), ``*``/``+`` by 2.
    Engines expand counted repeats into copies, so this tracks what compiling costs.
    """
    stack: list[tuple[int, int]] = []  # (alternatives' total so far, current sequence) per open group
    total, seq, last = 0, 0, 0
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "\\":
            j = i + 2
            if pattern[i + 1 : i + 2] in ("p", "P", "u") and pattern[i + 2 : i + 3] == "{":
                j = pattern.index("}", i) + 1
            atom = 64 if pattern[i + 1 : i + 2] in ("p", "P") else 1
            i, last = j, atom
            seq = _add(seq, atom)
            continue
        if char == "[":
            j, atom = _class_end(pattern, i)
            i, last = j, atom
            seq = _add(seq, atom)
            continue
        if char == "(":
            stack.append((total, seq))
            total, seq, last = 0, 0, 0
            i += 1
            if pattern.startswith(("?:", "?=", "?!"), i):
                i += 2
            elif pattern.startswith(("?<=", "?<!"), i):
                i += 3
            elif pattern.startswith("?<", i):
                i = pattern.index(">", i) + 1
            continue
        if char == ")":
            group = _add(total, seq)
            total, seq = stack.pop()
            seq, last = _add(seq, group), group
            i += 1
            continue
        if char == "|":
            total, seq, last = _add(total, seq), 0, 0
            i += 1
            continue
        if char in "*+?{":
            times, i = _repeat(pattern, i)
            seq = _add(seq - last, min(last * times, _SATURATE))
            last = 0
            continue
        seq, last = _add(seq, 1), 1
        i += 1
    return _add(total, seq)


def _add(a: int, b: int) -> int:
    return min(a + b, _SATURATE)


def _class_end(pattern: str, start: int) -> tuple[int, int]:
    """The index after the class opening at ``start``, and its size (a property inside: 64)."""
    i, size = start + 1, 1
    if pattern[i : i + 1] == "^":
        i += 1
    if pattern[i : i + 1] == "]":  # ECMA: "[]" is the empty class, "[^]" any character
        return i + 1, size
    while i < len(pattern) and pattern[i] != "]":
        if pattern[i] == "\\":
            if pattern[i + 1 : i + 2] in ("p", "P"):
                size = 64
            i += 2
        else:
            i += 1
    return i + 1, size


def _repeat(pattern: str, i: int) -> tuple[int, int]:
    """(how many copies a quantifier at ``i`` makes of its atom, the index after it)."""
    char = pattern[i]
    if char == "{":
        close = pattern.index("}", i)
        low, comma, high = pattern[i + 1 : close].partition(",")
        # {n} makes n copies, {n,m} m, and {n,} n copies then a loop
        times = int(low) if not comma else int(high) if high else int(low) + 1
        i = close + 1
    else:
        times = 1 if char == "?" else 2
        i += 1
    if pattern[i : i + 1] == "?":  # lazy
        i += 1
    return max(times, 1), i


def check_pattern(pattern: str, budget: Budget = DEFAULT_BUDGET) -> None:
    """Refuse a pattern whose program would be larger than ``budget.max_pattern``."""
    size = pattern_size(pattern)
    if size > budget.max_pattern:
        shown = pattern if len(pattern) <= 60 else pattern[:60] + "..."
        raise SchemaCompileError(f"pattern /{shown}/ expands to over {budget.max_pattern} units ({_big(size)})")


# ---------------------------------------------------------------- schemas


def schema_cost(root: Any, budget: Budget = DEFAULT_BUDGET) -> SchemaCost:
    """The fan-out and reach of a normalised schema (local ``$ref`` only, no in-place cycles).

    Refuses with :class:`SchemaCompileError` when the fan-out or the reach is over its limit.
    """
    if not isinstance(root, dict):
        return SchemaCost(1, 1, False, 0)
    nodes = _index(root)
    fanout: dict[str, int] = {}
    order = _in_place_order(nodes)
    for ptr in order:  # children before parents
        fanout[ptr] = min(_own_cost(nodes[ptr]) + sum(fanout[c] for c in _in_place(nodes, ptr)), _SATURATE)
    worst = max(fanout.values())
    if worst > budget.max_fanout:
        where = max(fanout, key=fanout.__getitem__)
        raise SchemaCompileError(
            f"schema costs over {budget.max_fanout} checks per instance location ({_big(worst)}: $ref/anyOf/allOf fan-out)",
            where,
        )
    # subschemas one level down from a node (with how many times each is applied), through
    # everything the node applies in place
    below: dict[str, Counter[str]] = {}
    for ptr in order:
        kids = Counter(_descend(nodes, ptr))
        for child in _in_place(nodes, ptr):
            kids.update(below[child])
        below[ptr] = kids
    reach = dict(fanout)
    for _ in range(budget.instance_depth):
        step = {p: min(fanout[p] + sum(k * reach[c] for c, k in below[p].items()), _SATURATE) for p in nodes}
        if step == reach:
            break
        reach = step
    if reach[""] > budget.max_reach:
        raise SchemaCompileError(f"schema reaches over {budget.max_reach} subschemas along one instance path ({_big(reach[''])})")
    large_enum = any(isinstance(n, dict) and isinstance(n.get("enum"), list) and len(n["enum"]) > 64 for n in nodes.values())
    return SchemaCost(worst, reach[""], large_enum, sum(pattern_size(p) for p in _patterns(nodes.values())))


def _patterns(nodes: Any) -> Iterator[str]:
    for node in nodes:
        if not isinstance(node, dict):
            continue
        if isinstance(node.get("pattern"), str):
            yield node["pattern"]
        if isinstance(node.get("patternProperties"), dict):
            yield from node["patternProperties"]


def _own_cost(node: Any) -> int:
    """Checks one node makes at one location: one per keyword, one per pattern, one per enum member."""
    if not isinstance(node, dict):
        return 1
    cost = 1 + len(node)
    patterns = node.get("patternProperties")
    if isinstance(patterns, dict):
        cost += len(patterns)
    enum = node.get("enum")
    if isinstance(enum, list):
        cost += len(enum)
    return cost


def _index(root: dict[str, Any]) -> dict[str, Any]:
    """Every subschema by pointer (the positions that hold schemas, as dialects.walk finds them)."""
    from .dialects import walk_schemas

    return walk_schemas(root)


def _target(node: Any) -> str | None:
    from .dialects import ref_target

    if isinstance(node, dict) and isinstance(node.get("$ref"), str):
        return ref_target(node["$ref"], "")
    return None


def _in_place(nodes: dict[str, Any], ptr: str) -> Iterator[str]:
    node = nodes[ptr]
    if not isinstance(node, dict):
        return
    target = _target(node)
    if target is not None and target in nodes:
        yield target
    for key in IN_PLACE_LISTS:
        if isinstance(node.get(key), list):
            yield from (f"{ptr}/{key}/{i}" for i in range(len(node[key])))
    for key in IN_PLACE_ONE:
        if key in node:
            yield f"{ptr}/{key}"
    if isinstance(node.get("dependentSchemas"), dict):
        from .pointer import escape_token

        yield from (f"{ptr}/dependentSchemas/{escape_token(name)}" for name in node["dependentSchemas"])


def _descend(nodes: dict[str, Any], ptr: str) -> Iterator[str]:
    from .pointer import escape_token

    node = nodes[ptr]
    if not isinstance(node, dict):
        return
    for key in DESCEND_ONE:
        if f"{ptr}/{key}" in nodes:
            yield f"{ptr}/{key}"
    for key in DESCEND_MAPS:
        if isinstance(node.get(key), dict):
            yield from (f"{ptr}/{key}/{escape_token(name)}" for name in node[key])
    if isinstance(node.get("prefixItems"), list):
        yield from (f"{ptr}/prefixItems/{i}" for i in range(len(node["prefixItems"])))


def _in_place_order(nodes: dict[str, Any]) -> list[str]:
    """Pointers ordered so every in-place child comes before its parent (the in-place graph is
    acyclic: dialects refuses a ``$ref`` cycle that makes no progress)."""
    order: list[str] = []
    state: dict[str, int] = {}
    for start in nodes:
        if start in state:
            continue
        stack: list[tuple[str, Iterator[str]]] = [(start, _in_place(nodes, start))]
        state[start] = 1
        while stack:
            ptr, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                state[ptr] = 2
                order.append(ptr)
            elif child not in state:
                state[child] = 1
                stack.append((child, _in_place(nodes, child)))
            elif state[child] == 1:
                raise SchemaCompileError("$ref cycle re-validates the same instance without progress", child)
    return order


# ---------------------------------------------------------------- verification


def instance_nodes(instance: Any, limit: int) -> int:
    """How many values ``instance`` holds (containers, members and object keys), counted up to ``limit + 1``."""
    count = 0
    stack = [instance]
    while stack and count <= limit:
        node = stack.pop()
        count += 1
        if isinstance(node, dict):
            count += len(node)  # a key is matched against patterns and names on its own
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


def verification_work(cost: SchemaCost, instance: Any, budget: Budget = DEFAULT_BUDGET) -> int:
    """An upper bound of the checks verifying ``instance`` makes (instance values x schema reach)."""
    return cost.work(instance_nodes(instance, budget.max_work // max(cost.reach, 1) + 1))


def _big(value: int) -> str:
    return f"{value:.2e}" if value < _SATURATE else "unbounded"
