"""RFC 6901 JSON Pointers: parsing, formatting and lookup.

Pointers are kept as tuples of unescaped reference tokens internally (cheap prefix tests, no
re-parsing) and as escaped strings on the wire (reports, patches, ledgers).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Tokens = tuple[str, ...]

_MISSING = object()


class PointerSyntaxError(ValueError):
    """The text is not an RFC 6901 JSON Pointer."""


def escape_token(token: str) -> str:
    """Escape one reference token (``~`` -> ``~0`` first, then ``/`` -> ``~1``)."""
    return token.replace("~", "~0").replace("/", "~1")


def unescape_token(token: str) -> str:
    """Undo :func:`escape_token`; ``~`` not followed by 0 or 1 is a syntax error."""
    if "~" not in token:
        return token
    i = token.find("~")
    while i != -1:
        if i + 1 >= len(token) or token[i + 1] not in "01":
            raise PointerSyntaxError(f"invalid escape '~' in token {token!r}")
        i = token.find("~", i + 2)
    return token.replace("~1", "/").replace("~0", "~")


def parse_pointer(pointer: str) -> Tokens:
    """Split an escaped pointer into unescaped tokens; ``""`` is the whole document."""
    if not isinstance(pointer, str):
        raise PointerSyntaxError(f"pointer must be a string, got {type(pointer).__name__}")
    if pointer == "":
        return ()
    if pointer[0] != "/":
        raise PointerSyntaxError(f"pointer {pointer!r} must be empty or start with '/'")
    return tuple(unescape_token(t) for t in pointer[1:].split("/"))


def format_pointer(tokens: Iterable[str | int]) -> str:
    """Join tokens (strings or array indices) into an escaped pointer."""
    return "".join("/" + escape_token(str(t)) for t in tokens)


def is_prefix(prefix: Tokens, tokens: Tokens) -> bool:
    """True when ``prefix`` equals ``tokens`` or is one of its ancestors."""
    return len(prefix) <= len(tokens) and tokens[: len(prefix)] == prefix


def array_index(token: str, length: int, *, allow_end: bool) -> int | None:
    """The array index a token names, or None when it names none.

    RFC 6901 allows only ``0`` or digits without a leading zero; ``-`` (one past the end) is
    accepted only where the caller may append (``add``).
    """
    if token == "-":
        return length if allow_end else None
    if not token.isdigit() or not token.isascii() or (len(token) > 1 and token[0] == "0"):
        return None
    limit = length if allow_end else length - 1
    if len(token) > len(str(max(limit, 0))):  # more digits than any index here: never int() a 5,000-digit token
        return None
    index = int(token)
    return index if index <= limit else None


def index_at_least(token: str, other: str) -> bool:
    """``int(token) >= int(other)`` for two canonical RFC 6901 indices, compared as digit strings
    so that a hostile 5,000-digit token costs a length comparison, not a conversion that raises."""
    return (len(token), token) >= (len(other), other)


def resolve(document: Any, tokens: Tokens, default: Any = _MISSING) -> Any:
    """The value at ``tokens``; ``default`` (or KeyError) when the path does not exist."""
    node = document
    for token in tokens:
        if isinstance(node, dict):
            if token not in node:
                break
            node = node[token]
        elif isinstance(node, list):
            index = array_index(token, len(node), allow_end=False)
            if index is None:
                break
            node = node[index]
        else:
            break
    else:
        return node
    if default is _MISSING:
        raise KeyError(format_pointer(tokens))
    return default
