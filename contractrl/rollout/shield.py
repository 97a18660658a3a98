"""Shielded decisions: a policy consults the public validator before it commits an answer.

A blind policy sends its single best guess and learns from the rejection one attempt later. A
shielded policy holds several candidate answers (its own proposals, and the enumerated candidates
of :mod:`contractrl.rollout.candidates` scored by the same model), runs each through the case's
public contract from the current state (:func:`probe`: strict parse, action mask, apply to a copy,
schema and cross-field check; ``RepairContract.step`` is pure, so nothing is dispatched and no
attempt is spent), and then commits by :func:`choose`:

1. ABSTAIN when the policy itself abstains: the model gives ABSTAIN at least half its probability
   (more than every patch together). The verifier accepts invented values too, so whether the
   request supports a repair at all stays the policy's decision;
2. else, if some candidate is *accepted*, the best-scoring accepted one;
3. else, with another attempt left after this one, the best-scoring admissible candidate that
   makes an object not seen rejected in this episode (a partial repair whose next report may say
   more);
4. else ABSTAIN: an inadmissible or certainly rejected answer is never sent.

In 2 and 3 a candidate that adds a member with a value the public evidence does not state
(:mod:`.grounding`: not in the request beside what the call's other members take from it, not
freed from the call, not among the schema's values) does not count: the verifier
accepts an invented value as readily as a stated one, and this is the rule that keeps one from
reaching the tool.

Rules 1 and 2 can be settled by the enumerated candidates alone (:data:`SETTLED`): a proposal
could not overturn the policy's own ABSTAIN, and where an enumerated candidate is accepted a
proposal could at best be accepted too. So a deferring policy (``defer``, the default of every
command) weighs them first and decodes its proposals only for the decisions they leave open:
generation is most of a decision's cost, and on BFCL calls, a few short arguments, a patch is
nearly as long as the call it repairs, so generating nothing is what saves tokens there.

The enumerated candidates are built at the report's pointers and, after one more probe that
re-checks the current call (:func:`recheck`), at the pointers the public verifier itself names: a
report handed to the policy may point at the wrong place or be garbled (the noisy-feedback
families), and a policy that may consult the verifier need not trust it.

While a proposal is decoded, :mod:`.prefix_refusal` stops it as soon as these rules would refuse
every answer that begins with it (it no longer parses, the mask refuses an operation written so
far, a value being added begins with what no evidence states): most of what a deferring shield
still generates is a guessed value it then refuses.

A proposal the action mask refuses only for its verb (``replace`` of a member the call lacks, where
RFC 6902 wants ``add``) is also weighed in its mended form (:func:`mended`), scored by the model
like an enumerated candidate: its address and value are the model's, and on BFCL calls they are
often right where the verb is not.

Scores are the model's log-probabilities of whole answers. Among patches they rank which repair to
send; between ABSTAIN and a patch they do not, since a patch's probability is spread over its many
tokens while ABSTAIN's is not (measured: ranking ABSTAIN by its sequence probability against the
patches abstained on 9 of 52 cases the blind policy solved).

Only the public half is read: the case's schema, contract, immutable paths and budgets, the
current call and the episode's own history. Probes are counted per decision and reported beside
attempts and tokens (``probes`` in the ledger), so a comparison can charge every system for them.
Whole-object arms go through the same rule with :meth:`RepairContract.step_object`, which keeps
the comparison about the output representation, not about who may consult the validator.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..tasks.arms import arm_spec
from ..tasks.cases import ABSTAIN, PublicCase
from ..validators import PublicState, RepairContract
from ..validators.apply import apply_patch
from ..validators.codes import PATCH_CODES, Code
from ..validators.jsonvalue import canonical_json
from ..validators.patch import PatchAction, PatchOp, parse_action
from ..validators.pointer import resolve
from ..validators.report import VerifierError
from ..validators.strict_json import parse_response
from .candidates import enumerate_candidates
from .grounding import invents
from .known_rejected import known_rejected

# outcomes that mean the contract would not even apply the answer: the action mask's codes and
# every way a response fails to parse
_INADMISSIBLE = frozenset(PATCH_CODES) | frozenset(
    {Code.MALFORMED_JSON, Code.DUPLICATE_KEY, Code.NON_FINITE_NUMBER, Code.TOO_LARGE, Code.TOO_DEEP, Code.TRUNCATED}
)
# answers that end the episode without an attempt or a dispatch
_ENDS = frozenset({Code.ABSTAIN, Code.REFUSAL})
# log(1/2): at or above it, the policy puts more probability on ABSTAIN than on every other answer
_HALF = math.log(0.5)
# the tiers a decision's enumerated candidates settle alone: more proposals could not overturn the
# policy's own ABSTAIN, and an accepted candidate is what a proposal could at best also be
SETTLED = frozenset({"abstain", "accepted"})
# the most enumerated candidates one decision scores (ABSTAIN included); the selector's slot count
MAX_ENUMERATED = 16
_MISSING = object()


@dataclass(frozen=True)
class Probe:
    """What the public contract says of one answer from the current state (nothing applied)."""

    outcome: Code
    admissible: bool
    accepted: bool
    seen_rejected: bool  # leads to a text or object this episode has already seen rejected
    invents: bool = False  # adds a member whose value the public evidence for it does not state (grounding.py)


@dataclass(frozen=True)
class Choice:
    """The committed answer: the index of the chosen candidate (None: ABSTAIN, none listed) and
    how many candidates were probed to decide."""

    index: int | None
    probes: int
    tier: str  # which rule of the module docstring decided: "abstain" (1), "accepted" (2), "admissible" (3), "nothing" (4)


def probe(contract: RepairContract, case: PublicCase, state: PublicState, text: str, arm: str) -> Probe:
    """The contract's transition on ``text`` read for admissibility and acceptance."""
    whole = arm_spec(arm).whole_object
    result = (contract.step_object if whole else contract.step)(state, text, finish_reason="stop")
    outcome = result.outcome
    if outcome in _ENDS:
        return Probe(outcome, admissible=True, accepted=False, seen_rejected=False)
    accepted = result.accepted_object is not None
    admissible = accepted or outcome not in _INADMISSIBLE
    seen = not accepted and admissible and known_rejected(text, case, state, arm)
    after = result.accepted_object if accepted else result.patched
    invented = admissible and invents(state.candidate, after, case.request, case.schema)
    return Probe(outcome, admissible=admissible, accepted=accepted, seen_rejected=seen, invents=invented)


def choose(texts: Sequence[str], scores: Sequence[float], probes: Sequence[Probe], attempts_left: int) -> Choice:
    """The committed candidate by the rule of the module docstring; ties go to the earlier one."""
    n = len(texts)
    abstain = [i for i in range(n) if probes[i].outcome in _ENDS]
    if abstain and max(scores[i] for i in abstain) >= _HALF:
        return Choice(_best(abstain, scores), n, "abstain")
    accepted = [i for i in range(n) if probes[i].accepted and not probes[i].invents]
    if accepted:
        return Choice(_best(accepted, scores), n, "accepted")
    if attempts_left > 1:
        hopeful = [
            i
            for i in range(n)
            if probes[i].admissible and not probes[i].seen_rejected and not probes[i].invents and i not in abstain
        ]
        if hopeful:
            return Choice(_best(hopeful, scores), n, "admissible")
    return Choice(_best(abstain, scores) if abstain else None, n, "nothing")


def _best(indices: list[int], scores: Sequence[float]) -> int:
    return min(sorted(indices), key=lambda i: -scores[i])


def enumerated_answers(
    case: PublicCase, state: PublicState, arm: str, limit: int = MAX_ENUMERATED, contract: RepairContract | None = None
) -> list[str]:
    """The enumerated candidates as answers of ``arm``: ABSTAIN first, then canonical patches, or
    for the whole-object arms the failed call with each patch applied (same evidence, other form).

    With ``contract``, the current call is re-verified first (one probe, :func:`recheck`) and the
    candidates also cover the pointers the verifier names: the report the policy was handed may be
    wrong about where the error is, the public verifier is not."""
    verified = recheck(contract, state) if contract is not None else ()
    answers = [ABSTAIN]
    for candidate in enumerate_candidates(case, state, limit, verified)[1:]:
        if not arm_spec(arm).whole_object:
            answers.append(canonical_json(list(candidate.ops)))
            continue
        action = parse_action(candidate.text, max_ops=max(len(candidate.ops), 1))
        applied = apply_patch(state.candidate, action.ops) if isinstance(action, PatchAction) else None
        if applied is not None and applied.ok:
            answers.append(canonical_json(applied.document))
    return list(dict.fromkeys(answers))


def mended(text: str, state: PublicState, arm: str) -> str | None:
    """A proposal whose only fault is its verb, with the verb RFC 6902 gives that edit: a
    ``replace`` of an object member the call lacks becomes ``add`` (``replace`` needs its target to
    exist; ``add`` on an object member creates it). None when nothing is mended, the answer is not a
    patch, or an operation would still not apply.

    The proposal's address and value are the model's, and on BFCL calls they are often right where
    its verb is not (``{"op":"replace","path":"/start","value":"New York"}`` for a missing
    ``start``): the mask refuses it, and the shield had only ABSTAIN left."""
    if arm_spec(arm).whole_object:
        return None
    action = parse_action(text, max_ops=max(state.ops_left, 1))
    if not isinstance(action, PatchAction):
        return None
    document, ops = state.candidate, []
    for op in action.ops:
        applied = apply_patch(document, (mend := mended_op(document, op),))
        if not applied.ok:
            return None
        document = applied.document
        ops.append(mend)
    changed = any(mend is not op for mend, op in zip(ops, action.ops, strict=True))
    return canonical_json([op.to_dict() for op in ops]) if changed else None


def mended_op(document: Any, op: PatchOp) -> PatchOp:
    """``op`` with the verb RFC 6902 gives its edit of ``document``: a ``replace`` of an object
    member the document lacks is an ``add``; every other operation is itself."""
    if op.op != "replace" or not op.path_tokens:
        return op
    parent = resolve(document, op.path_tokens[:-1], _MISSING)
    if isinstance(parent, dict) and op.path_tokens[-1] not in parent:
        return dataclasses.replace(op, op="add")
    return op


def recheck(contract: RepairContract, state: PublicState) -> tuple[VerifierError, ...]:
    """The public verifier's own errors for the current call: one probe, nothing applied."""
    return contract.verifier.verify(state.candidate).errors


def answer_key(text: str) -> str:
    """One key for answer texts that say the same thing: the canonical JSON of a parsed value, else
    the stripped text (ABSTAIN, or text no parser takes)."""
    parsed = parse_response(text)
    return canonical_json(parsed.value) if parsed.is_value else text.strip()


__all__ = [
    "MAX_ENUMERATED",
    "SETTLED",
    "Choice",
    "Probe",
    "answer_key",
    "choose",
    "enumerated_answers",
    "mended",
    "mended_op",
    "probe",
    "recheck",
]
