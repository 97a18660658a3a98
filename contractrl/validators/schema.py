"""Compiled schemas with two interchangeable backends and backend-independent reports.

``rs`` (jsonschema-rs, Rust) is the fast default used in rollouts; ``python`` (python-jsonschema) is
the reference implementation used to cross-check it. Both are reduced to the same raw error form and
rendered by one function, so a report, and hence a ledger, does not depend on the backend: only the
verdicts could, and the conformance tests pin where they differ.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from urllib.parse import unquote

import jsonschema_rs

from ..errors import SchemaCompileError
from .budget import DEFAULT_BUDGET, Budget, schema_cost, verification_work
from .codes import Code
from .dialects import NormalizedSchema, SchemaLimits, normalize_schema
from .guard import guard
from .jsonvalue import canonical_json, json_type_name
from .lru import BoundedLRU
from .pointer import format_pointer, parse_pointer, resolve
from .report import VerifierError, truncate_actual

BackendName = Literal["rs", "python"]
BACKENDS: tuple[BackendName, ...] = ("rs", "python")


@dataclass(frozen=True, slots=True)
class RawError:
    """One backend error reduced to what both backends can tell: keyword, place, names."""

    keyword: str
    tokens: tuple[str | int, ...]
    value: Any
    names: tuple[str, ...] = ()


class Backend(Protocol):
    name: BackendName

    def is_valid(self, instance: Any) -> bool: ...

    def raw_errors(self, instance: Any) -> Iterator[RawError]: ...


def _schema_at(schema: Any, path: list[str | int]) -> Any:
    """Walk a backend's schema path (following ``$ref``) to the subschema it names."""
    node = schema
    root = schema
    for token in path:
        if token == "$ref" and isinstance(node, dict) and isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            node = root if ref == "#" else resolve(root, parse_pointer(unquote(ref[1:])), None)
            continue
        if isinstance(node, dict):
            node = node.get(str(token))
        elif isinstance(node, list) and isinstance(token, int) and token < len(node):
            node = node[token]
        else:
            return None
    return node


class RsBackend:
    """jsonschema-rs: compiled once in Rust; formats checked; unknown formats refused."""

    name: BackendName = "rs"

    def __init__(self, schema: dict[str, Any] | bool) -> None:
        self._schema = schema
        try:
            self._validator = jsonschema_rs.validator_for(schema, validate_formats=True, ignore_unknown_formats=False)
        except (jsonschema_rs.ValidationError, ValueError, jsonschema_rs.ReferencingError) as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SchemaCompileError(f"jsonschema-rs cannot compile the schema: {first_line}") from exc
        self.is_valid = self._validator.is_valid

    def raw_errors(self, instance: Any) -> Iterator[RawError]:
        for error in self._validator.iter_errors(instance):
            kind = error.kind
            path = list(error.schema_path)
            keyword = str(path[-1]) if path else kind.name
            if kind.name == "falseSchema":
                keyword = "false"
            details = kind.as_dict()
            names: tuple[str, ...] = ()
            if "property" in details:
                names = (str(details["property"]),)
            elif "unexpected" in details and keyword.endswith("Properties"):
                names = tuple(str(n) for n in details["unexpected"])
            parent = _schema_at(self._schema, path[:-1]) if path else None
            value = parent.get(keyword) if isinstance(parent, dict) else None
            yield RawError(keyword, tuple(error.instance_path), value, names)


_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")


class PythonBackend:
    """python-jsonschema Draft202012Validator: the reference, with the standard's regexes and formats.

    Patterns are ECMA-262 and time-bounded, ``email`` is RFC 5321 and ``regex`` is ECMA-262
    syntax (:mod:`.python_reference`), so this backend refuses what the standard refuses. A
    validation whose regex searches run past their budget is a refusal (``pattern_mismatch`` at
    the root), never a verdict guessed from a partial search.

    Imported on first use: its format checkers take seconds to import (they build grammars), a
    cost the default ``rs`` path and every short CLI call should not pay.
    """

    name: BackendName = "python"

    def __init__(self, schema: dict[str, Any] | bool) -> None:
        import jsonschema

        from .python_reference import format_checker, multiple_of, unique_items

        keywords = {"multipleOf": multiple_of, "uniqueItems": unique_items}
        cls = jsonschema.validators.extend(jsonschema.Draft202012Validator, keywords)
        try:
            cls.check_schema(schema, format_checker=format_checker())  # patterns are ECMA-262, not Python re
        except jsonschema.SchemaError as exc:
            raise SchemaCompileError(f"schema is not valid Draft 2020-12: {exc.message}") from exc
        self._validator = cls(schema, format_checker=format_checker())

    def is_valid(self, instance: Any) -> bool:
        from .ecma_regex import RegexTimeout
        from .python_reference import ecma_patterns

        try:
            with ecma_patterns():
                return self._validator.is_valid(instance)
        except RegexTimeout:
            return False

    def raw_errors(self, instance: Any) -> Iterator[RawError]:
        from .ecma_regex import RegexTimeout
        from .python_reference import ecma_patterns

        try:
            with ecma_patterns():  # the names of extra properties are found by pattern searches too
                raws = [self._raw(error) for error in self._validator.iter_errors(instance)]
        except RegexTimeout as exc:
            yield RawError("pattern", (), exc.pattern)  # located at the root: the search never finished
            return
        yield from raws

    @staticmethod
    def _raw(error: Any) -> RawError:
        keyword = error.validator if error.validator is not None else "false"
        names: tuple[str, ...] = ()
        inst = error.instance
        if keyword == "required" and isinstance(inst, dict):
            names = tuple(r for r in error.validator_value if r not in inst)
        elif keyword == "dependentRequired" and isinstance(inst, dict):
            names = tuple(d for p, deps in error.validator_value.items() if p in inst for d in deps if d not in inst)
        elif keyword == "additionalProperties" and isinstance(inst, dict):
            names = tuple(_extra_properties(inst, error.schema))
        elif keyword == "unevaluatedProperties":
            names = tuple(_QUOTED.findall(error.message))
        return RawError(str(keyword), tuple(error.absolute_path), error.validator_value, names)


def _extra_properties(instance: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    from .ecma_regex import search

    props = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [k for k in instance if k not in props and not any(search(p, k) for p in patterns)]


_KEYWORD_CODES: dict[str, Code] = {
    "required": Code.MISSING_REQUIRED,
    "type": Code.WRONG_TYPE,
    "enum": Code.ENUM_MISMATCH,
    "const": Code.CONST_MISMATCH,
    **dict.fromkeys(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"), Code.OUT_OF_RANGE),
    **dict.fromkeys(("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"), Code.LENGTH_VIOLATION),
    "pattern": Code.PATTERN_MISMATCH,
    "format": Code.FORMAT_MISMATCH,
    **dict.fromkeys(("additionalProperties", "unevaluatedProperties", "propertyNames"), Code.ADDITIONAL_PROPERTY),
    **dict.fromkeys(
        ("items", "prefixItems", "contains", "minContains", "maxContains", "uniqueItems", "unevaluatedItems"),
        Code.ITEMS_VIOLATION,
    ),
    **dict.fromkeys(("oneOf", "anyOf", "not"), Code.UNION_MISMATCH),
    **dict.fromkeys(("dependentRequired", "dependentSchemas", "if", "then", "else"), Code.DEPENDENCY_VIOLATION),
}

_BOUND_TEXT = {
    "minimum": ">= {}",
    "maximum": "<= {}",
    "exclusiveMinimum": "> {}",
    "exclusiveMaximum": "< {}",
    "multipleOf": "multiple of {}",
    "minLength": "length >= {}",
    "maxLength": "length <= {}",
    "minItems": "at least {} items",
    "maxItems": "at most {} items",
    "minProperties": "at least {} properties",
    "maxProperties": "at most {} properties",
    "minContains": "at least {} matching items",
    "maxContains": "at most {} matching items",
}


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _short(value: Any, limit: int = 120) -> str:
    """:func:`canonical_json` of ``value`` cut to ``limit`` characters, encoding no more than it keeps.

    A schema value quoted in a report (an enum of thousands of members) is encoded lazily and
    the encoding stops once the cut is known, so 20,000 errors never encode the enum 20,000 times.
    """
    pieces: list[str] = []
    size = 0
    try:
        for piece in _ENCODER.iterencode(value):
            pieces.append(piece)
            size += len(piece)
            if size > limit:
                return "".join(pieces)[:limit] + "..."
    except (TypeError, ValueError):
        text = repr(value)
        return text if len(text) <= limit else text[:limit] + "..."
    return "".join(pieces)


def _expected(keyword: str, value: Any) -> str:
    if keyword == "type":
        return "|".join(value) if isinstance(value, list) else str(value)
    if keyword == "enum":
        return "one of " + _short(value)
    if keyword == "const":
        return "equal to " + _short(value)
    if keyword in _BOUND_TEXT:
        return _BOUND_TEXT[keyword].format(_short(value))
    if keyword == "pattern":
        return f"matches /{value}/"
    if keyword == "format":
        return f"format {value}"
    if keyword == "oneOf":
        return f"exactly one of {len(value) if isinstance(value, list) else '?'} alternatives"
    if keyword == "anyOf":
        return f"at least one of {len(value) if isinstance(value, list) else '?'} alternatives"
    if keyword == "uniqueItems":
        return "unique items"
    if keyword == "not":
        return "must not match the excluded schema"
    return keyword


def to_verifier_errors(instance: Any, raw: RawError) -> list[VerifierError]:
    """Render one raw backend error as typed errors, one per missing or unexpected property."""
    code = _KEYWORD_CODES.get(raw.keyword)
    tokens = tuple(str(t) for t in raw.tokens)
    if raw.keyword in ("false", "not") and (raw.keyword == "false" or raw.value == {}):
        container = resolve(instance, tokens[:-1], None) if tokens else None
        code = Code.ITEMS_VIOLATION if isinstance(container, list) else Code.ADDITIONAL_PROPERTY
        actual = truncate_actual(resolve(instance, tokens, None))
        return [VerifierError(code, format_pointer(tokens), "absent", actual, f"{code.value}: value is not allowed here")]
    if code is None:
        code = Code.UNION_MISMATCH
    if raw.names and code in (Code.MISSING_REQUIRED, Code.DEPENDENCY_VIOLATION):
        return [
            VerifierError(code, format_pointer((*tokens, n)), "present", "absent", f"{code.value}: {n!r} is required")
            for n in raw.names
        ]
    if raw.names and code is Code.ADDITIONAL_PROPERTY:
        parent = resolve(instance, tokens, {})
        out = []
        for n in raw.names:
            actual = truncate_actual(parent.get(n) if isinstance(parent, dict) else None)
            out.append(VerifierError(code, format_pointer((*tokens, n)), "absent", actual, f"{code.value}: {n!r} is not allowed"))
        return out
    value_here = resolve(instance, tokens, None)
    expected = _expected(raw.keyword, raw.value)
    actual = truncate_actual(value_here)
    if code is Code.WRONG_TYPE:
        message = f"wrong_type: expected {expected}, got {json_type_name(value_here)}"
    else:
        message = f"{code.value}: expected {expected}, got {actual}"
    return [VerifierError(code, format_pointer(tokens), expected, actual, message)]


_INT_LIKE = re.compile(r"[+-]?[0-9]+")
_INT_START = frozenset("+-0123456789")
_CANONICAL_INT = re.compile(r"0|-?[1-9][0-9]*")  # what str(int(key)) gives back, without converting


def _has_lossy_key(instance: Any) -> bool:
    """Whether an object key would be mangled in jsonschema-rs error paths.

    The Python binding turns integer-looking path segments into ints (``"00"`` and ``"+1"`` come
    back as ``0`` and ``1``) and drops empty keys, so errors under such keys would point at the
    wrong place; those instances are reported through the reference backend instead.
    """
    stack = [instance]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "" or (key[0] in _INT_START and _INT_LIKE.fullmatch(key) and not _CANONICAL_INT.fullmatch(key)):
                    return True
                if isinstance(value, (dict, list)):
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, (dict, list)))
    return False


class CompiledSchema:
    """A normalised schema compiled for one backend; compile through :func:`compile_schema`.

    Its cost is bounded before either backend sees it (:mod:`.budget`), and every verification
    is bounded before it runs: an instance whose checks would pass ``budget.max_work`` is invalid
    with one ``too_large`` error, on both backends alike.
    """

    def __init__(self, normalized: NormalizedSchema, backend: BackendName, budget: Budget = DEFAULT_BUDGET) -> None:
        if backend not in BACKENDS:
            raise SchemaCompileError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        self.normalized = normalized
        self.backend_name = backend
        self.budget = budget
        self.cost = schema_cost(normalized.schema, budget)
        guard().compiles(normalized.schema)  # a blow-up past the static bounds kills the guard, not us
        self._backend: Backend = RsBackend(normalized.schema) if backend == "rs" else PythonBackend(normalized.schema)
        self._python: Backend | None = None

    @property
    def sha256(self) -> str:
        return self.normalized.sha256

    @property
    def schema(self) -> dict[str, Any] | bool:
        return self.normalized.schema

    def is_valid(self, instance: Any) -> bool:
        return self._work(instance) <= self.budget.max_work and self._backend.is_valid(instance)

    def errors(self, instance: Any) -> list[VerifierError]:
        """Every schema error of ``instance`` (empty when valid), unsorted; the work is counted once."""
        over = self._over_budget(instance)
        if over:
            return over
        return [] if self._backend.is_valid(instance) else self._render(instance)

    def errors_of_invalid(self, instance: Any) -> list[VerifierError]:
        """The errors of an instance already known to be invalid (skips a second verdict)."""
        return self._over_budget(instance) or self._render(instance)

    def _over_budget(self, instance: Any) -> list[VerifierError]:
        work = self._work(instance)
        if work <= self.budget.max_work:
            return []
        limit = self.budget.max_work
        message = f"too_large: verifying this object would take over {limit} checks against this schema"
        return [VerifierError(Code.TOO_LARGE, "", f"at most {limit} checks", f"{work} checks or more", message)]

    def _render(self, instance: Any) -> list[VerifierError]:
        backend = self._backend
        if backend.name == "rs" and (self.cost.large_enum or _has_lossy_key(instance)):
            # the rs binding copies the whole enum into every error it reports; the reference does not
            backend = self._reference()
        out: list[VerifierError] = []
        for raw in backend.raw_errors(instance):
            out.extend(to_verifier_errors(instance, raw))
        return out

    def _work(self, instance: Any) -> int:
        return verification_work(self.cost, instance, self.budget)

    def _reference(self) -> Backend:
        """The python backend, built on first need, for reports the rs binding cannot locate."""
        if self._python is None:
            self._python = PythonBackend(self.normalized.schema)
        return self._python


# jsonschema-rs programs weigh about 50 bytes per unit of pattern size (a{50000}: 2.4 MB); the
# python backend's programs are held, bounded, by ecma_regex's own cache
_RS_BYTES_PER_UNIT = 64


class _SchemaCache:
    """An LRU of compiled schemas keyed by (source text, dialect, lenient, backend), bounded twice.

    By count and by bytes: a few thousand 2 MB schemas, or a few thousand patterns of 50,000
    units, would otherwise stay resident. A schema's bytes are its canonical source text, its
    normalised text, and its patterns' compiled programs (:attr:`.budget.SchemaCost.pattern_units`).
    """

    def __init__(self, capacity: int = 4096, capacity_bytes: int = 256 * 2**20) -> None:
        self._items: BoundedLRU[tuple[str, str | None, bool, str], CompiledSchema] = BoundedLRU(capacity, capacity_bytes)

    @property
    def bytes(self) -> int:
        return self._items.cost

    def __len__(self) -> int:
        return len(self._items)

    def get_or_compile(
        self, schema: Any, backend: BackendName, dialect: str | None, lenient: bool, limits: SchemaLimits
    ) -> CompiledSchema:
        try:
            source_key = canonical_json(schema)
        except (TypeError, ValueError, RecursionError) as exc:
            raise SchemaCompileError(f"schema is not a finite JSON document: {exc}") from exc
        key = (source_key, dialect, lenient, backend)
        hit = self._items.get(key)
        if hit is not None:
            return hit
        normalized = normalize_schema(schema, dialect=dialect, lenient=lenient, limits=limits)
        compiled = CompiledSchema(normalized, backend)
        size = len(source_key) + len(canonical_json(normalized.schema)) + _RS_BYTES_PER_UNIT * compiled.cost.pattern_units
        self._items.put(key, compiled, size)
        return compiled


_CACHE = _SchemaCache()


def compile_schema(
    schema: Any,
    backend: BackendName = "rs",
    *,
    dialect: str | None = None,
    lenient: bool = False,
    limits: SchemaLimits = SchemaLimits(),
) -> CompiledSchema:
    """Normalise and compile ``schema`` once; later calls with the same schema hit the cache."""
    return _CACHE.get_or_compile(schema, backend, dialect, lenient, limits)
