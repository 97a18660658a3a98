"""One prompt, several answers, one forward pass: the SFT batch layout when answers share a prompt.

An SFT example with ranking negatives (:mod:`.ranking`) scores its gold answer and each negative
after the same prompt. As separate rows, every answer re-encodes the prompt (a few hundred tokens
against a few dozen per answer), which made the steps with negatives take 1.3-1.7x as long as the
others on a CPU. Packed, a row holds the prompt once and several answers after it, each attending
to the prompt and to its own earlier tokens only, at the positions it would have on its own row:
the log-probabilities are those of separate rows (up to float summation order).

A row never grows past the micro-batch's longest prompt-plus-one-answer (the length separate rows
would pad to): attention with a custom mask costs quadratically in the row length on a CPU, so
three long whole objects after one prompt were slower than three rows. An answer that would
overflow starts a new row with the prompt again.

Pure tensor bookkeeping; the learner runs the forward pass (:meth:`.learner.Learner.sft_step`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .ranking import SftExample


@dataclass(frozen=True)
class PackedAnswers:
    """A micro-batch of examples as left-padded rows of a prompt followed by one or more of its answers.

    The per-token fields describe every answer token of the batch: which row it is in, which
    position of that row predicts it, its id, which answer it is part of (numbered across the batch:
    example i's gold answer is answer i, the negatives follow), and whether it is a gold answer's
    first token (the decision, weighted ``experimental.contrast.decision_weight``)."""

    input_ids: Any  # (rows, length) long
    position_ids: Any  # (rows, length) long
    allowed: Any  # (rows, 1, length, length) bool: query position may attend to key position
    token_row: Any  # (tokens,) long
    token_predictor: Any  # (tokens,) long: the position in its row whose output predicts the token
    token_target: Any  # (tokens,) long
    token_answer: Any  # (tokens,) long
    token_gold: Any  # (tokens,) bool
    token_first: Any  # (tokens,) bool: a gold answer's first token
    answers: int  # answers in the batch: the examples' gold answers (0..examples-1), then the negatives
    negative_owner: Any  # (negatives,) long: the example (= its gold answer) each negative ranks below
    answer_index: tuple[tuple[int, ...], ...]  # per example, its answers' numbers (gold, then negatives)


def packed_length(example: SftExample) -> int:
    """Token positions the example takes with every answer after one prompt (micro-batches sort by it)."""
    return len(example.prompt_ids) + len(example.answer_ids) + sum(len(n) for n in example.negatives)


def row_layout(examples: Sequence[SftExample]) -> list[tuple[int, list[int]]]:
    """Rows as (example, its answers: 0 the gold, 1.. the negatives), each within the longest
    prompt-plus-one-answer of ``examples``; answers fill a row in order."""
    budget = max(len(e.prompt_ids) + max(map(len, (e.answer_ids, *e.negatives))) for e in examples)
    rows: list[tuple[int, list[int]]] = []
    for index, example in enumerate(examples):
        answers = [example.answer_ids, *example.negatives]
        row: list[int] = []
        used = len(example.prompt_ids)
        for answer, tokens in enumerate(answers):
            if row and used + len(tokens) > budget:
                rows.append((index, row))
                row, used = [], len(example.prompt_ids)
            row.append(answer)
            used += len(tokens)
        rows.append((index, row))
    return rows


def pack_answers(examples: Sequence[SftExample], pad_id: int) -> PackedAnswers:
    """Lay ``examples`` out as :class:`PackedAnswers` (every prompt and answer non-empty)."""
    import torch

    if not examples:
        raise ValueError("pack_answers needs at least one example")
    for example in examples:
        if not example.prompt_ids or not all((example.answer_ids, *example.negatives)):
            raise ValueError("pack_answers needs a non-empty prompt and non-empty answers")
    layout = row_layout(examples)
    # answer numbers: example i's gold is i, its negatives are numbered after every gold answer
    answer_index: list[tuple[int, ...]] = []
    negative_owner: list[int] = []
    for index, example in enumerate(examples):
        first = len(examples) + len(negative_owner)
        answer_index.append((index, *range(first, first + len(example.negatives))))
        negative_owner += [index] * len(example.negatives)

    def row_tokens(index: int, answers: list[int]) -> list[tuple[int, ...]]:
        example = examples[index]
        every = [example.answer_ids, *example.negatives]
        return [example.prompt_ids, *(every[a] for a in answers)]

    length = max(sum(map(len, row_tokens(index, answers))) for index, answers in layout)
    input_ids = torch.full((len(layout), length), pad_id, dtype=torch.long)
    position_ids = torch.zeros((len(layout), length), dtype=torch.long)
    allowed = torch.zeros((len(layout), 1, length, length), dtype=torch.bool)
    token_row: list[int] = []
    token_predictor: list[int] = []
    token_target: list[int] = []
    token_answer: list[int] = []
    token_gold: list[bool] = []
    token_first: list[bool] = []
    for row, (index, answers) in enumerate(layout):
        prompt, *tokens = row_tokens(index, answers)
        start = length - len(prompt) - sum(map(len, tokens))
        # a padding position attends to itself only: a query with no key gives NaN under SDPA
        pad = torch.arange(start)
        allowed[row, 0, pad, pad] = True
        end_prompt = start + len(prompt)
        input_ids[row, start:end_prompt] = torch.tensor(prompt, dtype=torch.long)
        position_ids[row, start:end_prompt] = torch.arange(len(prompt))
        allowed[row, 0, start:end_prompt, start:end_prompt] = torch.ones(len(prompt), len(prompt), dtype=torch.bool).tril()
        cursor = end_prompt
        for answer, ids in zip(answers, tokens, strict=True):
            gold = answer == 0
            answer_id = answer_index[index][answer]
            span = slice(cursor, cursor + len(ids))
            input_ids[row, span] = torch.tensor(ids, dtype=torch.long)
            position_ids[row, span] = torch.arange(len(prompt), len(prompt) + len(ids))
            allowed[row, 0, span, start:end_prompt] = True
            allowed[row, 0, span, span] = torch.ones(len(ids), len(ids), dtype=torch.bool).tril()
            for k, token in enumerate(ids):
                token_row.append(row)
                token_predictor.append(end_prompt - 1 if k == 0 else cursor + k - 1)
                token_target.append(token)
                token_answer.append(answer_id)
                token_gold.append(gold)
                token_first.append(gold and k == 0)
            cursor += len(ids)
    return PackedAnswers(
        input_ids=input_ids,
        position_ids=position_ids,
        allowed=allowed,
        token_row=torch.tensor(token_row, dtype=torch.long),
        token_predictor=torch.tensor(token_predictor, dtype=torch.long),
        token_target=torch.tensor(token_target, dtype=torch.long),
        token_answer=torch.tensor(token_answer, dtype=torch.long),
        token_gold=torch.tensor(token_gold, dtype=torch.bool),
        token_first=torch.tensor(token_first, dtype=torch.bool),
        answers=len(examples) + len(negative_owner),
        negative_owner=torch.tensor(negative_owner, dtype=torch.long),
        answer_index=tuple(answer_index),
    )


__all__ = ["PackedAnswers", "pack_answers", "packed_length", "row_layout"]
