"""Hugging Face causal-LM policy: batched sampling, per-token log-probs, JSON-aware stopping,
schema-constrained decoding (xgrammar) for the constrained-decoding arm, and shielded decisions.

The policy renders each observation with its arm's prompt (the arm comes with the observation;
a grammar arm's batch decodes under the schema's grammar) and the tokenizer's chat template,
generates for the whole batch at once, and returns per sequence the text, the generated token ids,
their log-probabilities under the (temperature-scaled) policy, token counts and whether generation
stopped on its length limit, which the parser then reports as ``truncated``.

With ``shield_k`` > 0 a decision is shielded (:mod:`contractrl.rollout.shield`): K proposals decoded
from one shared prefill (:mod:`contractrl.rollout.decode`), each stopped as soon as the shield
would refuse whatever followed (:mod:`contractrl.rollout.prefix_refusal`), and the enumerated
candidates, scored by the model, are probed on the case's public contract and one is committed. It replaced the
earlier re-decoding of answers already seen rejected with beams, which gained 5 of 52 held-out
cases at twice the tokens where the shield gained 29 at fewer (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import ConfigError
from ..tasks.arms import arm_spec
from ..tasks.cases import PublicCase
from ..validators import RepairContract
from ..validators.jsonvalue import canonical_json
from .cpu import compute_context, release_memory
from .decode import Decoded, Prefix, distinct_prompts, prefill, sample_answers, score_texts
from .env import contract_for
from .native_log import native_stderr_to_log
from .options import DEFAULT_MAX_NEW_TOKENS
from .policies import ABSTAIN, Generation, Observation
from .prefix_refusal import PrefixJudge
from .prompts import render_messages, render_prompt
from .shield import SETTLED, Choice, Probe, answer_key, choose, enumerated_answers, mended, probe


class DecodingOptions(Protocol):
    """The five decoding options an ``hf:`` policy takes from a command or the gate, by the same
    names in both (:class:`~contractrl.rollout.options.PolicyOptions`, ``gate.policy.HFOptions``),
    so each passes its options object whole instead of restating five keywords."""

    @property
    def max_new_tokens(self) -> int: ...
    @property
    def temperature(self) -> float: ...
    @property
    def seed(self) -> int: ...
    @property
    def shield_k(self) -> int: ...
    @property
    def enumerate(self) -> bool: ...
    @property
    def defer(self) -> bool: ...


@dataclass(frozen=True)
class SamplingConfig:
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    temperature: float = 1.0
    top_p: float = 1.0
    do_sample: bool = True
    batch_size: int = 8
    seed: int = 0
    # shielded decisions (rollout/shield.py): K proposals probed on the public contract before one is
    # committed (0 = blind: the one decoded answer is sent as it is)
    shield_k: int = 0
    # the shield also scores the enumerated candidates (rollout/candidates.py) beside the proposals
    shield_enumerate: bool = True
    # the shield weighs the enumerated candidates first and decodes only where they settle nothing
    shield_defer: bool = False

    @classmethod
    def from_options(cls, options: DecodingOptions) -> SamplingConfig:
        """The rollout/study command's and the gate's generation options: greedy at temperature 0."""
        return cls(
            max_new_tokens=options.max_new_tokens,
            temperature=options.temperature,
            do_sample=options.temperature > 0,
            seed=options.seed,
            shield_k=options.shield_k,
            shield_enumerate=options.enumerate,
            shield_defer=options.defer,
        )


def answer_complete(text: str) -> bool:
    """Whether ``text`` already holds a whole answer: one balanced JSON value, or an ABSTAIN line."""
    stripped = text.strip()
    if stripped.upper().startswith(ABSTAIN):
        return "\n" in text.lstrip()[len(ABSTAIN) :] or len(stripped) > 200
    if not stripped or stripped[0] not in "[{":
        return False
    depth = 0
    in_string = escaped = False
    for char in stripped:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return True
    return False


class HFPolicy:
    """A policy backed by a Hugging Face model and tokenizer (any causal LM, or the tiny preset)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        mode: str = "same_information",
        feedback: str = "full",
        sampling: SamplingConfig = SamplingConfig(),
        name: str = "hf",
        cpu_bf16: bool = True,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.mode = mode
        self.feedback = feedback
        self.sampling = sampling
        self.name = name
        self.cpu_bf16 = cpu_bf16  # bf16 products on a CPU that has them natively (cpu.py)
        self._grammars: dict[str, Any] = {}
        self._contracts: dict[str, tuple[PublicCase, RepairContract]] = {}
        self._compiler: Any = None

    def generate(self, observations: Sequence[Observation]) -> list[Generation]:
        """Batches of similar prompt length (less padding), returned in the callers' order."""
        batches = plan_batches(observations, self.sampling.batch_size)
        return in_callers_order(batches, [self.generate_batch([observations[i] for i in b]) for b in batches])

    def _seed(self, observations: Sequence[Observation]) -> int:
        """One seed per batch from the episodes in it, so reruns of the same batch sample the same."""
        key = [self.sampling.seed, [(o.case.case_id, o.sample, len(o.state.history)) for o in observations]]
        return int(hashlib.sha256(canonical_json(key).encode()).hexdigest()[:8], 16)

    def _encode(self, observations: Sequence[Observation]) -> tuple[Any, list[int], list[tuple[int, ...]]]:
        """The batch's prompts, left-padded: the encoding, each prompt's token count and its ids."""
        tok = self.tokenizer
        prompts = [render_prompt(render_messages(o.case, o.state, o.arm, self.mode, self.feedback), tok) for o in observations]
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.model.device)
        width = enc["input_ids"].shape[1]
        counts = enc["attention_mask"].sum(dim=1).tolist()
        ids = [tuple(row[width - n :]) for row, n in zip(enc["input_ids"].tolist(), counts, strict=True)]
        return enc, counts, ids

    def generate_batch(self, observations: Sequence[Observation]) -> list[Generation]:
        """One generation call for exactly these observations (a batch of :func:`plan_batches`)."""
        if self.sampling.shield_k > 0:
            return self._shielded_batch(observations)
        import torch

        start = time.perf_counter()
        from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

        tok = self.tokenizer
        enc, prompt_tokens, prompt_ids = self._encode(observations)
        prompt_len = enc["input_ids"].shape[1]
        constrained = _grammar(observations)

        class _JsonStop(StoppingCriteria):
            def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
                texts = tok.batch_decode(input_ids[:, prompt_len:], skip_special_tokens=True)
                return torch.tensor([answer_complete(t) for t in texts], device=input_ids.device)

        processors = LogitsProcessorList()
        if constrained:
            processors.append(self._grammar_processor([o.case.schema for o in observations]))
        torch.manual_seed(self._seed(observations))
        s = self.sampling
        with torch.no_grad(), compute_context(self.model, self.cpu_bf16):
            result = self.model.generate(
                **enc,
                max_new_tokens=s.max_new_tokens,
                do_sample=s.do_sample,
                temperature=s.temperature if s.do_sample else None,
                top_p=s.top_p if s.do_sample else None,
                top_k=None,
                logits_processor=processors,
                # under a grammar the answer ends with EOS, which the grammar forces once the object is
                # complete; stopping earlier would feed padding to the grammar matcher
                stopping_criteria=StoppingCriteriaList([] if constrained else [_JsonStop()]),
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
                return_dict_in_generate=True,
                output_logits=True,
            )
        new_tokens = result.sequences[:, prompt_len:]
        logits = torch.stack(result.logits, dim=1).float()  # (batch, steps, vocab), before sampling warpers
        logprobs = torch.log_softmax(logits / (s.temperature if s.do_sample else 1.0), dim=-1)
        chosen = logprobs.gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
        generations = []
        share = (time.perf_counter() - start) / len(observations)
        for row in range(len(observations)):
            ids = new_tokens[row].tolist()
            keep = _answer_length(ids, tok)
            text = tok.decode(ids[:keep], skip_special_tokens=True)
            ended = keep < len(ids) or (keep > 0 and ids[keep - 1] == tok.eos_token_id) or answer_complete(text)
            generations.append(
                Generation(
                    text=text.strip(),
                    finish_reason="stop" if ended else "length",
                    generated_tokens=keep,
                    prompt_tokens=int(prompt_tokens[row]),
                    token_ids=tuple(ids[:keep]),
                    logprobs=tuple(float(x) for x in chosen[row, :keep].tolist()),
                    prompt_ids=prompt_ids[row],
                    gen_s=share,
                )
            )
        release_memory()  # the KV cache of this batch; see cpu.py
        return generations

    def _contract(self, case: PublicCase) -> RepairContract:
        found = self._contracts.get(case.case_id)
        if found is None or found[0] is not case:
            found = self._contracts[case.case_id] = (case, contract_for(case))
        return found[1]

    def _shielded_batch(self, observations: Sequence[Observation]) -> list[Generation]:
        """K proposals per observation from one shared prefill, the enumerated candidates scored on
        the same cache, each probed on the public contract, one committed (rollout/shield.py).

        With ``shield_defer`` the enumerated candidates are weighed first, and a decision they settle
        (the policy abstains, or one of them is accepted) commits without generating anything; the
        rest decode their K proposals and weigh everything together, as without it."""
        import torch

        start = time.perf_counter()
        s = self.sampling
        enc, prompt_tokens, prompt_ids = self._encode(observations)
        temperature = s.temperature if s.do_sample and s.temperature > 0 else 1.0
        # the episodes of a GRPO group share their first prompt: it runs, and is scored on, once
        first, prompt_row = distinct_prompts(prompt_ids)
        scored: dict[tuple[int, tuple[int, ...]], tuple[float, tuple[float, ...]]] = {}
        lists: list[list[_ShieldCandidate]] = [[] for _ in observations]
        decisions: dict[int, tuple[list[Probe], Choice]] = {}
        decoded: dict[int, list[Decoded]] = {}
        with torch.no_grad(), compute_context(self.model, self.cpu_bf16):
            prefix = prefill(self.model, enc["input_ids"][first], enc["attention_mask"][first])
            if s.shield_defer:
                for row, o in enumerate(observations):
                    lists[row] = self._shield_candidates(o, ())
                self._score(prefix, prompt_row, lists, scored, temperature)
                for row, o in enumerate(observations):
                    probes, choice = self._decide(o, lists[row])
                    if choice.tier in SETTLED:
                        decisions[row] = (probes, choice)
            rows = [row for row in range(len(observations)) if row not in decisions]
            if rows:
                answers = self._propose(prefix, [observations[r] for r in rows], [prompt_row[r] for r in rows])
                for row, proposed in zip(rows, answers, strict=True):
                    decoded[row] = proposed
                    # a deferring decision's enumerated candidates are already built and scored
                    lists[row] = self._shield_candidates(observations[row], proposed, lists[row] or None)
                self._score(prefix, prompt_row, lists, scored, temperature)
        generations = []
        for row, o in enumerate(observations):
            probes, choice = decisions[row] if row in decisions else self._decide(o, lists[row])
            listed = lists[row]
            chosen = listed[choice.index] if choice.index is not None else _ShieldCandidate(ABSTAIN, (), (), 0.0, None)
            generations.append(
                Generation(
                    text=chosen.text,
                    finish_reason="stop" if chosen.decoded is None or chosen.decoded.ended else "length",
                    generated_tokens=sum(len(d.token_ids) for d in decoded.get(row, ())),
                    prompt_tokens=int(prompt_tokens[row]) + sum(len(c.token_ids) for c in listed if c.decoded is None),
                    token_ids=chosen.token_ids,
                    logprobs=chosen.logprobs,
                    prompt_ids=prompt_ids[row],
                    probes=choice.probes + (1 if self.sampling.shield_enumerate else 0),  # + the re-check
                )
            )
        share = (time.perf_counter() - start) / len(observations)
        release_memory()
        return [dataclasses.replace(g, gen_s=share) for g in generations]

    def _propose(self, prefix: Prefix, observations: Sequence[Observation], prompt_rows: Sequence[int]) -> list[list[Decoded]]:
        """The K decoded proposals of each observation, continuing its prompt's prefill row."""
        tok, s = self.tokenizer, self.sampling
        constrained = _grammar(observations)
        processors = None
        if constrained:
            from transformers import LogitsProcessorList

            schemas = [o.case.schema for o in observations for _ in range(s.shield_k)]
            processors = LogitsProcessorList([self._grammar_processor(schemas)])

        # a row ends where its answer does, or where the shield would refuse whatever followed;
        # under a grammar the answer ends on the EOS the grammar forces (its matcher needs every row)
        judges = [] if constrained else [PrefixJudge.of(self._contract(o.case), o.case, o.state, o.arm) for o in observations]

        def complete(prompt: int, ids: list[int]) -> bool:
            if constrained:
                return False
            text = tok.decode(ids, skip_special_tokens=True)
            return answer_complete(text) or judges[prompt].refuses(text)

        return sample_answers(
            self.model,
            prefix,
            s.shield_k,
            max_new_tokens=s.max_new_tokens,
            temperature=s.temperature if s.temperature > 0 else 1.0,
            eos_id=tok.eos_token_id,
            pad_id=tok.pad_token_id,
            seed=self._seed(observations),
            complete=complete,
            greedy_first=not s.do_sample,
            processors=processors,
            prompt_rows=prompt_rows,
        )

    def _score(
        self,
        prefix: Prefix,
        prompt_row: Sequence[int],
        lists: list[list[_ShieldCandidate]],
        scored: dict[tuple[int, tuple[int, ...]], tuple[float, tuple[float, ...]]],
        temperature: float,
    ) -> None:
        """Score, in place, the listed candidates the model did not decode: each (prompt, answer)
        pair is teacher-forced once, ``scored`` keeping the pairs already forced."""
        pairs = ((prompt_row[row], c.token_ids) for row, listed in enumerate(lists) for c in listed if c.decoded is None)
        wanted = [pair for pair in dict.fromkeys(pairs) if pair not in scored]
        if wanted:
            scored.update(zip(wanted, score_texts(self.model, prefix, wanted, temperature), strict=True))
        for row, listed in enumerate(lists):
            for index, candidate in enumerate(listed):
                if candidate.decoded is None:
                    score, logprobs = scored[(prompt_row[row], candidate.token_ids)]
                    listed[index] = dataclasses.replace(candidate, score=score, logprobs=logprobs)

    def _decide(self, o: Observation, listed: Sequence[_ShieldCandidate]) -> tuple[list[Probe], Choice]:
        """Each candidate probed on the public contract, and the one :func:`choose` commits."""
        contract = self._contract(o.case)
        probes = [probe(contract, o.case, o.state, c.text, o.arm) for c in listed]
        return probes, choose([c.text for c in listed], [c.score for c in listed], probes, o.state.attempts_left)

    def _shield_candidates(
        self, o: Observation, answers: Sequence[Decoded], enumerated: Sequence[_ShieldCandidate] | None = None
    ) -> list[_ShieldCandidate]:
        """The model's distinct proposals, their mended forms (:func:`~.shield.mended`), then ABSTAIN
        and the enumerated candidates it did not propose (to be scored), each once by
        :func:`answer_key`; ``enumerated``: those candidates as an earlier call built them (a
        deferring decision's first step), instead of building them again."""
        tok = self.tokenizer
        found: dict[str, _ShieldCandidate] = {}
        mends: list[str] = []
        for answer in answers:
            keep = _answer_length(list(answer.token_ids), tok)
            text = tok.decode(answer.token_ids[:keep], skip_special_tokens=True).strip()
            found.setdefault(
                answer_key(text), _ShieldCandidate(text, answer.token_ids[:keep], answer.logprobs[:keep], answer.score, answer)
            )
            mend = mended(text, o.state, o.arm)
            if mend is not None:
                mends.append(mend)
        for text in mends:  # scored like the enumerated candidates: the model did not write them
            found.setdefault(answer_key(text), self._to_score(text))
        if enumerated is None:
            texts = (
                enumerated_answers(o.case, o.state, o.arm, contract=self._contract(o.case))
                if self.sampling.shield_enumerate
                else [ABSTAIN]
            )
            enumerated = [self._to_score(t) for t in texts]
        for candidate in enumerated:
            found.setdefault(answer_key(candidate.text), candidate)
        return list(found.values())

    def _to_score(self, text: str) -> _ShieldCandidate:
        """An answer the model did not decode, tokenized for :meth:`_score` to teacher-force."""
        return _ShieldCandidate(text, tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"]), (), 0.0, None)

    def _grammar_processor(self, schemas: list[dict[str, Any]]) -> Any:
        import xgrammar as xgr
        from xgrammar.contrib.hf import LogitsProcessor

        if self._compiler is None:
            info = xgr.TokenizerInfo.from_huggingface(
                self.tokenizer, vocab_size=self.model.config.vocab_size, stop_token_ids=[self.tokenizer.eos_token_id]
            )
            self._compiler = xgr.GrammarCompiler(info)
        compiled = []
        for schema in schemas:
            key = canonical_json(schema)
            if key not in self._grammars:
                with native_stderr_to_log("xgrammar"):  # its C++ warnings, once each (rollout/native_log.py)
                    try:
                        self._grammars[key] = self._compiler.compile_json_schema(key, any_whitespace=False, strict_mode=True)
                    except Exception:  # a schema feature xgrammar cannot express: fall back to any JSON object
                        self._grammars[key] = self._compiler.compile_builtin_json_grammar()
            compiled.append(self._grammars[key])
        return LogitsProcessor(compiled)


@dataclass(frozen=True)
class _ShieldCandidate:
    """One answer a shielded decision weighs: its text and tokens, the model's log-probabilities and
    summed score, and the decoded row it came from (None: an enumerated candidate, teacher-forced)."""

    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    score: float
    decoded: Decoded | None


def _grammar(observations: Sequence[Observation]) -> bool:
    """Whether this batch decodes under the schema's grammar: its observations' arm says so. One
    generation call cannot mix grammar and free decoding, so a batch that would is refused."""
    wanted = {arm_spec(o.arm).grammar for o in observations}
    if len(wanted) > 1:
        raise ConfigError(f"one generation batch mixes arms with and without a grammar: {sorted({o.arm for o in observations})}")
    return wanted == {True}


def plan_batches(observations: Sequence[Observation], size: int) -> list[list[int]]:
    """Indices of ``observations`` in generation batches of similar prompt length (less padding).

    The plan depends only on the observations, so a pool of policy actors that runs these batches
    generates exactly what one process does: same batches, same padding, same per-batch seeds.
    """
    lengths = [len(canonical_json(o.case.schema)) + len(o.case.request) for o in observations]
    order = sorted(range(len(observations)), key=lambda i: (lengths[i], i))
    return [order[start : start + size] for start in range(0, len(order), max(1, size))]


def in_callers_order(batches: list[list[int]], generated: Sequence[Sequence[Generation]]) -> list[Generation]:
    """The generations of planned batches back in the order of the observations they came from."""
    out: list[Generation | None] = [None] * sum(len(b) for b in batches)
    for batch, generations in zip(batches, generated, strict=True):
        for index, generation in zip(batch, generations, strict=True):
            out[index] = generation
    return [g for g in out if g is not None]


def _answer_length(ids: list[int], tok: Any) -> int:
    """Tokens up to and including the end of the answer (EOS, or padding after the row stopped)."""
    for index, token in enumerate(ids):
        if token == tok.eos_token_id:
            return index + 1
        if token == tok.pad_token_id:
            return index
    return len(ids)


__all__ = ["DecodingOptions", "HFPolicy", "SamplingConfig", "answer_complete", "in_callers_order", "plan_batches"]
