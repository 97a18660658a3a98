"""Resource bombs: small schemas and instances that cost a validator far more than their size.

Each generator returns a :class:`Bomb` (a schema and an instance to verify against it). The suite
runs a handful of them by name; ``benchmarks/fuzz_contract.py --bombs`` runs generated ones over
many seeds and checks that every one ends as a typed refusal or a verdict, within the documented
budget and memory cap (docs/contract.md, "Budgets").

The kinds are the ones a hostile schema author can reach with a few hundred bytes:

- ``fanout``: ``$defs`` levels, each ``anyOf`` two references to the next (2^depth paths);
- ``repeat``: counted repeats nested in a pattern (``(?:a{65535}){65535}``);
- ``regex_size``: a pattern whose compiled program is large (Unicode classes under counts);
- ``searches``: many ``patternProperties`` against an object with many keys;
- ``enum_report``: a large enum of objects against many failing items (reports quote the enum);
- ``unique``: ``uniqueItems`` over many distinct objects;
- ``float_bound``: an integer bound written as a float beyond 2^53 (a correctness probe, with
  :func:`exact_bound_holds` as its reference, which reads the bound's decimal text exactly).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

KINDS = ("fanout", "repeat", "regex_size", "searches", "enum_report", "unique", "float_bound")


@dataclass(frozen=True)
class Bomb:
    """A schema, an instance, and whether the instance is valid (known by construction, since
    a general reference would itself take the minutes or gigabytes the bomb costs)."""

    kind: str
    schema: Any
    instance: Any
    valid: bool


def fanout(depth: int, width: int = 2) -> Bomb:
    defs = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"} for _ in range(width)]} for i in range(depth)}
    defs[f"d{depth}"] = {"type": "string", "minLength": 3}
    return Bomb("fanout", {"$defs": defs, "$ref": "#/$defs/d0"}, "ab", valid=False)


def repeat(inner: int, outer: int) -> Bomb:
    return Bomb("repeat", {"type": "string", "pattern": f"^(?:a{{{inner}}}){{{outer}}}$"}, "a", valid=inner * outer == 1)


def regex_size(count: int, classes: int = 3) -> Bomb:
    parts = "|".join(rf"\p{{{name}}}{{{count}}}" for name in ("L", "N", "P", "S", "Lu", "Ll")[:classes])
    return Bomb("regex_size", {"type": "string", "pattern": f"^(?:{parts})+$"}, "a", valid=count == 1)


def searches(patterns: int, keys: int) -> Bomb:
    schema = {
        "type": "object",
        "patternProperties": {f"^k{i}x$": {"type": "integer"} for i in range(patterns)},
        "additionalProperties": {"type": "integer"},
    }
    instance = {f"key{i}": i for i in range(keys)}
    instance[""] = "not an integer"  # an empty key routes rs reports through the python backend
    return Bomb("searches", schema, instance, valid=False)


def enum_report(members: int, items: int) -> Bomb:
    enum = [{"member": i, "padding": "x" * 20} for i in range(members)]
    return Bomb("enum_report", {"type": "array", "items": {"enum": enum}}, [{"member": -1}] * items, valid=items == 0)


def unique(items: int) -> Bomb:
    return Bomb("unique", {"type": "array", "uniqueItems": True}, [{"i": i} for i in range(items)], valid=True)


def float_bound(exponent: int, keyword: str, offset: int) -> Bomb:
    value = 10**exponent + offset
    valid = exact_bound_holds(keyword, f"1e{exponent}", value)
    return Bomb("float_bound", {"type": "integer", keyword: float(f"1e{exponent}")}, value, valid)


def exact_bound_holds(keyword: str, bound_text: str, value: int) -> bool:
    """The bound as its decimal text means it, compared exactly (the reference for ``float_bound``)."""
    bound = Decimal(bound_text)
    return {
        "maximum": value <= bound,
        "minimum": value >= bound,
        "exclusiveMaximum": value < bound,
        "exclusiveMinimum": value > bound,
    }[keyword]


def _log_int(rng: random.Random, high: int) -> int:
    """A size drawn log-uniformly from 1..high: small, medium and far-past-budget alike."""
    return max(1, int(10 ** rng.uniform(0, math.log10(high))))


def generate_bomb(seed: int) -> Bomb:
    """One bomb of a kind and size drawn from ``seed``, from harmless to far past every budget."""
    rng = random.Random(seed)
    kind = KINDS[seed % len(KINDS)]
    if kind == "fanout":
        return fanout(rng.randint(1, 30), rng.randint(1, 4))
    if kind == "repeat":
        return repeat(_log_int(rng, 10**9), _log_int(rng, 65535))
    if kind == "regex_size":
        return regex_size(_log_int(rng, 5000), rng.randint(1, 6))
    if kind == "searches":
        return searches(_log_int(rng, 1000), _log_int(rng, 10_000))
    if kind == "enum_report":
        return enum_report(_log_int(rng, 3000), _log_int(rng, 20_000))
    if kind == "unique":
        return unique(_log_int(rng, 60_000))
    keyword = rng.choice(["maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum"])
    return float_bound(rng.randint(15, 300), keyword, rng.choice([-1, 0, 1]))
