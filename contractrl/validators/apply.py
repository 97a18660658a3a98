"""Atomic, copy-on-write application of a parsed patch.

The input document is never mutated: each operation copies only the containers on its path (the
first time they are touched), so a failed patch leaves the input exactly as it was and a successful
one shares every untouched subtree with it. Values from the patch are deep-copied on insertion so
the patched object never aliases the patch. The dynamic half of the action mask lives here, since
whether a path exists depends on the operations before it; so does the immutable check of an
appended element, since the index ``-`` creates depends on them too (``immutable``).

Every intermediate document stays within the parser's limits (:class:`ParseLimits`): the op
budget bounds the number of operations, not their cost, and forty ``copy`` operations of a value
into itself would double the document forty times. Sizes are tracked per operation (the document
is measured once, then each insertion and removal adjusts it by the exact bytes of the value and of
its member's key and separators), so a patch that would grow the document past ``max_bytes`` or
nest it past ``max_depth`` stops with ``too_large``/``too_deep`` before the copy is made. The
tracked size is exact, not a bound: an over-count would refuse patches the parser accepts, and an
under-count (which removing a ``true`` counted as five bytes once caused) would let one through
that it refuses.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .codes import Code
from .jsonvalue import deep_copy, json_equal
from .mask import touches_immutable
from .patch import PatchOp
from .pointer import Tokens, array_index, format_pointer, resolve
from .strict_json import DEFAULT_LIMITS, ParseLimits

_ABSENT = object()


@dataclass(slots=True)
class ApplyResult:
    """The patched document, or the first operation that could not apply and why.

    ``touched`` lists the locations the operations named (``-`` resolved to its index); collateral
    edits are leaf changes outside them, so the renumbering of later array elements by an insert
    or a removal in the middle of an array counts as collateral.
    """

    ok: bool
    document: Any = None
    code: Code | None = None
    message: str = ""
    op_index: int | None = None
    pointer: str = ""
    touched: tuple[Tokens, ...] = ()


class _Failure(Exception):
    def __init__(self, code: Code, message: str, pointer: str) -> None:
        super().__init__(message)
        self.code, self.message, self.pointer = code, message, pointer


_PLAIN = re.compile(r'[^"\\\x00-\x1f]*')  # ASCII text JSON writes as it is


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _json_bytes(value: Any) -> int:
    """Bytes of ``value`` as compact JSON text (what the parser's ``max_bytes`` counts), at C speed."""
    t = type(value)
    try:
        if t is str and value.isascii() and _PLAIN.fullmatch(value):
            return len(value) + 2
        if t is int:
            return len(str(value))
        if t is float:
            return len(repr(value))
        if value is None or value is True:
            return 4
        if value is False:
            return 5
        return len(_ENCODER.encode(value).encode("utf-8", "surrogatepass"))
    except (RecursionError, ValueError):  # past the stack, or an int past str()'s 4,300 digits: never parsed text
        return 1 << 62


def _nesting_exceeds(value: Any, budget: int) -> bool:
    """Whether ``value`` nests more than ``budget`` containers deep (iterative; stops at the budget)."""
    if type(value) not in (dict, list):
        return budget < 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if level > budget:
            return True
        children = node.values() if type(node) is dict else node
        stack.extend((child, level + 1) for child in children if type(child) in (dict, list))
    return False


def _framing(key: str | None, siblings: int) -> int:
    """Bytes a member writes beside its value: ``"key":`` (``key`` is None for an array item), and a
    comma when the container holds ``siblings`` other members."""
    return (0 if key is None else _json_bytes(key) + 1) + (1 if siblings else 0)


class _CowDocument:
    def __init__(self, document: Any, limits: ParseLimits, immutable: tuple[Tokens, ...] = ()) -> None:
        self.root = document
        self.immutable = immutable
        self._owned: set[int] = set()
        self._keep: list[Any] = []  # owned containers stay alive so their ids are never reused
        self.touched: list[Tokens] = []
        self.limits = limits
        self.size: int | None = None  # measured on the first insertion

    def grow(self, tokens: Tokens, value: Any, ptr: str, removed: Any = _ABSENT, framing: int = 0) -> None:
        """Account for ``value`` inserted at ``tokens`` (replacing ``removed``), with ``framing`` bytes
        of a new member's key and separators; refuse past the limits."""
        limits = self.limits
        if _nesting_exceeds(value, limits.max_depth - len(tokens)):
            raise _Failure(Code.TOO_DEEP, f"the document would nest deeper than {limits.max_depth}", ptr)
        if self.size is None:
            self.size = _json_bytes(self.root)
        added = framing + _json_bytes(value) - (_json_bytes(removed) if removed is not _ABSENT else 0)
        if self.size + added > limits.max_bytes:
            raise _Failure(Code.TOO_LARGE, f"the document would grow past {limits.max_bytes} bytes", ptr)
        self.size += added

    def shrink(self, value: Any, framing: int) -> None:
        """Account for ``value`` removed, with ``framing`` bytes of its member's key and separators."""
        if self.size is not None:
            self.size -= framing + _json_bytes(value)

    def _own(self, node: Any) -> Any:
        if id(node) in self._owned:
            return node
        copy = dict(node) if type(node) is dict else list(node)
        self._owned.add(id(copy))
        self._keep.append(copy)
        return copy

    def container(self, tokens: Tokens, ptr: str) -> Any:
        """The writable container at ``tokens``, copying the path down to it."""
        if not isinstance(self.root, (dict, list)):
            raise _Failure(Code.PATH_UNAVAILABLE, "the document is not a container", ptr)
        self.root = node = self._own(self.root)
        for token in tokens:
            if type(node) is dict:
                child = node.get(token, _ABSENT)
                key: Any = token
            else:
                key = array_index(token, len(node), allow_end=False)
                child = node[key] if key is not None else _ABSENT
            if child is _ABSENT or not isinstance(child, (dict, list)):
                raise _Failure(Code.PATH_UNAVAILABLE, f"no container at {ptr!r}", ptr)
            child = self._own(child)
            node[key] = child
            node = child
        return node

    def add(self, tokens: Tokens, value: Any, ptr: str, *, copy: bool = False) -> None:
        """Insert ``value`` (a deep copy of it with ``copy``, made only after the size check passed)."""
        parent = self.container(tokens[:-1], ptr)
        last = tokens[-1]
        if type(parent) is dict:
            removed = parent.get(last, _ABSENT)
            self.grow(tokens, value, ptr, removed, _framing(last, len(parent)) if removed is _ABSENT else 0)
            parent[last] = deep_copy(value) if copy else value
            self.touched.append(tokens)
            return
        index = array_index(last, len(parent), allow_end=True)
        if index is None:
            raise _Failure(Code.PATH_UNAVAILABLE, f"array index {last!r} is out of range at {ptr!r}", ptr)
        created = (*tokens[:-1], str(index))
        frozen = touches_immutable(created, self.immutable) if last == "-" else None
        if frozen is not None:  # the static mask saw only the literal '-'; the element it appends may be immutable
            where = format_pointer(created)
            raise _Failure(
                Code.PATH_IMMUTABLE, f"{ptr!r} appends at {where!r}, which would change immutable {format_pointer(frozen)!r}", ptr
            )
        self.grow(tokens, value, ptr, framing=_framing(None, len(parent)))
        parent.insert(index, deep_copy(value) if copy else value)
        self.touched.append(created)

    def remove(self, tokens: Tokens, ptr: str) -> Any:
        parent = self.container(tokens[:-1], ptr)
        last = tokens[-1]
        if type(parent) is dict:
            if last not in parent:
                raise _Failure(Code.PATH_UNAVAILABLE, f"nothing to remove at {ptr!r}", ptr)
            self.touched.append(tokens)
            self.shrink(parent[last], _framing(last, len(parent) - 1))
            return parent.pop(last)
        index = array_index(last, len(parent), allow_end=False)
        if index is None:
            raise _Failure(Code.PATH_UNAVAILABLE, f"nothing to remove at {ptr!r}", ptr)
        self.touched.append(tokens)
        self.shrink(parent[index], _framing(None, len(parent) - 1))
        return parent.pop(index)

    def replace(self, tokens: Tokens, value: Any, ptr: str) -> None:
        parent = self.container(tokens[:-1], ptr)
        last = tokens[-1]
        if type(parent) is dict:
            if last not in parent:
                raise _Failure(Code.PATH_UNAVAILABLE, f"nothing to replace at {ptr!r}", ptr)
            self.grow(tokens, value, ptr, parent[last])
            parent[last] = value
        else:
            index = array_index(last, len(parent), allow_end=False)
            if index is None:
                raise _Failure(Code.PATH_UNAVAILABLE, f"nothing to replace at {ptr!r}", ptr)
            self.grow(tokens, value, ptr, parent[index])
            parent[index] = value
        self.touched.append(tokens)

    def read(self, tokens: Tokens) -> Any:
        return resolve(self.root, tokens, _ABSENT)


def apply_patch(
    document: Any, ops: tuple[PatchOp, ...], limits: ParseLimits = DEFAULT_LIMITS, immutable: tuple[Tokens, ...] = ()
) -> ApplyResult:
    """Apply all of ``ops`` to a copy of ``document``, or none of them; no intermediate document
    exceeds ``limits`` (the parser's size and depth bounds).

    ``immutable`` are the contract's immutable paths: an append (``-``) that would create one, or
    an ancestor of one, fails with ``path_immutable``. Every other immutable rule needs no document
    and is :func:`~contractrl.validators.mask.static_violation`'s, which the caller runs first.
    """
    doc = _CowDocument(document, limits, immutable)
    for index, op in enumerate(ops):
        try:
            _apply_one(doc, op)
        except _Failure as fail:
            return ApplyResult(
                False,
                code=fail.code,
                message=f"operation {index} ({op.op}): {fail.message}",
                op_index=index,
                pointer=fail.pointer,
            )
    return ApplyResult(True, document=doc.root, touched=tuple(doc.touched))


def _apply_one(doc: _CowDocument, op: PatchOp) -> None:
    tokens = op.path_tokens
    if op.op == "test":
        current = doc.read(tokens)
        if current is _ABSENT:
            raise _Failure(Code.PATH_UNAVAILABLE, f"nothing to test at {op.path!r}", op.path)
        if not json_equal(current, op.value):
            raise _Failure(Code.TEST_FAILED, f"value at {op.path!r} differs from the tested value", op.path)
        return
    if not tokens:  # root writes are masked before apply; refuse again rather than trust the caller
        raise _Failure(Code.ROOT_WRITE_FORBIDDEN, "writes the whole document", op.path)
    if op.op == "add":
        doc.add(tokens, deep_copy(op.value), op.path)
    elif op.op == "replace":
        doc.replace(tokens, deep_copy(op.value), op.path)
    elif op.op == "remove":
        doc.remove(tokens, op.path)
    else:  # move / copy
        assert op.from_tokens is not None and op.from_ is not None
        if op.op == "move" and not op.from_tokens:  # masked before apply; refuse again rather than crash
            raise _Failure(Code.MOVE_SOURCE_INVALID, "cannot move the whole document", op.from_)
        source = doc.read(op.from_tokens)
        if source is _ABSENT:
            raise _Failure(Code.MOVE_SOURCE_INVALID, f"'from' {op.from_!r} does not exist", op.from_)
        if op.op == "copy":
            doc.add(tokens, source, op.path, copy=True)
        elif op.from_tokens != tokens:
            doc.remove(op.from_tokens, op.from_)
            doc.add(tokens, source, op.path)
