"""Prefix-shared decoding for shielded decisions: one prefill per prompt, K answers and any number
of scored candidate texts read off the same key/value cache.

Generation costs about 10^4 times a transition, and on a CPU the prompt's prefill is a large share of
it. ``model.generate(num_return_sequences=K)`` repeats the prompt K times before the prefill; here the
prompt is run once (:func:`prefill`), its cache is gathered per row (:func:`select_rows`), and

- :func:`sample_answers` decodes K answers per prompt as one batch (row 0 of each prompt greedy, the
  others sampled with a seeded generator), stopping each row where its answer ends;
- :func:`score_texts` reads the model's log-probability of given answer texts by teacher forcing,
  each prompt's answers as one prefix tree (:class:`AnswerTree`: the shield's candidates mostly
  differ in one value, and their shared start runs once), in chunks (:func:`score_chunks`) bounded
  in rows and in row-tokens, so that time and memory stay bounded whatever the number and the
  length of the candidates.

Why the row-token bound: a chunk is padded to its longest row and the model computes a full-vocabulary
logit row for every padded position. The shield enumerates candidates whose length the case decides
(a ``write_file`` candidate that pads ``content`` to its 20,000-character bound is 5,010 tokens), so a
chunk of 32 rows holding one such candidate ran 160,000 positions through the model, 15 GB of bf16
logits; a batch of 8 gate calls, whose candidates share chunks, ran for many minutes at 5-10 GB
(docs/notebook/2026-12-06-serve-hf-concurrency.md). Chunks now close before they would pass
``SCORE_TOKENS`` row-tokens, so a long candidate is scored alone, and the log-probabilities are read
from each answer's own positions in blocks, never from an fp32 copy of the whole chunk's logits.

Works for any causal LM whose forward takes ``position_ids``, a ``DynamicCache`` and a custom 4D
attention mask under SDPA or eager attention (the Llama and Qwen2 families of the presets). Left
padding is handled as ``generate`` handles it: positions count real tokens only, and the attention
mask hides the padding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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
            logits_to_keep=1,  # the head over every prompt position was a fifth of the prefill's time
        )
    return Prefix(out.cache, attention_mask, out.logits[:, -1].float(), attention_mask.long().sum(-1))


def distinct_prompts(prompts: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """The first row of each distinct prompt, and for every row its prompt's index among them.

    A GRPO group's episodes begin from one observation, so a rollout batch holds each first
    decision's prompt once per group member; run once, its prefill and its candidates' scores
    serve every member."""
    index: dict[tuple[int, ...], int] = {}
    of_row = [index.setdefault(tuple(ids), len(index)) for ids in prompts]
    first = [of_row.index(i) for i in range(len(index))]
    return first, of_row


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
    complete: Callable[[int, list[int]], bool],
    greedy_first: bool = True,
    processors: Any = None,
    prompt_rows: Sequence[int] | None = None,
) -> list[list[Decoded]]:
    """K answers per prompt: the greedy one first (``greedy_first``), the rest sampled at
    ``temperature`` (all K sampled without it, as a policy-gradient rollout needs). ``prompt_rows``
    names the prefix row each prompt of the batch continues (default: prompt i is row i), so that
    prompts that are the same text share one prefill (:func:`distinct_prompts`).

    ``complete(prompt, ids)`` says whether a row's tokens (of the ``prompt``-th prompt of the batch)
    end its answer: they hold a whole one (the JSON-aware stop), or the shield would refuse
    whatever followed (``rollout/prefix_refusal.py``).
    ``processors`` (a ``LogitsProcessorList``, e.g. a grammar) see every row's tokens so far.

    Once half the rows still in the batch have ended, the ended ones leave it (their cache rows are
    dropped): one long answer otherwise kept every ended row in each forward pass to its end, and
    the answers' lengths vary several-fold. A grammar's processor keeps a matcher per row in batch
    order, so with ``processors`` the batch stays whole.
    """
    import torch

    if prompt_rows is None:
        prompt_rows = range(prefix.next_logits.shape[0])
    batch = len(prompt_rows)
    rows = torch.tensor(list(prompt_rows), dtype=torch.long, device=prefix.next_logits.device).repeat_interleave(k)
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
    active = list(range(width))  # the rows still in the batch, in batch order
    history = torch.empty((width, 0), dtype=torch.long, device=logits.device)
    for _ in range(max_new_tokens):
        if processors is not None:
            logits = processors(torch.cat([mask.new_zeros((len(active), 1)).long(), history], dim=1), logits)
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
        for j, row in enumerate(active):
            if done[row]:
                step[j] = pad_id
                continue
            tokens[row].append(step[j])
            sampled_lp[row].append(warm_list[j])
            if step[j] == eos_id:
                done[row] = True
                continue
            scores[row] += chosen_plain[j]
            if complete(row // k, tokens[row]):
                done[row] = True
        if all(done):
            break
        step_ids = torch.tensor(step, device=logits.device)[:, None]
        history = torch.cat([history, step_ids], dim=1)
        mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)
        finished = sum(done[row] for row in active)
        if processors is None and 2 * finished >= len(active):
            # half the batch has ended: decode on without it (a grammar's matchers keep their rows)
            keep = torch.tensor([j for j, row in enumerate(active) if not done[row]], device=logits.device)
            active = [active[j] for j in keep.tolist()]
            cache = select_rows(cache, keep)
            mask, positions, greedy_row = mask[keep], positions[keep], greedy_row[keep]
            history, step_ids = history[keep], step_ids[keep]
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


@dataclass
class AnswerTree:
    """One prompt row's answers as a prefix tree: answers that begin alike (every candidate of a
    patch arm starts ``[{"op":"replace","path":"/x","value":``, a whole object's candidates differ in
    one field) share the nodes of their common start, so each shared token is run once.

    Node i holds a token; ``parents[i]`` is the node before it (-1: the first token of an answer)
    and ``depths[i]`` its offset after the prompt. ``paths`` maps an item's index to its nodes."""

    row: int
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    paths: dict[int, list[int]] = field(default_factory=dict)
    _children: dict[tuple[int, int], int] = field(default_factory=dict, repr=False)

    def new_nodes(self, answer: Sequence[int]) -> int:
        """How many nodes adding ``answer`` would create."""
        parent = -1
        for depth, token in enumerate(answer):
            child = self._children.get((parent, token))
            if child is None:
                return len(answer) - depth
            parent = child
        return 0

    def add(self, item: int, answer: Sequence[int]) -> None:
        parent, path = -1, []
        for depth, token in enumerate(answer):
            child = self._children.get((parent, token))
            if child is None:
                child = len(self.tokens)
                self._children[(parent, token)] = child
                self.tokens.append(int(token))
                self.parents.append(parent)
                self.depths.append(depth)
            path.append(child)
            parent = child
        self.paths[item] = path


def answer_trees(items: Sequence[tuple[int, Sequence[int]]], max_nodes: int = SCORE_TOKENS) -> list[AnswerTree]:
    """The items' answers as prefix trees, one per prompt row, a row's next tree begun where adding
    an answer would pass ``max_nodes`` (an answer longer than that has a tree of its own). Empty
    answers have no nodes and no tree."""
    trees: list[AnswerTree] = []
    open_tree: dict[int, AnswerTree] = {}
    for index, (row, answer) in enumerate(items):
        if not answer:
            continue
        tree = open_tree.get(row)
        if tree is None or (tree.tokens and len(tree.tokens) + tree.new_nodes(answer) > max_nodes):
            tree = open_tree[row] = AnswerTree(row)
            trees.append(tree)
        tree.add(index, answer)
    return trees


def custom_mask(allowed: Any, implementation: str, dtype: Any) -> Any:
    """A boolean 4D mask (True: may attend) as the model's attention takes a custom one: SDPA reads
    it as it is, the eager path adds its mask to the scores (0, or the dtype's minimum). Flash
    attention takes no custom mask."""
    import torch

    if implementation == "sdpa":
        return allowed
    if implementation == "eager":
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, torch.finfo(dtype).min)
    raise ValueError(f"a custom attention mask needs SDPA or eager attention, not {implementation!r}")


def score_texts(
    model: Any, prefix: Prefix, items: Sequence[tuple[int, Sequence[int]]], temperature: float = 1.0
) -> list[tuple[float, tuple[float, ...]]]:
    """For each (prompt row, answer token ids): the summed log-probability of the tokens after that
    prompt (at temperature 1: the score), and the per-token log-probabilities at ``temperature``
    (what a policy-gradient update compares its new ones with), by teacher forcing on the cache.

    Each prompt's answers run as one prefix tree (:class:`AnswerTree`): a node attends to the
    prompt and to its own ancestors, at the position it has in its answer, so it gets the
    log-probabilities a row of its own would (up to float summation order) while the shield's
    candidates, which mostly differ in a value, share the rest. Trees are chunked as answers were:
    at most ``SCORE_CHUNK`` rows and ``SCORE_TOKENS`` row-nodes a forward, a longer tree alone."""
    import torch

    device = prefix.next_logits.device
    param = next(model.parameters())
    implementation = getattr(model.config, "_attn_implementation", "sdpa")
    out: list[tuple[float, tuple[float, ...]]] = [(0.0, ())] * len(items)
    trees = answer_trees(items, SCORE_TOKENS)
    prompt_width = prefix.attention_mask.shape[1]
    for span in score_chunks([len(tree.tokens) for tree in trees], SCORE_CHUNK, SCORE_TOKENS):
        chunk = trees[span.start : span.stop]
        rows = torch.tensor([tree.row for tree in chunk], device=device)
        width = max(len(tree.tokens) for tree in chunk)
        ids = torch.zeros((len(chunk), width), dtype=torch.long)
        depths = torch.zeros((len(chunk), width), dtype=torch.long)
        allowed = torch.zeros((len(chunk), 1, width, prompt_width + width), dtype=torch.bool)
        allowed[:, 0, :, :prompt_width] = prefix.attention_mask[rows].bool().cpu()[:, None, :]
        for r, tree in enumerate(chunk):
            n = len(tree.tokens)
            ids[r, :n] = torch.tensor(tree.tokens, dtype=torch.long)
            depths[r, :n] = torch.tensor(tree.depths, dtype=torch.long)
            tree_part = allowed[r, 0, :, prompt_width:]
            for node, parent in enumerate(tree.parents):  # parents precede their children
                if parent >= 0:
                    tree_part[node] = tree_part[parent]
                tree_part[node, node] = True
            for pad in range(n, width):  # padding attends to itself (a query with no key is NaN)
                tree_part[pad, pad] = True
        positions = prefix.lengths[rows][:, None].cpu() + depths
        mask = custom_mask(allowed.to(device), implementation, param.dtype)
        with torch.no_grad():
            logits = model(
                input_ids=ids.to(device),
                attention_mask=mask,
                position_ids=positions.to(device),
                cache=select_rows(prefix.cache, rows),
                use_cache=True,
            ).logits
        for r, tree in enumerate(chunk):
            first = prefix.next_logits[tree.row]
            for item, path in tree.paths.items():
                # token j is predicted by the prompt's last position (j = 0) or by the node of token j - 1
                predictors = torch.tensor(path[:-1], dtype=torch.long, device=device)
                answer = torch.tensor(list(items[item][1]), dtype=torch.long, device=device)
                plain, warm = _answer_logprobs(first, logits[r], predictors, answer, temperature)
                out[item] = (float(plain.sum()), tuple(float(x) for x in warm.tolist()))
        del logits
    return out


def _answer_logprobs(first: Any, logits: Any, predictors: Any, ids: Any, temperature: float) -> tuple[Any, Any]:
    """Log-probabilities of ``ids`` at temperature 1 and at ``temperature``, given the logits that
    predict them: ``first`` (the prefill's, fp32) for token 0, ``logits[predictors[j - 1]]`` for
    token j. Taken in blocks of positions (each position's softmax is its own), so the fp32 copy
    is one block."""
    import torch

    plain, warm = [], []
    for start in range(0, len(ids), LOGPROB_BLOCK):
        stop = min(len(ids), start + LOGPROB_BLOCK)
        block = logits[predictors[max(0, start - 1) : stop - 1]].float()
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
    "AnswerTree",
    "Decoded",
    "Prefix",
    "answer_trees",
    "custom_mask",
    "distinct_prompts",
    "prefill",
    "sample_answers",
    "score_chunks",
    "score_texts",
    "select_rows",
]
