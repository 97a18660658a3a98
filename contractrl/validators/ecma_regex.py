"""ECMA-262 regular expressions, as JSON Schema defines ``pattern``, for the Python reference backend.

python-jsonschema evaluates patterns with Python's ``re``, which reads the same text differently:
``$`` also matches before a trailing newline, ``\\d``/``\\w``/``\\s`` are Unicode classes, ``.``
matches ``\\r`` and ``\\u2028``, and ``(?i)`` or ``\\A`` are syntax ECMA-262 does not have. So
``"abc\\n"`` passed ``^[a-z]+$`` and ``"١٢"`` passed ``^\\d+$`` on the python backend while the rs
backend (ECMA semantics) refused them. Python's ``re`` also has no time bound: ``^(a|aa)+$``
against 40 ``a`` and a ``!`` backtracks for minutes.

:func:`translate` parses a pattern as ECMA-262 (the Unicode-mode syntax jsonschema-rs accepts)
and writes the same language in the syntax of the ``regex`` module, which can stop a search
after a time limit. Syntax whose meaning differs between engines is refused rather than guessed:
backreferences (ECMA matches an unset group as empty, Python fails), inline flags, possessive
quantifiers, quantified assertions, Python-only escapes. :func:`portable` gives the pattern the
rs backend compiles: the source with ``\\d``/``\\w``/``\\s`` (and their negations), ``.`` and
``\\b``/``\\B`` spelled out as explicit ASCII classes and lookarounds. jsonschema-rs reads ``\\b``
as a Unicode word boundary (it accepted ``é\\Bfoo`` on ``"éfoo"``), and once a pattern has a
lookaround its engine reads ``[\\w-]`` as Unicode too (it accepted ``é`` for ``((?!a))[\\w-]``).
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from typing import Any

import regex

from .budget import check_pattern, pattern_size
from .lru import BoundedLRU

WORD = "A-Za-z0-9_"
_DIGIT = "0-9"
_SPACE = "\\t\\n\\x0b\\f\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
_CLASS_ESCAPES = {"d": _DIGIT, "w": WORD, "s": _SPACE}
_CONTROL_ESCAPES = {"t": "\t", "n": "\n", "v": "\x0b", "f": "\f", "r": "\r"}
_SYNTAX = set("^$\\.*+?()[]{}|/")
_BOUNDARY = f"(?:(?<=[{WORD}])(?![{WORD}])|(?<![{WORD}])(?=[{WORD}]))"
_NON_BOUNDARY = f"(?:(?<=[{WORD}])(?=[{WORD}])|(?<![{WORD}])(?![{WORD}]))"
_QUANTIFIER = regex.compile(r"\{([0-9]+)(,([0-9]*))?\}")

# The time a python-backend validation may spend in regex searches, all of them together.
SEARCH_BUDGET_S = 1.0
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("ecma_regex_deadline", default=None)


class EcmaSyntaxError(ValueError):
    """The pattern is not ECMA-262, or uses syntax whose meaning differs between regex engines."""


class RegexTimeout(Exception):
    """A search ran past the validation's regex time budget; the verdict must be a refusal."""

    def __init__(self, pattern: str) -> None:
        super().__init__(f"/{pattern[:60]}/ ran past the regex time budget")
        self.pattern = pattern


def _lit(char: str) -> str:
    """One code point as an unambiguous escape, valid inside and outside a character class."""
    return f"\\U{ord(char):08x}"


class _Translator:
    """A single left-to-right pass over the pattern: ECMA-262 in, ``regex`` (V1) syntax out."""

    def __init__(self, source: str, syntax_only: bool = False) -> None:
        self.src = source
        self.syntax_only = syntax_only  # format "regex": backreferences are valid syntax, only unrunnable
        self.groups = 0
        self.names: set[str] = set()
        self.references: list[int | str] = []
        self.pos = 0
        self.out: list[str] = []  # regex-module syntax
        self.portable: list[str] = []  # the source with \b/\B made explicit
        self.depth = 0
        self._group_quantifiable: list[bool] = []
        self._prop_start = 0
        self._esc_start = 0

    def fail(self, message: str) -> EcmaSyntaxError:
        return EcmaSyntaxError(f"{message} at offset {self.pos} of /{self.src}/")

    def peek(self, n: int = 0) -> str:
        i = self.pos + n
        return self.src[i] if i < len(self.src) else ""

    def emit(self, python: str, portable: str | None = None) -> None:
        self.out.append(python)
        self.portable.append(portable if portable is not None else python)

    def run(self) -> tuple[str, str]:
        quantifiable = False
        while self.pos < len(self.src):
            char = self.src[self.pos]
            if char == "\\":
                quantifiable = self.escape()
            elif char == "[":
                self.char_class()
                quantifiable = True
            elif char == "(":
                quantifiable = self.group_open()
            elif char == ")":
                if self.depth == 0:
                    raise self.fail("unbalanced ')'")
                self.depth -= 1
                self.pos += 1
                self.emit(")")
                quantifiable = self._group_quantifiable.pop()
            elif char == "|":
                self.pos += 1
                self.emit("|")
                quantifiable = False
            elif char == "^":
                self.pos += 1
                self.emit("\\A", "^")
                quantifiable = False
            elif char == "$":
                self.pos += 1
                self.emit("\\Z", "$")  # end of input only: never before a trailing newline
                quantifiable = False
            elif char == ".":
                self.pos += 1
                self.emit("[^\\n\\r\\u2028\\u2029]")
                quantifiable = True
            elif char in "*+?{":
                if not quantifiable:
                    raise self.fail(f"nothing to repeat before {char!r}")
                self.quantifier()
                quantifiable = False
                continue
            elif char in "]}":
                raise self.fail(f"lone {char!r}")
            else:
                self.pos += 1
                self.emit(_lit(char), char)
                quantifiable = True
        if self.depth:
            raise self.fail("unterminated group")
        for ref in self.references:
            if (ref not in self.names) if isinstance(ref, str) else (ref > self.groups):
                raise self.fail(f"backreference to a group that does not exist: {ref}")
        return "(?V1)" + "".join(self.out), "".join(self.portable)

    def quantifier(self) -> None:
        char = self.src[self.pos]
        if char == "{":
            match = _QUANTIFIER.match(self.src, self.pos)
            if not match:
                raise self.fail("'{' that does not form a quantifier")
            low, high = int(match.group(1)), match.group(3)
            if high and int(high) < low:
                raise self.fail("quantifier range out of order")
            text = match.group(0)
            self.pos = match.end()
        else:
            text = char
            self.pos += 1
        if self.peek() == "?":
            text += "?"
            self.pos += 1
        if self.peek() in ("*", "+", "?", "{") and self.peek():
            raise self.fail("a quantifier cannot follow a quantifier")
        self.emit(text)

    def group_open(self) -> bool:
        """Open a group; returns whether a quantifier may follow the group once it closes."""
        rest = self.src[self.pos : self.pos + 4]
        if rest.startswith("(?:"):
            self.emit("(?:")
            self.pos += 3
            quantifiable = True
        elif rest.startswith(("(?=", "(?!")):
            self.emit(rest[:3])
            self.pos += 3
            quantifiable = False
        elif rest.startswith(("(?<=", "(?<!")):
            self.emit(rest[:4])
            self.pos += 4
            quantifiable = False
        elif rest.startswith("(?<"):
            end = self.src.find(">", self.pos)
            name = self.src[self.pos + 3 : end] if end != -1 else ""
            if not name or not (name[0].isalpha() or name[0] in "_$") or not all(c.isalnum() or c in "_$" for c in name):
                raise self.fail("invalid group name")
            self.emit("(", self.src[self.pos : end + 1])
            self.names.add(name)
            self.groups += 1
            self.pos = end + 1
            quantifiable = True
        elif rest.startswith("(?"):
            raise self.fail("group syntax ECMA-262 does not have (inline flags, comments, atomic or Python groups)")
        else:
            self.emit("(")
            self.pos += 1
            quantifiable = True
            self.groups += 1
        self.depth += 1
        self._group_quantifiable.append(quantifiable)
        return False

    def escape(self) -> bool:
        """An escape outside a class; returns whether a quantifier may follow it."""
        self.pos += 1
        char = self.peek()
        if not char:
            raise self.fail("pattern ends with a lone backslash")
        self.pos += 1
        if char in _CLASS_ESCAPES:  # spelled out for rs too: its \\w is Unicode in some engine paths
            self.emit(f"[{_CLASS_ESCAPES[char]}]")
        elif char.lower() in _CLASS_ESCAPES:
            self.emit(f"[^{_CLASS_ESCAPES[char.lower()]}]")
        elif char == "b":
            self.emit(_BOUNDARY)
            return False
        elif char == "B":
            self.emit(_NON_BOUNDARY)
            return False
        elif char in ("p", "P"):
            self.emit(self.property(char), None)
            self.portable[-1] = self.src[self._prop_start : self.pos]
        elif (char.isdigit() and char != "0") or char == "k":
            if not self.syntax_only:
                raise self.fail("backreferences are refused: ECMA-262 and Python disagree on unset groups")
            self.backreference(char)
        else:
            self.emit(_lit(self.atom_escape(char)), None)
            self.portable[-1] = self.src[self._esc_start : self.pos]
        return True

    def backreference(self, char: str) -> None:
        """Record ``\\N`` or ``\\k<name>`` (syntax-only mode), checked against the groups at the end."""
        if char == "k":
            end = self.src.find(">", self.pos)
            if self.peek() != "<" or end == -1:
                raise self.fail("\\k needs <name>")
            self.references.append(self.src[self.pos + 1 : end])
            self.pos = end + 1
        else:
            digits = char
            while self.peek().isdigit():
                digits += self.peek()
                self.pos += 1
            self.references.append(int(digits))
        self.emit("")

    def property(self, char: str) -> str:
        self._prop_start = self.pos - 2
        if self.peek() != "{":
            raise self.fail(f"\\{char} needs {{name}}")
        end = self.src.find("}", self.pos)
        if end == -1:
            raise self.fail("unterminated property escape")
        name = self.src[self.pos + 1 : end]
        self.pos = end + 1
        if not name or not all(c.isalnum() or c in "_=" for c in name):
            raise self.fail(f"invalid property name {name!r}")
        return f"\\{char}{{{name}}}"

    def atom_escape(self, char: str) -> str:
        """The code point a character escape names (``\\n``, ``\\x41``, ``\\u{1F600}``, ``\\/``, ...)."""
        self._esc_start = self.pos - 2
        if char in _CONTROL_ESCAPES:
            return _CONTROL_ESCAPES[char]
        if char == "0":
            if self.peek().isdigit():
                raise self.fail("octal escapes are not ECMA-262 (Unicode mode)")
            return "\0"
        if char == "c":
            letter = self.peek()
            if not (letter.isascii() and letter.isalpha()):
                raise self.fail("\\c needs a letter")
            self.pos += 1
            return chr(ord(letter) % 32)
        if char == "x":
            digits = self.src[self.pos : self.pos + 2]
            if len(digits) != 2 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise self.fail("\\x needs two hex digits")
            self.pos += 2
            return chr(int(digits, 16))
        if char == "u":
            return self.unicode_escape()
        if char in _SYNTAX or char == "-":
            return char
        if char.isascii() and not char.isalnum():
            return char  # an identity escape of ASCII punctuation, space or control: a literal in every engine
        raise self.fail(f"unknown escape \\{char}")

    def unicode_escape(self) -> str:
        if self.peek() == "{":
            end = self.src.find("}", self.pos)
            digits = self.src[self.pos + 1 : end] if end != -1 else ""
            if not digits or not all(c in "0123456789abcdefABCDEF" for c in digits) or int(digits, 16) > 0x10FFFF:
                raise self.fail("invalid \\u{...} escape")
            self.pos = end + 1
            return chr(int(digits, 16))
        digits = self.src[self.pos : self.pos + 4]
        if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
            raise self.fail("\\u needs four hex digits")
        self.pos += 4
        code = int(digits, 16)
        low = self.src[self.pos + 2 : self.pos + 6] if self.src[self.pos : self.pos + 2] == "\\u" else ""
        if 0xD800 <= code <= 0xDBFF and len(low) == 4 and all(c in "0123456789abcdefABCDEF" for c in low):
            second = int(low, 16)
            if 0xDC00 <= second <= 0xDFFF:  # a surrogate pair names one code point (Unicode mode)
                self.pos += 6
                return chr(0x10000 + ((code - 0xD800) << 10) + (second - 0xDC00))
        if 0xD800 <= code <= 0xDFFF:
            raise self.fail("lone surrogate escape")
        return chr(code)

    def char_class(self) -> None:
        """A class, in regex V1 syntax for Python and with its class escapes spelled out for rs.

        ECMA-262 has no class intersection, so a negated escape inside a class (``[a\\W]``,
        ``[^\\D]``) becomes an alternation or lookaheads over explicit ASCII classes in the
        portable form; jsonschema-rs then never meets a ``\\w`` whose meaning depends on its engine.
        """
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        items: list[str] = []  # regex V1
        plain: list[str] = []  # portable members
        complements: list[str] = []  # portable: members that are the complement of these ASCII sets
        while True:
            char = self.peek()
            if not char:
                raise self.fail("unterminated character class")
            if char == "]":
                self.pos += 1
                break
            atom_start = self.pos
            low, low_kind = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                high, high_kind = self.class_atom()
                if low_kind != "char" or high_kind != "char":
                    raise self.fail("a class escape cannot bound a range")
                if ord(low) > ord(high):
                    raise self.fail("class range out of order")
                items.append(f"{_lit(low)}-{_lit(high)}")
                plain.append(self.src[atom_start : self.pos])
            elif low_kind == "char":
                items.append(_lit(low))
                plain.append(self.src[atom_start : self.pos])
            elif low_kind == "set":
                items.append(f"[{low}]")
                plain.append(low)
            elif low_kind == "complement":
                items.append(f"[^{low}]")
                complements.append(low)
            else:  # a property escape, the same in both syntaxes
                items.append(low)
                plain.append(low)
        if not items:
            # [^] is any character, [] none; written for rs as the union of a class and its complement
            self.emit("[\\U00000000-\\U0010ffff]" if negated else "(?!)", "[\\s\\S]" if negated else "[^\\s\\S]")
            return
        python = ("[^" if negated else "[") + "".join(items) + "]"
        members = "".join(plain)
        if not complements:
            self.emit(python, ("[^" if negated else "[") + members + "]")
        elif not negated:  # any member, or outside one of the complemented sets
            alternatives = ([f"[{members}]"] if members else []) + [f"[^{c}]" for c in complements]
            self.emit(python, "(?:" + "|".join(alternatives) + ")")
        else:  # no member, and inside every complemented set
            guards = (f"(?![{members}])" if members else "") + "".join(f"(?=[{c}])" for c in complements[1:])
            self.emit(python, f"(?:{guards}[{complements[0]}])")

    def class_atom(self) -> tuple[str, str]:
        """One member of a class: (code point, "char"), or (set members, "set" / "complement" /
        "property"); set members are plain ASCII ranges valid in both syntaxes."""
        char = self.src[self.pos]
        self.pos += 1
        if char != "\\":
            return char, "char"
        esc = self.peek()
        if not esc:
            raise self.fail("pattern ends with a lone backslash")
        self.pos += 1
        if esc in _CLASS_ESCAPES:
            return _CLASS_ESCAPES[esc], "set"
        if esc.lower() in _CLASS_ESCAPES:
            return _CLASS_ESCAPES[esc.lower()], "complement"
        if esc in ("p", "P"):
            return self.property(esc), "property"
        if esc == "b":
            return "\b", "char"
        if esc.isdigit() and esc != "0":
            raise self.fail("backreferences are refused")
        return self.atom_escape(esc), "char"


# Compiled programs cost about 150 bytes per unit of pattern size (budget.pattern_size; measured
# with the regex module: a{50000} is 7 MB), so both caches are bounded by what they hold.
_REGEX_BYTES_PER_UNIT = 150
_TRANSLATED: BoundedLRU[str, tuple[str, str]] = BoundedLRU(max_items=4096, max_cost=64 << 20)
_COMPILED: BoundedLRU[str, Any] = BoundedLRU(max_items=4096, max_cost=128 << 20)


def translate(pattern: str) -> tuple[str, str]:
    """(``regex``-module source with ECMA-262 semantics, portable ECMA source for jsonschema-rs).

    Raises :class:`EcmaSyntaxError` for anything that is not ECMA-262 or would be read
    differently by the engines, and :class:`~contractrl.errors.SchemaCompileError` for a pattern
    over the size budget (:func:`.budget.check_pattern`)."""
    hit = _TRANSLATED.get(pattern)
    if hit is not None:
        return hit
    python, portable = _Translator(pattern).run()
    check_pattern(pattern)  # before compiling: the reference engine expands counted repeats in memory
    try:
        compiled = regex.compile(python, cache_pattern=False)  # the module cache counts entries, not bytes
    except regex.error as exc:  # e.g. an unknown Unicode property name
        raise EcmaSyntaxError(f"/{pattern}/ is not a pattern the reference engine can read: {exc}") from exc
    _TRANSLATED.put(pattern, (python, portable), 2 * (len(pattern) + len(python) + len(portable)))
    _COMPILED.put(pattern, compiled, _REGEX_BYTES_PER_UNIT * pattern_size(pattern) + 2 * len(python))
    return python, portable


def _compiled(pattern: str) -> Any:
    hit = _COMPILED.get(pattern)
    if hit is not None:
        return hit
    python = translate(pattern)[0]
    compiled = regex.compile(python, cache_pattern=False)
    _COMPILED.put(pattern, compiled, _REGEX_BYTES_PER_UNIT * pattern_size(pattern) + 2 * len(python))
    return compiled


def is_valid_syntax(pattern: str) -> bool:
    """Whether ``pattern`` is ECMA-262 as jsonschema-rs reads ``format: regex``: the syntax
    :func:`translate` accepts, plus backreferences to groups that exist."""
    try:
        _Translator(pattern, syntax_only=True).run()
    except EcmaSyntaxError:
        return False
    return True


def portable(pattern: str) -> str:
    """The pattern as jsonschema-rs should compile it (see the module docstring)."""
    return translate(pattern)[1]


@contextlib.contextmanager
def search_budget(seconds: float = SEARCH_BUDGET_S) -> Iterator[None]:
    """Bound the time every :func:`search` inside the block may take, together."""
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` (ECMA-262) matches somewhere in ``text``, within the current budget."""
    deadline = _DEADLINE.get()
    timeout = SEARCH_BUDGET_S if deadline is None else deadline - time.monotonic()
    if timeout <= 0:  # the budget is for all searches together: many cheap ones must not outrun it
        raise RegexTimeout(pattern)
    try:
        return _compiled(pattern).search(text, timeout=timeout) is not None
    except TimeoutError as exc:
        raise RegexTimeout(pattern) from exc
