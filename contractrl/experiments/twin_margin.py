"""Does a policy's ABSTAIN depend on the request? Its probability on each twin of a contrast pair.

An unrepairable case and its minimal contrast (``tasks/contrast.py``) share the call, the report,
the schema and the budget; only the contrast's request states the withheld value. A policy that
reads the request gives ABSTAIN a higher probability on the unrepairable twin; one that decides
from the report alone gives both twins the same. Greedy outcomes (``contractrl rollout``) and
training-rollout rates (``twin_abstention.py``) show where the decision lands; this shows how far
each policy is from moving it, one forward pass per twin, without sampling.

For each unrepairable case of ``--cases`` that has a contrast, and each ``--policy`` (anything
``contractrl rollout --policy hf:...`` loads: a model directory or a ``contractrl train`` adapter),
it scores the first decision's prompt of both twins (the ContractRL arm, same-information mode)
and gives:

* ``p_abstain_unrepairable`` / ``p_abstain_contrast``: mean probability of the answer ``ABSTAIN``
  (its tokens and EOS) on each side;
* ``log_margin``: mean of log p(ABSTAIN | unrepairable) - log p(ABSTAIN | contrast), with a
  bootstrap 95% interval over pairs; 0 for a policy that ignores the request;
* ``ordered``: the share of pairs where the unrepairable twin's ABSTAIN is the more probable.

    python benchmarks/twin_margin.py --cases runs/exp_c300_noisy/cases/train \\
        --policy runs/exp_c300_noisy/adapter --policy runs/exp_g19/adapter \\
        [--form appended|clause] [--stated start|end] [--json]

``--form`` builds the contrasts as ``experimental.contrast.form`` does in training: ``appended`` (after the
request's last clause) or ``clause`` (one more clause at a seeded place). ``--stated start`` moves
the stated value, word for word, to the start: of the request for ``appended``, of its clauses for
``clause``; ``--stated end`` puts a ``clause`` after the last clause. A policy that reads whether the
value is there scores every place alike; one that learned where contrasts put it
(benchmarks/RESULTS.md, "A larger share of twins") does not.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from contractrl.analysis.stats import paired_bootstrap
from contractrl.errors import ContractRLError
from contractrl.rollout.env import RepairEnv
from contractrl.rollout.prompts import render_messages, render_prompt
from contractrl.tasks.arms import DEFAULT_ARM
from contractrl.tasks.cases import ABSTAIN, Case
from contractrl.tasks.contrast import CONTRAST_FORMS, contrast_case
from contractrl.tasks.offline import read_cases

ARM = DEFAULT_ARM
STATED = ("form", "start", "end")


@dataclass(frozen=True)
class TwinMargin:
    """One policy over one case set's twin pairs."""

    policy: str
    pairs: int
    p_abstain_unrepairable: float
    p_abstain_contrast: float
    log_margin: float
    log_margin_ci_low: float
    log_margin_ci_high: float
    ordered: float


def stated_first(case: Case, twin: Case) -> Case:
    """The contrast with its stated value moved from the end of the request to its start: the same
    words, another place. A policy that reads whether the value is there treats both alike; one
    that learned where contrasts put it does not."""
    stated = twin.public.request.removeprefix(case.public.request).strip()
    assert stated and stated != twin.public.request  # contrast_case appends to the case's request
    return dataclasses.replace(twin, public=dataclasses.replace(twin.public, request=f"{stated} {case.public.request}"))


def twin_pairs(cases: Sequence[Case], stated: str = "form", form: str = "appended") -> list[tuple[Case, Case]]:
    """(unrepairable case, its contrast in ``form``) for every case of the set that has one, in the
    set's order; ``stated`` is where the value stands: where ``form`` puts it, or its ``start`` or
    ``end`` (the end is where ``appended`` puts it)."""
    if stated not in STATED:
        raise ValueError(f"stated must be one of {', '.join(STATED)}, got {stated!r}")
    if form == "clause" and stated != "form":
        index = 0 if stated == "start" else -1
        return [(case, twin) for case in cases if (twin := contrast_case(case, form, index=index)) is not None]
    pairs = [(case, twin) for case in cases if (twin := contrast_case(case, form)) is not None]
    return [(case, stated_first(case, twin)) for case, twin in pairs] if stated == "start" else pairs


def first_prompt(case: Case, tokenizer: Any) -> str:
    return render_prompt(render_messages(case.public, RepairEnv(case.public, ARM).reset(), ARM), tokenizer)


def answer_logprob(model: Any, tokenizer: Any, prompt: str, answer: str) -> float:
    """log p(answer + EOS | prompt) under the model, summed over the answer's tokens."""
    import torch

    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    ids = torch.tensor([prompt_ids + answer_ids], device=model.device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return float(logprobs.gather(1, torch.tensor(answer_ids, device=model.device)[:, None]).sum())


def summarise(policy: str, unrepairable: Sequence[float], contrast: Sequence[float], seed: int = 0) -> TwinMargin:
    """The figures of one policy from its per-pair log p(ABSTAIN) on each twin."""
    if len(unrepairable) != len(contrast) or not unrepairable:
        raise ValueError(
            f"need the same, non-zero number of log-probabilities per side, got {len(unrepairable)} and {len(contrast)}"
        )
    margin = paired_bootstrap(contrast, unrepairable, seed=seed)  # unrepairable - contrast, over pairs
    return TwinMargin(
        policy=policy,
        pairs=margin.n,
        p_abstain_unrepairable=float(np.mean(np.exp(unrepairable))),
        p_abstain_contrast=float(np.mean(np.exp(contrast))),
        log_margin=margin.difference,
        log_margin_ci_low=margin.low,
        log_margin_ci_high=margin.high,
        ordered=float(np.mean(np.asarray(unrepairable) > np.asarray(contrast))),
    )


def measure(policy: str, pairs: Sequence[tuple[Case, Case]]) -> TwinMargin:
    from contractrl.trainer.model_cache import MODELS_DIR
    from contractrl.trainer.presets import load_model

    target = f"hf:{Path(policy).resolve()}" if Path(policy).exists() else policy
    model, tokenizer = load_model(target, cache_dir=MODELS_DIR.resolve())
    model.eval()
    sides: tuple[list[float], list[float]] = ([], [])
    for case, twin in pairs:
        for side, member in zip(sides, (case, twin), strict=True):
            side.append(answer_logprob(model, tokenizer, first_prompt(member, tokenizer), ABSTAIN))
    return summarise(policy, *sides)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", required=True, type=Path, help="a case set directory (public and offline halves)")
    parser.add_argument("--policy", required=True, action="append", help="a model or adapter directory; repeatable")
    parser.add_argument(
        "--form",
        choices=CONTRAST_FORMS,
        default="appended",
        help="how the contrast states the value (experimental.contrast.form)",
    )
    parser.add_argument(
        "--stated",
        choices=STATED,
        default="form",
        help="where the value stands: where --form puts it, or the start or end (of the request for appended, "
        "of its clauses for clause)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    try:
        pairs = twin_pairs(read_cases(args.cases), args.stated, args.form)
        if not pairs:
            raise ContractRLError(f"{args.cases}: no unrepairable built-in case with a contrast")
        results = [measure(policy, pairs) for policy in args.policy]
    except ContractRLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
        return 0
    where = "where the form puts it" if args.stated == "form" else f"at the {args.stated}"
    print(f"{len(pairs)} twin pairs from {args.cases}, {args.form} contrasts, the value stated {where}")
    for r in results:
        print(
            f"{r.policy}: p(ABSTAIN) unrepairable {r.p_abstain_unrepairable:.3f}, contrast {r.p_abstain_contrast:.3f}; "
            f"log margin {r.log_margin:+.3f} [{r.log_margin_ci_low:+.3f}, {r.log_margin_ci_high:+.3f}] "
            f"(x{math.exp(r.log_margin):.2f}); unrepairable twin ahead in {r.ordered:.2f} of pairs"
        )
    return 0
