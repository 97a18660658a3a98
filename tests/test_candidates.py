"""Enumerated candidates for the structural mistakes real models make (natural failures): arguments
wrapped one level too deep, a value wrapped in a one-member object, an enum member the request
names in other case. Each is checked by applying it, with the contract and with the reference RFC
6902 implementation (jsonpatch), not by reading the candidate's text."""

from __future__ import annotations

import json
import time
from typing import Any

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st

from contractrl.rollout.candidates import MENTION_SCAN_CHARS, enumerate_candidates
from contractrl.rollout.env import RepairEnv
from contractrl.tasks.cases import PublicCase
from contractrl.validators.verifier import Verifier

FOOD = {"type": "string", "enum": ["PIZZA", "BURGER", "SALAD", "SOUP", "STEAK", "TACO", "RAMEN"]}


def _case(schema: dict[str, Any], candidate: Any, request: str, max_ops: int = 4) -> PublicCase:
    verifier = Verifier.build(schema)
    return PublicCase(
        case_id="c1", family="multi_field", tool="t", tool_family="bfcl", schema=schema,
        schema_sha256=verifier.schema.sha256, schema_version=1, contract={"rules": []}, request=request,
        candidate=candidate, report=verifier.verify(candidate).to_dict(), immutable=(), max_attempts=2,
        max_ops=max_ops, world_seed=0,
    )  # fmt: skip


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _accepted(case: PublicCase) -> dict[str, Any]:
    """Candidate text -> the object the contract accepts it as; each checked against jsonpatch."""
    env = RepairEnv(case)
    state = env.reset()
    found = {}
    for candidate in enumerate_candidates(case, state, 16)[1:]:
        result = env.contract.step(state, candidate.text)
        if result.accepted_object is not None:
            assert result.accepted_object == jsonpatch.apply_patch(case.candidate, json.loads(candidate.text))
            found[candidate.text] = result.accepted_object
    return found


def test_wrapped_arguments_are_moved_up_with_their_values() -> None:
    schema = _object({"food": FOOD, "url": {"type": "string"}}, ["food"])
    case = _case(schema, {"params": {"food": "BURGER", "url": "https://x"}}, "switch from pizza to a burger")
    assert {"food": "BURGER", "url": "https://x"} in _accepted(case).values()


def test_a_wrapper_is_unwrapped_inside_a_nested_object() -> None:
    schema = _object({"body": _object({"mode": {"type": "string"}, "temp": {"type": "integer"}}, ["mode"])}, ["body"])
    case = _case(schema, {"body": {"args": {"mode": "COOL"}, "temp": 24}}, "cool mode at 24")
    assert {"body": {"mode": "COOL", "temp": 24}} in _accepted(case).values()


def test_nothing_is_hoisted_over_a_member_the_object_has_or_outside_its_schema() -> None:
    schema = _object({"food": FOOD}, ["food"])
    # the call has food already: moving params/food up would overwrite it
    case = _case(schema, {"food": "SOUP", "params": {"food": "BURGER"}}, "a burger")
    env = RepairEnv(case)
    texts = [c.text for c in enumerate_candidates(case, env.reset(), 16)]
    assert not any('"move"' in t for t in texts)
    # the wrapper holds no name of the schema: removing it is the only structural candidate
    case = _case(schema, {"food": "SOUP", "extra": {"colour": "red"}}, "soup")
    texts = [c.text for c in enumerate_candidates(case, RepairEnv(case).reset(), 16)]
    assert '[{"op":"remove","path":"/extra"}]' in texts and not any('"move"' in t for t in texts)


def test_a_one_member_wrapper_around_a_value_is_unwrapped() -> None:
    schema = _object({"items": {"type": "array", "items": {"type": "string"}}}, ["items"])
    case = _case(schema, {"items": {"items": ["red logo", "white text"]}}, "red logo, white text")
    assert {"items": ["red logo", "white text"]} in _accepted(case).values()


def test_the_enum_member_the_request_names_comes_first() -> None:
    """The call says "whopper", closer in spelling to other members; the request says burger."""
    schema = _object({"food": FOOD}, ["food"])
    case = _case(schema, {"food": "whopper"}, "I need a Whopper, also known as the burger.", max_ops=1)
    enums = [c for c in enumerate_candidates(case, RepairEnv(case).reset(), 16) if c.source == "enum"]
    assert enums[0].ops == ({"op": "replace", "path": "/food", "value": "BURGER"},)

    def order(request: str) -> list[Any]:
        case = _case(schema, {"food": "whopper"}, request, max_ops=1)
        return [c.ops[0]["value"] for c in enumerate_candidates(case, RepairEnv(case).reset(), 16) if c.source == "enum"]

    # a member inside another word is not named: "soupy" orders nothing ahead
    assert order("something soupy") == order("something else") and order("soup, please")[0] == "SOUP"


def test_enums_of_objects_and_mixed_members_still_enumerate() -> None:
    schema = _object({"shape": {"enum": [{"kind": "circle"}, "square", 3, None]}}, ["shape"])
    case = _case(schema, {"shape": "triangle"}, "a square", max_ops=1)
    values = _values(case, "enum")
    assert values[0] == "square" and {"kind": "circle"} in values and len(values) == 4
    assert _values(_case(schema, {"shape": "sqare"}, "a square", max_ops=1), "enum") == ["square"]


def _values(case: PublicCase, source: str) -> list[Any]:
    return [c.ops[0]["value"] for c in enumerate_candidates(case, RepairEnv(case).reset(), 16) if c.source == source]


def test_a_value_spelt_another_way_is_offered_that_member_alone() -> None:
    """BFCL cases the shielded policy lost: the call wrote a member in another case, with other word
    separators, wrapped in an array or misspelt, and the request names other members too ("free
    Wi-Fi"); SmolLM2 scored a named member above the one the call meant."""
    facility = {"type": "string", "enum": ["Wi-Fi", "Reading Room", "Fiction", "Children Section", "Cafe"]}
    schema = _object({"facilities": {"type": "array", "items": facility}}, ["facilities"])
    request = "the nearest public library with an English fiction section and free Wi-Fi"
    assert _values(_case(schema, {"facilities": ["FICTION", "Wi-Fi"]}, request, max_ops=1), "enum") == ["Fiction"]
    info = {"type": "string", "enum": ["average_review_rating", "age_range", "number_of_players", "genre"]}
    schema = _object({"info": info}, ["info"])
    request = "the average review rating and the age range of Catan"
    for value in ("AVERAGE_REVIEW_RATING", ["average_review_rating"], "Average-Review-Rating", "average_reviw_rating"):
        assert _values(_case(schema, {"info": value}, request, max_ops=1), "enum") == ["average_review_rating"], value
    # a member of another type that the value converts to (BFCL live: false was offered for "true")
    flags = _object({"monitoring": {"enum": [False, True]}, "level": {"enum": [1, 2, 3]}}, ["monitoring", "level"])
    assert _values(_case(flags, {"monitoring": "true", "level": 2}, "with monitoring", max_ops=1), "enum") == [True]
    assert _values(_case(flags, {"monitoring": False, "level": "3"}, "level three", max_ops=1), "enum") == [3]
    # a value far from every member: the members the request names (in other separators) come first
    assert _values(_case(schema, {"info": "score"}, request, max_ops=1), "enum")[:2] == ["average_review_rating", "age_range"]


def test_a_default_never_replaces_what_the_call_says() -> None:
    """A default fills what is missing or garbled; over a value that spells a member, or over a
    non-empty object or array, it would change what the call says (BFCL live: "dontcare" for
    "COMEDY", ``{}`` for ``{"sort": "des"}``)."""
    genre = {"type": "string", "enum": ["Comedy", "Drama", "Family", "Horror", "Cult", "dontcare"], "default": "dontcare"}
    schema = _object({"genre": genre}, ["genre"])
    assert _values(_case(schema, {"genre": "COMEDY"}, "a comedy", max_ops=1), "default") == []
    assert _values(_case(schema, {"genre": "xyzzy"}, "a comedy", max_ops=1), "default") == ["dontcare"]
    # a value that converts to the declared type (BFCL live: false offered for "true", and chosen)
    flag = _object({"monitoring": {"type": "boolean", "default": False}}, ["monitoring"])
    assert _values(_case(flag, {"monitoring": "true"}, "with monitoring", max_ops=1), "default") == []
    assert _values(_case(flag, {"monitoring": "true"}, "with monitoring", max_ops=1), "convert")[0] is True
    assert _values(_case(flag, {"monitoring": "on"}, "with monitoring", max_ops=1), "default") == [False]
    schema = _object({"params": {"type": "string", "default": "none"}}, ["params"])
    assert _values(_case(schema, {"params": {"sort": "des"}}, "sorted", max_ops=1), "default") == []
    assert _values(_case(schema, {"params": {}}, "sorted", max_ops=1), "default") == ["none"]


def test_one_patch_repairs_every_pointer_once() -> None:
    """The combined candidate takes each pointer's first candidate once, though the report names a
    pointer twice (two codes): listed once per error, it had three operations for a budget of two
    and was dropped (BFCL non-live case ce9e0e4f)."""
    info = {"type": "string", "enum": ["average_review_rating", "age_range", "genre"]}
    schema = _object({"game": {"type": "string"}, "info": {"type": "array", "items": info}}, ["game", "info"])
    call = {"game": "Catan", "info": ["AVERAGE_REVIEW_RATING", ["age_range"]]}
    case = _case(schema, call, "What's the average review rating and the age range of Catan?", max_ops=2)
    assert len({e["pointer"] for e in case.report["errors"]}) < len(case.report["errors"])  # /info/1 twice
    combined = [c for c in enumerate_candidates(case, RepairEnv(case).reset(), 16) if c.source == "combined"]
    fixed = {**call, "info": ["average_review_rating", "age_range"]}
    assert [jsonpatch.apply_patch(call, list(c.ops)) for c in combined] == [fixed]


names = st.sampled_from(["a", "b", "c", "d"])
scalars = st.integers(-5, 5) | st.text(alphabet="xyz", max_size=3) | st.booleans()


def test_a_request_of_many_numbers_and_quotes_is_read_in_bounded_time() -> None:
    schema = _object({"a": {"type": "integer"}, "s": {"type": "string"}, "b": {"type": ["integer", "string"]}}, ["b"])
    request = " ".join(f"{i} '{i}x':" for i in range(20_000))  # 20,000 numbers and 20,000 quoted keys
    start = time.process_time()
    offered = _mentioned(_case(schema, {"a": 0}, request))
    assert [ops[0]["value"] for ops in offered] == [1, 2, 3]
    assert time.process_time() - start < 20  # a hang guard in CPU time, not a speed figure
    # a number too long to be any argument's value is no mention (Python refuses an int of 4,301
    # digits, and a float of 400 is inf, which JSON cannot write): nothing is offered, nothing raises
    for huge in ("7" * 5000, "1" + ",000" * 2000, "7" * 400 + ".5", "1" * 19):
        assert _mentioned(_case(schema, {"a": 0}, f"take {huge} now")) == []


@settings(max_examples=200, deadline=None)
@given(
    wrapper_name=st.sampled_from(["params", "args", "kwargs"]),
    inside=st.dictionaries(names | st.sampled_from(["q", "r"]), scalars, min_size=1, max_size=4),
    outside=st.dictionaries(names, scalars, max_size=3),
)
def test_hoisting_loses_and_invents_nothing(wrapper_name: str, inside: dict[str, Any], outside: dict[str, Any]) -> None:
    """Every hoist candidate, applied by the reference implementation: each schema-named member the
    object lacked now holds the wrapper's value, every member the object had keeps its own, and the
    wrapper is gone; members the schema does not name are the only thing dropped."""
    schema = _object({k: {} for k in "abcd"}, [])
    call = {**outside, wrapper_name: inside}
    case = _case(schema, call, "", max_ops=8)
    hoists = [c for c in enumerate_candidates(case, RepairEnv(case).reset(), 16) if c.source == "rename" and len(c.ops) > 1]
    movable = {k: v for k, v in inside.items() if k in "abcd" and k not in outside}
    assert len(hoists) == (1 if movable else 0)
    for candidate in hoists:
        after = jsonpatch.apply_patch(call, list(candidate.ops))
        assert after == {**outside, **movable}


def test_the_search_for_named_members_is_bounded() -> None:
    """Each member is one search of the whole request: past MENTION_SCAN_CHARS (an untrusted schema
    and request can be large together) members keep the closeness order instead of being named."""
    request = "x " * 50_000 + "the zebra"  # 100 KB: the bound reads about 19 members' searches

    def first_enum(position: int) -> Any:
        members = [f"filler{i}" for i in range(40)]
        members.insert(position, "ZEBRA")
        schema = _object({"animal": {"type": "string", "enum": members}}, ["animal"])
        case = _case(schema, {"animal": "unknown fill"}, request, max_ops=1)  # closer to the fillers, no misspelling
        return next(c.ops[0]["value"] for c in enumerate_candidates(case, RepairEnv(case).reset(), 16) if c.source == "enum")

    assert MENTION_SCAN_CHARS // (len(request) + 8) < 30
    assert first_enum(3) == "ZEBRA"
    assert first_enum(30) != "ZEBRA"


def test_a_misspelt_enum_value_is_offered_its_closest_members_not_the_requests_other_values() -> None:
    """The built-in case that regressed (c3191344): the request lists the ``columns`` argument's
    values, all enum members; the sort column "customer_i" is a misspelling of customer_id. Named
    members offered beside it let the model pick the shortest ("id"), so a misspelt value gets the
    closeness order alone; now it is offered only the member it spells."""
    members = ["active", "city", "customer_id", "email", "id", "placed", "product_id", "quantity", "total"]
    column = {"type": "string", "enum": members}
    schema = _object({"columns": {"type": "array", "items": column}, "sort": column}, ["columns", "sort"])
    call = {"columns": ["id", "product_id", "quantity", "total", "placed"], "sort": "customer_i"}
    request = 'columns: ["id","product_id","quantity","total","placed"]; sort by customer_id; database id db_1'
    case = _case(schema, call, request, max_ops=1)
    enums = [c.ops[0]["value"] for c in enumerate_candidates(case, RepairEnv(case).reset(), 16) if c.source == "enum"]
    assert enums == ["customer_id"]
    # far from every member ("by customer"), the members the request names still come first
    case = _case(schema, {**call, "sort": "by customer"}, request, max_ops=1)
    named = [c.ops[0]["value"] for c in enumerate_candidates(case, RepairEnv(case).reset(), 16) if c.source == "enum"]
    assert named[0] == "customer_id" and "id" in named


def _mentioned(case: PublicCase) -> list[Any]:
    """The patches the ``mention`` source offers."""
    env = RepairEnv(case)
    state = env.reset()
    return [json.loads(c.text) for c in enumerate_candidates(case, state, 16) if c.source == "mention"]


def test_a_missing_number_is_offered_the_requests_numbers_no_other_argument_holds() -> None:
    # BFCL live: "What is the multiplication of 3 and 2" with a = 3; SmolLM2 wrote b = "3", then 3
    schema = _object({"a": {"type": "integer"}, "b": {"type": "integer"}}, ["a", "b"])
    case = _case(schema, {"a": 3}, "What is the multiplication of 3 and 2")
    assert _mentioned(case) == [[{"op": "add", "path": "/b", "value": 2}]]
    assert {"a": 3, "b": 2} in _accepted(case).values()
    # thousands separators make one number, and a redacted value is no number at all (BFCL non-live,
    # unrepairable: the first version offered 0, read from "2,000,000", and the shield sent it)
    equity = _object({k: {"type": "integer"} for k in ("net_income", "equity", "dividends")}, ["net_income", "equity"])
    request = "net income of $2,000,000, shareholder's equity of $[not given], and dividends paid of $200,000"
    assert _mentioned(_case(equity, {"net_income": 2_000_000, "dividends": 200_000}, request)) == []
    assert _mentioned(_case(schema, {"a": 1}, "add 1,2,3 and 12,345")) == [
        [{"op": "add", "path": "/b", "value": v}] for v in (2, 3, 12345)
    ]
    # a number the request states twice may serve both arguments
    assert _mentioned(_case(schema, {"a": 3}, "square 3: multiply 3 by 3")) == [[{"op": "add", "path": "/b", "value": 3}]]


def test_a_missing_string_is_offered_the_requests_quoted_spans() -> None:
    # BFCL non-live: "... of the 'R vs Adams' legal case?" with case_id missing; SmolLM2 abstained
    schema = _object({"case_id": {"type": "string"}, "details": {"type": "boolean"}}, ["case_id", "details"])
    case = _case(schema, {"details": True}, "How to obtain the detailed case information of the 'R vs Adams' legal case?")
    assert _mentioned(case) == [[{"op": "add", "path": "/case_id", "value": "R vs Adams"}]]
    # an apostrophe inside a word quotes nothing, and a span the call already holds is not offered again
    review = "I love the food here! It's always fresh and delicious."
    schema = _object({"text": {"type": "string"}, "language": {"type": "string"}}, ["text", "language"])
    assert _mentioned(_case(schema, {"text": review}, f"Analyze the sentiment of a customer review '{review}'.")) == []
    # a redaction marker is where a value was taken out (BFCL live, unrepairable: the selector sent
    # "[not given]" as the subject), and a quoted JSON key is no value (built-in: path = "active")
    email = _object({"to": {"type": "string"}, "subject": {"type": "string"}}, ["to", "subject"])
    assert _mentioned(_case(email, {"to": "a@b.c"}, 'Mail a@b.c with the subject "[not given]"')) == []
    fetch = _object({"path": {"type": "string"}, "query": {"type": "object"}}, ["path", "query"])
    request = 'Fetch this from the API.\n- set the query parameters to {"active":"true"}\n- path "/users"'
    assert _mentioned(_case(fetch, {"query": {"active": "true"}}, request)) == [
        [{"op": "add", "path": "/path", "value": "/users"}]
    ]


def test_mentions_are_not_offered_where_the_schema_or_the_request_already_names_the_value() -> None:
    # an enum's members are the candidates there; a value the request states by label is `request`'s
    schema = _object({"unit": {"type": "string", "enum": ["km", "mi"]}, "n": {"type": "integer"}}, ["unit", "n"])
    assert _mentioned(_case(schema, {"n": 1}, "convert 'km' for 5")) == []
    labelled = _object({"count": {"type": "integer"}, "page": {"type": "integer"}}, ["count", "page"])
    case = _case(labelled, {"page": 1}, "count: 7; page 1 of 40")
    assert _mentioned(case) == []
    assert [{"op": "add", "path": "/count", "value": 7}] in [
        json.loads(c.text) for c in enumerate_candidates(case, RepairEnv(case).reset(), 16)[1:]
    ]
    # a number never fits a string argument, nor a fraction an integer one
    assert _mentioned(_case(_object({"a": {"type": "integer"}, "s": {"type": "string"}}, ["s"]), {"a": 1}, "take 2.5 of 9")) == []
    assert _mentioned(_case(_object({"b": {"type": "integer"}}, ["b"]), {}, "take 2.5 of 9")) == [
        [{"op": "add", "path": "/b", "value": 9}]
    ]


@settings(max_examples=200, deadline=None)
@given(
    words=st.lists(
        st.sampled_from(["add", "'x y'", '"z"', "3", "-4", "2.5", "v2", "it's", "7,", "1.2.3", "'", "and"]), max_size=12
    ),
    present=st.dictionaries(
        st.sampled_from(["a", "s"]), st.one_of(st.integers(-5, 9), st.sampled_from(["x y", "z"])), max_size=2
    ),
)
def test_every_mention_is_stated_by_the_request_and_left_over_by_the_call(words: list[str], present: dict[str, Any]) -> None:
    """Reference: a value is offered only if the request spells it (as a number token, or between
    quotes) more times than the call's other arguments hold it; each at most once, at most three."""
    request = " ".join(words)
    schema = _object({"a": {"type": "integer"}, "s": {"type": "string"}, "m": {"type": ["integer", "string"]}}, ["m"])
    offered = [ops[0]["value"] for ops in _mentioned(_case(schema, present, request))]
    assert len(offered) <= 3 and len({json.dumps(v) for v in offered}) == len(offered)
    tokens = request.split()
    for value in offered:
        if isinstance(value, int):
            stated = sum(t.rstrip(",") == str(value) for t in tokens)
        else:
            stated = request.count(f"'{value}'") + request.count(f'"{value}"')
        held = sum(v == value and type(v) is type(value) for v in present.values())
        assert stated > held, (request, present, value)
