"""Typed verifier reports: what the policy, the ledger and the metrics see of a failure.

A report is a value: immutable, ordered deterministically (pointer, then code), and rendered the
same way whichever validation backend produced it, so ledgers do not depend on the backend.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .codes import Code
from .jsonvalue import canonical_json

ACTUAL_MAX_CHARS = 120


def truncate_actual(value: Any, limit: int = ACTUAL_MAX_CHARS) -> str:
    """Render an offending value as canonical JSON cut to ``limit`` characters.

    Reports travel into prompts and ledgers; a 10 MB string must not, so the value is cut and the
    cut is marked with the original length.
    """
    try:
        text = canonical_json(value)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...<{len(text)} chars>"


@dataclass(frozen=True, slots=True)
class VerifierError:
    """One violated constraint: its typed code and where (RFC 6901) it was found."""

    code: Code
    pointer: str
    expected: str
    actual: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {
            "code": self.code.value,
            "pointer": self.pointer,
            "expected": self.expected,
            "actual": self.actual,
            "message": self.message,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VerifierError:
        return cls(
            code=Code(data["code"]),
            pointer=str(data["pointer"]),
            expected=str(data["expected"]),
            actual=str(data["actual"]),
            message=str(data["message"]),
        )

    @property
    def sort_key(self) -> tuple[str, str, str, str]:
        return (self.pointer, self.code.value, self.expected, self.actual)


@dataclass(frozen=True, slots=True)
class VerifierReport:
    """The verdict on one object (or one model response): accepted, or every error found."""

    status: str
    errors: tuple[VerifierError, ...] = field(default=())

    @property
    def accepted(self) -> bool:
        return self.status == "accepted"

    @property
    def primary(self) -> VerifierError | None:
        """The first error in report order: the (code, pointer) the CR-MDP state exposes."""
        return self.errors[0] if self.errors else None

    @property
    def codes(self) -> tuple[Code, ...]:
        return tuple(e.code for e in self.errors)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "errors": [e.to_dict() for e in self.errors]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VerifierReport:
        return cls(status=data["status"], errors=tuple(VerifierError.from_dict(e) for e in data["errors"]))

    @classmethod
    def accept(cls) -> VerifierReport:
        return _ACCEPTED

    @classmethod
    def reject(cls, errors: Iterable[VerifierError]) -> VerifierReport:
        """A rejection with errors deduplicated and sorted by (pointer, code)."""
        unique = {e.sort_key: e for e in errors}
        if not unique:
            raise ValueError("a rejected report needs at least one error")
        return cls(status="rejected", errors=tuple(unique[k] for k in sorted(unique)))

    @classmethod
    def single(cls, code: Code, message: str, pointer: str = "", expected: str = "", actual: str = "") -> VerifierReport:
        return cls.reject([VerifierError(code, pointer, expected, actual, message)])


_ACCEPTED = VerifierReport(status="accepted")
