"""The one vocabulary of typed outcome codes (docs/contract.md), shared by prompts, ledgers and metrics.

Codes are plain strings on the wire (``Code.WRONG_TYPE == "wrong_type"``) so ledgers stay readable
and stable across versions; the enum only guards against typos in the code base.
"""

from __future__ import annotations

from enum import Enum


class Code(str, Enum):
    """Every outcome the parser, verifier, action mask and budget can report."""

    # response
    ACCEPTED = "accepted"
    REFUSAL = "refusal"
    MALFORMED_JSON = "malformed_json"
    TRUNCATED = "truncated"
    DUPLICATE_KEY = "duplicate_key"
    NON_FINITE_NUMBER = "non_finite_number"
    TOO_LARGE = "too_large"
    TOO_DEEP = "too_deep"
    ABSTAIN = "abstain"
    # schema
    MISSING_REQUIRED = "missing_required"
    WRONG_TYPE = "wrong_type"
    ENUM_MISMATCH = "enum_mismatch"
    CONST_MISMATCH = "const_mismatch"
    OUT_OF_RANGE = "out_of_range"
    LENGTH_VIOLATION = "length_violation"
    PATTERN_MISMATCH = "pattern_mismatch"
    FORMAT_MISMATCH = "format_mismatch"
    ADDITIONAL_PROPERTY = "additional_property"
    ITEMS_VIOLATION = "items_violation"
    UNION_MISMATCH = "union_mismatch"
    DEPENDENCY_VIOLATION = "dependency_violation"
    CROSS_FIELD = "cross_field"
    # patch
    PATCH_MALFORMED = "patch_malformed"
    OP_NOT_ALLOWED = "op_not_allowed"
    PATH_UNAVAILABLE = "path_unavailable"
    PATH_IMMUTABLE = "path_immutable"
    ROOT_WRITE_FORBIDDEN = "root_write_forbidden"
    MOVE_SOURCE_INVALID = "move_source_invalid"
    OP_BUDGET_EXCEEDED = "op_budget_exceeded"
    TEST_FAILED = "test_failed"
    # budget
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"

    def __str__(self) -> str:
        return self.value

    # Hash as the plain string (C speed, and consistent with ``Code.X == "x"``): codes are
    # looked up in sets and dicts on every transition.
    __hash__ = str.__hash__


SCHEMA_CODES = frozenset(
    {
        Code.MISSING_REQUIRED,
        Code.WRONG_TYPE,
        Code.ENUM_MISMATCH,
        Code.CONST_MISMATCH,
        Code.OUT_OF_RANGE,
        Code.LENGTH_VIOLATION,
        Code.PATTERN_MISMATCH,
        Code.FORMAT_MISMATCH,
        Code.ADDITIONAL_PROPERTY,
        Code.ITEMS_VIOLATION,
        Code.UNION_MISMATCH,
        Code.DEPENDENCY_VIOLATION,
        Code.CROSS_FIELD,
    }
)
PATCH_CODES = frozenset(
    {
        Code.PATCH_MALFORMED,
        Code.OP_NOT_ALLOWED,
        Code.PATH_UNAVAILABLE,
        Code.PATH_IMMUTABLE,
        Code.ROOT_WRITE_FORBIDDEN,
        Code.MOVE_SOURCE_INVALID,
        Code.OP_BUDGET_EXCEEDED,
        Code.TEST_FAILED,
    }
)
