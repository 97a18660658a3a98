"""Where the valid calls that cases corrupt come from: the built-in catalog, BFCL data, or a JSON
Schema corpus.

A source draws one valid call from a seeded RNG, writes the user's request for the (possibly
corrupted) call, and says what a repair is scored against offline. The built-in catalog samples
calls from its tools' samplers, writes requests that state every value, and scores a repair by
executing it in the tool's sandbox. BFCL gives real function documentation, the user's own
question and ground-truth calls; a repair is scored by BFCL's acceptance rule over every
acceptable value, kept in the offline half. A JSON Schema corpus gives real schemas and valid
instances; the request is written from the instance, and a repair must give it back exactly.
A model's own BFCL run (``bfcl-results:DIR``) gives natural failures instead of valid calls: no
corruption is applied, each case is a call the model really made (:mod:`.natural`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote

from ..errors import ConfigError, ContractRLError, InputFileError
from ..io import read_json_file
from ..validators import Verifier
from ..validators.jsonvalue import canonical_json
from ..validators.pointer import PointerSyntaxError, escape_token, parse_pointer, resolve
from .bfcl import BfclEntry, ground_truth_call, load_bfcl_dir
from .bfcl_wheel import category_dir, is_category
from .catalog import make_sandbox, tools_of
from .corruptions import CORRUPTION_FAMILIES, Corruption, iter_leaves
from .natural import RESULTS, RESULTS_LIVE, NaturalSource
from .requests import REQUEST_STYLES, TOOL_OUTPUT_HEADING, render_request
from .spec import ToolSpec

BUILTIN = "builtin"
# what can be built without a sandbox or schema history: imported tools have no immutable paths
# (so no immutable_field) and no earlier schema versions (so no stale_schema)
IMPORTED_FAMILIES: tuple[str, ...] = tuple(f for f in CORRUPTION_FAMILIES if f not in ("stale_schema", "immutable_field"))
REDACTED = "[not given]"


@dataclass(frozen=True)
class SourceCall:
    """One valid call a case can be built from, with what its source needs to finish the case."""

    spec: ToolSpec
    args: dict[str, Any]
    world_seed: int
    question: str = ""  # BFCL: the user's own words
    possible: dict[str, Any] | None = None  # BFCL: every acceptable value, per argument (offline only)


class CallSource(Protocol):
    name: str

    def families(self) -> tuple[str, ...]:
        """The corruption families this source's calls can host."""
        ...

    def draw(self, rng: random.Random, family: str) -> SourceCall: ...

    def request(self, call: SourceCall, corruption: Corruption, rng: random.Random) -> str: ...

    def expected(self, call: SourceCall, corruption: Corruption) -> dict[str, Any] | None:
        """The offline expectation of the target, or None when this call cannot be a case."""
        ...


def stated_contrast(source: CallSource, call: SourceCall, corruption: Corruption) -> dict[str, Any] | None:
    """For a case whose request withholds a value (``corruption.omit``) from a source of people's own
    words: the request as the person wrote it, the value stated, and what repairing it must achieve.

    It is the minimal contrast's data (:mod:`.contrast`): the same call and report, the request the
    only difference. It goes in the offline half (the request states the withheld value), so it
    exists only where the source can give back the words it redacted; the built-in catalog writes
    its requests itself and states a withheld value in a form of its own instead.
    """
    stated = getattr(source, "stated_request", None)
    if not corruption.omit or corruption.target is not None or stated is None:
        return None
    target = {**corruption.candidate, **{key: call.args[key] for key in corruption.omit}}
    repaired = dataclasses.replace(corruption, target=target, omit=())
    expected = source.expected(call, repaired)
    if expected is None:
        return None
    return {"request": stated(call, repaired), "expected": expected}


class BuiltinSource:
    """The built-in catalog: sampled calls, requests that state each value, sandbox outcomes."""

    name = BUILTIN

    def __init__(self, tool_families: tuple[str, ...], style: str = "verbatim") -> None:
        self.tools = tools_of(tool_families)
        self.style = style

    def families(self) -> tuple[str, ...]:
        return CORRUPTION_FAMILIES

    def draw(self, rng: random.Random, family: str) -> SourceCall:
        spec = rng.choice(self.tools)
        world_seed = rng.getrandbits(31)
        return SourceCall(spec, spec.sample(rng, make_sandbox(spec.family, world_seed)), world_seed)

    def request(self, call: SourceCall, corruption: Corruption, rng: random.Random) -> str:
        return _written_request(call, corruption, rng, self.style)

    def expected(self, call: SourceCall, corruption: Corruption) -> dict[str, Any] | None:
        if corruption.target is None:
            return {"abstain": True}
        return sandbox_expected(call.spec, call.world_seed, corruption.target)


def sandbox_expected(spec: ToolSpec, world_seed: int, target: dict[str, Any]) -> dict[str, Any] | None:
    """What the oracle expects of a built-in tool's repaired call: what the sandbox world does with
    the target, or None where the target does not run there (no such case can be scored)."""
    outcome = make_sandbox(spec.family, world_seed).execute(spec.name, target)
    return {"abstain": False, **outcome.to_dict()} if outcome.ok else None


def _written_request(call: SourceCall, corruption: Corruption, rng: random.Random, style: str) -> str:
    """A request ContractRL writes: every value of the target (or of the call, for an abstention)."""
    values = corruption.target if corruption.target is not None else call.args
    return render_request(call.spec, values, rng, omit=corruption.omit, tool_output=corruption.tool_output, style=style)


class _ImportedSource:
    """Calls read from data: no sampler, no sandbox, no immutable paths, no schema history."""

    name: str

    def __init__(self, calls: list[SourceCall], skipped: dict[str, int]) -> None:
        if not calls:
            raise ConfigError(f"no usable calls in {self.name} (skipped: {skipped})")
        self.calls = calls
        self.skipped = skipped
        self._hosts = {family: [c for c in calls if _can_host(c, family)] for family in IMPORTED_FAMILIES}

    def families(self) -> tuple[str, ...]:
        """The families some call of this data can host (few BFCL calls have nested objects)."""
        return tuple(f for f in IMPORTED_FAMILIES if self._hosts[f])

    def draw(self, rng: random.Random, family: str) -> SourceCall:
        hosts = self._hosts.get(family) or []
        if not hosts:
            raise ConfigError(f"no call in {self.name} can host {family!r}; choose from {', '.join(self.families())}")
        return rng.choice(hosts)


def _skip(skipped: dict[str, int], reason: str) -> None:
    skipped[reason] = skipped.get(reason, 0) + 1


def _imported_spec(
    family: str, name: str, description: str, schema: dict[str, Any], args: dict[str, Any], intro: str
) -> ToolSpec:
    required = [k for k in schema.get("required", []) if k in args] or list(args)
    return ToolSpec(
        name=name,
        family=family,  # its sandbox records the call (catalog.IMPORTED_TOOL_FAMILIES)
        description=description,
        schema=schema,
        sample=_no_sampler,
        intros=(intro,),
        version=1,
        injection_targets=tuple(f"/{escape_token(k)}" for k in required[:1]),
    )


def _compiled(raw: Any, dialect: str | None, args: Any, skipped: dict[str, int]) -> dict[str, Any] | None:
    """The strictly normalised schema, if it compiles and accepts ``args``; else None (counted)."""
    try:
        verifier = Verifier.build(raw, dialect=dialect)
    except ContractRLError:
        _skip(skipped, "schema does not compile strictly")
        return None
    schema = verifier.schema.normalized.schema
    if not isinstance(schema, dict) or not isinstance(args, dict) or not args:
        _skip(skipped, "not an object call")
        return None
    if not verifier.verify(args).accepted:
        _skip(skipped, "target refused by its schema")
        return None
    return root_resolved(schema)


# what may stand beside a root $ref without constraining anything (it is kept on the new root)
_ROOT_ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "$ref", "$comment", "title", "description"})


def root_resolved(schema: dict[str, Any]) -> dict[str, Any]:
    """A normalised schema whose root is only a ``$ref``, with the referenced schema as its root.

    Every MCP specification schema is ``{"$ref": "#/definitions/X", "definitions": ...}``; the
    corruption families read ``required``, ``properties`` and leaf constraints at the root, so
    such a schema could host none of missing_required, constraint_violation or unrepairable.
    The result validates exactly the same instances: the target's keywords move to the root, and
    ``$defs`` is kept whole, so every ``#/$defs/...`` reference (the target's included) still
    resolves. A root with constraints beside its ``$ref``, or a target with its own ``$id``, is
    left as it is.
    """
    seen: set[str] = set()
    while isinstance(schema.get("$ref"), str) and set(schema) <= _ROOT_ANNOTATIONS:
        ref = schema["$ref"]
        if ref in seen or not ref.startswith("#/"):
            break
        seen.add(ref)
        try:
            target = resolve(schema, parse_pointer(unquote(ref[1:], errors="strict")), None)
        except (PointerSyntaxError, UnicodeDecodeError):
            break
        if not isinstance(target, dict) or "$id" in target:
            break
        kept: dict[str, Any] = {k: schema[k] for k in ("$schema", "$id", "$comment", "title", "description") if k in schema}
        schema = {**kept, **{k: v for k, v in target.items() if k != "$defs"}, "$defs": schema.get("$defs", {})}
    return schema


class BfclSource(_ImportedSource):
    """BFCL question files with possible answers: one candidate call per ground-truth call.

    An entry with several calls gives one call per position, and its request names which call it
    is. Calls whose schema does not compile strictly, or whose ground truth the schema refuses,
    are left out and counted in ``skipped``.
    """

    def __init__(self, directory: str | Path, name: str | None = None) -> None:
        self.name = name or f"bfcl:{directory}"
        calls: list[SourceCall] = []
        skipped: dict[str, int] = {}
        for entry in load_bfcl_dir(directory):
            for index in range(len(entry.ground_truth)):
                call = self._call(entry, index, skipped)
                if call is not None:
                    calls.append(call)
        super().__init__(calls, skipped)

    @staticmethod
    def _call(entry: BfclEntry, index: int, skipped: dict[str, int]) -> SourceCall | None:
        name, args = ground_truth_call(entry, index)
        try:
            function = entry.function(name)
        except KeyError:
            _skip(skipped, "ground truth names no listed function")
            return None
        schema = _compiled(function.parameters, "bfcl", args, skipped)
        if schema is None:
            return None
        count = len(entry.ground_truth)
        question = entry.user_text
        if count > 1:
            question += f"\n\n(Repair call {index + 1} of {count}: {name}.)"
        spec = _imported_spec("bfcl", name, function.description, schema, args, "")
        return SourceCall(spec, args, _pool(entry.id, index), question=question, possible=entry.ground_truth[index][name])

    def request(self, call: SourceCall, corruption: Corruption, rng: random.Random) -> str:
        text = self.stated_request(call, corruption)
        for key in corruption.omit:  # the unrepairable family: the value is taken out of the question
            text = redact(text, call.args[key])
        return text

    def stated_request(self, call: SourceCall, corruption: Corruption) -> str:
        """The user's question as written, every value stated (:func:`stated_contrast`)."""
        text = call.question
        if corruption.tool_output is not None:
            text += f"{TOOL_OUTPUT_HEADING}{corruption.tool_output}"
        return text

    def expected(self, call: SourceCall, corruption: Corruption) -> dict[str, Any] | None:
        if corruption.target is None:
            return {"abstain": True}
        possible = dict(call.possible or {})
        for key, value in corruption.target.items():
            if key not in call.args or canonical_json(value) != canonical_json(call.args[key]):
                # the case's data changed this argument (hostile text inside a value the user gave):
                # the right repair keeps it as it is, so only the target's value is acceptable
                possible[key] = [as_possible(value)]
        return {"abstain": False, "bfcl_possible": possible}


class JsonSchemaSource(_ImportedSource):
    """A JSON Schema corpus (JSONSchemaBench's maskbench form): each valid object instance is a
    target, its request written from its values like the built-in catalog's, and a repair must
    give back exactly that object."""

    def __init__(self, directory: str | Path, style: str = "verbatim") -> None:
        self.name = f"jsonschema:{directory}"
        self.style = style
        folder = Path(directory)
        files = sorted(folder.rglob("*.json")) if folder.is_dir() else []
        if not files:
            raise InputFileError(f"no JSON Schema corpus files (*.json with 'schema' and 'tests') under {folder}")
        calls: list[SourceCall] = []
        skipped: dict[str, int] = {}
        for path in files:
            doc = read_json_file(path, "JSON Schema corpus file")
            if not isinstance(doc, dict) or "schema" not in doc or not isinstance(doc.get("tests"), list):
                raise InputFileError(f"{path}: a corpus file needs 'schema' and a 'tests' list")
            for index, test in enumerate(doc["tests"]):
                if not (isinstance(test, dict) and test.get("valid") is True):
                    continue
                schema = _compiled(doc["schema"], None, test.get("data"), skipped)
                if schema is None:
                    continue
                name = _tool_name(path.relative_to(folder))
                about = _cut(str(schema.get("description") or schema.get("title") or ""))
                intro = f"Please call {name}" + (f" ({about})" if about else "") + ":"
                spec = _imported_spec("jsonschema", name, str(schema.get("description", "")), schema, test["data"], intro)
                calls.append(SourceCall(spec, test["data"], _pool(name, index)))
        super().__init__(calls, skipped)

    def request(self, call: SourceCall, corruption: Corruption, rng: random.Random) -> str:
        return _written_request(call, corruption, rng, self.style)

    def expected(self, call: SourceCall, corruption: Corruption) -> dict[str, Any] | None:
        if corruption.target is None:
            return {"abstain": True}
        return {"abstain": False, "match": "target"}


def _tool_name(relative: Path) -> str:
    """A tool name from a corpus file's path: ``Glaiveai2K/send_email_ba1630aa.json`` -> ``send_email_ba1630aa``."""
    stem = relative.with_suffix("").as_posix().split("---")[-1]
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem.split("/")[-1])


def _cut(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _pool(*key: Any) -> int:
    """A candidate-pool seed per source item: cases of one item never straddle a split."""
    return int(hashlib.sha256(canonical_json(list(key)).encode()).hexdigest()[:7], 16)


def as_possible(value: Any) -> Any:
    """One value in BFCL's possible-answer form, where an object lists alternatives per field."""
    if isinstance(value, dict):
        return {k: [as_possible(v)] for k, v in value.items()}
    if isinstance(value, list):
        return [as_possible(v) for v in value]
    return value


def _can_host(call: SourceCall, family: str) -> bool:
    """Whether the call has the shape the family breaks (whether it breaks is seen when drawn)."""
    leaves = list(iter_leaves(call.spec.schema, call.args))
    if family in ("nested_field", "ambiguous_pointer"):
        return any(len(leaf.tokens) >= 2 and not any(t.isdigit() for t in leaf.tokens) for leaf in leaves)
    if family == "array_element":
        return any(any(t.isdigit() for t in leaf.tokens) for leaf in leaves)
    if family == "multi_field":
        return len(leaves) >= 2
    return bool(leaves)


def _no_sampler(rng: random.Random, sandbox: Any) -> dict[str, Any]:
    raise ContractRLError("imported calls come from data (ground truth, valid instances), not from a sampler")


def redact(text: str, value: Any) -> str:
    """``text`` with every spelling of ``value`` that a reader could copy replaced by a marker."""
    forms = {canonical_json(value)}
    if isinstance(value, str):
        forms.add(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        forms.update({str(value), f"{value:,}"})
    for form in sorted(forms, key=len, reverse=True):
        if form:
            text = re.sub(re.escape(form), REDACTED, text, flags=re.IGNORECASE)
    return text


def check_source(spec: str, style: str = "verbatim") -> None:
    """Refuse a source spec or request style that cannot be read, without reading any data."""
    if style not in REQUEST_STYLES:
        raise ConfigError(f"unknown request style {style!r}; choose from {', '.join(REQUEST_STYLES)}")
    kind, _, directory = spec.partition(":")
    if spec != BUILTIN and not (kind in ("bfcl", "jsonschema", RESULTS, RESULTS_LIVE) and directory):
        raise ConfigError(
            f"unknown case source {spec!r}; use builtin, bfcl:CATEGORY, bfcl:DIR, jsonschema:DIR, {RESULTS}:DIR "
            f"or {RESULTS_LIVE}:DIR"
        )
    if kind in ("bfcl", RESULTS, RESULTS_LIVE) and style != "verbatim":
        raise ConfigError("BFCL requests are the users' own questions; request_style applies to builtin and jsonschema")


def make_source(spec: str, tool_families: tuple[str, ...], style: str = "verbatim") -> CallSource | NaturalSource:
    """``builtin``, ``bfcl:CATEGORY`` (a category of the BFCL v4 wheel, e.g. ``bfcl:live_simple``;
    :mod:`.bfcl_wheel`), ``bfcl:DIR``, ``jsonschema:DIR``, or a model's BFCL run:
    ``bfcl-results:DIR`` (its non-live result files) or ``bfcl-results-live:DIR`` (its live ones,
    held out); ``style`` is how ContractRL writes requests (BFCL requests are the users' own
    words, so only ``verbatim`` applies there)."""
    check_source(spec, style)
    if spec == BUILTIN:
        return BuiltinSource(tool_families, style)
    kind, _, directory = spec.partition(":")
    return _imported(kind, directory, style)


@lru_cache(maxsize=8)
def _imported(kind: str, directory: str, style: str) -> _ImportedSource | NaturalSource:
    """Read once per process: a config check and the generator both ask for the same data."""
    if kind in (RESULTS, RESULTS_LIVE):
        return NaturalSource(directory, live=kind == RESULTS_LIVE)
    if kind == "bfcl" and is_category(directory):
        return BfclSource(category_dir(directory), name=f"bfcl:{directory}")
    return BfclSource(directory) if kind == "bfcl" else JsonSchemaSource(directory, style)


def source_calls(spec: str, style: str = "verbatim") -> dict[str, Any] | None:
    """What a data source made of its data: the calls used and, by reason, the calls skipped
    (a ground truth its own schema refuses, a call with no arguments, a schema strict mode
    refuses). None for the built-in catalog, whose calls are sampled. ``style`` as generated
    with, so the source already read is the one asked."""
    if spec == BUILTIN:
        return None
    source = make_source(spec, (), style)
    if isinstance(source, NaturalSource):  # natural failures also say what share of BFCL's the verifier sees
        return source.report()
    assert isinstance(source, _ImportedSource)
    return {"used": len(source.calls), "skipped": dict(sorted(source.skipped.items()))}


def source_families(spec: str) -> tuple[str, ...]:
    """The corruption families a source can host: for data, those its calls have the shape for."""
    return make_source(spec, ()).families()


__all__ = [
    "BUILTIN",
    "IMPORTED_FAMILIES",
    "BfclSource",
    "BuiltinSource",
    "CallSource",
    "JsonSchemaSource",
    "SourceCall",
    "check_source",
    "make_source",
    "redact",
    "root_resolved",
    "sandbox_expected",
    "source_calls",
    "source_families",
    "stated_contrast",
]
