"""The verifier: one object (or one response text) in, one typed report out.

It joins the three checks a tool call must pass, in the contract's order: strict parsing of the
text, the compiled schema, then the tool's cross-field rules. It is deterministic and pure: the same
input gives the same report, whichever backend is selected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .codes import Code
from .contracts import EMPTY_CONTRACT, ContractSet
from .report import VerifierReport
from .schema import BackendName, CompiledSchema, compile_schema
from .strict_json import DEFAULT_LIMITS, ParseLimits, parse_json_text


@dataclass(frozen=True, slots=True)
class Verifier:
    """A compiled schema and a cross-field contract for one tool version."""

    schema: CompiledSchema
    contract: ContractSet = EMPTY_CONTRACT
    limits: ParseLimits = DEFAULT_LIMITS

    @classmethod
    def build(
        cls,
        schema: Any,
        contract: ContractSet = EMPTY_CONTRACT,
        *,
        backend: BackendName = "rs",
        lenient: bool = False,
        dialect: str | None = None,
        limits: ParseLimits = DEFAULT_LIMITS,
    ) -> Verifier:
        return cls(compile_schema(schema, backend, dialect=dialect, lenient=lenient), contract, limits)

    def verify(self, instance: Any) -> VerifierReport:
        """Every schema and cross-field error of ``instance``; ``accepted`` only when there are none.

        A value that is not JSON at all (an unpaired surrogate, a set, a NaN that bypassed parsing)
        is rejected as ``malformed_json`` rather than raising: the verifier is total and fail-closed.
        """
        try:
            return self._verify(instance)
        except (TypeError, ValueError, UnicodeError, RecursionError) as exc:
            return VerifierReport.single(Code.MALFORMED_JSON, f"not a JSON value the validator can check: {type(exc).__name__}")

    def _verify(self, instance: Any) -> VerifierReport:
        schema_errors = self.schema.errors(instance)  # one verdict, one budget count
        if not schema_errors:
            if not self.contract:
                return VerifierReport.accept()
            errors = self.contract.check(instance)
        else:
            reported = {e.pointer for e in schema_errors}
            errors = schema_errors + (self.contract.check(instance, reported) if self.contract else [])
        return VerifierReport.reject(errors) if errors else VerifierReport.accept()

    def verify_text(self, text: str | bytes, finish_reason: str | None = None) -> tuple[VerifierReport, Any]:
        """Parse model text strictly, then verify it; returns the report and the parsed value (or None)."""
        parsed = parse_json_text(text, self.limits, finish_reason)
        if not parsed.is_value:
            return VerifierReport.single(parsed.code, parsed.message), None
        return self.verify(parsed.value), parsed.value
