"""Reading the start of a JSON text that is still being written: what it already holds, and
whether any continuation can still make it one JSON value.

A generator writes an answer a token at a time, and the shield decides on whole answers; this is
what lets it decide on a prefix instead (``rollout/shield.py: refused_prefix``). The reading is
exact in both directions a decision needs:

- ``viable`` is False only when no text appended to the prefix is one JSON value: a syntax error,
  a duplicate key (the strict parser refuses those, ``strict_json.py``), a control character in a
  string. A prefix that stops inside a number, a literal, an escape or a key is viable;
- ``value`` holds only what every completion keeps: closed strings, numbers, literals, and the
  containers opened so far with the members and elements they hold. The number, literal or key
  being written is left out (``12`` may become ``125``); the string being written is in, as far as
  it goes, and ``open_path`` says where it is, or else which container is still open.

Python's own decoder cannot do this: it reads ``[1.`` as malformed (``1.5`` follows) and
``{"a": tr`` as truncated only through a guess (``strict_json._looks_truncated``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

_WHITESPACE = " \t\n\r"
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
# a number not yet ended: a sign alone, an integer part, a fraction begun, an exponent begun
_NUMBER_START = re.compile(r"-?(?:0|[1-9]\d*)?|-?(?:0|[1-9]\d*)\.\d*|-?(?:0|[1-9]\d*)(?:\.\d+)?[eE][+-]?\d*")
_NUMBER_CHARS = frozenset("+-0123456789.eE")
_LITERALS = {"t": ("true", True), "f": ("false", False), "n": ("null", None)}
_ESCAPES = frozenset('"\\/bfnrt')
_HEX = frozenset("0123456789abcdefABCDEF")

Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class JsonPrefix:
    """What a prefix of a JSON text holds (module docstring). ``value`` is meaningful when
    ``started``; ``open_path`` is None once the value is complete."""

    viable: bool
    started: bool = False
    value: Any = None
    open_path: Path | None = ()
    reason: str = ""
    depth: int = 0  # the deepest nesting of containers so far (the strict parser bounds it)

    def closed(self, path: Sequence[str | int]) -> bool:
        """Whether the member or element at ``path`` (keys, and indices as ints or pointer tokens)
        is complete: nothing written after the prefix changes it."""
        if self.open_path is None:
            return True
        return tuple(map(str, self.open_path[: len(path)])) != tuple(map(str, path))


@dataclass(slots=True)
class _Frame:
    container: dict[str, Any] | list[Any]
    path: Path
    expect: str  # "key_or_end", "key", "colon", "value_or_end", "value", "comma_or_end"
    key: str | None = None
    keys: set[str] = field(default_factory=set)


class _NotViable(Exception):
    pass


def read_json_prefix(text: str) -> JsonPrefix:
    """The prefix ``text`` read as the module docstring says; linear in its length."""
    try:
        return _Reader(text).read()
    except _NotViable as stop:
        return JsonPrefix(viable=False, reason=str(stop))


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.stack: list[_Frame] = []
        self.root: Any = None
        self.started = False
        self.done = False
        self.depth = 0

    def read(self) -> JsonPrefix:
        text, n = self.text, len(self.text)
        while True:
            while self.pos < n and text[self.pos] in _WHITESPACE:
                self.pos += 1
            if self.pos >= n:
                return self._result(None)
            if self.done:
                raise _NotViable(f"text after the value at offset {self.pos}")
            char = text[self.pos]
            frame = self.stack[-1] if self.stack else None
            expect = frame.expect if frame else "value"
            if expect in ("key_or_end", "key"):
                if char == "}" and expect == "key_or_end":
                    self._close()
                elif char == '"':
                    key = self._string()
                    if key is None:  # the key is still being written
                        return self._result(None)
                    assert frame is not None
                    if key in frame.keys:
                        raise _NotViable(f"duplicate key {key!r}")
                    frame.keys.add(key)
                    frame.key, frame.expect = key, "colon"
                else:
                    raise _NotViable(f"expected a key at offset {self.pos}")
            elif expect == "colon":
                if char != ":":
                    raise _NotViable(f"expected ':' at offset {self.pos}")
                self.pos += 1
                assert frame is not None
                frame.expect = "value"
            elif expect == "comma_or_end":
                assert frame is not None
                closer = "}" if isinstance(frame.container, dict) else "]"
                if char == closer:
                    self._close()
                elif char == ",":
                    self.pos += 1
                    frame.expect = "key" if isinstance(frame.container, dict) else "value"
                else:
                    raise _NotViable(f"expected ',' or {closer!r} at offset {self.pos}")
            elif char == "]" and expect == "value_or_end":
                self._close()
            else:
                open_string = self._value(char)
                if open_string is not None:
                    return self._result(open_string)

    def _value(self, char: str) -> Path | None:
        """Read one value at ``pos``; the path of the string it leaves open, if it does."""
        if char in "{[":
            container: dict[str, Any] | list[Any] = {} if char == "{" else []
            path = self._place(container)
            self.stack.append(_Frame(container, path, "key_or_end" if char == "{" else "value_or_end"))
            self.depth = max(self.depth, len(self.stack))
            self.pos += 1
            return None
        if char == '"':
            start = self.pos
            value = self._string()
            if value is None:  # the text ends inside this string: keep what is written of it
                return self._place(_partial_string(self.text[start + 1 :]))
            self._place(value)
            return None
        if char == "-" or char.isdigit():
            end = self.pos
            while end < len(self.text) and self.text[end] in _NUMBER_CHARS:
                end += 1
            run = self.text[self.pos : end]
            if end == len(self.text):
                if not _NUMBER_START.fullmatch(run):
                    raise _NotViable(f"{run!r} does not begin a number")
                self.pos = end  # still being written: left out
                return None
            if not _NUMBER.fullmatch(run):
                raise _NotViable(f"{run!r} is not a number")
            self._place(json.loads(run))
            self.pos = end
            return None
        if char in _LITERALS:
            word, value = _LITERALS[char]
            written = self.text[self.pos : self.pos + len(word)]
            if written != word:
                if self.pos + len(written) == len(self.text) and word.startswith(written):
                    self.pos = len(self.text)  # still being written: left out
                    return None
                raise _NotViable(f"expected {word!r} at offset {self.pos}")
            self._place(value)
            self.pos += len(word)
            return None
        raise _NotViable(f"no value starts with {char!r} at offset {self.pos}")

    def _string(self) -> str | None:
        """The closed string at ``pos`` (``pos`` moves past it), or None when the text ends in it."""
        text, n = self.text, len(self.text)
        index = self.pos + 1
        while index < n:
            char = text[index]
            if char == '"':
                value = json.loads(text[self.pos : index + 1])
                self.pos = index + 1
                return value
            if char == "\\":
                if index + 1 >= n:
                    break
                escape = text[index + 1]
                if escape == "u":
                    digits = text[index + 2 : index + 6]
                    if not all(d in _HEX for d in digits):
                        raise _NotViable(f"bad \\u escape at offset {index}")
                    index += 2 + len(digits)
                    continue
                if escape not in _ESCAPES:
                    raise _NotViable(f"bad escape \\{escape} at offset {index}")
                index += 2
                continue
            if ord(char) < 0x20:
                raise _NotViable(f"control character in a string at offset {index}")
            index += 1
        self.pos = n
        return None

    def _place(self, value: Any) -> Path:
        """Put a value where the reader stands; its path."""
        self.started = True
        if not self.stack:
            self.root = value
            if not isinstance(value, (dict, list)):
                self.done = True
            return ()
        frame = self.stack[-1]
        if isinstance(frame.container, dict):
            assert frame.key is not None
            frame.container[frame.key] = value
            path = (*frame.path, frame.key)
        else:
            frame.container.append(value)
            path = (*frame.path, len(frame.container) - 1)
        frame.expect = "comma_or_end"
        return path

    def _close(self) -> None:
        self.stack.pop()
        self.pos += 1
        if not self.stack:
            self.done = True

    def _result(self, open_string: Path | None) -> JsonPrefix:
        if open_string is not None:
            open_path: Path | None = open_string
        elif self.stack:
            open_path = self.stack[-1].path
        else:
            open_path = None if self.done else ()
        return JsonPrefix(viable=True, started=self.started, value=self.root, open_path=open_path, depth=self.depth)


def _partial_string(body: str) -> str:
    """The text of a string cut off after ``body`` (the characters after its opening quote), an
    escape it ends inside left out, and a half of a surrogate pair."""
    cut = body.rfind("\\")
    if cut >= 0:
        # the backslash that begins the last escape: an odd run of backslashes ends in one
        run = len(body[: cut + 1]) - len(body[: cut + 1].rstrip("\\"))
        tail = body[cut + 1 :]
        if run % 2 == 1 and (not tail or (tail[0] == "u" and len(tail) < 5)):
            body = body[:cut]
    text = json.loads(f'"{body}"')
    # a high surrogate written as an escape pairs with the escape after it, if one follows
    return text[:-1] if text and "\ud800" <= text[-1] <= "\udbff" else text


__all__ = ["JsonPrefix", "read_json_prefix"]
