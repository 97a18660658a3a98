"""Prefix-shared decoding for shielded decisions: one prefill per prompt, K answers and any number
of scored candidate texts read off the same key/value cache.

Generation costs about 10^4 times a transition, and on a CPU the prompt's prefill is a large share of
it. ``model.generate(num_return_sequences=K)`` repeats the prompt K times before the prefill; here the
prompt is run once (:func:`prefill`), its cache is gathered per row (:func:`select_rows`), and

- :func:`sample_answers` decodes K answers per prompt as one batch (row 0 of each prompt greedy, the
  others sampled with a seeded generator), stopping each row where its answer ends;
- :func:`score_texts` reads the model's log-probability of given answer texts by teacher forcing,
  in chunks (:func:`score_chunks`) bounded in rows and in row-tokens, so that time and memory stay
  bounded whatever the number and the length of the candidates.

Why the row-token bound: a chunk is padded to its longest answer and the model computes a full-vocabulary
logit row for every padded position. The shield enumerates candidates whose length the case decides
(a ``write_file`` candidate that pads ``content`` to its 20,000-character bound is 5,010 tokens), so a
chunk of 32 rows holding one such candidate ran 160,000 positions through the model, 15 GB of bf16
logits; a batch of 8 gate calls, whose candidates share chunks, ran for many minutes at 5-10 GB
(docs/notebook/2026-12-06-serve-hf-concurrency.md). Chunks now close before they would pass
``SCORE_TOKENS`` row-tokens, so a long candidate is scored alone, and the log-probabilities are read
from each row's own positions in blocks, never from an fp32 copy of the whole chunk's logits. Items
keep their order: a chunk within the bound is the same chunk as before, so its scores are too.

Works for any causal LM whose forward takes ``position_ids`` and a ``DynamicCache`` (the Llama and
Qwen2 families of the presets). Left padding is handled as ``generate`` handles it: positions count
real tokens only, and the attention mask hides the padding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# rows per teacher-forced forward (a chunk's cache copy is rows x prompt length x layers)
SCORE_CHUNK = 32
# row-tokens per teacher-forced forward, rows x the chunk's longest answer (its logits are this many
# vocabulary rows); 32 rows of 128 tokens, well above the catalog's usual chunks, which stay as they were
SCORE_TOKENS = 4096
# answer positions whose fp32 log-softmax is taken at once (a block is this many vocabulary rows)
LOGPROB_BLOCK = 512


@dataclass(frozen=True)
class Prefix:
    """A prefilled batch of left-padded prompts: the cache, the mask, and the next-token logits."""

    cache: Any
    attention_mask: Any  # (batch, prompt length)
    next_logits: Any  # (batch, vocab), fp32
    lengths: Any  # (batch,) real prompt tokens


@dataclass(frozen=True)
class Decoded:
    """One answer: its tokens (up to and including EOS when it ended on one), their log-probabilities
    under the sampling distribution, the score (log-probability at temperature 1 of the tokens before
    EOS) and whether it ended before the token limit."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    score: float
    ended: bool


def prefill(model: Any, input_ids: Any, attention_mask: Any) -> Prefix:
    import torch
    from transformers import DynamicCache

    positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=positions,
            cache=DynamicCache(),
            use_cache=True,
        )
    return Prefix(out.cache, attention_mask, out.logits[:, -1].float(), attention_mask.long().sum(-1))


def select_rows(cache: Any, rows: Any) -> Any:
    """A new cache whose row i is row ``rows[i]`` of ``cache`` (the source is left untouched)."""
    from transformers import DynamicCache

    out = DynamicCache()
    for index, layer in enumerate(cache.layers):
        out.update(layer.keys.index_select(0, rows), layer.values.index_select(0, rows), index)
    return out


def sample_answers(
    model: Any,
    prefix: Prefix,
    k: int,
    *,
    max_new_tokens: int,
    temperature: float,
    eos_id: int,
    pad_id: int,
    seed: int,
    complete: Callable[[list[int]], bool],
    greedy_first: bool = True,
    processors: Any = None,
) -> list[list[Decoded]]:
    """K answers per prompt: the greedy one first (``greedy_first``), the rest sampled at
    ``temperature`` (all K sampled without it, as a policy-gradient rollout needs).

    ``complete(ids)`` says whether a row's tokens already hold a whole answer (the JSON-aware stop).
    ``processors`` (a ``LogitsProcessorList``, e.g. a grammar) see every row's tokens so far.
    """
    import torch

    batch = prefix.next_logits.shape[0]
    rows = torch.arange(batch).repeat_interleave(k)
    cache = select_rows(prefix.cache, rows)
    mask = prefix.attention_mask[rows]
    positions = prefix.lengths[rows].clone()
    logits = prefix.next_logits[rows]
    greedy_row = (torch.arange(batch * k) % k == 0) & greedy_first
    sample = not bool(greedy_row.all())
    generator = torch.Generator(device=logits.device).manual_seed(seed)
    width = batch * k
    tokens: list[list[int]] = [[] for _ in range(width)]
    sampled_lp: list[list[float]] = [[] for _ in range(width)]
    scores = [0.0] * width
    done = [False] * width
    history = torch.empty((width, 0), dtype=torch.long, device=logits.device)
    for _ in range(max_new_tokens):
        if processors is not None:
            logits = processors(torch.cat([mask.new_zeros((width, 1)).long(), history], dim=1), logits)
        plain = torch.log_softmax(logits, dim=-1)
        warm = plain if temperature == 1.0 else torch.log_softmax(logits / temperature, dim=-1)
        chosen = plain.argmax(-1)
        if sample:
            drawn = torch.multinomial(warm.exp(), 1, generator=generator).squeeze(-1)
            chosen = torch.where(greedy_row, chosen, drawn)
        chosen_plain = plain.gather(-1, chosen[:, None]).squeeze(-1).tolist()
        chosen_warm = torch.where(
            greedy_row, plain.gather(-1, chosen[:, None]).squeeze(-1), warm.gather(-1, chosen[:, None]).squeeze(-1)
        )
        warm_list = chosen_warm.tolist()
        step = chosen.tolist()
        for row in range(width):
            if done[row]:
                step[row] = pad_id
                continue
            tokens[row].append(step[row])
            sampled_lp[row].append(warm_list[row])
            if step[row] == eos_id:
                done[row] = True
                continue
            scores[row] += chosen_plain[row]
            if complete(tokens[row]):
                done[row] = True
        if all(done):
            break
        step_ids = torch.tensor(step, device=logits.device)[:, None]
        history = torch.cat([history, step_ids], dim=1)
        mask = torch.cat([mask, mask.new_ones((width, 1))], dim=1)
        with torch.no_grad():
            out = model(input_ids=step_ids, attention_mask=mask, position_ids=positions[:, None], cache=cache, use_cache=True)
        cache = out.cache
        positions = positions + 1
        logits = out.logits[:, -1].float()
    answers = [Decoded(tuple(tokens[r]), tuple(sampled_lp[r]), scores[r], done[r]) for r in range(width)]
    return [answers[b * k : (b + 1) * k] for b in range(batch)]


def score_chunks(lengths: Sequence[int], max_rows: int = SCORE_CHUNK, max_tokens: int = SCORE_TOKENS) -> list[range]:
    """Consecutive chunks of the items with these answer lengths, each at most ``max_rows`` rows and,
    padded to its longest answer, at most ``max_tokens`` row-tokens; an item longer than
    ``max_tokens`` is a chunk of its own. Order is kept, so items within the bounds chunk as they
    would by rows alone."""
    if max_rows < 1 or max_tokens < 1:
        raise ValueError(f"score chunks need max_rows >= 1 and max_tokens >= 1, got {max_rows} and {max_tokens}")
    chunks: list[range] = []
    start, width = 0, 0
    for index, length in enumerate(lengths):
        wider = max(width, length, 1)
        if index > start and (index - start >= max_rows or (index - start + 1) * wider > max_tokens):
            chunks.append(range(start, index))
            start, wider = index, max(length, 1)
        width = wider
    if start < len(lengths):
        chunks.append(range(start, len(lengths)))
    return chunks


def score_texts(
    model: Any, prefix: Prefix, items: Sequence[tuple[int, Sequence[int]]], temperature: float = 1.0
) -> list[tuple[float, tuple[float, ...]]]:
    """For each (prompt row, answer token ids): the summed log-probability of the tokens after that
    prompt (at temperature 1: the score), and the per-token log-probabilities at ``temperature``
    (what a policy-gradient update compares its new ones with), by teacher forcing on the cache."""
    import torch

    out: list[tuple[float, tuple[float, ...]]] = []
    for span in score_chunks([len(ids) for _, ids in items], SCORE_CHUNK, SCORE_TOKENS):
        chunk = items[span.start : span.stop]
        rows = torch.tensor([row for row, _ in chunk])
        width = max(1, max(len(ids) for _, ids in chunk))
        ids = torch.zeros((len(chunk), width), dtype=torch.long)
        real = torch.zeros((len(chunk), width), dtype=prefix.attention_mask.dtype)
        for i, (_, answer) in enumerate(chunk):
            ids[i, : len(answer)] = torch.tensor(list(answer), dtype=torch.long)
            real[i, : len(answer)] = 1
        mask = torch.cat([prefix.attention_mask[rows], real.to(prefix.attention_mask.device)], dim=1)
        positions = prefix.lengths[rows][:, None] + torch.arange(width)[None, :]
        with torch.no_grad():
            logits = model(
                input_ids=ids.to(prefix.next_logits.device),
                attention_mask=mask,
                position_ids=positions.to(prefix.next_logits.device),
                cache=select_rows(prefix.cache, rows),
                use_cache=True,
            ).logits
        first = prefix.next_logits[rows]
        for i, (_, answer) in enumerate(chunk):
            # token j is predicted by the prompt's last position (j = 0) or the answer's position j - 1
            plain, warm = _answer_logprobs(first[i], logits[i, : max(0, len(answer) - 1)], ids[i, : len(answer)], temperature)
            out.append((float(plain.sum()), tuple(float(x) for x in warm.tolist())))
        del logits
    return out


def _answer_logprobs(first: Any, following: Any, ids: Any, temperature: float) -> tuple[Any, Any]:
    """Log-probabilities of ``ids`` at temperature 1 and at ``temperature``, given the logits that
    predict them: ``first`` (the prefill's, fp32) for token 0, ``following[j - 1]`` for token j. Taken
    in blocks of positions (each position's softmax is its own), so the fp32 copy is one block."""
    import torch

    plain, warm = [], []
    for start in range(0, len(ids), LOGPROB_BLOCK):
        stop = min(len(ids), start + LOGPROB_BLOCK)
        block = following[max(0, start - 1) : stop - 1].float()
        if start == 0:
            block = torch.cat([first[None, :], block], dim=0)
        wanted = ids[start:stop, None]
        plain.append(torch.log_softmax(block, dim=-1).gather(-1, wanted).squeeze(-1))
        warm.append(
            plain[-1] if temperature == 1.0 else torch.log_softmax(block / temperature, dim=-1).gather(-1, wanted).squeeze(-1)
        )
    empty = first.new_zeros((0,))
    return (torch.cat(plain) if plain else empty), (torch.cat(warm) if warm else empty)


__all__ = [
    "LOGPROB_BLOCK",
    "SCORE_CHUNK",
    "SCORE_TOKENS",
    "Decoded",
    "Prefix",
    "prefill",
    "sample_answers",
    "score_chunks",
    "score_texts",
    "select_rows",
]
