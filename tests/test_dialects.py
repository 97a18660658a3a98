"""Dialect normalisation into Draft 2020-12, and the fail-closed refusals."""

from __future__ import annotations

import base64
import binascii

import numpy as np
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
        ({"properties": {"d": {"type": "string", "format": "int128"}}}, "unknown format 'int128'"),
        ({"properties": {"n": {"type": "integer", "minValue": 0}}}, "unknown keyword 'minValue'"),
        ({"oneOf": [{"type": "object"}], "discriminator": {"propertyName": "kind"}}, "unknown keyword 'discriminator'"),
        ({"properties": {"t": {"_format": "date-time"}}}, "unknown keyword '_format'"),
        ({"self": {"vendor": "v", "name": "n", "format": "jsonschema", "version": 1}}, "unknown keyword 'self'"),
        ({"properties": {"a": {"self": {"vendor": "v", "name": "n", "format": "f", "version": "1"}}}}, "unknown keyword 'self'"),
        ({"name": "f", "inputSchema": "object"}, "'inputSchema' that is not a schema"),
        # a schema whose own keywords sit beside a definition's: neither is silently dropped
        ({"name": "f", "parameters": {}, "type": "object", "required": ["a"]}, "keys a tool definition does not"),
        ({"name": "f", "inputSchema": {}, "properties": {"a": {"type": "string"}}}, "keys a tool definition does not"),
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
    out = normalize_schema({"type": "object", "nullable": True, "properties": {"d": {"format": "int128"}}}, lenient=True)
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


# --- schemas people actually have: annotations, OpenAPI formats and tool definitions ----------------

_TOOL = {
    "type": "object",
    "properties": {"limit": {"type": "integer", "format": "int32"}, "blob": {"type": "string", "format": "byte"}},
    "required": ["limit"],
}


def test_vendor_extensions_and_openapi_annotations_are_removed_with_notes() -> None:
    schema = {
        "type": "object",
        "x-kubernetes-group-version-kind": [{"group": "", "kind": "Pod", "version": "v1"}],
        "properties": {
            "x-name": {"type": "string", "x-order": 1, "example": "a", "externalDocs": {"url": "u"}, "xml": {"name": "n"}},
        },
        "self": {"vendor": "com.acme", "name": "event", "format": "jsonschema", "version": "1-0-0"},
    }
    out = normalize_schema(schema)
    # a property named x-name is a property: only keywords are annotations
    assert out.schema["properties"] == {"x-name": {"type": "string"}}
    assert "x-kubernetes-group-version-kind" not in out.schema and "self" not in out.schema
    assert len(out.notes) == 6
    verifier = Verifier.build(schema)
    assert verifier.verify({"x-name": "a"}).accepted and not verifier.verify({"x-name": 1}).accepted


@pytest.mark.parametrize(
    "definition",
    [
        {"name": "search", "description": "d", "inputSchema": _TOOL},  # MCP
        {"name": "search", "description": "d", "parameters": _TOOL},  # OpenAI function
        {"type": "function", "function": {"name": "search", "parameters": _TOOL, "strict": True}},  # OpenAI tool
        {"name": "search", "input_schema": _TOOL},  # Anthropic
    ],
)
def test_tool_definitions_are_read_for_their_schema(definition: dict) -> None:
    bare = normalize_schema(_TOOL)
    wrapped = normalize_schema(definition)
    assert wrapped.schema == bare.schema and wrapped.sha256 == bare.sha256
    assert "search" in wrapped.notes[0]
    report = Verifier.build(definition).verify({"limit": 2**31})
    assert not report.accepted and report.errors[0].pointer == "/limit"


def test_annotation_formats_can_be_refused() -> None:
    schema = {"properties": {"file": {"type": "string", "format": "binary"}, "pw": {"type": "string", "format": "password"}}}
    assert normalize_schema(schema).schema["properties"] == {"file": {"type": "string"}, "pw": {"type": "string"}}
    with pytest.raises(SchemaCompileError, match="unknown format 'binary'"):
        normalize_schema(schema, annotation_formats=frozenset())


def test_openapi_formats_keep_the_schema_own_bounds() -> None:
    out = normalize_schema({"type": "integer", "format": "int32", "minimum": 0, "allOf": [{"multipleOf": 2}]})
    assert out.schema["minimum"] == 0
    assert out.schema["allOf"] == [{"multipleOf": 2}, {"minimum": -(2**31), "maximum": 2**31 - 1}]
    verifier = Verifier.build({"type": "integer", "format": "int32", "minimum": 0})
    assert [verifier.verify(v).accepted for v in (-1, 0, 2**31 - 1, 2**31)] == [False, True, True, False]


_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _near_bounds() -> st.SearchStrategy[int]:
    edges = [b + d for lo, hi in _RANGES.values() for b in (lo, hi) for d in (-1, 0, 1)]
    return st.one_of(st.sampled_from(edges), st.integers(min_value=-(2**70), max_value=2**70))


@settings(max_examples=300, deadline=None)
@given(value=_near_bounds(), fmt=st.sampled_from(sorted(_RANGES)), backend=st.sampled_from(["rs", "python"]))
def test_integer_formats_accept_exactly_their_range(value: int, fmt: str, backend: str) -> None:
    lo, hi = _RANGES[fmt]
    verifier = Verifier.build({"type": "integer", "format": fmt}, backend=backend)
    assert verifier.verify(value).accepted == (lo <= value <= hi)


@settings(max_examples=300, deadline=None)
@given(
    value=st.one_of(
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from([_FLOAT32_MAX, -_FLOAT32_MAX, np.nextafter(_FLOAT32_MAX, np.inf), 1e39, -1e39]),
    ),
    backend=st.sampled_from(["rs", "python"]),
)
def test_float_format_accepts_exactly_the_float32_range(value: float, backend: str) -> None:
    reference = abs(value) <= _FLOAT32_MAX  # the largest finite IEEE single, as OpenAPI's float
    assert Verifier.build({"type": "number", "format": "float"}, backend=backend).verify(float(value)).accepted == reference


def _base64_reference(text: str) -> bool:
    """RFC 4648 section 4 with padding: Python's strict decoder, and a length that is a multiple of
    4 (the decoder also takes a "=" after a complete quantum, such as "0000=", which section 4 does
    not: padding only completes the last quantum; hypothesis found it)."""
    try:
        binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError):
        return False
    return len(text) % 4 == 0


@settings(max_examples=500, deadline=None)
@given(
    text=st.one_of(
        st.text(alphabet="ABCaz09+/=", max_size=12),
        st.binary(max_size=9).map(lambda b: base64.b64encode(b).decode()),
        st.binary(max_size=9).map(lambda b: base64.b64encode(b).decode() + "="),
        st.text(max_size=8),
    ),
    backend=st.sampled_from(["rs", "python"]),
)
def test_byte_format_accepts_exactly_base64(text: str, backend: str) -> None:
    verifier = Verifier.build({"type": "string", "format": "byte"}, backend=backend)
    assert verifier.verify(text).accepted == _base64_reference(text)
