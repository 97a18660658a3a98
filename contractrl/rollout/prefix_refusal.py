"""Stopping a proposal as soon as the shield would refuse every answer that begins with it.

The shield (:mod:`.shield`) refuses an answer that does not parse, that the action mask refuses,
or that adds a member with a value the public evidence does not state. Most of the tokens a
shielded policy still generated went to such answers: on the cases a repair cannot be read from
(BFCL's redacted questions, the unrepairable family) the model writes a plausible value, "San
Francisco, CA" or a schema's description, sometimes 160 tokens of digits, and the shield then
refuses it and abstains (``docs/notebook/2026-12-07-prefix-refusal.md``). Each of those refusals
is already certain part-way through the answer:

- the text can no longer become one JSON value (:mod:`contractrl.validators.json_prefix`), holds
  a duplicate key, or nests deeper than the strict parser reads;
- an operation that is written far enough breaks the action mask: an unknown or disallowed
  ``op``, a malformed pointer, an immutable or root path, more operations than the budget, or
  (applied to the call, a ``replace`` of a missing member read as the ``add`` the shield mends it
  to) a path that does not apply;
- a value being added cannot be stated by the evidence however it goes on
  (:class:`~.grounding.Evidence`): its written start appears nowhere in the request, the call or
  the schema's values.

:class:`PrefixJudge` says so, and the decoder stops that row there. The judgement is one-sided by
construction: it never stops a prefix some continuation of which the shield could commit, so a
decision is what it would have been, at fewer tokens. The one exception is a patch that adds a
member with an invented value and then removes or moves it again in a later operation, which no
policy here writes and the stop refuses. The whole-object arms are judged by the same rules (the
mask's part is their immutable members), so regeneration saves what a patch saves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..tasks.arms import arm_spec
from ..tasks.cases import PublicCase
from ..validators import PublicState, RepairContract
from ..validators.apply import apply_patch
from ..validators.json_prefix import JsonPrefix, Path, read_json_prefix
from ..validators.jsonvalue import json_identical, leaves
from ..validators.mask import static_violation
from ..validators.patch import PatchOp, parse_op
from ..validators.pointer import Tokens, format_pointer, resolve
from ..validators.strict_json import ParseLimits
from .grounding import Evidence, added_members
from .shield import mended_op

_ABSENT = object()


@dataclass(frozen=True)
class PrefixJudge:
    """One decision's rules for refusing a proposal before it ends (module docstring)."""

    call: Any
    whole_object: bool
    evidence: Evidence
    immutable: tuple[Tokens, ...]
    allowed_ops: frozenset[str]
    ops_left: int
    limits: ParseLimits

    @classmethod
    def of(cls, contract: RepairContract, case: PublicCase, state: PublicState, arm: str) -> PrefixJudge:
        return cls(
            call=state.candidate,
            whole_object=arm_spec(arm).whole_object,
            evidence=Evidence.of(case.request, case.schema, state.candidate),
            immutable=contract.immutable_tokens,
            allowed_ops=contract.budgets.allowed_ops,
            ops_left=state.ops_left,
            limits=contract.verifier.limits,
        )

    def refuses(self, text: str) -> bool:
        """Whether the shield would refuse every answer that begins with ``text``."""
        start = text.lstrip()[:1]
        if start not in ("[", "{"):  # ABSTAIN, a refusal, or nothing yet: not judged
            return False
        read = read_json_prefix(text)
        if not read.viable or read.depth > self.limits.max_depth:
            return True  # no continuation parses, or every one nests deeper than the parser reads
        return self._refuses_object(read) if self.whole_object else self._refuses_patch(read)

    def _refuses_object(self, read: JsonPrefix) -> bool:
        written = read.value
        if not isinstance(written, dict):  # a wrong type is the verifier's to report, and admissible
            return False
        for tokens in self.immutable:
            value = resolve(written, tokens, _ABSENT)
            if value is not _ABSENT and read.closed(tokens) and not json_identical(value, resolve(self.call, tokens, _ABSENT)):
                return True
        return self._invents(written, _open_string(read, read.open_path))

    def _refuses_patch(self, read: JsonPrefix) -> bool:
        items = read.value
        if not isinstance(items, list) or len(items) > self.ops_left:
            return True
        document, open_at = self.call, None
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                return True
            if read.closed((index,)):
                parsed = parse_op(item, index, self.allowed_ops)
                if not isinstance(parsed, PatchOp):
                    return True
            else:
                parsed, refused = self._written_op(read, index, item)
                if refused:
                    return True
                if parsed is None:
                    break
            if static_violation(parsed, index, self.immutable) is not None:
                return True
            if parsed.op == "test" and not read.closed((index,)):
                break  # a test's outcome waits for its whole value
            parsed = mended_op(document, parsed)
            applied = apply_patch(document, (parsed,), self.limits, self.immutable)
            if not applied.ok:
                return True
            if parsed.op in ("add", "replace") and "value" not in item:
                break  # its path applies; its value is yet to come
            document = applied.document
            if read.open_path is not None and not read.closed((index, "value")):
                open_at = _open_string(read, read.open_path, (*parsed.path_tokens, *read.open_path[2:]))
        return self._invents(document, open_at)

    def _written_op(self, read: JsonPrefix, index: int, item: dict[str, Any]) -> tuple[PatchOp | None, bool]:
        """The operation still being written, as far as the mask can judge it: (op, refused). Its
        members written to the end go to :func:`parse_op` as they are, the others as stand-ins it
        accepts (an empty pointer, the value so far or null), so a refusal comes from what is
        written alone; the op is None until its verb, path and source are written."""
        written = {key: value for key, value in item.items() if read.closed((index, key))}
        if "op" not in written:
            return None, False
        parsed = parse_op({"path": "", "from": "", **written, "value": item.get("value")}, index, self.allowed_ops)
        if not isinstance(parsed, PatchOp):
            return None, True
        needed = ("path", "from") if parsed.op in ("move", "copy") else ("path",)
        if any(key not in written for key in needed):
            return None, False
        return parsed, False

    def _invents(self, after: Any, open_at: str | None) -> bool:
        """Whether some value ``after`` adds to the call cannot be stated by the evidence, the
        string at pointer ``open_at`` being judged by its start."""
        for path, value in added_members(self.call, after):
            for pointer, leaf in leaves(value, format_pointer(path)).items():
                if pointer == open_at:
                    if not self.evidence.may_state_start(leaf):
                        return True
                elif not self.evidence.may_state(leaf):
                    return True
        return False


def _open_string(read: JsonPrefix, path: Path | None, at: Path | None = None) -> str | None:
    """The pointer, in the document the answer makes, of the string being written (None: the
    prefix does not end inside a string). ``path`` is where it sits in what was read, ``at`` where
    it lands (default: the same place)."""
    if path is None:
        return None
    value = resolve(read.value, tuple(str(t) for t in path), _ABSENT)
    if not isinstance(value, str):
        return None
    return format_pointer(path if at is None else at)


__all__ = ["PrefixJudge"]
