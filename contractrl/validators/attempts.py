"""Per-attempt classification, as in the structured-output contract this project follows.

Six classes keep different failures apart instead of pooling them into one success rate:
``accepted``, ``refusal`` (an explicit refusal, or the protocol's ABSTAIN), ``malformed`` (not
parseable as the expected JSON or patch), ``schema_violation`` (parseable, but the object or the
patch breaks its contract), ``truncation`` (the output was cut off) and ``exhausted`` (the attempt
arrived after the budget was spent and was not evaluated).
"""

from __future__ import annotations

from enum import Enum

from .codes import PATCH_CODES, SCHEMA_CODES, Code


class AttemptClass(str, Enum):
    ACCEPTED = "accepted"
    REFUSAL = "refusal"
    MALFORMED = "malformed"
    SCHEMA_VIOLATION = "schema_violation"
    TRUNCATION = "truncation"
    EXHAUSTED = "exhausted"

    def __str__(self) -> str:
        return self.value


_MALFORMED = frozenset(
    {Code.MALFORMED_JSON, Code.DUPLICATE_KEY, Code.NON_FINITE_NUMBER, Code.TOO_LARGE, Code.TOO_DEEP, Code.PATCH_MALFORMED}
)


def classify_attempt(code: Code) -> AttemptClass:
    """The class of one attempt from the outcome code it ended in."""
    found = _CLASS_OF.get(code)
    if found is None:
        raise ValueError(f"no attempt class for code {code!r}")
    return found


def _classify(code: Code) -> AttemptClass:
    if code is Code.ACCEPTED:
        return AttemptClass.ACCEPTED
    if code in (Code.REFUSAL, Code.ABSTAIN):
        return AttemptClass.REFUSAL
    if code is Code.TRUNCATED:
        return AttemptClass.TRUNCATION
    if code is Code.ATTEMPTS_EXHAUSTED:
        return AttemptClass.EXHAUSTED
    if code in _MALFORMED:
        return AttemptClass.MALFORMED
    if code in SCHEMA_CODES or code in PATCH_CODES:
        return AttemptClass.SCHEMA_VIOLATION
    raise ValueError(f"no attempt class for code {code!r}")


_CLASS_OF: dict[Code, AttemptClass] = {code: _classify(code) for code in Code}
# Responses that end an episode without spending an attempt, or arrive after it ended.
_FREE = frozenset({Code.ABSTAIN, Code.REFUSAL, Code.ATTEMPTS_EXHAUSTED})


def consumes_attempt(code: Code) -> bool:
    """Whether an attempt that ended in ``code`` counts against the attempt budget (a = r + 1)."""
    return code not in _FREE
