"""The static half of the action mask: rules that need the patch and the contract, not the object.

Immutable paths protect identity fields (ids, owners, accounts). Protection is fail-closed in
three directions: writing at or under an immutable path, writing an ancestor of one (which would
replace it wholesale), and inserting into or removing from an array that holds one (which would
shift it to another index). Moving away from an immutable path is forbidden too; copying from one
only reads it and is allowed.

A path ending in ``-`` names no index until it is applied: ``add /a/-`` creates ``/a/<len(a)>``,
which may be immutable (an identity field the candidate lacks, or one under the element the add
creates). This module cannot see the document, so :func:`static_violation` checks ``-`` only as a
literal token and ``apply_patch`` checks the index it resolves to with :func:`touches_immutable`
(as ``add /a/1`` and the whole-object arm's comparison would refuse the same change).
"""

from __future__ import annotations

from dataclasses import dataclass

from .codes import Code
from .patch import PatchOp
from .pointer import Tokens, index_at_least, is_prefix


@dataclass(slots=True)
class MaskViolation:
    code: Code
    message: str
    op_index: int
    pointer: str


def touches_immutable(target: Tokens, immutable: tuple[Tokens, ...]) -> Tokens | None:
    """The immutable path that writing ``target`` would change (it is at, under or above it), or None.

    Public so that ``apply_patch`` can check the index a ``-`` resolves to with the same rule.
    """
    for frozen in immutable:
        if is_prefix(frozen, target) or is_prefix(target, frozen):
            return frozen
    return None


def _is_index(token: str) -> bool:
    """An RFC 6901 array index: ``0`` or ASCII digits without a leading zero."""
    return token.isascii() and token.isdigit() and (token == "0" or token[0] != "0")


def _shifts_immutable(target: Tokens, immutable: tuple[Tokens, ...]) -> Tokens | None:
    """An insert/remove at an array index moves every later element; is one of them immutable?

    Only index tokens can shift siblings (an object key cannot, and ``-`` appends after all), so a
    digit-named object key is over-protected here, which is the fail-closed side.
    """
    if not target or not _is_index(target[-1]):
        return None
    parent, index = target[:-1], target[-1]
    depth = len(parent)
    for frozen in immutable:
        if len(frozen) > depth and frozen[:depth] == parent and _is_index(frozen[depth]) and index_at_least(frozen[depth], index):
            return frozen
    return None


def static_violation(op: PatchOp, index: int, immutable: tuple[Tokens, ...]) -> MaskViolation | None:
    """The first mask rule ``op`` breaks without looking at the object, or None."""
    writes_path = op.op != "test"
    if writes_path and not op.path_tokens:
        return MaskViolation(Code.ROOT_WRITE_FORBIDDEN, f"operation {index} ({op.op}) writes the whole document", index, op.path)
    if op.op == "move" and op.from_tokens is not None:
        if not op.from_tokens or (op.from_tokens != op.path_tokens and is_prefix(op.from_tokens, op.path_tokens)):
            return MaskViolation(
                Code.MOVE_SOURCE_INVALID, f"operation {index} moves {op.from_!r} into its own child {op.path!r}", index, op.path
            )
        frozen = touches_immutable(op.from_tokens, immutable) or _shifts_immutable(op.from_tokens, immutable)
        if frozen is not None:
            return MaskViolation(Code.PATH_IMMUTABLE, f"operation {index} moves away an immutable value", index, op.from_ or "")
    if writes_path:
        frozen = touches_immutable(op.path_tokens, immutable)
        if frozen is None and op.op in ("add", "remove", "move", "copy"):
            frozen = _shifts_immutable(op.path_tokens, immutable)
        if frozen is not None:
            return MaskViolation(
                Code.PATH_IMMUTABLE, f"operation {index} ({op.op}) would change an immutable path", index, op.path
            )
    return None
