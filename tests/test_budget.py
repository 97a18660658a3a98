"""Resource budgets: every bomb ends as a typed refusal, and each bound is checked against a reference.

The bounds in :mod:`contractrl.validators.budget` are refusal rules, so each one is held against an
independent reference that hunts for inputs it lets through: a pattern's widest match (Python's
own regex parser) never exceeds its size bound, and a naive recursive expansion of a schema never
visits more nodes than its fan-out bound.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contractrl.errors import SchemaCompileError
from contractrl.validators import Code, SchemaLimits, Verifier
from contractrl.validators.budget import DEFAULT_BUDGET, Budget, check_pattern, pattern_size, schema_cost
from contractrl.validators.dialects import normalize_schema
from contractrl.validators.ecma_regex import RegexTimeout, search, search_budget
from contractrl.validators.guard import CompileGuard, GuardLimits
from contractrl.validators.jsonvalue import canonical_json
from contractrl.validators.schema import _SchemaCache, _short, compile_schema

from . import bombs

BACKENDS = ("rs", "python")


# ---------------------------------------------------------------- bombs end typed


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("bomb", "outcome"),
    [
        (bombs.fanout(20), "compile"),
        (bombs.fanout(12, 3), "compile"),
        (bombs.repeat(65535, 65535), "compile"),
        (bombs.repeat(1, 1_000_000_000), "compile"),
        (bombs.searches(1000, 10_000), "too_large"),
        (bombs.enum_report(3000, 20_000), "too_large"),
    ],
    ids=["fanout-20", "fanout-3^12", "repeat-nested", "repeat-1e9", "searches", "enum-report"],
)
def test_bombs_over_budget_are_typed_refusals(bomb: bombs.Bomb, outcome: str, backend: str) -> None:
    if outcome == "compile":
        with pytest.raises(SchemaCompileError, match="over"):
            Verifier.build(bomb.schema, backend=backend)
        return
    report = Verifier.build(bomb.schema, backend=backend).verify(bomb.instance)
    assert not report.accepted
    assert report.codes == (Code.TOO_LARGE,)
    assert "checks" in report.errors[0].message


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "bomb",
    [bombs.fanout(3), bombs.searches(10, 100), bombs.enum_report(100, 50), bombs.unique(500), bombs.repeat(10, 10)],
    ids=["fanout-3", "searches", "enum", "unique", "repeat-small"],
)
def test_bombs_within_budget_get_the_references_verdict(bomb: bombs.Bomb, backend: str) -> None:
    report = Verifier.build(bomb.schema, backend=backend).verify(bomb.instance)
    reference = jsonschema.Draft202012Validator(bomb.schema).is_valid(bomb.instance)
    assert report.accepted == reference == bomb.valid
    assert Code.TOO_LARGE not in report.codes


@pytest.mark.parametrize("backend", BACKENDS)
def test_unique_items_over_60k_objects_is_linear(backend: str) -> None:
    """The reference compares every pair here (minutes); the verdicts are known by construction."""
    bomb = bombs.unique(60_000)
    verifier = Verifier.build(bomb.schema, backend=backend)
    assert verifier.verify(bomb.instance).accepted
    assert verifier.verify([*bomb.instance, {"i": 59_999}]).codes == (Code.ITEMS_VIOLATION,)


def test_a_large_enum_is_quoted_once_per_error_and_cut() -> None:
    bomb = bombs.enum_report(300, 200)
    for backend in BACKENDS:
        report = Verifier.build(bomb.schema, backend=backend).verify(bomb.instance)
        assert len(report.errors) == 200
        assert all(len(e.expected) <= len("one of ") + 123 for e in report.errors)


def test_the_whole_bomb_suite_stays_under_a_memory_cap() -> None:
    """Every bomb, both backends, in one child capped at 1 GiB: an abort or MemoryError fails here."""
    program = textwrap.dedent(
        """
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from tests import bombs
        from contractrl.errors import ContractRLError
        from contractrl.validators import Verifier
        outcomes = []
        for seed in range(len(bombs.KINDS) * 6):
            bomb = bombs.generate_bomb(seed)
            for backend in ("rs", "python"):
                try:
                    report = Verifier.build(bomb.schema, backend=backend).verify(bomb.instance)
                    assert bomb.valid or not report.accepted, (seed, backend)
                    outcomes.append(report.status)
                except ContractRLError:
                    outcomes.append("refused")
        print(len(outcomes))
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(len(bombs.KINDS) * 6 * 2)


# ---------------------------------------------------------------- patterns


@st.composite
def _bounded_patterns(draw: st.DrawFn, depth: int = 0) -> str:
    """Patterns of literals, classes, groups, alternations and bounded repeats: their widest
    match is what a compiler expands, and Python's parser can measure it."""
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        if depth < 3 and draw(st.booleans()):
            alternatives = draw(st.lists(_bounded_patterns(depth + 1), min_size=1, max_size=3))
            atom = "(?:" + "|".join(alternatives) + ")"
        else:
            atom = draw(st.sampled_from(["a", "b", "[a-z]", "\\.", "[^x]"]))
        quantifier = draw(st.sampled_from(["", "?", "{2}", "{0,3}", "{7}", "{40,90}", "{300}"]))
        parts.append(atom + quantifier)
    return "".join(parts)


@settings(max_examples=300, deadline=None)
@given(_bounded_patterns())
def test_pattern_size_never_underestimates_the_widest_match(pattern: str) -> None:
    widest = re._parser.parse(pattern).getwidth()[1]  # type: ignore[attr-defined]
    assert pattern_size(pattern) >= widest


@settings(max_examples=200, deadline=None)
@given(_bounded_patterns())
def test_a_pattern_past_the_budget_never_compiles(pattern: str) -> None:
    budget = Budget(max_pattern=500)
    widest = re._parser.parse(pattern).getwidth()[1]  # type: ignore[attr-defined]
    if pattern_size(pattern) <= budget.max_pattern:
        assert widest <= budget.max_pattern
    else:
        with pytest.raises(SchemaCompileError, match="expands to over"):
            check_pattern(pattern, budget)


def test_regex_searches_share_one_deadline() -> None:
    """Once a validation's regex budget is spent, even the cheapest search refuses."""
    with search_budget(0.0), pytest.raises(RegexTimeout):
        search("^a$", "a")
    assert search("^a$", "a")


# ---------------------------------------------------------------- fan-out


@st.composite
def _ref_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """``$defs`` whose entries apply later entries in place (anyOf/allOf/oneOf/$ref), acyclic."""
    count = draw(st.integers(1, 7))
    defs: dict[str, Any] = {}
    for i in range(count - 1, -1, -1):
        later = [f"#/$defs/d{j}" for j in range(i + 1, count)]
        node: dict[str, Any] = {"type": draw(st.sampled_from(["string", "integer", "object"]))}
        if later and draw(st.booleans()):
            key = draw(st.sampled_from(["anyOf", "allOf", "oneOf"]))
            node[key] = [{"$ref": draw(st.sampled_from(later))} for _ in range(draw(st.integers(1, 3)))]
        if later and draw(st.booleans()):
            node["not"] = {"$ref": draw(st.sampled_from(later))}
        defs[f"d{i}"] = node
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def _naive_checks(schema: dict[str, Any], node: Any) -> int:
    """Checks at one location, by expanding every in-place reference (exponential on purpose)."""
    if not isinstance(node, dict):
        return 1
    total = 1 + len(node)
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        total += _naive_checks(schema, schema["$defs"][name])
    for key in ("anyOf", "allOf", "oneOf"):
        for sub in node.get(key, []):
            total += _naive_checks(schema, sub)
    if "not" in node:
        total += _naive_checks(schema, node["not"])
    return total


@settings(max_examples=300, deadline=None)
@given(_ref_schemas())
def test_fanout_bound_is_at_least_the_naive_expansion(schema: dict[str, Any]) -> None:
    normalized = normalize_schema(schema).schema
    cost = schema_cost(normalized, Budget(max_fanout=10**12, max_reach=10**12))
    assert cost.fanout >= _naive_checks(normalized, normalized)


@settings(max_examples=200, deadline=None)
@given(_ref_schemas())
def test_a_schema_past_the_fanout_budget_is_refused(schema: dict[str, Any]) -> None:
    normalized = normalize_schema(schema).schema
    budget = Budget(max_fanout=60)
    if _naive_checks(normalized, normalized) > budget.max_fanout:
        with pytest.raises(SchemaCompileError, match="fan-out"):
            schema_cost(normalized, budget)


def test_recursive_schemas_reach_linearly_with_depth() -> None:
    tree = {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#"}}}}
    cost = compile_schema(tree).cost
    assert cost.reach <= 64 * 10  # a few nodes per level, 64 levels: well within the budget
    assert Verifier.build(tree).verify({"children": [{"children": []}]}).accepted


# ---------------------------------------------------------------- exact bounds


@settings(max_examples=200, deadline=None)
@given(
    exponent=st.integers(16, 300),
    keyword=st.sampled_from(["maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum"]),
    offset=st.integers(-2, 2),
    backend=st.sampled_from(BACKENDS),
)
def test_float_bounds_compare_as_their_decimal_text(exponent: int, keyword: str, offset: int, backend: str) -> None:
    text = f"1e{exponent}"
    schema = json.loads(f'{{"type": "integer", "{keyword}": {text}}}')
    value = 10**exponent + offset
    accepted = Verifier.build(schema, backend=backend).verify(value).accepted
    assert accepted == bombs.exact_bound_holds(keyword, text, value)


# ---------------------------------------------------------------- reports, uniqueItems, cache


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from([1.0, 0.5, -2.0]) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_json, max_size=8))
def test_unique_items_agrees_with_the_pairwise_reference(items: list[Any]) -> None:
    from jsonschema._utils import uniq

    for backend in BACKENDS:
        assert compile_schema({"uniqueItems": True}, backend).is_valid(items) == uniq(items)


@settings(max_examples=300, deadline=None)
@given(_json, st.integers(1, 40))
def test_short_is_the_canonical_text_cut(value: Any, limit: int) -> None:
    text = canonical_json(value)
    assert _short(value, limit) == (text if len(text) <= limit else text[:limit] + "...")


def test_the_schema_cache_is_bounded_in_bytes() -> None:
    cache = _SchemaCache(capacity=1000, capacity_bytes=4000)
    for i in range(50):
        cache.get_or_compile({"type": "string", "description": "x" * 200 + str(i)}, "rs", None, False, SchemaLimits())
        assert cache.bytes <= 4000
    assert 0 < len(cache) < 50


# ---------------------------------------------------------------- the compile guard


def test_a_compile_that_dies_in_the_guard_is_a_typed_refusal_and_the_guard_recovers() -> None:
    guard = CompileGuard(GuardLimits(memory_bytes=60 << 20))  # ~32 MB is the child's own floor
    try:
        assert guard.compiles({"type": "string"})
        with pytest.raises(SchemaCompileError, match="guard allows"):
            guard.compiles({"pattern": "(?:[^a]{100}){100}"})  # ~80 MB inside jsonschema-rs
        assert guard.compiles({"type": "integer"})  # a fresh child serves the next schema
        assert guard.started == 2
        assert guard.compiles({"pattern": "(a"}) is False  # a compile error is the backend's, not the guard's
    finally:
        guard.close()


def test_default_budget_is_documented() -> None:
    from pathlib import Path

    doc = (Path(__file__).parents[1] / "docs" / "contract.md").read_text()
    for value in (DEFAULT_BUDGET.max_fanout, DEFAULT_BUDGET.max_work, DEFAULT_BUDGET.max_pattern):
        assert f"{value:,}" in doc
