"""The ranking a shielded policy acts on, as a training signal.

A shielded policy (:mod:`contractrl.rollout.shield`) commits the best-scoring candidate the public
verifier accepts. The verifier accepts invented values too: an enum member the request never
names, a stated ``"rescheduled"`` replaced by ``"cancelled"``. Cross-entropy on the gold answer
raises its probability but says nothing about the accepted wrong candidates beside it, and the
shielded main job lost 4 of its 5 failures exactly there (benchmarks/RESULTS.md, "Shielded
decoding"). So SFT can contrast the gold answer with those candidates: :func:`ranking_negatives`
finds them at a demonstration's decision, and the learner adds a margin term on the difference of
the two answers' summed log-probabilities, the very score the shield ranks by.

Only the public half and the gold answer are read: a candidate is wrong when the object it makes
differs from the object the gold answer makes (for an ABSTAIN demonstration, every accepted
candidate is wrong), so no hidden target crosses the evidence boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..rollout.env import contract_for
from ..rollout.shield import answer_key, enumerated_answers
from ..tasks.arms import arm_spec
from ..tasks.cases import ABSTAIN
from ..tasks.demonstrations import Demonstration
from ..validators import PublicState
from ..validators.jsonvalue import canonical_json


@dataclass(frozen=True)
class SftExample:
    """One SFT demonstration as token ids: the prompt, the gold answer (+ EOS), and the accepted wrong
    answers (+ EOS) it is contrasted with (empty unless ``experimental.ranking.negatives`` > 0)."""

    prompt_ids: tuple[int, ...]
    answer_ids: tuple[int, ...]
    negatives: tuple[tuple[int, ...], ...] = field(default=())


def ranking_negatives(demo: Demonstration, state: PublicState, arm: str, limit: int) -> tuple[str, ...]:
    """Up to ``limit`` enumerated answers at the demonstration's decision that the public verifier
    accepts and that make another object than the gold answer (in the enumeration's order)."""
    if limit <= 0:
        return ()
    contract = contract_for(demo.case)
    step = contract.step_object if arm_spec(arm).whole_object else contract.step
    gold_key = None
    if demo.answer != ABSTAIN:
        made = step(state, demo.answer, finish_reason="stop").accepted_object
        if made is None:
            return ()  # a gold answer that is itself a partial repair: no accepted object to rank against
        gold_key = canonical_json(made)
    gold_text = answer_key(demo.answer)
    out: list[str] = []
    for text in enumerated_answers(demo.case, state, arm):
        if text == ABSTAIN or answer_key(text) == gold_text:
            continue
        made = step(state, text, finish_reason="stop").accepted_object
        if made is None or canonical_json(made) == gold_key:
            continue
        out.append(text)
        if len(out) == limit:
            break
    return tuple(out)


__all__ = ["SftExample", "ranking_negatives"]
