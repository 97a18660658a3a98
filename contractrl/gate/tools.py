"""The tools a gate guards: OpenAI or MCP function definitions, or a JSON Schema per tool name.

Each definition is compiled once, when the gate is built, into the same :class:`Verifier` the
episodes use, so a definition the verifier cannot hold fail-closed (an unknown keyword, a bad
``$ref``, a malformed contract) stops the gate from starting instead of passing calls later.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..tasks.catalog import all_tools
from ..validators import Verifier, load_contract, tool_schema
from ..validators.jsonvalue import sha256_json

EMPTY_CONTRACT: dict[str, Any] = {"rules": []}


@dataclass(frozen=True)
class GateTool:
    """One guarded tool: its schema as given (what a policy reads), its cross-field contract, the
    paths a repair may not touch, and the compiled verifier that judges every call to it."""

    name: str
    description: str
    schema: dict[str, Any] | bool
    contract: dict[str, Any]
    immutable: tuple[str, ...]
    verifier: Verifier

    @property
    def digest(self) -> str:
        """What identifies this tool's contract: equal digests verify every call the same way."""
        return sha256_json([self.name, self.schema, self.contract, list(self.immutable)])


def _definition(index: int, document: Any) -> tuple[str, str, Any]:
    """(name, description, schema) of one OpenAI or MCP definition; a typed error otherwise."""
    where = f"tool definition {index}"
    if not isinstance(document, dict):
        raise ConfigError(f"{where} must be an object, got {type(document).__name__}")
    inner = document.get("function") if document.get("type") == "function" else document
    if not isinstance(inner, dict):
        raise ConfigError(f'{where}: an OpenAI definition needs "function" to be an object')
    name = inner.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where} has no tool name (a non-empty string)")
    description = inner.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"{where} ({name!r}): description must be a string")
    if inner is not document and "parameters" not in inner:
        # OpenAI: "omitting parameters defines a function with an empty parameter list"
        return name, description, {"type": "object", "properties": {}, "additionalProperties": False}
    schema, kind = tool_schema(document)  # SchemaCompileError for a wrapper that is not a schema
    if kind is None:
        raise ConfigError(f'{where} ({name!r}) is neither an OpenAI function ("parameters") nor an MCP tool ("inputSchema")')
    return name, description, schema


def parse_tools(
    definitions: Any,
    contracts: Mapping[str, Any] | None = None,
    immutable: Mapping[str, Any] | None = None,
) -> dict[str, GateTool]:
    """Tools by name from a list of OpenAI/MCP definitions or a ``{name: JSON Schema}`` mapping.

    ``contracts`` maps a tool name to its cross-field rules (``{"rules": [...]}``, the format of
    :func:`~contractrl.validators.load_contract`); ``immutable`` to JSON Pointers a repair must
    leave as the call had them. Naming a tool that is not defined is an error, not a no-op: a
    contract that silently guards nothing is what fail-closed rules out.
    """
    entries: list[tuple[str, str, Any]]
    if isinstance(definitions, Mapping):
        entries = []
        for name, schema in definitions.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"tool names must be non-empty strings, got {name!r}")
            entries.append((name, "", schema))
    elif isinstance(definitions, (list, tuple)):
        entries = [_definition(i, d) for i, d in enumerate(definitions)]
    else:
        raise ConfigError(f"tools must be a list of definitions or a {{name: schema}} mapping, got {type(definitions).__name__}")
    if not entries:
        raise ConfigError("a gate needs at least one tool definition")
    contracts = dict(contracts or {})
    immutable = dict(immutable or {})
    names = [name for name, _, _ in entries]
    for label, extra in (("contracts", contracts), ("immutable paths", immutable)):
        unknown = sorted(set(extra) - set(names))
        if unknown:
            raise ConfigError(f"{label} name tools that are not defined: {unknown}")
    tools: dict[str, GateTool] = {}
    for name, description, schema in entries:
        if name in tools:
            raise ConfigError(f"tool {name!r} is defined twice")
        if not isinstance(schema, (dict, bool)):
            raise ConfigError(f"the schema of tool {name!r} must be an object or a boolean")
        contract = contracts.get(name, EMPTY_CONTRACT)
        paths = immutable.get(name, ())
        if isinstance(paths, str) or not all(isinstance(p, str) for p in paths):
            raise ConfigError(f"the immutable paths of tool {name!r} must be a list of JSON Pointers")
        verifier = Verifier.build(schema, load_contract(contract))
        tools[name] = GateTool(name, description, schema, contract, tuple(paths), verifier)
    return tools


def builtin_tool(name: str) -> dict[str, Any]:
    """A catalog tool as the three things a gate is built from: ``{"definition": <OpenAI function>,
    "contract": ..., "immutable": [...]}`` (the quickstart's way to a real tool without writing one)."""
    for spec in all_tools():
        if spec.name == name:
            return _as_gate_tool(spec)
    raise ConfigError(f"no built-in tool named {name!r}")


def builtin_tools() -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, list[str]]]:
    """The whole catalog as ``(definitions, contracts, immutable)``, the arguments of a gate."""
    definitions, contracts, immutable = [], {}, {}
    for spec in all_tools():
        tool = _as_gate_tool(spec)
        definitions.append(tool["definition"])
        contracts[spec.name] = tool["contract"]
        immutable[spec.name] = tool["immutable"]
    return definitions, contracts, immutable


def _as_gate_tool(spec: Any) -> dict[str, Any]:
    definition = {"type": "function", "function": {"name": spec.name, "description": spec.description, "parameters": spec.schema}}
    return {"definition": definition, "contract": spec.contract, "immutable": list(spec.immutable)}


__all__ = ["GateTool", "builtin_tool", "builtin_tools", "parse_tools"]
