"""Tokens of the gold answer per arm: the floor of the generated-token ratio, patch against object.

    python benchmarks/bench_answer_tokens.py [--source builtin|bfcl:DIR|jsonschema:DIR] [--n 130]
        [--seed 0] [--model smollm2] [--json]
    python benchmarks/bench_answer_tokens.py --cases runs/bench_learning/train/cases/eval [--json]

A patch arm that answers every case right on its first attempt generates the gold patch (or
ABSTAIN); a whole-object arm generates the target object. The ratio of their means is therefore the
best generated-token ratio a patch policy can reach against regeneration on a case set: retries,
wrong answers and a regenerator that abstains where it should not all move the measured ratio away
from it. It depends on the tools' object sizes, not on any model, so it says whether a token target
such as the paper's "<= 0.3x" is reachable on a source at all. Counted with a preset's tokenizer,
without special tokens (generation stops once the answer is complete). Record the output in
benchmarks/RESULTS.md. ``--cases`` reads a written case set (both halves), e.g. the held-out cases a
learning benchmark scored, instead of generating one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from typing import Any

from contractrl.tasks.arms import Arm
from contractrl.tasks.cases import ABSTAIN, Case
from contractrl.tasks.demonstrations import gold_answer
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.tasks.offline import read_cases
from contractrl.tasks.sources import source_families
from contractrl.trainer.presets import load_tokenizer, model_path


def line_form(answer: str) -> str:
    """A gold patch written one line per operation (``replace /unit "celsius"``): a shorter surface
    for the same RFC 6902 operations, counted here only to see what it could reach (no policy
    answers in it)."""
    if answer == ABSTAIN:
        return answer
    lines = []
    for op in json.loads(answer):
        parts = [op["op"], op["path"], *([op["from"]] if "from" in op else [])]
        if "value" in op:
            parts.append(json.dumps(op["value"], separators=(",", ":"), ensure_ascii=False))
        lines.append(" ".join(parts))
    return "\n".join(lines)


def answer_tokens(cases: Sequence[Case], count: Callable[[str], int]) -> dict[str, Any]:
    """Mean gold-answer tokens of a patch arm, of the same patch in :func:`line_form` and of a
    whole-object arm, per family and pooled."""
    rows: dict[str, list[tuple[int, int, int]]] = {}
    for case in cases:
        answer = gold_answer(case, Arm.CONTRACTRL.value)
        whole = count(gold_answer(case, Arm.FULL_REGEN.value))
        rows.setdefault(case.public.family, []).append((count(answer), count(line_form(answer)), whole))
    families = {family: rows[family] for family in sorted(rows)}
    families["pooled"] = [row for family_rows in families.values() for row in family_rows]

    def summary(triples: list[tuple[int, int, int]]) -> dict[str, Any]:
        patch = statistics.mean(p for p, _, _ in triples)
        lines = statistics.mean(line for _, line, _ in triples)
        whole = statistics.mean(w for _, _, w in triples)
        return {
            "n": len(triples),
            "patch": round(patch, 1),
            "line_form": round(lines, 1),
            "object": round(whole, 1),
            "ratio": round(patch / whole, 3),
            "line_form_ratio": round(lines / whole, 3),
        }

    return {family: summary(pairs) for family, pairs in families.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default="builtin", help="builtin, bfcl:DIR or jsonschema:DIR")
    parser.add_argument("--cases", help="a written case set to count instead of generating one")
    parser.add_argument("--n", type=int, default=130)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="smollm2", help="a preset or model directory whose tokenizer counts")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    tokenizer = load_tokenizer(model_path(args.model))
    if args.cases:
        cases, origin = read_cases(args.cases), args.cases
    else:
        config = GenerateConfig(seed=args.seed, n=args.n, source=args.source, families=source_families(args.source))
        cases, origin = generate_cases(config), f"{args.source}, seed {args.seed}"

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    result = {"model": args.model, "cases": origin, "families": answer_tokens(cases, count)}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"gold-answer tokens ({args.model} tokenizer, {len(cases)} cases: {origin})")
    print("| family | n | patch | line form | object | patch / object | line form / object |\n|---|---|---|---|---|---|---|")
    for family, row in result["families"].items():
        cells = [row["n"], row["patch"], row["line_form"], row["object"], f"{row['ratio']:.3f}", f"{row['line_form_ratio']:.3f}"]
        print(f"| {family} | " + " | ".join(map(str, cells)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
