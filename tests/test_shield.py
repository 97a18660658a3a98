"""Shielded decisions: the policy consults the public contract before it commits.

The shield is a refusal rule (never commit an answer the contract would refuse, and abstain when
nothing admissible is left), so its properties are hunted by hypothesis against references it does
not share code with: the environment's own transition run on the committed answer, and the
``jsonschema`` library on whatever that transition dispatches.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path
from typing import Any

import jsonpatch
import jsonpointer
import jsonschema
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from contractrl.rollout.env import RepairEnv, contract_for
from contractrl.rollout.grounding import invents
from contractrl.rollout.shield import MAX_ENUMERATED, Choice, Probe, choose, enumerated_answers, mended, probe
from contractrl.tasks.arms import ARMS, arm_spec
from contractrl.tasks.cases import ABSTAIN
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.validators import PublicState
from contractrl.validators.codes import PATCH_CODES, Code
from contractrl.validators.jsonvalue import canonical_json
from contractrl.validators.report import VerifierReport

CASES = generate_cases(GenerateConfig(seed=53, n=130))
_REFUSED = frozenset(PATCH_CODES) | {Code.MALFORMED_JSON, Code.DUPLICATE_KEY, Code.TRUNCATED, Code.PATCH_MALFORMED}


def _mutations(case: Any, state: Any, arm: str) -> st.SearchStrategy[str]:
    """Answers a weak policy writes: the enumerated ones, and the same aimed at immutable paths,
    the root, a path that is not there, with a dangling brace, or with too many operations."""
    listed = enumerated_answers(case, state, arm)
    bad = ["", "{", "[]", '[{"op":"replace","path":"","value":{}}]', '[{"op":"remove","path":"/nope/deeper"}]', "I cannot"]
    bad += [f'[{{"op":"replace","path":"{p}","value":"x"}}]' for p in case.immutable]
    bad += [text[:-1] for text in listed if len(text) > 2]
    if not arm_spec(arm).whole_object and len(listed) > 2:
        ops = [op for text in listed[1:] for op in json.loads(text)]
        bad.append(canonical_json(ops * 2))
    if isinstance(state.candidate, dict):  # the wrong verb for a missing member, and its mended form
        bad += [f'[{{"op":"replace","path":"/{name}","value":"x"}}]' for name in case.schema.get("required", ())]
    bad += [mend for text in listed + bad if (mend := mended(text, state, arm)) is not None]
    return st.sampled_from(listed + bad)


@st.composite
def decisions(draw: st.DrawFn) -> tuple[Any, Any, str, list[str], list[float]]:
    case = draw(st.sampled_from(CASES)).public
    arm = draw(st.sampled_from(ARMS))
    state = RepairEnv(case, arm=arm).reset()
    texts = draw(st.lists(_mutations(case, state, arm), min_size=1, max_size=8))
    scores = draw(st.lists(st.floats(-40, 0), min_size=len(texts), max_size=len(texts)))
    return case, state, arm, texts, scores


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(decisions())
def test_a_committed_answer_is_never_one_the_contract_refuses(decision: tuple) -> None:
    case, state, arm, texts, scores = decision
    probes = [probe(contract_for(case), case, state, t, arm) for t in texts]
    choice = choose(texts, scores, probes, state.attempts_left)
    committed = ABSTAIN if choice.index is None else texts[choice.index]
    env = RepairEnv(case, arm=arm)
    env.reset()
    _, record = env.step(committed)
    assert Code(record.outcome) not in _REFUSED, (committed, record.outcome)
    if env.log.dispatched is not None:  # the reference validator agrees with what went out
        jsonschema.validate(env.log.dispatched, case.schema)
    if env.log.dispatched is not None:  # nothing the request, the call and the schema do not state was added
        assert not invents(case.candidate, env.log.dispatched, case.request, case.schema)
    if any(p.accepted and not p.invents for p in probes):  # a grounded accepted answer goes out unless the policy abstains
        abstains = [s for s, p in zip(scores, probes, strict=True) if p.outcome in (Code.ABSTAIN, Code.REFUSAL)]
        if not abstains or max(abstains) < math.log(0.5):
            assert choice.tier == "accepted" and env.log.dispatched is not None
    assert choice.probes == len(texts)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(decisions())
def test_probes_say_what_the_environment_does(decision: tuple) -> None:
    case, state, arm, texts, _ = decision
    for text in texts:
        verdict = probe(contract_for(case), case, state, text, arm)
        env = RepairEnv(case, arm=arm)
        env.reset()
        _, record = env.step(text)
        assert verdict.outcome.value == record.outcome
        assert verdict.accepted == (env.log.dispatched is not None)


@given(
    st.lists(
        st.tuples(st.sampled_from([c for c in Code if c is not Code.ACCEPTED]), st.booleans(), st.floats(-20, 0)), max_size=8
    ),
    st.integers(1, 3),
)
def test_with_nothing_admissible_the_decision_is_abstain(rows: list[tuple[Code, bool, float]], attempts_left: int) -> None:
    """No accepted candidate, and every other one refused or leading where this episode has already
    been rejected: ABSTAIN whatever the scores (an ABSTAIN listed among them, or none at all)."""
    probes = [Probe(code, admissible=admissible, accepted=False, seen_rejected=admissible) for code, admissible, _ in rows]
    texts = [f"t{i}" for i in range(len(rows))]
    choice = choose(texts, [score for *_, score in rows], probes, attempts_left)
    assert choice.tier in ("abstain", "nothing")
    assert choice.index is None or probes[choice.index].outcome in (Code.ABSTAIN, Code.REFUSAL)


@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.floats(-20, 0)), min_size=1, max_size=8))
def test_on_the_last_attempt_only_an_accepted_answer_or_abstain_is_sent(rows: list[tuple[bool, bool, float]]) -> None:
    probes = [
        Probe(Code.ACCEPTED if acc else Code.WRONG_TYPE, admissible=True, accepted=acc, seen_rejected=False) for acc, _, _ in rows
    ]
    texts = [f"t{i}" for i in range(len(rows))]
    choice = choose(texts, [s for *_, s in rows], probes, attempts_left=1)
    assert choice.index is None or probes[choice.index].accepted
    if any(acc for acc, _, _ in rows):
        best = max(s for acc, _, s in rows if acc)
        assert choice.index is not None and rows[choice.index][2] == best


_MEMBERS = st.sampled_from(["/a", "/b", "/n", "/n/x", "/n/y", "/start"])


def _mend_reference(document: Any, ops: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """What mending means, by jsonpatch and jsonpointer: each ``replace`` whose target is missing
    from an object that exists (as the operations before it left the document) becomes ``add``;
    None when no verb changes or an operation still fails."""
    out, changed = [], False
    for op in ops:
        parent, _, key = op["path"].rpartition("/")
        holder = jsonpointer.resolve_pointer(document, parent, None)
        if op["op"] == "replace" and isinstance(holder, dict) and key not in holder:
            op, changed = {**op, "op": "add"}, True
        try:
            document = jsonpatch.apply_patch(document, [op])
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException):
            return None
        out.append(op)
    return out if changed else None


@settings(max_examples=300, deadline=None)
@example(document={"end": 1}, ops=[("replace", "/start", 2)])  # BFCL: replace of a missing "start"
@given(
    document=st.fixed_dictionaries({}, optional={"a": st.integers(0, 2), "b": st.integers(0, 2), "n": st.just({"x": 1})}),
    ops=st.lists(st.tuples(st.sampled_from(["add", "replace", "remove"]), _MEMBERS, st.integers(0, 2)), min_size=1, max_size=3),
)
def test_a_mended_proposal_changes_only_the_verbs_rfc_6902_requires(document: dict[str, Any], ops: list[tuple]) -> None:
    """Mending keeps the proposal's addresses and values and turns a ``replace`` of a missing member
    into ``add``, exactly where the reference does; whole-object arms are never mended."""
    proposal = [{"op": op, "path": path, **({} if op == "remove" else {"value": value})} for op, path, value in ops]
    state = PublicState(document, VerifierReport("rejected"), (), attempts_left=2, ops_left=3, immutable=())
    text = canonical_json(proposal)
    got = mended(text, state, "contractrl")
    assert (json.loads(got) if got is not None else None) == _mend_reference(document, proposal)
    assert mended(text, state, "full_regen") is None


def test_enumerated_answers_hold_no_withheld_value() -> None:
    """The evidence boundary for probes: everything the shield weighs is built from the public half,
    so an unrepairable case's withheld value is in none of its candidates, in any arm."""
    checked = 0
    for case in generate_cases(GenerateConfig(seed=59, n=650)):
        if case.public.family != "unrepairable":
            continue
        withheld = case.offline.corruption["withheld_value"]
        needle = withheld if isinstance(withheld, str) else canonical_json(withheld)
        state = RepairEnv(case.public).reset()
        for arm in ARMS:
            contract = contract_for(case.public)
            for text in enumerated_answers(case.public, state, arm, contract=contract):
                assert needle not in text, (case.public.case_id, arm, text)
                checked += 1
    assert checked > 100


def test_the_recheck_reaches_the_field_a_noisy_report_hides() -> None:
    """A report that points at the wrong place (or says nothing usable) hides the field to repair;
    the shield's re-check asks the public verifier and lists candidates there too. The report's own
    candidates keep their places (the re-check only appends), and on the noisy-feedback families
    the re-check turns cases with no accepted candidate into cases with one."""
    gained = lost = 0
    for case in generate_cases(GenerateConfig(seed=61, n=200)):
        if case.public.family not in ("wrong_pointer", "ambiguous_pointer", "malformed_feedback"):
            continue
        # a request that states no value as JSON (as a real user's does not): only the pointers lead
        public = dataclasses.replace(case.public, request="Please make the call valid.")
        contract = contract_for(public)
        state = RepairEnv(public).reset()
        plain = enumerated_answers(public, state, "contractrl")
        checked = enumerated_answers(public, state, "contractrl", contract=contract)
        assert checked[: len(plain)] == plain or len(checked) == MAX_ENUMERATED
        before = any(probe(contract, public, state, t, "contractrl").accepted for t in plain)
        after = any(probe(contract, public, state, t, "contractrl").accepted for t in checked)
        gained += after and not before
        lost += before and not after
    assert lost == 0 and gained > 10, (gained, lost)  # 24 of 45 when written


def test_choice_is_a_plain_record() -> None:
    assert Choice(None, 0, "abstain") == Choice(None, 0, "abstain")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 300), max_size=60),
    st.integers(1, 40),
    st.integers(1, 2000),
)
def test_score_chunks_keep_order_and_bound_rows_and_row_tokens(lengths: list[int], rows: int, tokens: int) -> None:
    """Every forward of the shield's teacher forcing is at most ``rows`` rows and, padded to its
    longest answer, at most ``tokens`` row-tokens, unless one answer alone is longer; the chunks
    cover the items in order, and where every chunk of ``rows`` fits the bound they are those chunks."""
    from contractrl.rollout.decode import score_chunks

    chunks = score_chunks(lengths, rows, tokens)
    assert [i for chunk in chunks for i in chunk] == list(range(len(lengths)))
    for chunk in chunks:
        assert 1 <= len(chunk) <= rows
        assert len(chunk) == 1 or len(chunk) * max(1, *(lengths[i] for i in chunk)) <= tokens
    for before, after in itertools.pairwise(chunks):  # a chunk closes only when the next item would break a bound
        grown = range(before.start, after.start + 1)
        assert len(grown) > rows or len(grown) * max(1, *(lengths[i] for i in grown)) > tokens
    if rows * max([1, *lengths]) <= tokens:
        assert chunks == [range(s, min(s + rows, len(lengths))) for s in range(0, len(lengths), rows)]


def test_score_chunks_refuse_empty_bounds() -> None:
    from contractrl.rollout.decode import score_chunks

    with pytest.raises(ValueError, match="max_rows >= 1"):
        score_chunks([1, 2], 0, 10)
    with pytest.raises(ValueError, match="max_tokens >= 1"):
        score_chunks([1, 2], 4, 0)


# --- the shielded Hugging Face policy on the tiny preset ---------------------------------------

torch = pytest.importorskip("torch", reason="torch is not installed")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    from contractrl.trainer.presets import build_tiny, load_model, tokenizer_corpus

    path = build_tiny(tmp_path_factory.mktemp("tiny"), corpus=tokenizer_corpus(n_cases=130))
    return load_model(str(path), device="cpu")


def _shielded_run(tiny: tuple[Any, Any], out: Path, k: int, workers: int, arm: str = "contractrl") -> str:
    from contractrl.rollout.hf_policy import HFPolicy, SamplingConfig
    from contractrl.rollout.run import write_run
    from contractrl.rollout.runner import EpisodeRunner, LocalPool

    model, tokenizer = tiny
    policy = HFPolicy(model, tokenizer, sampling=SamplingConfig(max_new_tokens=12, batch_size=4, do_sample=False, shield_k=k))
    runner = EpisodeRunner(policy, LocalPool(workers), arm=arm, max_inflight=5)
    return write_run(out, {"policy": "tiny"}, runner, [c.public for c in CASES[:13]], group=1, seed=7)


def test_shielded_episodes_count_their_probes_and_send_nothing_refused(tiny: tuple[Any, Any], tmp_path: Path) -> None:
    from contractrl.rollout.ledger import read_ledger

    for arm in ("contractrl", "full_regen"):
        _shielded_run(tiny, tmp_path / arm, 2, 1, arm)
        rows = read_ledger(tmp_path / arm)
        for row in rows:
            assert row["probes"] == sum(a["probes"] for a in row["attempts"]) >= len(row["attempts"])
            for attempt in row["attempts"]:
                assert attempt["probes"] >= 2  # ABSTAIN and at least one proposal
                # the committed answer was decoded or scored: its log-probability is over its own tokens
                assert attempt["logprob"] is not None and attempt["answer_tokens"] >= 1, attempt
                assert Code(attempt["outcome"]) not in _REFUSED, attempt


def test_same_seed_and_k_give_the_same_ledger_whatever_the_workers(tiny: tuple[Any, Any], tmp_path: Path) -> None:
    one = _shielded_run(tiny, tmp_path / "one", 3, 1)
    two = _shielded_run(tiny, tmp_path / "two", 3, 2)
    assert one == two
    assert _shielded_run(tiny, tmp_path / "k1", 1, 1) != one  # K is part of what the ledger records


def test_prefix_shared_decoding_matches_plain_generation(tiny: tuple[Any, Any]) -> None:
    """The greedy row of the shared-prefix decoder is what ``generate`` decodes, and teacher forcing
    gives back the log-probabilities a sampled row was drawn with (temperature 1)."""
    from contractrl.rollout.decode import prefill, sample_answers, score_texts
    from contractrl.rollout.hf_policy import HFPolicy, SamplingConfig
    from contractrl.rollout.policies import Observation
    from contractrl.rollout.prompts import render_messages, render_prompt

    model, tok = tiny
    obs = [Observation(c.public, RepairEnv(c.public).reset(), 0) for c in CASES[:3]]
    plain = HFPolicy(model, tok, sampling=SamplingConfig(max_new_tokens=10, batch_size=3, do_sample=False)).generate(obs)
    prompts = [render_prompt(render_messages(o.case, o.state, "contractrl"), tok) for o in obs]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    prefix = prefill(model, enc["input_ids"], enc["attention_mask"])
    for temperature in (1.0, 0.7):  # GRPO compares new log-probs with these at its own temperature
        decoded = sample_answers(
            model,
            prefix,
            3,
            max_new_tokens=10,
            temperature=temperature,
            eos_id=tok.eos_token_id,
            pad_id=tok.pad_token_id,
            seed=1,
            complete=lambda _, __: False,
        )
        for row, gen in enumerate(plain):
            assert decoded[row][0].token_ids[: len(gen.token_ids)] == gen.token_ids
            sampled = decoded[row][1]
            ((_, per_token),) = score_texts(model, prefix, [(row, sampled.token_ids)], temperature)
            assert per_token == pytest.approx(sampled.logprobs, abs=1e-3)


def test_a_long_candidate_is_scored_in_a_forward_of_its_own(tiny: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The shield's candidates of a whole gate batch share teacher-forced chunks: one long candidate
    (a 20,000-character string pads a catalog candidate to 5,010 tokens) once padded a 32-row chunk to
    its length. No forward now passes the row-token bound except one answer alone, and every answer
    keeps the score it has when scored alone."""
    from contractrl.rollout import decode
    from contractrl.rollout.policies import Observation
    from contractrl.rollout.prompts import render_messages, render_prompt

    model, tok = tiny
    monkeypatch.setattr(decode, "SCORE_TOKENS", 64)
    monkeypatch.setattr(decode, "LOGPROB_BLOCK", 16)  # the long answer's log-softmax in several blocks
    obs = [Observation(c.public, RepairEnv(c.public).reset(), 0) for c in CASES[:2]]
    prompts = [render_prompt(render_messages(o.case, o.state, "contractrl"), tok) for o in obs]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    prefix = decode.prefill(model, enc["input_ids"], enc["attention_mask"])
    vocab = model.config.vocab_size
    items = [(i % 2, [(7 * i + j) % vocab for j in range(3 + i % 4)]) for i in range(12)]
    items.insert(5, (1, [(11 * j) % vocab for j in range(90)]))
    items.insert(9, (0, []))
    shapes: list[tuple[int, int]] = []
    hook = model.register_forward_pre_hook(
        lambda _, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        together = decode.score_texts(model, prefix, items, 0.7)
    finally:
        hook.remove()
    assert len(shapes) >= 3 and (1, 90) in shapes  # the long answer alone, the short ones around it
    assert all(rows == 1 or rows * width <= 64 for rows, width in shapes)
    assert together[9] == (0.0, ())
    for (row, ids), (score, per_token) in zip(items, together, strict=True):
        ((alone_score, alone_tokens),) = decode.score_texts(model, prefix, [(row, ids)], 0.7)
        assert score == pytest.approx(alone_score, abs=1e-4) and per_token == pytest.approx(alone_tokens, abs=1e-4)
        assert len(per_token) == len(ids)


@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.lists(st.integers(0, 5), max_size=6)),
        max_size=12,
    ),
    st.integers(1, 12),
)
def test_answer_trees_share_common_starts_and_stay_within_their_bound(items: list[tuple[int, list[int]]], max_nodes: int) -> None:
    """Each answer's path spells it, answers of one row share the nodes of their common start, a
    row's answers are split across trees only where a tree would pass the bound, and a tree past
    the bound holds one answer alone."""
    from contractrl.rollout.decode import answer_trees

    trees = answer_trees(items, max_nodes)
    seen = {}
    for tree in trees:
        assert len(tree.tokens) <= max_nodes or len(tree.paths) == 1
        assert all(p < i for i, p in enumerate(tree.parents))  # parents precede their children
        assert len(set(zip(tree.parents, tree.tokens, strict=True))) == len(tree.tokens)  # no duplicate child
        for item, path in tree.paths.items():
            row, answer = items[item]
            assert tree.row == row and [tree.tokens[n] for n in path] == answer
            assert [tree.depths[n] for n in path] == list(range(len(answer)))
            assert all(tree.parents[b] == a for a, b in zip([-1, *path], path, strict=False))
            seen[item] = tree
    assert set(seen) == {i for i, (_, answer) in enumerate(items) if answer}


def test_answers_with_a_common_start_score_as_they_do_alone(tiny: tuple[Any, Any]) -> None:
    """The shield's candidates of one prompt differ in a value after a common start: scored as one
    prefix tree they get the log-probabilities they get alone, under SDPA and eager attention, while
    the forward runs each shared token once."""
    import torch

    from contractrl.rollout import decode
    from contractrl.rollout.policies import Observation
    from contractrl.rollout.prompts import render_messages, render_prompt

    model, tok = tiny
    obs = [Observation(c.public, RepairEnv(c.public).reset(), 0) for c in CASES[:2]]
    prompts = [render_prompt(render_messages(o.case, o.state, "contractrl"), tok) for o in obs]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    start = tok('[{"op":"replace","path":"/a","value":', add_special_tokens=False)["input_ids"]
    values = ['"x"}]', '"xy"}]', "1}]", "[1, 2]}]"]
    items = [(row, [*start, *tok(v, add_special_tokens=False)["input_ids"]]) for row in (0, 1) for v in values]
    items.append((0, start[:3]))  # an answer that is another's start
    shapes: list[tuple[int, int]] = []
    hook = model.register_forward_pre_hook(
        lambda _, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    implementation = model.config._attn_implementation
    try:
        for attention in ("sdpa", "eager"):
            model.config._attn_implementation = attention
            prefix = decode.prefill(model, enc["input_ids"], enc["attention_mask"])
            shapes.clear()
            together = decode.score_texts(model, prefix, items, 0.7)
            assert len(shapes) == 1 and shapes[0][1] < max(len(ids) for _, ids in items) * len(values)
            for (row, ids), (score, per_token) in zip(items, together, strict=True):
                # the reference: the prompt and the answer as one plain sequence, no cache, no tree
                prompt = enc["input_ids"][row][enc["attention_mask"][row].bool()].tolist()
                with torch.no_grad():
                    logits = model(input_ids=torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
                wanted = torch.tensor(ids)[:, None]
                plain = torch.log_softmax(logits, dim=-1).gather(-1, wanted).squeeze(-1)
                warm = torch.log_softmax(logits / 0.7, dim=-1).gather(-1, wanted).squeeze(-1)
                assert score == pytest.approx(float(plain.sum()), abs=1e-3)
                assert per_token == pytest.approx(warm.tolist(), abs=1e-4)
    finally:
        hook.remove()
        model.config._attn_implementation = implementation


def test_a_batched_gate_scores_within_the_bound_and_decides_as_one_call_at_a_time(
    tiny: tuple[Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Concurrent gate calls of a shielded model meet in one batch (gate/batching.py), whose
    candidates share teacher-forced chunks: every forward stays within the row-token bound, and each
    call gets the decision it gets alone."""
    import threading

    from contractrl.gate import RepairGate
    from contractrl.gate.batching import BatchingPolicy
    from contractrl.gate.tools import builtin_tools
    from contractrl.rollout import decode
    from contractrl.rollout.hf_policy import HFPolicy, SamplingConfig

    model, tok = tiny
    monkeypatch.setattr(decode, "SCORE_TOKENS", 48)  # the catalog's candidates then need the bound
    sampling = SamplingConfig(max_new_tokens=12, do_sample=False, shield_k=1)
    definitions, contracts, immutable = builtin_tools()
    calls = [({"name": c.public.tool, "arguments": c.public.candidate}, c.public.request) for c in CASES[:6]]

    def decide(policy: Any, ledger: Path, concurrent: bool) -> list[Any]:
        gate = RepairGate(definitions, policy, ledger=ledger, contracts=contracts, immutable=immutable)
        if not concurrent:
            return [gate.repair(call, request) for call, request in calls]
        out: list[Any] = [None] * len(calls)
        barrier = threading.Barrier(len(calls))

        def one(i: int) -> None:
            barrier.wait()
            out[i] = gate.repair(*calls[i])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out

    alone = decide(HFPolicy(model, tok, sampling=sampling, cpu_bf16=False), tmp_path / "alone", False)
    shapes: list[tuple[int, int]] = []

    def scoring(_: Any, args: Any, kwargs: dict[str, Any]) -> None:  # forwards on a prompt's cache: not the prefill
        if kwargs["cache"].get_seq_length() > 0:
            shapes.append(tuple(kwargs["input_ids"].shape))

    hook = model.register_forward_pre_hook(scoring, with_kwargs=True)
    batched = BatchingPolicy(HFPolicy(model, tok, sampling=sampling, cpu_bf16=False), max_batch_size=len(calls), wait_s=30.0)
    try:
        together = decide(batched, tmp_path / "together", True)
    finally:
        hook.remove()
    assert batched.batches[0] == len(calls)  # the first attempts met in one model call
    assert all(rows == 1 or rows * width <= 48 for rows, width in shapes)
    assert sum(rows * width for rows, width in shapes if width > 1) > 48  # the bound split the batch's candidates
    assert [type(d).__name__ for d in together] == [type(d).__name__ for d in alone]
    assert [getattr(d, "call", None) for d in together] == [getattr(d, "call", None) for d in alone]
    assert [getattr(d, "code", None) for d in together] == [getattr(d, "code", None) for d in alone]


@given(st.lists(st.lists(st.integers(0, 3), max_size=3), max_size=10))
def test_distinct_prompts_run_each_prompt_once_and_map_every_row_to_its_own(prompts: list[list[int]]) -> None:
    from contractrl.rollout.decode import distinct_prompts

    first, of_row = distinct_prompts(prompts)
    assert len(of_row) == len(prompts) and sorted(first) == first
    assert len({tuple(prompts[r]) for r in first}) == len(first)  # each distinct prompt once
    assert all(prompts[first[of_row[r]]] == prompts[r] for r in range(len(prompts)))


def _assert_same_decision(got: Any, want: Any, *accounting: str) -> None:
    """Two generations commit the same answer with the same probes and ``accounting`` fields, and
    log-probabilities equal up to float summation order."""
    fields = ("text", "token_ids", "probes", *accounting)
    assert [getattr(got, f) for f in fields] == [getattr(want, f) for f in fields]
    assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)


def test_a_group_sharing_its_prompt_is_prefilled_and_scored_once(tiny: tuple[Any, Any]) -> None:
    """A GRPO group's episodes start from one observation: the shielded batch runs each distinct
    prompt through the model once, and every episode decides as it does in a batch without the
    repeats; sampled answers continue the shared prefill as they continue a prefill of their own."""
    from contractrl.rollout import decode
    from contractrl.rollout.hf_policy import HFPolicy, SamplingConfig
    from contractrl.rollout.policies import Observation
    from contractrl.rollout.prompts import render_messages, render_prompt

    model, tok = tiny
    policy = HFPolicy(model, tok, sampling=SamplingConfig(max_new_tokens=12, batch_size=8, do_sample=False, shield_k=1))
    one = [Observation(c.public, RepairEnv(c.public).reset(), 0) for c in CASES[:2]]
    group = [dataclasses.replace(o, sample=s) for o in one for s in range(3)]
    rows: list[int] = []
    hook = model.register_forward_pre_hook(lambda _, args, kwargs: rows.append(kwargs["input_ids"].shape[0]), with_kwargs=True)
    try:
        together = policy.generate_batch(group)
    finally:
        hook.remove()
    assert rows[0] == 2  # the prefill: two distinct prompts for six episodes
    alone = policy.generate_batch(one)
    for index, generation in enumerate(together):
        _assert_same_decision(generation, alone[index // 3], "prompt_tokens")

    prompts = [render_prompt(render_messages(o.case, o.state, "contractrl"), tok) for o in group]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    first, of_row = decode.distinct_prompts(enc["input_ids"].tolist())
    every = decode.prefill(model, enc["input_ids"], enc["attention_mask"])
    shared = decode.prefill(model, enc["input_ids"][first], enc["attention_mask"][first])
    common = {"max_new_tokens": 10, "temperature": 0.8, "eos_id": tok.eos_token_id, "pad_id": tok.pad_token_id, "seed": 4}
    own = decode.sample_answers(model, every, 2, complete=lambda _, __: False, **common)
    reused = decode.sample_answers(model, shared, 2, complete=lambda _, __: False, prompt_rows=of_row, **common)
    for mine, theirs in zip(itertools.chain(*own), itertools.chain(*reused), strict=True):
        assert mine.token_ids == theirs.token_ids and mine.logprobs == pytest.approx(theirs.logprobs, abs=1e-4)


def test_rows_that_leave_a_decoding_batch_decode_as_in_a_whole_batch(tiny: tuple[Any, Any]) -> None:
    """Once half the rows still decoding have ended, the ended ones leave the batch: the greedy
    answers, their log-probabilities and ends are those of a batch kept whole (as a grammar's
    processors keep it; an empty processor list changes no logit), and the forwards shrink."""
    from transformers import LogitsProcessorList

    from contractrl.rollout import decode
    from contractrl.rollout.policies import Observation
    from contractrl.rollout.prompts import render_messages, render_prompt

    model, tok = tiny
    obs = [Observation(c.public, RepairEnv(c.public).reset(), 0) for c in CASES[:6]]
    prompts = [render_prompt(render_messages(o.case, o.state, "contractrl"), tok) for o in obs]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    prefix = decode.prefill(model, enc["input_ids"], enc["attention_mask"])
    lengths = {i: 2 + 2 * i for i in range(6)}  # row i ends after 2 + 2i tokens: the batch thins out
    common = {"max_new_tokens": 14, "temperature": 1.0, "eos_id": -1, "pad_id": tok.pad_token_id, "seed": 0}

    def run(processors: Any) -> tuple[list[decode.Decoded], list[int]]:
        seen: list[int] = []

        def complete(prompt: int, ids: list[int]) -> bool:
            return len(ids) >= lengths[prompt]

        hook = model.register_forward_pre_hook(lambda _, a, kw: seen.append(kw["input_ids"].shape[0]), with_kwargs=True)
        try:
            answers = decode.sample_answers(model, prefix, 1, complete=complete, processors=processors, **common)
        finally:
            hook.remove()
        return [a[0] for a in answers], seen

    thinned, shrinking = run(None)
    whole, constant = run(LogitsProcessorList([]))
    assert set(constant) == {6} and shrinking[-1] < 6 and shrinking == sorted(shrinking, reverse=True)
    for mine, theirs in zip(thinned, whole, strict=True):
        assert mine.token_ids == theirs.token_ids and mine.ended == theirs.ended
        assert mine.logprobs == pytest.approx(theirs.logprobs, abs=1e-5)
    assert [len(a.token_ids) for a in thinned] == [lengths[i] for i in range(6)]


def test_deferring_decodes_only_where_the_enumerated_candidates_settle_nothing(tiny: tuple[Any, Any]) -> None:
    """With ``shield_defer`` a decision that an accepted, grounded enumerated candidate (or the
    policy's own ABSTAIN) settles commits without generating a token, and what it commits is what
    the contract accepts (or ABSTAIN); every other decision decodes and decides exactly as without
    deferring, though its batch decodes fewer rows. Checked for both output representations."""
    from contractrl.rollout.hf_policy import HFPolicy, SamplingConfig
    from contractrl.rollout.policies import Observation

    model, tok = tiny
    base = SamplingConfig(max_new_tokens=12, batch_size=16, do_sample=False, shield_k=1)
    for arm in ("contractrl", "full_regen"):
        observations = [Observation(c.public, RepairEnv(c.public).reset(), 0, arm=arm) for c in CASES[:16]]
        plain = HFPolicy(model, tok, sampling=base).generate_batch(observations)
        deferred = HFPolicy(model, tok, sampling=dataclasses.replace(base, shield_defer=True)).generate_batch(observations)
        settled = 0
        for o, mine, theirs in zip(observations, deferred, plain, strict=True):
            contract = contract_for(o.case)
            accepted = [
                text
                for text in enumerated_answers(o.case, o.state, arm, contract=contract)
                if (p := probe(contract, o.case, o.state, text, arm)).accepted and not p.invents
            ]
            if accepted:
                assert mine.generated_tokens == 0, (o.case.case_id, accepted)
            if mine.generated_tokens == 0:
                settled += 1
                outcome = probe(contract, o.case, o.state, mine.text, arm)
                assert outcome.accepted or mine.text == ABSTAIN, (o.case.case_id, mine.text)
                assert mine.probes <= theirs.probes  # the proposal was never probed
            else:
                _assert_same_decision(mine, theirs, "generated_tokens")
        assert 0 < settled < len(observations), (arm, settled)  # both paths ran


def test_each_proposal_is_judged_for_its_own_decision_and_stops_where_refused(
    tiny: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decoding row asks the prefix judge of its own observation (rows are K per prompt), and a
    row the judge refuses stops there: with a judge that refuses every prefix, each proposal is one
    token, and the shield, having nothing admissible from them, decides from the enumerated
    candidates alone. (The tiny model writes no JSON, so the judge is stood in for here; the real
    one is tested in test_prefix_refusal.py.)"""
    from contractrl.rollout.hf_policy import HFPolicy, SamplingConfig
    from contractrl.rollout.policies import Observation
    from contractrl.rollout.prefix_refusal import PrefixJudge

    model, tok = tiny
    asked: list[str] = []

    def refuse_all(self: PrefixJudge, text: str) -> bool:
        asked.append(self.evidence.text)
        return True

    observations = [Observation(c.public, RepairEnv(c.public).reset(), 0) for c in CASES[:6]]
    sampling = SamplingConfig(max_new_tokens=12, batch_size=6, do_sample=True, temperature=1.0, shield_k=3)
    free = HFPolicy(model, tok, sampling=sampling).generate_batch(observations)
    monkeypatch.setattr(PrefixJudge, "refuses", refuse_all)
    stopped = HFPolicy(model, tok, sampling=sampling).generate_batch(observations)
    assert set(asked) == {o.case.request.lower() for o in observations}  # every row's own judge, and only those
    assert len(asked) == 3 * len(observations)  # each of the K rows judged once, after its first token
    assert [g.generated_tokens for g in stopped] == [3] * len(observations)
    assert sum(g.generated_tokens for g in free) > sum(g.generated_tokens for g in stopped)
