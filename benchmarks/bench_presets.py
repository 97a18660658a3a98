"""Build, load and prompt one model preset: the cost of a rung of the model-size ladder on this machine.

    python benchmarks/bench_presets.py [--model qwen2.5-coder-0.5b] [--cache runs/models] [--max-new-tokens 48]
        [--no-generate] [--json]

Reports the build time (0 when the preset was already in the cache), the load time, the parameter
count, the resident memory after loading, after one short forward pass (a bf16 load maps the file
and pages weights in on first use) and at its peak, and one greedy reply to the first decision
of a generated case, in the preset's own chat template. Loading a real rung is a benchmark, not a
test: the weights come from the registry on first use. Record the output in a notebook entry.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from collections.abc import Sequence
from pathlib import Path

from contractrl.rollout.env import RepairEnv
from contractrl.rollout.prompts import render_messages, render_prompt
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.trainer.presets import load_model, model_path


def resident_gb() -> float:
    """The process's resident set now (``/proc``), in GB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1e6
    return float("nan")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--cache", default="runs/models")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"))
    parser.add_argument("--no-generate", action="store_true", help="load and measure memory only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    import torch

    start = time.perf_counter()
    path = model_path(args.model, cache_dir=args.cache)
    built = time.perf_counter() - start
    start = time.perf_counter()
    model, tokenizer = load_model(args.model, cache_dir=args.cache, device="cpu", dtype=args.dtype)
    result: dict[str, object] = {
        "model": args.model,
        "path": str(path),
        "build_s": round(built, 1),
        "load_s": round(time.perf_counter() - start, 1),
        "params": sum(p.numel() for p in model.parameters()),
        "dtype": str(next(model.parameters()).dtype),
        "rss_after_load_gb": round(resident_gb(), 2),
    }
    with torch.no_grad():  # a bf16 load maps the file lazily: one forward pages in every layer's weights
        model(**tokenizer("Hello", return_tensors="pt"))
    result["rss_after_forward_gb"] = round(resident_gb(), 2)
    if not args.no_generate:
        case = generate_cases(GenerateConfig(seed=0, n=1))[0]
        messages = render_messages(case.public, RepairEnv(case.public).reset(), "contractrl")
        ids = tokenizer(render_prompt(messages, tokenizer), return_tensors="pt", add_special_tokens=False)
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(**ids, max_new_tokens=args.max_new_tokens, do_sample=False)
        new = out[0, ids["input_ids"].shape[1] :]
        result.update(
            prompt_tokens=int(ids["input_ids"].shape[1]),
            new_tokens=int(new.shape[0]),
            generate_s=round(time.perf_counter() - start, 1),
            reply=tokenizer.decode(new, skip_special_tokens=True),
        )
    result["peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
