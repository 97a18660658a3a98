"""The contract core: strict parsing, typed verification, the action mask and the transition.

Everything here is pure and deterministic, with no Ray, model or file I/O, so the same code
runs inside rollout actors, in the runtime repair gate and in tests.
"""

from .apply import ApplyResult, apply_patch
from .attempts import AttemptClass, classify_attempt
from .codes import Code
from .collateral import changed_leaves, collateral_edits
from .contracts import ContractSet, load_contract
from .dialects import NormalizedSchema, SchemaLimits, detect_dialect, normalize_schema, tool_schema
from .patch import AbstainAction, InvalidAction, PatchAction, PatchOp, RefusalAction, parse_action
from .report import VerifierError, VerifierReport
from .schema import BACKENDS, CompiledSchema, compile_schema
from .strict_json import ParsedResponse, ParseLimits, parse_json_text, parse_response
from .transition import AttemptRecord, Budgets, PublicState, RepairContract, StepResult
from .verifier import Verifier

__all__ = [
    "BACKENDS",
    "AbstainAction",
    "ApplyResult",
    "AttemptClass",
    "AttemptRecord",
    "Budgets",
    "Code",
    "CompiledSchema",
    "ContractSet",
    "InvalidAction",
    "NormalizedSchema",
    "ParseLimits",
    "ParsedResponse",
    "PatchAction",
    "PatchOp",
    "PublicState",
    "RefusalAction",
    "RepairContract",
    "SchemaLimits",
    "StepResult",
    "Verifier",
    "VerifierError",
    "VerifierReport",
    "apply_patch",
    "changed_leaves",
    "classify_attempt",
    "collateral_edits",
    "compile_schema",
    "detect_dialect",
    "load_contract",
    "normalize_schema",
    "parse_action",
    "parse_json_text",
    "parse_response",
    "tool_schema",
]
