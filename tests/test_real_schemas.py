"""Schemas as public ones are written, compiled as a user importing them would: references into
nested ``definitions`` and into keywords the dialect does not know resolve as the source dialect
resolves them, and a ``$schema`` inside a subschema no longer splits the two backends."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from contractrl.errors import SchemaCompileError
from contractrl.validators import compile_schema, normalize_schema

D4 = "http://json-schema.org/draft-04/schema#"
D7 = "http://json-schema.org/draft-07/schema#"

# a user with a phone number whose format is defined inside the user's own definitions
NESTED = {
    "$schema": D7,
    "type": "object",
    "definitions": {
        "user": {
            "type": "object",
            "definitions": {"tel": {"type": "string", "pattern": "^[0-9]{3,}$"}, "a b": {"maxLength": 5}},
            "properties": {
                "tel": {"$ref": "#/definitions/user/definitions/tel"},
                "nick": {"$ref": "#/definitions/user/definitions/a%20b"},
            },
            "required": ["tel"],
        },
        "pair": {"type": "array", "items": [{"type": "integer"}, {"type": "string"}], "additionalItems": {"type": "null"}},
        "deps": {"dependencies": {"card": {"required": ["cvv"]}}},
    },
    "properties": {
        "user": {"$ref": "#/definitions/user"},
        "first": {"$ref": "#/definitions/pair/items/0"},
        "rest": {"$ref": "#/definitions/pair/additionalItems"},
        "pay": {"$ref": "#/definitions/deps/dependencies/card"},
    },
}
NESTED_INSTANCES: list[Any] = [
    {"user": {"tel": "0123"}},
    {"user": {"tel": "12"}},
    {"user": {"tel": 123}},
    {"user": {}},
    {"user": {"tel": "555", "nick": "toolongnick"}},
    {"user": {"tel": "555", "nick": "ok"}},
    {"first": 3, "rest": None},
    {"first": "3"},
    {"rest": 0},
    {"pay": {}},
    {"pay": {"card": 1}},
    {"pay": {"card": 1, "cvv": 2}},
]

# definitions kept where an OpenAPI document or a vendor keeps them
UNKNOWN_CONTAINERS = {
    "type": "object",
    "components": {"schemas": {"Money": {"type": "number", "minimum": 0}}},
    "x-defs": {"code": {"type": "string", "enum": ["EUR", "USD"]}},
    "properties": {
        "amount": {"$ref": "#/components/schemas/Money"},
        "currency": {"$ref": "#/x-defs/code"},
    },
}
UNKNOWN_INSTANCES: list[Any] = [
    {"amount": 3, "currency": "EUR"},
    {"amount": -1},
    {"amount": "3"},
    {"currency": "GBP"},
    {},
]


def _errors(schema: Any, instance: Any, backend: str, lenient: bool) -> list[dict[str, Any]]:
    return [e.to_dict() for e in compile_schema(schema, backend, lenient=lenient).errors(instance)]


@pytest.mark.parametrize("lenient", [False, True])
def test_refs_into_nested_definitions_resolve_as_draft07_resolves_them(lenient: bool) -> None:
    """`#/definitions/user/definitions/tel` resolved to nothing once `definitions` became `$defs`."""
    out = normalize_schema(NESTED, lenient=lenient)
    user = out.schema["$defs"]["user"]
    assert user["properties"]["tel"] == {"$ref": "#/$defs/user/$defs/tel"}
    assert user["properties"]["nick"] == {"$ref": "#/$defs/user/$defs/a%20b"}  # unchanged tokens kept as written
    assert out.schema["properties"]["first"] == {"$ref": "#/$defs/pair/prefixItems/0"}
    assert out.schema["properties"]["rest"] == {"$ref": "#/$defs/pair/items"}
    assert out.schema["properties"]["pay"] == {"$ref": "#/$defs/deps/dependentSchemas/card"}
    reference = jsonschema.Draft7Validator(NESTED)
    for instance in NESTED_INSTANCES:
        expected = reference.is_valid(instance)
        for backend in ("rs", "python"):
            assert compile_schema(NESTED, backend, lenient=lenient).is_valid(instance) == expected, (instance, backend)
        assert _errors(NESTED, instance, "rs", lenient) == _errors(NESTED, instance, "python", lenient), instance
    assert not reference.is_valid({"user": {"tel": "12"}})  # the nested reference does constrain


def test_refs_into_unknown_keywords_compile_leniently_and_keep_their_constraints() -> None:
    """Lenient mode dropped `components` and then found the $ref into it dangling: no schema at all."""
    out = normalize_schema(UNKNOWN_CONTAINERS, lenient=True)
    assert "components" not in out.schema and "x-defs" not in out.schema
    assert out.schema["properties"]["amount"] == {"$ref": "#/$defs/~1components~1schemas~1Money"}
    assert out.schema["$defs"]["/x-defs/code"] == {"type": "string", "enum": ["EUR", "USD"]}
    assert any("referenced by /properties/amount/$ref" in note for note in out.notes)
    reference = jsonschema.Draft7Validator(UNKNOWN_CONTAINERS)
    for instance in UNKNOWN_INSTANCES:
        for backend in ("rs", "python"):
            assert compile_schema(UNKNOWN_CONTAINERS, backend, lenient=True).is_valid(instance) == reference.is_valid(instance)
        assert _errors(UNKNOWN_CONTAINERS, instance, "rs", True) == _errors(UNKNOWN_CONTAINERS, instance, "python", True)
    # strict mode still refuses the keyword it does not know; a vendor extension is an annotation,
    # so the definitions kept in one compile strictly, and refuse what they would refuse anywhere
    with pytest.raises(SchemaCompileError, match="unknown keyword 'components'"):
        normalize_schema(UNKNOWN_CONTAINERS)
    vendor = {k: v for k, v in UNKNOWN_CONTAINERS.items() if k != "components"}
    vendor["properties"] = {"currency": {"$ref": "#/x-defs/code"}}
    assert not compile_schema(vendor).is_valid({"currency": "GBP"})
    with pytest.raises(SchemaCompileError, match="unknown keyword 'minValue'"):
        normalize_schema({"x-defs": {"n": {"minValue": 0}}, "properties": {"n": {"$ref": "#/x-defs/n"}}})


def test_references_the_source_dialect_cannot_resolve_are_still_refused() -> None:
    with pytest.raises(SchemaCompileError, match="resolves to nothing"):
        normalize_schema({"definitions": {"user": {"definitions": {}}}, "$ref": "#/definitions/user/definitions/tel"})
    with pytest.raises(SchemaCompileError, match="does not name a subschema"):
        normalize_schema({"definitions": {"a": {"enum": [{"type": "string"}]}}, "$ref": "#/definitions/a/enum/0"})
    with pytest.raises(SchemaCompileError, match="cycle"):  # a loop through a relocated target is still a loop
        normalize_schema({"x-defs": {"a": {"allOf": [{"$ref": "#/x-defs/a"}]}}, "$ref": "#/x-defs/a"})


# A draft-04 document whose definitions carry their own draft-04 marker, as exported by generators:
# python-jsonschema switched to Draft 4 inside them (a $ref's siblings ignored, numeric
# exclusiveMinimum unknown) while jsonschema-rs read 2020-12.
NESTED_MARKER = {
    "$schema": D4,
    "definitions": {
        "item": {
            "$schema": D4,
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 1, "exclusiveMinimum": True},
                "code": {"$ref": "#/definitions/code", "maxLength": 2},
                "k": {"const": "x"},
            },
            "required": ["n"],
        },
        "code": {"type": "string"},
    },
    "type": "array",
    "items": {"$ref": "#/definitions/item"},
}
MARKER_INSTANCES: list[Any] = [
    [{"n": 1}],
    [{"n": 2, "code": "abc"}],
    [{"n": 2, "code": "ab"}],
    [{"n": 2, "k": "y"}],
    [{}],
    [{"n": 2}, {"n": 0, "code": 7}],
]


@pytest.mark.parametrize("lenient", [False, True])
def test_a_nested_dialect_marker_gives_identical_reports_on_both_backends(lenient: bool) -> None:
    out = normalize_schema(NESTED_MARKER, lenient=lenient)
    assert "$schema" not in out.schema["$defs"]["item"]
    assert any("/definitions/item/$schema" in note and "draft-04" in note for note in out.notes)
    verdicts = []
    for instance in MARKER_INSTANCES:
        rs, python = _errors(NESTED_MARKER, instance, "rs", lenient), _errors(NESTED_MARKER, instance, "python", lenient)
        assert rs == python, instance
        verdicts.append(not rs)
    assert verdicts == [False, False, True, False, False, False]


def test_a_nested_marker_of_an_unknown_dialect_is_refused_strictly_and_dropped_leniently() -> None:
    schema = {"properties": {"a": {"$schema": "http://example.com/mine", "type": "string"}}}
    with pytest.raises(SchemaCompileError, match="unknown \\$schema dialect"):
        normalize_schema(schema)
    out = normalize_schema(schema, lenient=True)
    assert out.schema["properties"]["a"] == {"type": "string"}
    assert any("dropped, lenient" in note for note in out.notes)


def test_a_nested_draft04_marker_reads_its_subschema_as_draft04() -> None:
    """Draft-04 `id` under a draft-07 document's definitions is that subschema's `$id`."""
    schema = {"$schema": D7, "definitions": {"a": {"$schema": D4, "id": "urn:a", "type": "string"}}}
    assert normalize_schema(schema).schema["$defs"]["a"] == {"$id": "urn:a", "type": "string"}
