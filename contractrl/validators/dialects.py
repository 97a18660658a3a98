"""Normalise the schema dialects tool calls come with into one: JSON Schema Draft 2020-12.

Function-calling data arrives as BFCL's pseudo-schemas (``dict``, ``float``, ``tuple``, ``any``,
``optional``) or as draft-04/06/07 documents (``definitions``, ``dependencies``, array-form
``items``, boolean ``exclusiveMinimum``). Validating those as-is silently ignores what the
validator does not understand, which is the opposite of fail-closed. So every keyword must be
known: an unknown keyword, an unknown ``format``, a remote or dangling ``$ref`` or a ``$ref`` loop
is a :class:`SchemaCompileError` unless ``lenient`` is set, in which case it is dropped and the
drop is recorded in ``notes``.

Real tool schemas also carry what is not JSON Schema but has a defined meaning, and strict mode
takes it rather than refuse schemas people actually have:
- ``x-*`` keys are vendor annotations by definition (OpenAPI, Kubernetes): removed, noted;
- OpenAPI's annotation keywords ``example``, ``externalDocs`` and ``xml``, and Snowplow's root
  ``self`` header when it has exactly the header's four string fields: removed, noted;
- OpenAPI formats become the standard keywords that mean the same, so every backend checks them
  alike: ``int32``/``int64`` integer ranges, ``float`` the float32 range, ``byte`` a base64 pattern
  (RFC 4648), ``double`` nothing beyond JSON's finite numbers; ``binary`` and ``password`` assert
  nothing about a value (octets; a UI hint) and are annotations while they are in
  ``annotation_formats`` (pass an empty set to refuse them);
- a tool *definition* is read for its schema: MCP (``inputSchema``), OpenAI function calling
  (``parameters``, bare or under ``{"type": "function", "function": ...}``) and Anthropic
  (``input_schema``).

Every other unknown keyword still refuses: a misspelt ``minValue`` or a vendor's ``_format`` may
be meant as a constraint, and ignoring it would let values through that its author refuses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import quote, unquote

from ..errors import SchemaCompileError
from . import ecma_regex
from .jsonvalue import canonical_json, json_type_name, sha256_json
from .pointer import PointerSyntaxError, escape_token, format_pointer, parse_pointer, resolve, unescape_token

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"

KNOWN_FORMATS = frozenset(
    {
        "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname",
        "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template",
        "json-pointer", "relative-json-pointer", "regex",
    }
)  # fmt: skip

# OpenAPI 3 data-type formats (https://spec.openapis.org/oas/v3.1.0#data-types), as standard keywords
_FLOAT32_MAX = 3.4028234663852886e38
OPENAPI_FORMATS: dict[str, dict[str, Any]] = {
    "int32": {"minimum": -(2**31), "maximum": 2**31 - 1},
    "int64": {"minimum": -(2**63), "maximum": 2**63 - 1},
    "float": {"minimum": -_FLOAT32_MAX, "maximum": _FLOAT32_MAX},
    "double": {},  # every finite JSON number is a double; the parser refuses the rest
    "byte": {"pattern": "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"},
}
# formats that say nothing about a value; read as annotations unless the caller refuses them
ANNOTATION_FORMATS = frozenset({"binary", "password"})
_OPENAPI_ANNOTATIONS = frozenset({"example", "externalDocs", "xml"})
# tool definitions: (key that marks one, key of its schema), and every other key a definition has
_TOOL_WRAPPERS = (("inputSchema", "MCP tool"), ("input_schema", "Anthropic tool"), ("parameters", "OpenAI function"))
_TOOL_FIELDS = frozenset(
    {"name", "title", "description", "inputSchema", "input_schema", "parameters", "outputSchema", "annotations",
     "strict", "type", "_meta", "cache_control"}
)  # fmt: skip

_SCHEMA_VALUED = frozenset(
    {"additionalProperties", "additionalItems", "contains", "propertyNames", "not", "if", "then", "else",
     "unevaluatedProperties", "unevaluatedItems", "items", "contentSchema"}
)  # fmt: skip
# Boolean subschemas whose keyword reports the offending names itself (kept as booleans).
_BOOLEAN_OK = frozenset({"additionalProperties", "unevaluatedProperties", "items", "unevaluatedItems"})
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_VALUE_KEYWORDS = frozenset(
    {"type", "enum", "const", "required", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
     "multipleOf", "minLength", "maxLength", "pattern", "format", "minItems", "maxItems", "uniqueItems",
     "minContains", "maxContains", "minProperties", "maxProperties", "dependentRequired", "dependencies",
     "$ref", "$id", "$schema", "$comment", "$anchor", "title", "description", "default", "examples",
     "deprecated", "readOnly", "writeOnly", "contentEncoding", "contentMediaType"}
)  # fmt: skip
# Applicators that re-check the same instance: a $ref cycle through only these never terminates.
_IN_PLACE = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas")
_UNSUPPORTED = frozenset({"$recursiveRef", "$recursiveAnchor", "$dynamicRef", "$dynamicAnchor", "$vocabulary"})
_BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}
_JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_DRAFT_URIS = {
    "draft-04": "draft-04",
    "draft-06": "draft-06",
    "draft-07": "draft-07",
    "2019-09": "2019-09",
    "2020-12": "2020-12",
}


@dataclass(frozen=True, slots=True)
class SchemaLimits:
    """Bounds on a schema, checked before anything is compiled."""

    max_bytes: int = 2_000_000
    max_depth: int = 64
    max_nodes: int = 20_000


@dataclass(frozen=True, slots=True)
class NormalizedSchema:
    """A Draft 2020-12 schema with the dialect it came from and every change made to it."""

    schema: dict[str, Any] | bool
    source_dialect: str
    sha256: str
    notes: tuple[str, ...]


def detect_dialect(schema: Any) -> str:
    """``bfcl``, ``draft-04`` ... ``2020-12``; schemas without ``$schema`` are read as draft-07."""
    if not isinstance(schema, dict):
        return "2020-12"
    uri = schema.get("$schema")
    if isinstance(uri, str):
        for marker, dialect in _DRAFT_URIS.items():
            if marker in uri:
                return dialect
        raise SchemaCompileError(f"unknown $schema dialect {uri!r}", "/$schema")
    if _uses_bfcl_types(schema, 0):
        return "bfcl"
    return "draft-07"


def _uses_bfcl_types(node: Any, depth: int) -> bool:
    if depth > 64 or not isinstance(node, dict):
        return False
    types = node.get("type")
    names = types if isinstance(types, list) else [types]
    if any(isinstance(t, str) and t in _BFCL_TYPES for t in names) or "optional" in node:
        return True
    props = node.get("properties")
    children = list(props.values()) if isinstance(props, dict) else []
    if isinstance(node.get("items"), dict):
        children.append(node["items"])
    return any(_uses_bfcl_types(child, depth + 1) for child in children)


def _is_iglu_header(value: Any) -> bool:
    """Snowplow's ``self`` names the schema (vendor, name, format, version) and constrains nothing."""
    fields = {"vendor", "name", "format", "version"}
    return isinstance(value, dict) and set(value) == fields and all(isinstance(v, str) for v in value.values())


def tool_schema(document: Any) -> tuple[Any, str | None]:
    """The JSON Schema inside a tool definition, and what kind of definition it was (None: a schema).

    A JSON Schema never has ``inputSchema``, ``input_schema`` or ``parameters`` beside a ``name``
    (strict mode would refuse them as unknown keywords), so reading them as a wrapper takes nothing
    a schema could have meant.
    """
    if not isinstance(document, dict):
        return document, None
    if document.get("type") == "function" and isinstance(document.get("function"), dict):
        document = document["function"]  # OpenAI chat-completions tools
    if not isinstance(document.get("name"), str):
        return document, None
    for key, kind in _TOOL_WRAPPERS:
        if key in document:
            inner = document[key]
            if not isinstance(inner, (dict, bool)):
                raise SchemaCompileError(f"the {kind} {document['name']!r} has a {key!r} that is not a schema", f"/{key}")
            extra = sorted(set(document) - _TOOL_FIELDS)
            if extra or document.get("type", "function") != "function":
                # schema keywords beside a definition's fields: which one is the contract? refuse
                raise SchemaCompileError(
                    f"{kind} {document['name']!r} also has keys a tool definition does not: {extra or ['type']}", "/"
                )
            return inner, f"{kind} {document['name']!r}"
    return document, None


def normalize_schema(
    schema: Any,
    *,
    dialect: str | None = None,
    lenient: bool = False,
    limits: SchemaLimits = SchemaLimits(),
    annotation_formats: frozenset[str] = ANNOTATION_FORMATS,
) -> NormalizedSchema:
    """Rewrite ``schema`` (or a tool definition's) into Draft 2020-12, failing closed on anything
    not understood."""
    schema, wrapper = tool_schema(schema)
    if not isinstance(schema, (dict, bool)):
        raise SchemaCompileError(f"a schema must be an object or a boolean, got {json_type_name(schema)}")
    try:
        size = len(canonical_json(schema).encode("utf-8"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise SchemaCompileError(f"schema is not a finite JSON document: {exc}") from exc
    if size > limits.max_bytes:
        raise SchemaCompileError(f"schema is {size} bytes, over the limit of {limits.max_bytes}")
    source = dialect or detect_dialect(schema)
    normalizer = _Normalizer(source, lenient, limits, annotation_formats, schema)
    if wrapper is not None:
        normalizer.notes.append(f"/: the schema of the {wrapper}")
    out = normalizer.node(schema, "", 0)
    if isinstance(out, dict):
        normalizer.relocate(out)
        out = {"$schema": DRAFT_2020_12, **{k: v for k, v in out.items() if k != "$schema"}}
        _check_refs(out, limits.max_depth)
    return NormalizedSchema(out, source, sha256_json(out), tuple(normalizer.notes))


class _Normalizer:
    def __init__(self, dialect: str, lenient: bool, limits: SchemaLimits, annotation_formats: frozenset[str], root: Any) -> None:
        self.dialect = dialect
        self.root = root  # the schema as written: every '#...' reference resolves against it
        self.relocations: dict[str, str] = {}  # source pointer -> why it is referenced (first $ref)
        self.lenient = lenient
        self.limits = limits
        self.annotation_formats = annotation_formats
        self.notes: list[str] = []
        self.implied: dict[str, dict[str, Any]] = {}  # node pointer -> keywords an OpenAPI format means
        self.nodes = 0

    def fail(self, message: str, pointer: str) -> None:
        """Raise in strict mode; in lenient mode record why a part of the schema was dropped."""
        if not self.lenient:
            raise SchemaCompileError(message, pointer)
        self.notes.append(f"{pointer or '/'}: {message} (dropped, lenient)")

    def node(self, schema: Any, ptr: str, depth: int) -> Any:
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            raise SchemaCompileError(f"schema has more than {self.limits.max_nodes} subschemas", ptr)
        if depth > self.limits.max_depth:
            raise SchemaCompileError(f"schema nests deeper than {self.limits.max_depth}", ptr)
        if isinstance(schema, bool):
            # python-jsonschema drops the instance path of errors from a nested ``false`` schema;
            # the equivalent ``{"not": {}}`` is located correctly by both backends.
            return schema if schema or depth == 0 else {"not": {}}
        if not isinstance(schema, dict):
            raise SchemaCompileError(f"subschema must be an object or a boolean, got {json_type_name(schema)}", ptr)
        document_dialect = self.dialect
        if depth > 0 and "$schema" in schema:
            self.dialect = self._nested_dialect(schema["$schema"], f"{ptr}/$schema")
        try:
            out: dict[str, Any] = {}
            for key, value in schema.items():
                here = f"{ptr}/{escape_token(key)}"
                self.keyword(key, value, here, depth, out, schema)
        finally:
            self.dialect = document_dialect
        implied = self.implied.pop(ptr, None)
        if implied:
            if any(k in out for k in implied) or any(k in out for k in ("exclusiveMinimum", "exclusiveMaximum")):
                out["allOf"] = [*out.get("allOf", []), implied]  # both hold; neither replaces the other
            else:
                out.update(implied)
        if self.dialect == "bfcl":
            self._bfcl_cleanup(out, ptr)
        return out

    def keyword(self, key: str, value: Any, here: str, depth: int, out: dict[str, Any], parent: dict[str, Any]) -> None:
        if key in _UNSUPPORTED:
            self.fail(f"keyword {key!r} is not supported", here)
        elif key in ("items", "prefixItems") and isinstance(parent.get("items"), list) and "prefixItems" in parent:
            raise SchemaCompileError("array-form 'items' and 'prefixItems' both give per-position schemas; keep one", here)
        elif key == "items" and isinstance(value, list):
            out["prefixItems"] = [self.node(v, f"{here}/{i}", depth + 1) for i, v in enumerate(value)]
            if "additionalItems" in parent:
                extra = parent["additionalItems"]
                where = here.rsplit("/", 1)[0] + "/additionalItems"
                out["items"] = extra if isinstance(extra, bool) else self.node(extra, where, depth + 1)
        elif key == "additionalItems":
            if not isinstance(parent.get("items"), list):
                self.notes.append(f"{here}: additionalItems without array-form items has no effect (removed)")
        elif key in _SCHEMA_VALUED:
            keep_bool = isinstance(value, bool) and key in _BOOLEAN_OK
            out[key] = value if keep_bool else self.node(value, here, depth + 1)
        elif key == "pattern":
            out[key] = self._pattern(value, here)
        elif key in _SCHEMA_MAPS:
            if not isinstance(value, dict):
                raise SchemaCompileError(f"{key!r} must be an object", here)
            if key == "patternProperties":
                value = {self._pattern(pattern, here): sub for pattern, sub in value.items()}
            target = "$defs" if key == "definitions" else key
            out.setdefault(target, {})  # an empty map is kept: it changes how backends locate errors
            for name, sub in value.items():
                where = f"{here}/{escape_token(name)}"
                self._merge(out, target, name, self.node(sub, where, depth + 1), where)
        elif key in _SCHEMA_LISTS:
            if not isinstance(value, list) or not value:
                raise SchemaCompileError(f"{key!r} must be a non-empty array", here)
            out[key] = [self.node(v, f"{here}/{i}", depth + 1) for i, v in enumerate(value)]
        elif key == "dependencies":
            self._dependencies(value, here, depth, out)
        elif key == "type":
            self._type(value, here, out)
        elif key == "format":
            self._format(value, here, out)
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(value, bool):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            if value and bound in parent:
                out[key] = exact_bound(parent[bound])
            self.notes.append(f"{here}: draft-04 boolean {key} rewritten")
        elif key in ("minimum", "maximum") and parent.get("exclusive" + key.capitalize()) is True:
            return  # folded into the exclusive bound above
        elif key == "$ref":
            out[key] = self._ref(value, here)
        elif key == "$schema":
            if depth == 0:
                out[key] = value  # replaced by the 2020-12 marker once the whole document is normalised
        elif key in ("$id", "id") and depth > 0 and (key == "$id" or self.dialect == "draft-04") and _has_ref(parent):
            # an inner $id moves the base every '#...' reference under it resolves against
            self.fail(f"{key!r} inside a subschema with a $ref changes how the reference resolves; only the root may", here)
        elif key == "id" and self.dialect == "draft-04" and isinstance(value, str):
            out["$id"] = value
        elif key == "dependentRequired":
            self._dependent_required(value, here, out)
        elif key == "optional" and self.dialect == "bfcl":
            self.notes.append(f"{here}: BFCL 'optional' flag removed (required list is authoritative)")
        elif key in _BOUND_KEYWORDS:
            out[key] = exact_bound(value)
        elif key in _VALUE_KEYWORDS:
            out[key] = value
        elif key.startswith("x-"):
            self.notes.append(f"{here}: vendor extension {key!r} is an annotation (removed)")
        elif key in _OPENAPI_ANNOTATIONS:
            self.notes.append(f"{here}: OpenAPI annotation {key!r} (removed)")
        elif key == "self" and depth == 0 and _is_iglu_header(value):
            self.notes.append(f"{here}: Iglu self-describing header (annotation, removed)")
        else:
            self.fail(f"unknown keyword {key!r}", here)

    def _format(self, value: Any, here: str, out: dict[str, Any]) -> None:
        if isinstance(value, str) and value in KNOWN_FORMATS:
            out["format"] = value
        elif isinstance(value, str) and value in OPENAPI_FORMATS:
            implied = dict(OPENAPI_FORMATS[value])
            if "pattern" in implied:
                implied["pattern"] = self._pattern(implied["pattern"], here)
            self.implied.setdefault(here.rsplit("/", 1)[0], {}).update(implied)
            self.notes.append(f"{here}: OpenAPI format {value!r} checked as {canonical_json(implied)}")
        elif isinstance(value, str) and value in self.annotation_formats:
            self.notes.append(f"{here}: format {value!r} asserts nothing about a value (annotation, removed)")
        else:
            self.fail(f"unknown format {value!r}", here)

    def _type(self, value: Any, here: str, out: dict[str, Any]) -> None:
        names = value if isinstance(value, list) else [value]
        mapped: list[str] = []
        for name in names:
            if not isinstance(name, str):
                raise SchemaCompileError(f"type must be a string or array of strings, got {name!r}", here)
            if self.dialect == "bfcl" and name in _BFCL_TYPES:
                target = _BFCL_TYPES[name]
                if target is None:  # 'any': no constraint at all
                    return
                name = target
            if name not in _JSON_TYPES:
                raise SchemaCompileError(f"unknown type {name!r}", here)
            if name not in mapped:
                mapped.append(name)
        out["type"] = mapped[0] if not isinstance(value, list) else mapped

    def _dependencies(self, value: Any, here: str, depth: int, out: dict[str, Any]) -> None:
        if not isinstance(value, dict):
            raise SchemaCompileError("'dependencies' must be an object", here)
        for prop, dep in value.items():
            where = f"{here}/{escape_token(prop)}"
            if isinstance(dep, list):
                self._dependent_required({prop: dep}, here, out)
            else:
                self._merge(out, "dependentSchemas", prop, self.node(dep, where, depth + 1), where)

    def _dependent_required(self, value: Any, here: str, out: dict[str, Any]) -> None:
        """Add property dependencies; ``dependencies`` beside ``dependentRequired`` needs both lists."""
        if not isinstance(value, dict):
            raise SchemaCompileError("'dependentRequired' must be an object", here)
        merged = out.setdefault("dependentRequired", {})
        for prop, names in value.items():
            if not isinstance(names, list) or not all(isinstance(d, str) for d in names):
                raise SchemaCompileError("property dependencies must list property names", f"{here}/{escape_token(prop)}")
            merged[prop] = list(dict.fromkeys([*merged.get(prop, []), *names]))

    def _merge(self, out: dict[str, Any], target: str, name: str, schema: Any, where: str) -> None:
        """Put one named subschema under ``target``; two source keywords that map to one name must agree.

        Draft-07 ``definitions`` beside 2020-12 ``$defs`` (or ``dependencies`` beside
        ``dependentSchemas``) can name the same entry twice. Overwriting one with the other would
        drop a constraint silently: dependent schemas are combined (both must hold), and two
        different definitions under one name are refused, since a ``$ref`` names only one.
        """
        entries = out.setdefault(target, {})
        if name not in entries or canonical_json(entries[name]) == canonical_json(schema):
            entries[name] = schema
        elif target == "dependentSchemas":
            entries[name] = {"allOf": [entries[name], schema]}
        else:
            raise SchemaCompileError(f"{name!r} is defined twice ('definitions' and '$defs') with different schemas", where)

    def _pattern(self, value: Any, here: str) -> str:
        """An ECMA-262 pattern both backends read alike, in the form jsonschema-rs compiles.

        Python-only syntax (``(?i)``, ``\\A``), syntax the engines run differently
        (backreferences) and patterns jsonschema-rs cannot compile are refused here, so the two
        backends never disagree about which schemas compile. ``\\d``/``\\w``/``\\s``, ``.`` and
        ``\\b``/``\\B`` are spelled out as ASCII classes and lookarounds (noted), since jsonschema-rs
        reads some of them as Unicode (see :mod:`.ecma_regex`).
        """
        if not isinstance(value, str):
            raise SchemaCompileError(f"pattern must be a string, got {value!r}", here)
        try:
            out = ecma_regex.portable(value)
        except ecma_regex.EcmaSyntaxError as exc:
            raise SchemaCompileError(f"pattern {value!r} is not a valid regular expression (ECMA-262): {exc}", here) from exc
        if not _rs_compiles(out):
            raise SchemaCompileError(f"pattern {value!r} is not a regular expression jsonschema-rs can compile", here)
        if out != value:
            self.notes.append(
                f"{here}: classes and word boundaries in pattern {value!r} spelled out (ASCII, as ECMA-262 defines them)"
            )
        return out

    def _nested_dialect(self, uri: Any, here: str) -> str:
        """The dialect a subschema's own ``$schema`` names; the marker itself is not kept.

        A ``$schema`` below the root is no dialect marker in 2020-12, but python-jsonschema still
        switches to that draft when a ``$ref`` leads into the subschema (and then ignores a
        ``$ref``'s siblings, ``const``, numeric ``exclusiveMinimum``...) while jsonschema-rs does
        not: kept, it made the backends disagree. The subschema is normalised as the dialect it
        names, like the rest of the document, and both backends read the result as 2020-12.
        """
        try:
            nested = detect_dialect({"$schema": uri}) if isinstance(uri, str) else None
        except SchemaCompileError:
            nested = None
        if nested is None:
            self.fail(f"unknown $schema dialect {uri!r} in a subschema", here)
            return self.dialect
        self.notes.append(f"{here}: $schema {uri!r} in a subschema: normalised as {nested} (marker removed)")
        return nested

    def _ref(self, value: Any, here: str) -> str:
        """The reference rewritten to where its target is in the normalised schema.

        It must name something in the schema as written. A target under a renamed keyword
        (``definitions`` at any depth, ``dependencies``, array-form ``items``) is renamed along
        the whole pointer; a target under a keyword the dialect does not know (``x-defs``,
        ``components``), which the source dialect resolves like any JSON Pointer, is normalised
        where it is referenced and kept under ``$defs`` (:meth:`relocate`). A target inside the
        value of a known non-schema keyword (``enum``, ``default``) is data, and refused later.
        """
        if not isinstance(value, str) or not value.startswith("#"):
            raise SchemaCompileError(f"only local '#...' references are allowed, got {value!r}", here)
        if value == "#":
            return value
        target = ref_target(value, here)
        tokens = parse_pointer(target)
        if resolve(self.root, tokens, _NOTHING) is _NOTHING:
            raise SchemaCompileError(f"$ref {value!r} resolves to nothing in the schema as written", here)
        mapped = _translate(self.root, tokens)
        if mapped is None:
            self.relocations.setdefault(target, here)
            mapped = ["$defs", target]
        if mapped == list(tokens):
            return value
        raw = value[1:].split("/")[1:]
        if len(raw) == len(tokens) == len(mapped) and all(_decoded(r) == t for r, t in zip(raw, tokens, strict=True)):
            # unchanged tokens are kept as written, so schemas that needed no rewrite keep their hash
            return "#" + "".join("/" + (r if m == t else _encoded(m)) for r, t, m in zip(raw, tokens, mapped, strict=True))
        return "#" + "".join("/" + _encoded(m) for m in mapped)

    def relocate(self, out: dict[str, Any]) -> None:
        """Normalise each referenced subschema that has no place in the output, under ``$defs``.

        Its name is its pointer in the schema as written (``/x-defs/address``), so nothing it was
        referenced by can collide with a definition of the author's; its own references may add more.
        """
        done: set[str] = set()
        while len(done) < len(self.relocations):
            target = next(t for t in self.relocations if t not in done)
            done.add(target)
            defs = out.setdefault("$defs", {})
            if target in defs:
                raise SchemaCompileError(f"a definition is already named {target!r}; cannot keep the $ref target there", "/$defs")
            value = resolve(self.root, parse_pointer(target))
            defs[target] = self.node(value, target, 1)
            self.notes.append(
                f"{target}: referenced by {self.relocations[target]} from outside any schema keyword;"
                f" normalised as a schema at /$defs/{escape_token(target)}"
            )

    def _bfcl_cleanup(self, out: dict[str, Any], ptr: str) -> None:
        """Drop BFCL defaults whose type contradicts the declared type: they would mislead repairs."""
        if "default" not in out or "type" not in out:
            return
        declared = out["type"] if isinstance(out["type"], list) else [out["type"]]
        actual = json_type_name(out["default"])
        ok = actual in declared or (actual == "integer" and "number" in declared)
        if not ok:
            self.notes.append(f"{ptr}/default: BFCL default {out['default']!r} is not of type {declared} (removed)")
            del out["default"]


_BOUND_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_EXACT_FLOAT = 2.0**53  # from here on a double is an integer, but rarely the integer its text wrote


def exact_bound(value: Any) -> Any:
    """A numeric bound as the decimal it was written as, not as its nearest double.

    ``1e25`` reads as the double 10000000000000000905969664, so ``exclusiveMaximum: 1e25`` let
    the integer 10^25 through on both backends. A float that large is always integral: it
    becomes the integer its shortest decimal text names, which both backends compare exactly.
    The instance side stays as parsed: a float instance at such a bound is compared against the
    exact integer, so the borderline double is refused, never accepted.
    """
    if isinstance(value, float) and math.isfinite(value) and abs(value) >= _EXACT_FLOAT:
        return int(Decimal(repr(value)))
    return value


def _has_ref(node: Any) -> bool:
    """Whether a ``$ref`` key occurs anywhere under ``node`` (over-approximated: data counts too)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "$ref" in item:
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _rs_compiles(pattern: str) -> bool:
    """Whether jsonschema-rs compiles ``pattern``: asked of the compile guard, since a pattern can
    cost the native compiler gigabytes (:mod:`.guard`)."""
    from .guard import guard

    return guard().compiles({"pattern": pattern})


def walk_schemas(root: dict[str, Any]) -> dict[str, Any]:
    """Every subschema of a normalised schema by its canonical pointer, found by keyword position.

    Only places where the keyword makes the value a schema are walked: the values of
    ``properties``/``$defs``/..., the entries of ``allOf``/``prefixItems``/..., the schema of
    ``items``/``not``/.... A key that merely *looks* like a keyword is judged by where it stands: a
    property named ``enum`` is a schema, the value of ``enum`` never is, whatever it contains.
    """
    found: dict[str, Any] = {}
    stack: list[tuple[str, Any]] = [("", root)]
    while stack:
        ptr, node = stack.pop()
        found[ptr] = node
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            here = f"{ptr}/{escape_token(key)}"
            if key in _SCHEMA_VALUED and isinstance(value, (dict, bool)):
                stack.append((here, value))
            elif key in _SCHEMA_MAPS and isinstance(value, dict):
                stack.extend((f"{here}/{escape_token(name)}", child) for name, child in value.items())
            elif key in _SCHEMA_LISTS and isinstance(value, list):
                stack.extend((f"{here}/{i}", child) for i, child in enumerate(value))
    return found


def ref_target(ref: str, where: str) -> str:
    """The canonical pointer a local ``$ref`` names: its fragment percent-decoded, as both backends read it."""
    try:
        return format_pointer(parse_pointer(unquote(ref[1:], errors="strict")))
    except (PointerSyntaxError, UnicodeDecodeError) as exc:
        raise SchemaCompileError(f"$ref {ref!r} is not a valid JSON Pointer fragment: {exc}", where) from exc


# known keywords whose values are data, never schemas: a $ref into them is refused by _check_refs
_DATA_KEYWORDS = _VALUE_KEYWORDS | _UNSUPPORTED | _OPENAPI_ANNOTATIONS | {"id", "optional", "self"}
_NAMED_SCHEMAS = {"definitions": "$defs", "$defs": "$defs", "properties": "properties", "dependentSchemas": "dependentSchemas"}


def _translate(root: Any, tokens: tuple[str, ...]) -> list[str] | None:
    """Where the source pointer ``tokens`` (into a schema as written) is after normalisation.

    Walks the source by keyword position, renaming what :class:`_Normalizer` renames. The path
    is kept as it is from the first known non-schema keyword on (its value is data). None: the
    target is not at a schema position that the normalised schema keeps (it sits under a keyword
    the dialect does not know, or one normalisation drops), so it must be relocated.
    """
    node: Any = root
    out: list[str] = []
    i = 0
    while i < len(tokens):
        if not isinstance(node, dict):
            return out + list(tokens[i:])  # inside a boolean schema or data: whatever it is, kept as is
        key = tokens[i]
        value = node[key]
        name = tokens[i + 1] if i + 1 < len(tokens) else None
        if key in _NAMED_SCHEMAS or key == "patternProperties":
            if name is None or not isinstance(value, dict):
                return out + list(tokens[i:])  # the map itself is not a schema
            if key == "patternProperties":
                try:
                    name = ecma_regex.portable(name)
                except ecma_regex.EcmaSyntaxError:
                    return None
            out += [_NAMED_SCHEMAS.get(key, key), name]
            node, i = value[tokens[i + 1]], i + 2
        elif key == "dependencies" and name is not None and isinstance(value, dict):
            if not isinstance(value[name], (dict, bool)):
                return out + list(tokens[i:])  # a property dependency: a list of names
            if name in node.get("dependentSchemas", {}):
                return None  # combined with the dependentSchemas entry of the same name
            out += ["dependentSchemas", name]
            node, i = value[name], i + 2
        elif key in _SCHEMA_LISTS or (key == "items" and isinstance(value, list)):
            if name is None or not isinstance(value, list):
                return out + list(tokens[i:])
            out += ["prefixItems" if key == "items" else key, name]
            node, i = value[int(name)], i + 2
        elif key == "additionalItems":
            if not isinstance(node.get("items"), list):
                return None  # removed: it has no effect without array-form items
            out.append("items")
            node, i = value, i + 1
        elif key in _SCHEMA_VALUED:
            out.append(key)
            node, i = value, i + 1
        elif key in _DATA_KEYWORDS or key == "dependencies" or key == "dependentRequired":
            return out + list(tokens[i:])
        else:
            return None  # an unknown keyword or vendor extension: dropped or refused, never walked
    return out


def _decoded(raw: str) -> str | None:
    """One raw fragment token as a reference token, or None where it does not decode to one."""
    try:
        return unescape_token(unquote(raw, errors="strict"))
    except (PointerSyntaxError, UnicodeDecodeError):
        return None


def _encoded(token: str) -> str:
    """One reference token as a fragment token both backends percent-decode back to it."""
    return quote(escape_token(token), safe="!$&'()*+,;=:@")


def _check_refs(root: dict[str, Any], max_chain: int) -> None:
    """Every local $ref must name a subschema, and no $ref cycle may re-check an instance without progress.

    A reference into a non-schema position (an ``enum`` value, a ``default``) is refused: the
    backends would compile it as a schema that was never normalised or checked here.
    """
    schemas = walk_schemas(root)
    edges: dict[str, str] = {}
    for ptr, node in schemas.items():
        if isinstance(node, dict) and "$ref" in node:
            ref, where = node["$ref"], f"{ptr}/$ref"
            target = ref_target(ref, where)
            if target not in schemas:
                found = resolve(root, parse_pointer(target), _NOTHING)
                what = (
                    "resolves to nothing"
                    if found is _NOTHING
                    else "does not name a subschema (only schema positions can be referenced)"
                )
                raise SchemaCompileError(f"$ref {ref!r} {what}", where)
            edges[ptr] = target
    explored: set[str] = set()
    for start in edges:
        _find_cycle(schemas, start, edges, explored, max_chain)


_NOTHING = object()


def _find_cycle(schemas: dict[str, Any], start: str, edges: dict[str, str], explored: set[str], max_chain: int) -> None:
    """Iterative depth-first search over in-place applicators (no recursion, so no stack limit).

    A cycle that re-validates the same instance never terminates; a chain of in-place references
    longer than ``max_chain`` is refused too, since validators recurse along it.
    """
    stack: list[tuple[str, int]] = [(start, 0)]
    path: list[str] = []
    on_path: set[str] = set()
    while stack:
        ptr, depth = stack.pop()
        if ptr == "\0done":
            done = path.pop()
            on_path.discard(done)
            explored.add(done)
            continue
        if ptr in on_path:
            loop = " -> ".join("#" + p for p in (*path, ptr))
            raise SchemaCompileError(f"$ref cycle re-validates the same instance without progress: {loop}", ptr)
        if ptr in explored:
            continue
        if depth > max_chain:
            raise SchemaCompileError(f"chain of in-place references is longer than {max_chain}", ptr)
        node = schemas.get(ptr)
        if not isinstance(node, dict):
            explored.add(ptr)
            continue
        path.append(ptr)
        on_path.add(ptr)
        stack.append(("\0done", depth))
        target = edges.get(ptr)
        if target is not None:
            stack.append((target, depth + 1))
        for key in _IN_PLACE:
            child = node.get(key)
            if isinstance(child, list):
                stack.extend((f"{ptr}/{key}/{i}", depth + 1) for i in range(len(child)))
            elif isinstance(child, dict) and key == "dependentSchemas":
                stack.extend((f"{ptr}/{key}/{escape_token(name)}", depth + 1) for name in child)
            elif isinstance(child, dict):
                stack.append((f"{ptr}/{key}", depth + 1))
