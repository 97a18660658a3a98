"""`benchmarks/twin_margin.py`: a policy's probability of ABSTAIN on each twin of a contrast pair.

The benchmark is run by hand on trained adapters; here its parts are checked on generated cases and
on the tiny preset: the twins' prompts differ in the request alone, the answer's log-probability is
the chain rule over one forward pass per token, and the summary's arithmetic.
"""

from __future__ import annotations

import difflib
import math
from pathlib import Path

import pytest

from contractrl.experiments import twin_margin
from contractrl.tasks.contrast import contrast_case
from contractrl.tasks.generate import GenerateConfig, generate_cases


@pytest.mark.parametrize("form", ["appended", "clause"])
def test_twin_prompts_differ_in_the_request_alone(form: str) -> None:
    cases = generate_cases(GenerateConfig(seed=5, n=26))
    pairs = twin_margin.twin_pairs(cases, form=form)
    assert len(pairs) == sum(c.public.family == "unrepairable" for c in cases) == 2
    for case, twin in pairs:
        a, b = twin_margin.first_prompt(case, None).splitlines(), twin_margin.first_prompt(twin, None).splitlines()
        changed = [line for line in difflib.ndiff(a, b) if line[:1] in "+-"]
        assert changed == [f"- {case.public.request}", f"+ {twin.public.request}"]


def test_stated_first_moves_the_value_and_nothing_else() -> None:
    cases = generate_cases(GenerateConfig(seed=5, n=26))
    for (case, end), (same, start) in zip(twin_margin.twin_pairs(cases), twin_margin.twin_pairs(cases, "start"), strict=True):
        assert same is case and start.public.case_id == end.public.case_id
        stated = end.public.request.removeprefix(case.public.request).strip()
        assert start.public.request == f"{stated} {case.public.request}" != end.public.request
        assert sorted(start.public.request.split()) == sorted(end.public.request.split())
        assert start.offline == end.offline
    with pytest.raises(ValueError, match="one of form, start, end"):
        twin_margin.twin_pairs(cases, "middle")


def test_a_clause_contrast_is_moved_among_the_clauses() -> None:
    """``--form clause --stated start|end``: the same clause first or last among the request's
    clauses; where the form puts it, the place seeded by the case id."""
    cases = generate_cases(GenerateConfig(seed=5, n=26))
    seeded, first, last = (twin_margin.twin_pairs(cases, stated, "clause") for stated in ("form", "start", "end"))
    assert len(seeded) == len(first) == len(last) == 2
    for (case, twin), (_, start), (_, end) in zip(seeded, first, last, strict=True):
        assert twin == contrast_case(case, "clause")
        assert start == contrast_case(case, "clause", index=0) and end == contrast_case(case, "clause", index=-1)
        assert start.offline == end.offline == twin.offline and start.public.request != end.public.request
        assert len(start.public.request) == len(end.public.request)  # the same clause in another place


def test_summary_arithmetic() -> None:
    unrepairable = [math.log(0.8), math.log(0.5), math.log(0.2)]
    contrast = [math.log(0.4), math.log(0.5), math.log(0.4)]
    result = twin_margin.summarise("p", unrepairable, contrast)
    assert result.pairs == 3
    assert result.p_abstain_unrepairable == pytest.approx(0.5)
    assert result.p_abstain_contrast == pytest.approx(13 / 30)
    assert result.log_margin == pytest.approx((math.log(2) + 0 + math.log(0.5)) / 3)
    assert result.ordered == pytest.approx(1 / 3)
    assert result.log_margin_ci_low <= result.log_margin <= result.log_margin_ci_high
    with pytest.raises(ValueError, match="same, non-zero number"):
        twin_margin.summarise("p", unrepairable, contrast[:2])


@pytest.mark.slow
def test_answer_logprob_is_the_chain_rule(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from contractrl.trainer.presets import build_tiny, load_model, tokenizer_corpus

    model, tokenizer = load_model(str(build_tiny(tmp_path, corpus=tokenizer_corpus(n_cases=26))), device="cpu")
    case = next(c for c in generate_cases(GenerateConfig(seed=5, n=26)) if c.public.family == "unrepairable")
    prompt = twin_margin.first_prompt(case, tokenizer)
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    answer = tokenizer("ABSTAIN", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    expected = 0.0
    with torch.no_grad():
        for token in answer:  # one forward pass per answer token: no shared slicing with the code under test
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
            expected += float(torch.log_softmax(logits, dim=-1)[token])
            ids = [*ids, token]
    assert twin_margin.answer_logprob(model, tokenizer, prompt, "ABSTAIN") == pytest.approx(expected, abs=1e-4)
