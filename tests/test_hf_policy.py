"""The Hugging Face policy on the tiny preset: batching, log-probs, truncation, constrained decoding."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
pytest.importorskip("transformers", reason="transformers is not installed")

from contractrl.cli import main  # noqa: E402
from contractrl.errors import ConfigError  # noqa: E402
from contractrl.rollout.env import RepairEnv, episode_row  # noqa: E402
from contractrl.rollout.hf_policy import HFPolicy, SamplingConfig, answer_complete  # noqa: E402
from contractrl.rollout.ledger import read_ledger  # noqa: E402
from contractrl.rollout.policies import Observation  # noqa: E402
from contractrl.tasks.generate import GenerateConfig, generate_cases  # noqa: E402
from contractrl.tasks.store import read_public  # noqa: E402
from contractrl.trainer.config import LoraConfig  # noqa: E402
from contractrl.trainer.learner import peft_lora_config  # noqa: E402
from contractrl.trainer.presets import build_tiny, load_model, tokenizer_corpus, train_tiny_tokenizer  # noqa: E402
from contractrl.validators import Verifier  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Path]:
    path = build_tiny(tmp_path_factory.mktemp("tiny"), corpus=tokenizer_corpus(n_cases=130))
    model, tokenizer = load_model(str(path), device="cpu")
    return model, tokenizer, path


@pytest.fixture(scope="module")
def observations() -> list[Observation]:
    cases = generate_cases(GenerateConfig(seed=41, n=6))
    return [Observation(c.public, RepairEnv(c.public).reset(), 0) for c in cases]


def test_tiny_tokenizer_and_model_are_deterministic(tmp_path: Path) -> None:
    corpus = ["hello world", '{"op": "replace", "path": "/a", "value": 1}', "ABSTAIN"] * 20
    a, b = train_tiny_tokenizer(corpus, 300), train_tiny_tokenizer(corpus, 300)
    assert a.get_vocab() == b.get_vocab()
    assert a.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True).endswith(
        "<|im_start|>assistant\n"
    )
    first, second = build_tiny(tmp_path / "a", corpus=corpus), build_tiny(tmp_path / "b", corpus=corpus)
    ma, _ = load_model(str(first), device="cpu")
    mb, _ = load_model(str(second), device="cpu")
    for (name, pa), (_, pb) in zip(ma.state_dict().items(), mb.state_dict().items(), strict=True):
        assert torch.equal(pa, pb), name


def test_batched_generation_reports_tokens_and_logprobs(tiny: tuple, observations: list[Observation]) -> None:
    model, tokenizer, _ = tiny
    gens = HFPolicy(model, tokenizer, sampling=SamplingConfig(max_new_tokens=12, batch_size=4)).generate(observations)
    assert len(gens) == len(observations)
    for gen in gens:
        assert gen.prompt_tokens > 100
        assert 0 < gen.generated_tokens <= 12
        assert len(gen.token_ids) == len(gen.logprobs) == gen.generated_tokens
        assert all(lp <= 0.0 for lp in gen.logprobs)
        assert gen.finish_reason in ("stop", "length")


@pytest.mark.parametrize("cpu_bf16", [False, True])
def test_logprobs_match_a_forward_pass(tiny: tuple, observations: list[Observation], cpu_bf16: bool) -> None:
    """The learner trusts these numbers: recompute them from scratch, in the same precision, and compare.
    bf16 products (on a CPU that has them) round to ~3 significant digits, hence the looser bound."""
    from contractrl.rollout.cpu import compute_context
    from contractrl.rollout.prompts import render_messages, render_prompt

    model, tokenizer, _ = tiny
    obs = observations[0]
    policy = HFPolicy(model, tokenizer, sampling=SamplingConfig(max_new_tokens=10, temperature=0.7), cpu_bf16=cpu_bf16)
    (gen,) = policy.generate([obs])
    prompt = render_prompt(render_messages(obs.case, obs.state, "contractrl"), tokenizer)
    prompt_ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    ids = torch.cat([prompt_ids, torch.tensor([gen.token_ids])], dim=1)
    with torch.no_grad(), compute_context(model, cpu_bf16):
        logits = model(ids).logits[0, prompt_ids.shape[1] - 1 : -1].float() / 0.7
    expected = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(gen.token_ids).unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(expected, torch.tensor(gen.logprobs), atol=5e-2 if cpu_bf16 else 1e-4)


def test_same_seed_same_samples(tiny: tuple, observations: list[Observation]) -> None:
    model, tokenizer, _ = tiny
    sampling = SamplingConfig(max_new_tokens=8, seed=5)
    a = [g.text for g in HFPolicy(model, tokenizer, sampling=sampling).generate(observations)]
    b = [g.text for g in HFPolicy(model, tokenizer, sampling=sampling).generate(observations)]
    c = [g.text for g in HFPolicy(model, tokenizer, sampling=SamplingConfig(max_new_tokens=8, seed=6)).generate(observations)]
    assert a == b and a != c


def test_length_limit_reaches_the_env_as_truncation(tiny: tuple, observations: list[Observation]) -> None:
    model, tokenizer, _ = tiny
    obs = observations[1]
    (gen,) = HFPolicy(model, tokenizer, sampling=SamplingConfig(max_new_tokens=3)).generate([obs])
    env = RepairEnv(obs.case)
    env.reset()
    _, record = env.step(gen.text, finish_reason=gen.finish_reason, generated_tokens=gen.generated_tokens)
    if gen.finish_reason == "length":
        assert record.outcome == "truncated"
    row = episode_row(obs.case, env.log, arm="contractrl", policy="hf", seed=0, sample=0)
    assert row["generated_tokens"] == gen.generated_tokens and row["attempts"][0]["raw"] == gen.text


def test_constrained_decoding_emits_schema_shaped_objects(tiny: tuple, observations: list[Observation]) -> None:
    model, tokenizer, _ = tiny
    policy = HFPolicy(model, tokenizer, sampling=SamplingConfig(max_new_tokens=200, do_sample=False))
    gens = policy.generate([Observation(o.case, o.state, 0, "constrained") for o in observations])
    finished = 0
    for obs, gen in zip(observations, gens, strict=True):
        assert gen.text.startswith("{")
        if gen.finish_reason == "stop":
            value = json.loads(gen.text)
            assert isinstance(value, dict)
            allowed = set(obs.case.schema["properties"])
            assert set(value) <= allowed  # the grammar only admits declared properties
            finished += 1
    assert finished >= 1


def test_xgrammar_warnings_reach_the_log_once(
    tiny: tuple, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """xgrammar's C++ compiler warns on fd 2 at every compile; the policy routes it through logging."""
    model, tokenizer, _ = tiny
    policy = HFPolicy(model, tokenizer, sampling=SamplingConfig(max_new_tokens=8, do_sample=False))
    schema = {"type": "object", "properties": {"ref": {"type": "string", "pattern": "^(?!/)[a-q]+$"}}, "required": ["ref"]}
    capfd.readouterr()
    with caplog.at_level(logging.DEBUG, logger="contractrl.rollout.native_log"):
        policy._grammar_processor([schema, {**schema, "title": "compiled again"}])
    assert "(?!/)[a-q]" not in capfd.readouterr().err
    lookahead = [r for r in caplog.records if "(?!/)[a-q]" in r.getMessage()]
    assert [r.levelno for r in lookahead] == [logging.WARNING, logging.DEBUG]
    assert "xgrammar: " in lookahead[0].getMessage()


@pytest.mark.parametrize("attempts", [2, 3])
def test_a_shielded_decision_never_sends_an_answer_known_to_fail(tiny: tuple, attempts: int) -> None:
    """After a rejected attempt the shielded policy commits an answer the contract accepts, a new
    admissible one while attempts remain after it, or ABSTAIN; never the rejected answer again."""
    import dataclasses

    from contractrl.rollout.env import contract_for
    from contractrl.rollout.known_rejected import known_rejected
    from contractrl.rollout.policies import ABSTAIN
    from contractrl.tasks.demonstrations import rejected_attempt

    model, tokenizer, _ = tiny
    for case in [c for c in generate_cases(GenerateConfig(seed=41, n=26)) if c.public.family == "wrong_type"]:
        public = dataclasses.replace(case.public, max_attempts=attempts)
        env = RepairEnv(public)
        env.reset()
        earlier = rejected_attempt(case, "contractrl")
        assert earlier is not None
        state, _ = env.step(earlier)
        assert not env.done and known_rejected(earlier, public, state, "contractrl")
        sampling = SamplingConfig(max_new_tokens=10, do_sample=False, shield_k=2)
        (out,) = HFPolicy(model, tokenizer, sampling=sampling).generate([Observation(public, state, 0)])
        assert out.probes >= 3  # two proposals (or one, twice) and the enumerated candidates, ABSTAIN among them
        if out.text == ABSTAIN:
            continue
        result = contract_for(public).step(state, out.text)
        assert result.accepted_object is not None or (
            state.attempts_left > 1 and not known_rejected(out.text, public, state, "contractrl")
        )
        assert len(out.token_ids) == len(out.logprobs) and all(lp <= 0.0 for lp in out.logprobs)


def test_answer_detection() -> None:
    assert answer_complete('[{"op": "add"}] trailing')
    assert answer_complete('{"a": "}"}')
    assert not answer_complete('[{"op": "add", "value": "]"')
    assert answer_complete("ABSTAIN\n")
    assert not answer_complete("ABST")


def test_rollout_cli_with_an_hf_model(tiny: tuple, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, _, path = tiny
    cases = tmp_path / "cases"
    assert main(["cases", "generate", "--seed", "3", "--n", "13", "--out", str(cases)]) == 0
    argv = ["rollout", "--cases", str(cases), "--policy", f"hf:{path}", "--workers", "0", "--max-new-tokens", "16"]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 0
    rows = read_ledger(tmp_path / "run")
    # shielded and deferring by default: a decision an enumerated candidate settles decodes nothing
    assert len(rows) == 13 and any(r["generated_tokens"] > 0 for r in rows)
    schemas = {c.case_id: c.schema for c in read_public(cases)}
    for row in rows:  # fail closed: whatever an untrained model wrote, only valid objects were dispatched
        if row["accepted"]:
            assert Verifier.build(schemas[row["case_id"]]).verify(row["dispatched"]).accepted


def _trained_adapter(base: Any, tokenizer: Any, out: Path, seed: int) -> Path:
    """A LoRA adapter on ``base`` with non-zero weights (a fresh one merges to the base itself)."""
    from peft import get_peft_model

    model = get_peft_model(base, peft_lora_config(LoraConfig(), base.config.num_hidden_layers))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def test_an_adapter_trained_on_an_adapter_loads_with_both(tiny: tuple, tmp_path: Path) -> None:
    """GRPO from ``RUN/stages/sft`` trains a fresh adapter on the merged SFT policy: loaded anywhere
    else (``contractrl rollout --policy hf:RUN/adapter``), it must bring the SFT adapter with it."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    _, tokenizer, base_path = tiny
    first = _trained_adapter(AutoModelForCausalLM.from_pretrained(base_path), tokenizer, tmp_path / "sft", seed=1)
    sft_policy, _ = load_model(str(first), device="cpu")
    assert sft_policy.name_or_path == str(first.resolve())
    second = _trained_adapter(sft_policy, tokenizer, tmp_path / "grpo", seed=2)
    assert json.loads((second / "adapter_config.json").read_text())["base_model_name_or_path"] == str(first.resolve())

    loaded, _ = load_model(str(second), device="cpu")
    both = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path), first).merge_and_unload()
    both = PeftModel.from_pretrained(both, second).merge_and_unload().eval()
    second_alone = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path), second).merge_and_unload().eval()
    ids = torch.tensor([tokenizer.encode('[{"op": "replace", "path": "/a", "value": 1}]')])
    with torch.no_grad():
        logits = loaded(ids).logits
        assert torch.allclose(logits, both(ids).logits, atol=1e-5)
        assert not torch.allclose(logits, second_alone(ids).logits, atol=1e-3)


def test_a_circular_or_baseless_adapter_is_a_config_error(tiny: tuple, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    _, tokenizer, base_path = tiny
    adapter = _trained_adapter(AutoModelForCausalLM.from_pretrained(base_path), tokenizer, tmp_path / "a", seed=3)
    config_file = adapter / "adapter_config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "base_model_name_or_path": str(adapter.resolve())}))
    with pytest.raises(ConfigError, match="circular"):
        load_model(str(adapter), device="cpu")
    config_file.write_text(json.dumps({**config, "base_model_name_or_path": None}))
    with pytest.raises(ConfigError, match="does not name its base model"):
        load_model(str(adapter), device="cpu")
    config_file.write_text(json.dumps({**config, "base_model_name_or_path": str(tmp_path / "gone")}))
    with pytest.raises(ConfigError, match="cannot load model"):
        load_model(str(adapter), device="cpu")


def test_lora_on_the_top_layers_stops_the_backward_pass_below_them(tiny: tuple) -> None:
    """``model.lora.top_layers`` (the main job adapts the top 15 of 30) is a speed setting because
    autograd never descends below the lowest adapted layer: its input needs no gradient."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    _, tokenizer, base_path = tiny
    base = AutoModelForCausalLM.from_pretrained(base_path)
    depth = base.config.num_hidden_layers
    assert depth >= 2
    model = get_peft_model(base, peft_lora_config(LoraConfig(top_layers=1), depth))
    adapted = {int(name.split(".layers.")[1].split(".")[0]) for name, p in model.named_parameters() if p.requires_grad}
    assert adapted == {depth - 1}
    ids = torch.tensor([tokenizer("a short prompt")["input_ids"]])
    out = model(input_ids=ids, labels=ids, output_hidden_states=True)
    # hidden_states[i] is the input of layer i: below the adapted layer nothing carries a gradient
    assert not any(h.requires_grad for h in out.hidden_states[:depth])
    assert out.hidden_states[depth].requires_grad and out.loss.requires_grad
    out.loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)

    everywhere = get_peft_model(AutoModelForCausalLM.from_pretrained(base_path), peft_lora_config(LoraConfig(), depth))
    hidden = everywhere(input_ids=ids, output_hidden_states=True).hidden_states
    assert not hidden[0].requires_grad and all(h.requires_grad for h in hidden[1:])
