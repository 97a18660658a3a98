"""The SFT stage's examples: each demonstration replayed to its decision through the real validator,
rendered as the policy would see it, and tokenized with its answer (and ranking negatives).

Replaying rather than storing states keeps one source of truth for what a later decision's prompt
holds: the same environment the rollouts run in.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..rollout.env import RepairEnv
from ..rollout.prompts import render_messages, render_prompt
from ..tasks.cases import ABSTAIN
from ..tasks.demonstrations import Demonstration
from ..validators import PublicState
from .ranking import SftExample, ranking_negatives


def replay_state(demo: Demonstration, arm: str) -> PublicState | None:
    """The state at a demonstration's decision: its earlier attempts replayed through the real
    validator. None when that decision is never reached (an earlier attempt ended the episode) or
    the answer does not fit the operations left."""
    env = RepairEnv(demo.case, arm)
    state = env.reset()
    for text in demo.earlier:
        state, _ = env.step(text)
        if state.done:
            return None
    patch = bool(demo.earlier) and not env.whole_object and demo.answer != ABSTAIN
    return None if patch and len(json.loads(demo.answer)) > state.ops_left else state


def sft_examples(
    demos: Sequence[Demonstration], arm: str, tokenizer: Any, rank_negatives: int = 0
) -> tuple[list[SftExample], int]:
    """The SFT examples of each demonstration whose state can be replayed (prompt ids, answer ids +
    EOS, and with ``rank_negatives`` the accepted wrong answers to rank below it), and the number
    that could not be replayed (a later decision whose earlier attempt ends the episode)."""
    examples = []
    unreachable = 0

    def answer_ids(text: str) -> tuple[int, ...]:
        return (*tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id)

    for demo in demos:
        state = replay_state(demo, arm)
        if state is None:
            unreachable += 1
            continue
        prompt = render_prompt(render_messages(demo.case, state, arm), tokenizer)
        negatives = ranking_negatives(demo, state, arm, rank_negatives)
        examples.append(
            SftExample(
                tuple(tokenizer(prompt, add_special_tokens=False)["input_ids"]),
                answer_ids(demo.answer),
                tuple(answer_ids(text) for text in negatives),
            )
        )
    return examples, unreachable


def sft_token_weight(answer: Sequence[int], decision_weight: float) -> float:
    """An answer's share of the SFT loss's denominator: its tokens, the first (the decision) counted
    ``decision_weight`` times, so the loss stays a weighted mean per token."""
    return len(answer) + (decision_weight - 1.0) if answer else 0.0


__all__ = ["replay_state", "sft_examples", "sft_token_weight"]
