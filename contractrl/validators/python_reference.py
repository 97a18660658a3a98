"""What python-jsonschema needs to judge like the standard (and like jsonschema-rs).

python-jsonschema is the reference backend, but out of the box it reads ``pattern`` with
Python's ``re`` and checks ``email`` for an ``@`` only, so it accepted objects the standard
refuses. Two fixes live here:

* :func:`ecma_patterns` makes every ``re.search`` that python-jsonschema's keyword code makes
  (``pattern``, ``patternProperties``, ``additionalProperties``, ``unevaluatedProperties``) an
  ECMA-262 search with a time budget (:mod:`.ecma_regex`), for the duration of one validation.
  It swaps the ``re`` name those two modules see for a proxy whose ``search`` consults a context
  variable; outside the block, and in every other thread or task, the proxy is plain ``re``.
* :func:`multiple_of` decides ``multipleOf`` on the numbers' decimals, exactly: python-jsonschema
  divides floats and refused ``0.3`` as a multiple of ``0.1``, which the JSON text says it is.
* :func:`format_checker` is python-jsonschema's checker with ``email`` as RFC 5321 mailboxes
  (dot-atom or quoted local part, LDH labels, IPv4/IPv6 address literals), ``regex`` as
  ECMA-262 syntax and ``date-time``/``date``/``time`` as RFC 3339 (leap seconds included, no
  trailing newline), the rules jsonschema-rs applies.
"""

from __future__ import annotations

import contextlib
import contextvars
import ipaddress
import re
from collections.abc import Iterator
from typing import Any

from . import ecma_regex
from .rfc3339 import parse_date, parse_date_time

_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("python_reference_ecma", default=False)


class _EcmaRe:
    """Stands in for ``re`` inside python-jsonschema's keyword modules (they only call ``search``)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)

    @staticmethod
    def search(pattern: Any, string: Any, flags: int = 0) -> Any:
        if _ACTIVE.get() and isinstance(pattern, str) and isinstance(string, str) and not flags:
            return True if ecma_regex.search(pattern, string) else None
        return re.search(pattern, string, flags)


_installed = False


def _install() -> None:
    global _installed
    if _installed:
        return
    from jsonschema import _keywords, _utils

    for module in (_keywords, _utils):
        if getattr(module, "re", None) is re:
            module.re = _EcmaRe()  # type: ignore[attr-defined]
    _installed = True


@contextlib.contextmanager
def ecma_patterns(budget_s: float = ecma_regex.SEARCH_BUDGET_S) -> Iterator[None]:
    """Within the block, python-jsonschema matches patterns as ECMA-262, all searches within ``budget_s``.

    A search past the budget raises :class:`.ecma_regex.RegexTimeout`; the caller turns it into
    a refusal. An invalid pattern raises :class:`.ecma_regex.EcmaSyntaxError` (normalised schemas
    never hold one)."""
    _install()
    token = _ACTIVE.set(True)
    try:
        with ecma_regex.search_budget(budget_s):
            yield
    finally:
        _ACTIVE.reset(token)


def multiple_of(validator: Any, divisor: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """``multipleOf`` on exact decimals: a float is the shortest decimal it prints as."""
    from fractions import Fraction

    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "number"):
        return
    try:
        ratio = Fraction(repr(instance) if isinstance(instance, float) else instance) / Fraction(
            repr(divisor) if isinstance(divisor, float) else divisor
        )
    except (ValueError, ZeroDivisionError, OverflowError):
        ratio = Fraction(1, 2)  # not a finite comparison: fail closed
    if ratio.denominator != 1:
        yield ValidationError(f"{instance!r} is not a multiple of {divisor}")


def unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """``uniqueItems`` in linear time: items compared by a hashable JSON key, not pairwise.

    python-jsonschema falls back to comparing every pair when items do not sort (objects), which
    takes minutes on 60,000 objects; the key keeps JSON equality (``1 == 1.0``, ``true != 1``).
    """
    from jsonschema.exceptions import ValidationError

    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _json_key(item)
        if key in seen:
            yield ValidationError("array has non-unique elements")
            return
        seen.add(key)


def _json_key(value: Any) -> Any:
    """A hashable stand-in equal exactly when two JSON values are equal under JSON Schema."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("array", tuple(_json_key(v) for v in value))
    if isinstance(value, dict):
        return ("object", frozenset((k, _json_key(v)) for k, v in value.items()))
    return ("other", id(value))  # not JSON: never equal to anything else


_ATOM = r"[A-Za-z0-9!#$%&'*+\-/=?^_`{|}~]+"
_LOCAL = re.compile(rf'{_ATOM}(?:\.{_ATOM})*|"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])*"', re.ASCII)
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)


def _label_ok(label: str) -> bool:
    if not _LABEL.fullmatch(label):
        return False
    if label[2:4] != "--":
        return True
    import idna  # a label with hyphens at 3-4 must be valid punycode (xn--...), as in IDNA 2008

    try:
        idna.decode(label)
    except (idna.IDNAError, UnicodeError, ValueError):
        return False
    return True


def is_email(value: object) -> bool:
    """RFC 5321 ``Mailbox``: what jsonschema-rs accepts (``"john doe"@x`` yes, ``john doe@x`` no)."""
    if not isinstance(value, str):
        return True
    local, at, domain = value.rpartition("@")
    if not at or len(local) > 64 or not _LOCAL.fullmatch(local):
        return False
    if domain.startswith("[") and domain.endswith("]"):
        literal = domain[1:-1]
        try:
            if literal[:5].lower() == "ipv6:":
                return isinstance(ipaddress.ip_address(literal[5:]), ipaddress.IPv6Address)
            return isinstance(ipaddress.ip_address(literal), ipaddress.IPv4Address)
        except ValueError:
            return False
    return len(domain) <= 255 and all(_label_ok(label) for label in domain.split("."))


def is_date_time(value: object) -> bool:
    """RFC 3339 ``date-time`` (:mod:`.rfc3339`): python-jsonschema's checker refused every leap second
    and, through a ``$`` that matches before a trailing newline, accepted ``"...Z\\n"``."""
    return not isinstance(value, str) or parse_date_time(value) is not None


def is_date(value: object) -> bool:
    return not isinstance(value, str) or parse_date(value) is not None


def is_time(value: object) -> bool:
    """RFC 3339 ``full-time``, read as the time of a day a leap second can end (as jsonschema-rs does)."""
    return not isinstance(value, str) or parse_date_time("1970-01-01T" + value) is not None


def is_ecma_regex(value: object) -> bool:
    """``format: regex``: ECMA-262 syntax (:func:`.ecma_regex.is_valid_syntax`), as jsonschema-rs reads it."""
    return not isinstance(value, str) or ecma_regex.is_valid_syntax(value)


def _format_checker() -> Any:
    import jsonschema

    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = dict(jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers)
    checker.checkers["email"] = (is_email, ())
    checker.checkers["regex"] = (is_ecma_regex, ())
    checker.checkers["date-time"] = (is_date_time, ())
    checker.checkers["date"] = (is_date, ())
    checker.checkers["time"] = (is_time, ())
    return checker


_CHECKER: Any = None


def format_checker() -> Any:
    """python-jsonschema's Draft 2020-12 format checker with ``email`` and ``regex`` as above."""
    global _CHECKER
    if _CHECKER is None:
        _CHECKER = _format_checker()
    return _CHECKER
