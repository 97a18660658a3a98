"""Dialect normalisation into Draft 2020-12, and the fail-closed refusals."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contractrl.errors import SchemaCompileError
from contractrl.validators import SchemaLimits, Verifier, compile_schema, detect_dialect, normalize_schema
from contractrl.validators.dialects import DRAFT_2020_12
from contractrl.validators.report import VerifierError

BFCL = {
    "type": "dict",
    "properties": {
        "ratio": {"type": "float", "default": "1.0"},
        "size": {"type": "tuple", "items": {"type": "integer"}},
        "anything": {"type": "any"},
        "flags": {"type": "dict", "properties": {"deep": {"type": "boolean", "default": "false"}}},
        "unit": {"type": "string", "optional": True, "default": "cm"},
    },
    "required": ["ratio"],
}


def test_bfcl_types_map_to_json_schema() -> None:
    out = normalize_schema(BFCL)
    assert out.source_dialect == "bfcl"
    props = out.schema["properties"]
    assert out.schema["type"] == "object"
    assert props["ratio"]["type"] == "number"
    assert props["size"] == {"type": "array", "items": {"type": "integer"}}
    assert props["anything"] == {}
    assert props["flags"]["type"] == "object"
    assert "optional" not in props["unit"]
    assert out.schema["$schema"] == DRAFT_2020_12


def test_bfcl_wrong_typed_defaults_are_removed_and_noted() -> None:
    out = normalize_schema(BFCL)
    assert "default" not in out.schema["properties"]["ratio"]
    assert "default" not in out.schema["properties"]["flags"]["properties"]["deep"]
    assert out.schema["properties"]["unit"]["default"] == "cm"
    assert any("/properties/ratio/default" in note for note in out.notes)


def test_bfcl_int_is_accepted_for_float() -> None:
    assert Verifier.build(BFCL).verify({"ratio": 2}).accepted


def test_draft04_constructs_are_rewritten() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "id": "urn:example",
        "definitions": {"pos": {"type": "integer", "minimum": 0, "exclusiveMinimum": True}},
        "type": "object",
        "properties": {"n": {"$ref": "#/definitions/pos"}, "tags": {"items": [{"type": "string"}], "additionalItems": False}},
        "dependencies": {"a": ["b"], "c": {"required": ["d"]}},
    }
    out = normalize_schema(schema)
    assert out.source_dialect == "draft-04"
    s = out.schema
    assert s["$id"] == "urn:example"
    assert s["$defs"]["pos"] == {"type": "integer", "exclusiveMinimum": 0}
    assert s["properties"]["n"] == {"$ref": "#/$defs/pos"}
    assert s["properties"]["tags"] == {"prefixItems": [{"type": "string"}], "items": False}
    assert s["dependentRequired"] == {"a": ["b"]}
    assert s["dependentSchemas"] == {"c": {"required": ["d"]}}
    verifier = Verifier.build(schema)
    assert not verifier.verify({"n": 0}).accepted
    assert verifier.verify({"n": 1}).accepted
    assert not verifier.verify({"tags": ["a", "b"]}).accepted
    assert [e.code.value for e in verifier.verify({"a": 1}).errors] == ["dependency_violation"]


def test_type_lists_are_kept() -> None:
    verifier = Verifier.build({"type": "object", "properties": {"x": {"type": ["string", "null"]}}})
    assert verifier.verify({"x": None}).accepted
    assert verifier.verify({"x": 1}).errors[0].expected == "string|null"


@pytest.mark.parametrize(
    ("dialect_uri", "name"),
    [
        ("http://json-schema.org/draft-06/schema#", "draft-06"),
        ("http://json-schema.org/draft-07/schema#", "draft-07"),
        ("https://json-schema.org/draft/2020-12/schema", "2020-12"),
    ],
)
def test_dialect_detection(dialect_uri: str, name: str) -> None:
    assert detect_dialect({"$schema": dialect_uri}) == name


def test_unknown_dialect_uri_is_refused() -> None:
    with pytest.raises(SchemaCompileError, match="unknown \\$schema"):
        normalize_schema({"$schema": "http://example.com/my-dialect"})


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "object", "nullable": True}, "unknown keyword 'nullable'"),
        ({"properties": {"d": {"type": "string", "format": "binary"}}}, "unknown format 'binary'"),
        ({"$ref": "https://example.com/schema.json"}, "only local"),
        ({"$ref": "#/$defs/missing"}, "resolves to nothing"),
        ({"type": "strnig"}, "unknown type"),
        ({"pattern": "("}, "not a valid regular expression"),
        ({"$dynamicRef": "#meta"}, "not supported"),
        ({"allOf": []}, "non-empty array"),
        ({"properties": []}, "must be an object"),
        (["not", "a", "schema"], "must be an object or a boolean"),
    ],
)
def test_fail_closed_at_compile_time(schema: object, message: str) -> None:
    with pytest.raises(SchemaCompileError, match=message):
        normalize_schema(schema)


def test_lenient_drops_unknown_keywords_and_formats_with_notes() -> None:
    out = normalize_schema({"type": "object", "nullable": True, "properties": {"d": {"format": "binary"}}}, lenient=True)
    assert out.schema["properties"]["d"] == {}
    assert "nullable" not in out.schema
    assert len(out.notes) == 2 and all("lenient" in n for n in out.notes)


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"},
        {"$defs": {"a": {"not": {"$ref": "#/$defs/a"}}}, "$ref": "#/$defs/a"},
    ],
)
def test_ref_cycles_without_progress_are_refused(schema: dict) -> None:
    with pytest.raises(SchemaCompileError, match="cycle"):
        normalize_schema(schema)


def test_recursive_ref_through_properties_is_legitimate() -> None:
    tree = {
        "$defs": {"node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
        "$ref": "#/$defs/node",
    }
    verifier = Verifier.build(tree)
    assert verifier.verify({"children": [{"children": [{"children": []}]}]}).accepted
    report = verifier.verify({"children": [{"children": [1]}]})
    assert [(e.code.value, e.pointer) for e in report.errors] == [("wrong_type", "/children/0/children/0")]


def test_schema_limits() -> None:
    with pytest.raises(SchemaCompileError, match="bytes"):
        normalize_schema({"description": "x" * 1000}, limits=SchemaLimits(max_bytes=500))
    deep: dict = {"type": "object"}
    for _ in range(80):
        deep = {"properties": {"a": deep}}
    with pytest.raises(SchemaCompileError, match="deeper"):
        normalize_schema(deep)
    wide = {"properties": {f"p{i}": {"type": "string"} for i in range(50)}}
    with pytest.raises(SchemaCompileError, match="subschemas"):
        normalize_schema(wide, limits=SchemaLimits(max_nodes=20))


def test_normalisation_is_deterministic_and_hashed() -> None:
    a = normalize_schema(BFCL)
    b = normalize_schema(dict(reversed(list(BFCL.items()))))
    assert a.sha256 == b.sha256
    assert len(a.sha256) == 64


_keywords = st.sampled_from(
    ["type", "properties", "items", "required", "enum", "minimum", "format", "$ref", "allOf", "oneOf", "not",
     "definitions", "dependencies", "additionalProperties", "pattern", "prefixItems", "exclusiveMinimum", "x-extra"]
)  # fmt: skip
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from(["string", "dict", "#", "#/a", "date", "(", "a"])
)
_schemas = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.one_of(_keywords, st.text(max_size=3)), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(schema=_schemas, lenient=st.booleans())
def test_arbitrary_schemas_compile_or_fail_with_a_typed_error(schema: object, lenient: bool) -> None:
    """Any JSON at all as a schema: a compiled validator or SchemaCompileError, nothing else."""
    for backend in ("rs", "python"):
        try:
            compiled = compile_schema(schema, backend, lenient=lenient)
        except SchemaCompileError:
            continue
        errors = compiled.errors({"a": [1, "x", None]})
        assert all(isinstance(e, VerifierError) and (e.pointer == "" or e.pointer.startswith("/")) for e in errors)
        # a validator built from the same schema gives the same verdict (compilation is deterministic)
        assert bool(errors) == bool(compile_schema(schema, backend, lenient=lenient).errors({"a": [1, "x", None]}))


def test_refs_are_found_by_keyword_position_not_by_name() -> None:
    """Keys named enum/const/default/examples are schemas under $defs or properties, and walked."""
    for name in ("enum", "const", "default", "examples"):
        with pytest.raises(SchemaCompileError, match="cycle"):
            normalize_schema({"$defs": {name: {"allOf": [{"$ref": f"#/$defs/{name}"}]}}, "$ref": f"#/$defs/{name}"})
    # the value of enum is data, never a schema: a $ref into it is refused, not compiled
    with pytest.raises(SchemaCompileError, match="does not name a subschema"):
        normalize_schema({"enum": [{"type": "string"}], "$ref": "#/enum/0"})


def test_refs_resolve_like_the_backends() -> None:
    """Both backends percent-decode a fragment and resolve it against an inner $id; so must the checks."""
    with pytest.raises(SchemaCompileError, match="cycle"):
        normalize_schema({"$defs": {"a b": {"not": {"$ref": "#/$defs/a%20b"}}}, "$ref": "#/$defs/a%20b"})
    with pytest.raises(SchemaCompileError, match="only the root"):
        normalize_schema({"properties": {"a": {"$id": "http://x.example/y", "$ref": "#/$defs/z", "$defs": {"z": {}}}}})
    out = normalize_schema({"properties": {"a": {"$id": "http://x.example/y", "$ref": "#"}}}, lenient=True)
    assert out.schema["properties"]["a"] == {"$ref": "#"} and "only the root" in out.notes[0]
    # without a reference under it an inner $id changes nothing and is kept
    assert normalize_schema({"properties": {"a": {"$id": "http://x.example/y"}}}).schema["properties"]["a"]["$id"]


def test_two_source_keywords_for_one_target_merge_or_refuse() -> None:
    out = normalize_schema(
        {
            "dependencies": {"a": ["b"], "c": {"required": ["d"]}},
            "dependentRequired": {"a": ["e"]},
            "dependentSchemas": {"c": {"minProperties": 9}},
        }
    )
    assert out.schema["dependentRequired"] == {"a": ["b", "e"]}
    assert out.schema["dependentSchemas"]["c"] == {"allOf": [{"required": ["d"]}, {"minProperties": 9}]}
    same = normalize_schema({"definitions": {"x": {"type": "integer"}}, "$defs": {"x": {"type": "integer"}}})
    assert same.schema["$defs"] == {"x": {"type": "integer"}}
    with pytest.raises(SchemaCompileError, match="defined twice"):
        normalize_schema({"definitions": {"x": {"type": "integer"}}, "$defs": {"x": {"type": "string"}}})
    with pytest.raises(SchemaCompileError, match="prefixItems"):
        normalize_schema({"prefixItems": [{}], "items": [{}]})
