"""What the three adapters share: the missing-extra error and the refusal text a model reads.

The refusal text carries the gate's typed code and reason and, where the arguments are JSON the
tool's verifier can judge, its first findings (pointer, code, expectation): the complaint the
gate answers is an error that never reaches the model in a form it can act on.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from ...errors import ConfigError
from ...validators import parse_json_text
from ..decision import Refusal
from ..gate import RepairGate

AGENTS_EXTRA = "agents"  # pyproject.toml: pip install 'contractrl[agents]'
MAX_FINDINGS = 3  # verifier findings quoted in a refusal; the ledger row has them all


class MissingExtraError(ConfigError):
    """An adapter's framework is not installed; the message names the package and the extra."""


def require(module: str, package: str, adapter: str) -> ModuleType:
    """Import ``module`` (the framework) now, or fail with one line that says what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"the {adapter} adapter needs the {package} package: pip install 'contractrl[{AGENTS_EXTRA}]'"
        ) from exc


def refusal_message(gate: RepairGate, tool: str, arguments: Any, refusal: Refusal) -> str:
    """One line for the model: the gate's code and reason, then what the verifier finds in the
    arguments as sent (up to :data:`MAX_FINDINGS`), so a retry can target the defect."""
    said = "" if refusal.reason == refusal.code else f": {refusal.reason}"
    text = f"contractrl repair gate refused this call to {tool!r} ({refusal.code}){said}"
    guarded = gate.tools.get(tool)
    if guarded is None:
        return text
    if isinstance(arguments, (str, bytes)):
        parsed = parse_json_text(arguments, guarded.verifier.limits)
        if not parsed.is_value:
            return text  # the gate's reason already names the parse failure
        arguments = parsed.value
    try:
        report = guarded.verifier.verify({} if arguments is None else arguments)
    except Exception:  # a value the verifier cannot judge: the gate's own reason stands
        return text
    findings = [f"{e.pointer or '/'}: {e.message}" for e in report.errors[:MAX_FINDINGS]]
    return f"{text}; the arguments fail {'; '.join(findings)}" if findings else text


__all__ = ["AGENTS_EXTRA", "MAX_FINDINGS", "MissingExtraError", "refusal_message", "require"]
