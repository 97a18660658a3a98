"""Time per GRPO step and peak memory: our trainer's GRPO step against TRL's ``GRPOTrainer``, same setup.

    python benchmarks/bench_grpo_vs_trl.py [--steps 6] [--group-size 4] [--cases-per-step 8] [--rounds 1]
        [--max-attempts 1 [2]] [--lora] [--ours-ray] [--ours-deepspeed] [--threads 1]
        [--out runs/bench_grpo_vs_trl] [--trl-site /work/trl_site] [--json]

Both trainers start from the same weights: the ``tiny`` preset (built locally, nothing downloaded),
after a short shared SFT warm start with our trainer (``--sft-steps``; a freshly initialised model
never ends an answer, so every group would have zero reward variance). Both see the same training
cases (``tune_configs/tiny.yaml``'s case generation), the same cases in each step, the same prompt
token ids, and the same reward: the completion is run through :class:`RepairEnv`, written to a
ledger that is frozen, judged by :class:`Judge`, and scored by :func:`episode_reward`. Generation
(``max_new_tokens``, temperature 1, no top-k/top-p), group size, cases per step, micro-batch size,
one update epoch, clip range (0.2 / 0.28), token-level loss over the whole step, std-scaled group
advantages, no KL (beta 0), AdamW at the same constant learning rate with gradient clipping 1.0,
fp32, and the torch thread count (``--threads``) are the same. Full fine-tuning by default, the same
LoRA on both with ``--lora``. Ours runs in one process (``resources.ray=false``, plain torch AdamW),
as TRL does; ``--ours-ray`` and ``--ours-deepspeed`` run it as ``tiny.yaml`` places it instead.

TRL's trainer samples one completion per prompt and cannot run a multi-attempt repair episode, so
its reward function plays a one-attempt episode; ours runs with ``data.max_attempts=1`` for the
comparison (pass ``--max-attempts 1 2`` to also time ours on two-attempt episodes).

Each trainer runs in its own subprocess, so their peak memory is separate; ``--rounds`` alternates
them to spread the noise of a shared machine. Step 1 of each run is a warmup and is not timed; a
step's time is the wall time between the ends of two consecutive optimizer steps (so it includes
everything the trainer does per step: generation, environment, ledger, judge, update, bookkeeping),
and its CPU time is the process's user + system time over the same interval, which is steadier than
wall time when other work shares the cores. The update (ours: ``grpo_step``; TRL: the step less
``_generate_and_score_completions``) is also timed apart. Memory: the process's peak RSS
(``getrusage``, whole life, imports included), its RSS just before step 1, and its peak RSS sampled
every 20 ms during the steps (with ``--ours-ray``: PSS summed over the driver and its Ray processes).

TRL is not a dependency of the project. Install it apart from the project's environment, e.g.:

    pip install --no-deps --target /work/trl_site trl==1.16.0 datasets==5.2.0 "dill>=0.3.0,<0.4.2" "multiprocess<0.70.20"

(accelerate, pandas, pyarrow, xxhash, psutil come from the project's environment). Record the output
in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import itertools
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TINY_YAML = ROOT / "tune_configs" / "tiny.yaml"
ARM = "contractrl"
TRL_INSTALL = 'pip install --no-deps --target {site} trl==1.16.0 datasets==5.2.0 "dill>=0.3.0,<0.4.2" "multiprocess<0.70.20"'


# --- measurement helpers (used in the child processes) ------------------------------------------


def _mib(n_bytes: float) -> float:
    return round(n_bytes / 2**20, 1)


def peak_rss_mib() -> float:
    """Peak resident set size of this process over its whole life (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


class RssSampler:
    """Peak memory sampled in a thread: this process's RSS, or with ``tree`` the sum of PSS (shared pages
    split between the processes that map them) over it and its descendants (Ray's raylet, GCS and
    actor processes are descendants of the driver that started them)."""

    def __init__(self, tree: bool = False) -> None:
        import psutil

        self.proc = psutil.Process()
        self.tree = tree
        self.interval = 0.25 if tree else 0.02  # reading smaps for PSS is slow
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def current(self) -> int:
        import psutil

        if not self.tree:
            return int(self.proc.memory_info().rss)
        total = 0
        for proc in [self.proc, *self.proc.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                total += proc.memory_full_info().pss
        return int(total)

    def cpu_seconds(self) -> float:
        """CPU time (user + system, all threads) of this process, or of it and its live descendants."""
        import psutil

        procs = [self.proc, *(self.proc.children(recursive=True) if self.tree else [])]
        total = 0.0
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                total += times.user + times.system
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.current())
            self._stop.wait(self.interval)

    def start(self) -> RssSampler:
        self.peak = self.current()
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.current())
        return self.peak


def step_times(ends: list[float]) -> list[float]:
    """Seconds of steps 2..N: the time between the ends of consecutive optimizer steps."""
    return [b - a for a, b in itertools.pairwise(ends)]


class StepClock:
    """Wall and CPU time at the end of every optimizer step, and the load average around the run."""

    def __init__(self, sampler: RssSampler) -> None:
        self.sampler = sampler
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.part: list[float] = []
        self.part_total = 0.0
        self.load = [os.getloadavg()[0]]

    def timed(self, method: Any) -> Any:
        """``method``, adding its wall time to the step's part (one phase of the step, timed apart)."""

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.part_total += time.perf_counter() - start

        return wrapper

    def tick(self) -> int:
        self.wall.append(time.perf_counter())
        self.cpu.append(self.sampler.cpu_seconds())
        self.part.append(self.part_total)
        return len(self.wall)

    def to_dict(self) -> dict[str, Any]:
        return {"ends": self.wall, "cpu_ends": self.cpu, "part_ends": self.part, "loadavg_1min": [*self.load, os.getloadavg()[0]]}


# --- the shared setup --------------------------------------------------------------------------


def _config(spec: dict[str, Any], out: Path, extra: list[str]) -> Any:
    from contractrl.configtree import load_config
    from contractrl.trainer.config import TrainConfig

    return load_config(TrainConfig, TINY_YAML, [f"out={out}", "wandb.mode=disabled", "eval.enabled=false", *extra])


def role_prepare(spec: dict[str, Any]) -> dict[str, Any]:
    """Cases (one set per attempt budget) and the shared warm-start weights."""
    from contractrl.tasks.store import MANIFEST_FILE
    from contractrl.trainer.entry import prepare_cases, train

    out = Path(spec["out"])
    base = _config(spec, out / "unused", [])
    for attempts in sorted(set(spec["max_attempts"])):
        case_root = out / "cases" / f"attempts-{attempts}"
        if not (case_root / "cases" / "train" / MANIFEST_FILE).is_file():
            data = dataclasses.replace(base.data, eval_cases=0, max_attempts=attempts)
            cases, _ = prepare_cases(data, case_root)
            print(f"[prepare] {len(cases)} training cases, max_attempts={attempts}", file=sys.stderr)
    if spec["init_model"]:
        return {"init_model": spec["init_model"]}
    warm = out / f"warm-sft{spec['sft_steps']}"
    model_dir = warm / "model"
    if not (model_dir / "config.json").is_file():
        shutil.rmtree(warm, ignore_errors=True)
        start = time.perf_counter()
        extra = [
            "stages=[sft]",
            f"sft.steps={spec['sft_steps']}",
            "model.lora.enabled=false",
            "resources.ray=false",
            "resources.num_workers=0",
            "deepspeed.enabled=false",
            f"resources.learner_threads={spec['threads']}",
            "checkpoint.every=1000000",
        ]
        result = train(_config(spec, warm, extra), progress=False)
        print(f"[prepare] SFT warm start, {spec['sft_steps']} steps: {time.perf_counter() - start:.0f} s", file=sys.stderr)
        model_dir = Path(result.model_dir)
    return {"init_model": str(model_dir.resolve())}


def _digest(ids: Any) -> str:
    return hashlib.sha256(json.dumps([int(i) for i in ids]).encode()).hexdigest()[:16]


def _step_cases(spec: dict[str, Any], n_cases: int) -> list[list[int]]:
    """The training-case indices of each GRPO step, exactly as our trainer picks them."""
    from contractrl.trainer.loop import batch_indices

    return [batch_indices(spec["seed"], "grpo", step, n_cases, spec["cases_per_step"]) for step in range(spec["steps"])]


# --- ours --------------------------------------------------------------------------------------


def role_ours(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    from contractrl.configtree import to_dict
    from contractrl.evidence.judge import Judge
    from contractrl.rollout.runner import LocalPool
    from contractrl.tasks.offline import read_cases
    from contractrl.trainer.entry import absolute
    from contractrl.trainer.group import LearnerGroup
    from contractrl.trainer.loop import Trainer
    from contractrl.trainer.presets import load_tokenizer

    torch.set_num_threads(spec["threads"])
    attempts = spec["attempts"]
    out = Path(spec["out"]) / spec["name"]
    shutil.rmtree(out, ignore_errors=True)
    case_dir = Path(spec["out"]) / "cases" / f"attempts-{attempts}" / "cases" / "train"
    extra = [
        "stages=[grpo]",
        f"model.name={spec['init_model']}",
        f"model.lora.enabled={str(spec['lora']).lower()}",
        f"data.max_attempts={attempts}",
        f"grpo.steps={spec['steps']}",
        f"grpo.cases_per_step={spec['cases_per_step']}",
        f"grpo.group_size={spec['group_size']}",
        f"grpo.max_new_tokens={spec['max_new_tokens']}",
        f"grpo.micro_batch_size={spec['micro_batch_size']}",
        f"grpo.optim.lr={spec['lr']}",
        "grpo.kl_coef=0.0",
        "grpo.epochs=1",
        "grpo.temperature=1.0",
        "checkpoint.every=1000000",
        f"resources.learner_threads={spec['threads']}",
        f"deepspeed.enabled={str(spec['ours_deepspeed']).lower()}",
    ]
    if not spec["ours_ray"]:
        extra += ["resources.ray=false", "resources.num_workers=0"]
    config = absolute(_config(spec, out, extra))
    out.mkdir(parents=True)
    cases = read_cases(case_dir)
    public = [c.public for c in cases]
    sampler = RssSampler(tree=spec["ours_ray"])
    setup_start = time.perf_counter()
    if spec["ours_ray"]:
        from contractrl.rollout.pool import RayPool, ensure_ray

        ensure_ray()
        pool: Any = RayPool(config.resources.num_workers, num_cpus_per_worker=config.resources.worker_cpus)
    else:
        pool = LocalPool(1)
    group = LearnerGroup(config, use_ray=config.resources.ray)
    clock = StepClock(sampler)
    group.grpo_step = clock.timed(group.grpo_step)  # type: ignore[method-assign]  # the update, timed apart
    first_prompts: dict[str, str] = {}  # case id -> digest of the first turn's prompt token ids, as generated
    generate = group.generate

    def generate_and_record(observations: Any, sampling: Any, arm: str) -> Any:
        out = generate(observations, sampling, arm)
        for obs, gen in zip(observations, out, strict=True):
            if not obs.state.history:
                first_prompts.setdefault(obs.case.case_id, _digest(gen.prompt_ids))
        return out

    group.generate = generate_and_record  # type: ignore[method-assign]
    rows: list[dict[str, Any]] = []
    rss_before: list[int] = []

    def report(row: dict[str, Any]) -> None:
        step = clock.tick()
        rows.append(row)
        print(
            f"[{spec['name']}] step {step}: {row['wall_s']:.2f} s, reward {row['reward_mean']:+.3f}, "
            f"samples {row['samples']}, zero-variance groups {row['zero_variance_groups']}",
            file=sys.stderr,
        )

    trainer = Trainer(
        config,
        train_cases=public,
        eval_cases=[],
        demos=[],
        judge=Judge(cases),
        group=group,
        pool=pool,
        tokenizer=load_tokenizer(spec["init_model"]),
        report=report,
        progress=False,
    )
    # the stage starts (fresh optimizer) inside run(); sample memory from here on
    local = getattr(group, "_local", None)  # in process: count the rank's trainable weights
    trainable = sum(p.numel() for p in local[0].model.parameters() if p.requires_grad) if local else None
    rss_before.append(sampler.current())
    sampler.start()
    setup_s = time.perf_counter() - setup_start
    try:
        trainer.run(to_dict(config))
    finally:
        peak_sampled = sampler.stop()
        if spec["ours_ray"]:
            pool.shutdown()
            group.shutdown()
    step_sets = [sorted({r["case_id"] for r in _ledger_rows(out, i + 1)}) for i in range(spec["steps"])]
    turns = [len(r["attempts"]) for s in range(spec["steps"]) for r in _ledger_rows(out, s + 1)]
    return {
        "name": spec["name"],
        "trainer": "ours",
        "max_attempts": attempts,
        "ray": spec["ours_ray"],
        "deepspeed": spec["ours_deepspeed"],
        "setup_s": round(setup_s, 2),
        **clock.to_dict(),
        "part": "update",
        "rows": [
            {
                k: r.get(k)
                for k in (
                    "wall_s",
                    "reward_mean",
                    "semantic_success",
                    "samples",
                    "zero_variance_groups",
                    "episodes_per_s",
                    "generated_tokens_mean",
                    "updated",
                )
            }
            for r in rows
        ],
        "case_ids_per_step": step_sets,
        "prompt_ids_digest": first_prompts,
        "turns_per_episode_mean": round(statistics.fmean(turns), 3) if turns else None,
        "rss_before_steps_mib": _mib(rss_before[0]),
        "rss_peak_during_steps_mib": _mib(peak_sampled),
        "rss_peak_process_mib": peak_rss_mib(),
        "memory_scope": "PSS summed over the driver and its Ray processes" if spec["ours_ray"] else "RSS of one process",
        "trainable_params": trainable,
    }


def _ledger_rows(out: Path, global_step: int) -> list[dict[str, Any]]:
    from contractrl.rollout.ledger import read_ledger

    return read_ledger(out / "rollouts" / f"step-{global_step:06d}", require_frozen=True)


# --- TRL ---------------------------------------------------------------------------------------


def _import_trl(site: str) -> Any:
    if site and site not in sys.path:
        sys.path.append(site)  # after the project's environment: nothing there is shadowed
    try:
        import trl
    except ImportError as exc:
        raise SystemExit(
            f"trl is not importable from {site!r} ({exc}). Install it apart from the project's environment:\n"
            f"    {TRL_INSTALL.format(site=site or '/work/trl_site')}\n"
            "or pass --trl-site DIR where it is installed."
        ) from exc
    return trl


class _Episodes:
    """TRL's reward function: each completion is a one-attempt repair episode, judged like ours."""

    __name__ = "contractrl_episode_reward"

    def __init__(self, spec: dict[str, Any], cases: list[Any], judge: Any, tokenizer: Any, out: Path) -> None:
        self.spec = spec
        self.cases = cases
        self.judge = judge
        self.tokenizer = tokenizer
        self.out = out
        self.weights = _config(spec, out, []).reward
        self.calls = 0
        self.log: list[dict[str, Any]] = []

    def __call__(self, prompts: list[str], completions: list[str], completion_ids: list[list[int]], **kwargs: Any) -> list[float]:
        from contractrl.rollout.env import RepairEnv, episode_row
        from contractrl.rollout.hf_policy import answer_complete
        from contractrl.rollout.ledger import MANIFEST, LedgerWriter
        from contractrl.trainer.reward import episode_reward

        start = time.perf_counter()
        self.calls += 1
        eos = self.tokenizer.eos_token_id
        seen: dict[int, int] = {}
        rows = []
        unfinished = 0
        for text, ids, index, prompt_tokens in zip(
            completions, completion_ids, kwargs["case_index"], kwargs["prompt_tokens"], strict=True
        ):
            case = self.cases[index].public
            sample = seen.get(index, 0)
            seen[index] = sample + 1
            text = text.strip()
            ended = (bool(ids) and ids[-1] == eos) or answer_complete(text)
            env = RepairEnv(case, ARM)
            env.reset()
            env.step(text, finish_reason="stop" if ended else "length", generated_tokens=len(ids), prompt_tokens=prompt_tokens)
            unfinished += not env.done
            rows.append(episode_row(case, env.log, arm=ARM, policy="trl", seed=self.spec["seed"], sample=sample))
        run_dir = self.out / "rollouts" / f"step-{self.calls:06d}"
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        manifest = {"kind": "contractrl.rollout", "seed": self.spec["seed"], "arm": ARM, "stage": "grpo", "trainer": "trl"}
        (run_dir / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        writer = LedgerWriter(run_dir)
        for row in rows:
            writer.append(row)
        writer.freeze()
        scored = self.judge.score_run(run_dir)
        rewards = [episode_reward(row, verdict.success, self.weights) for row, verdict in scored]
        values = [r.reward for r in rewards]
        g = self.spec["group_size"]
        zero_var = sum(1 for i in range(0, len(values), g) if max(values[i : i + g]) - min(values[i : i + g]) <= 1e-9)
        self.log.append(
            {
                "case_ids": sorted(self.cases[i].public.case_id for i in seen),
                "episodes": len(rows),
                "unfinished": unfinished,
                "reward_mean": statistics.fmean(values),
                "semantic_success": statistics.fmean(r.success for r in rewards),
                "zero_variance_groups": zero_var,
                "generated_tokens_mean": statistics.fmean(len(i) for i in completion_ids),
                "reward_fn_s": time.perf_counter() - start,
            }
        )
        return values


def role_trl(spec: dict[str, Any]) -> dict[str, Any]:
    trl = _import_trl(spec["trl_site"])
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback

    from contractrl.evidence.judge import Judge
    from contractrl.rollout.env import RepairEnv
    from contractrl.rollout.prompts import render_messages, render_prompt
    from contractrl.tasks.offline import read_cases
    from contractrl.trainer.presets import load_model

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(spec["seed"])
    out = Path(spec["out"]) / spec["name"]
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cases = read_cases(Path(spec["out"]) / "cases" / "attempts-1" / "cases" / "train")
    sampler = RssSampler()
    setup_start = time.perf_counter()
    model, tokenizer = load_model(spec["init_model"], device="cpu", dtype="float32")

    # one row per (step, case), in the order our trainer visits them; TRL reads the rows in order
    order = [i for step in _step_cases(spec, len(cases)) for i in step]
    prompts: dict[int, str] = {}
    for index in set(order):
        case = cases[index].public
        prompts[index] = render_prompt(render_messages(case, RepairEnv(case, ARM).reset(), ARM), tokenizer)
    # tokenized as GRPOTrainer tokenizes a plain-text prompt (``processing_class(text=prompts)``)
    prompt_ids = {i: tokenizer(text=[p])["input_ids"][0] for i, p in prompts.items()}
    dataset = Dataset.from_list([{"prompt": prompts[i], "case_index": i, "prompt_tokens": len(prompt_ids[i])} for i in order])

    episodes = spec["cases_per_step"] * spec["group_size"]
    micro = spec["micro_batch_size"]
    args = trl.GRPOConfig(
        output_dir=str(out / "trainer"),
        max_steps=spec["steps"],
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=episodes // micro,
        num_generations=spec["group_size"],
        generation_batch_size=episodes,
        num_iterations=1,
        max_completion_length=spec["max_new_tokens"],
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        scale_rewards="group",
        shuffle_dataset=False,
        learning_rate=spec["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        optim="adamw_torch",
        bf16=False,
        fp16=False,
        use_cpu=True,
        gradient_checkpointing=False,
        logging_steps=1_000_000,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=spec["seed"],
        log_completions=False,
    )
    peft_config = None
    if spec["lora"]:
        from contractrl.trainer.learner import peft_lora_config

        peft_config = peft_lora_config(_config(spec, out, []).model.lora)
    reward = _Episodes(spec, cases, Judge(cases), tokenizer, out)
    clock = StepClock(sampler)

    class Timer(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            step = clock.tick()
            last = reward.log[-1] if reward.log else {}
            print(
                f"[{spec['name']}] step {step}: reward {last.get('reward_mean', float('nan')):+.3f}, "
                f"zero-variance groups {last.get('zero_variance_groups')}",
                file=sys.stderr,
            )

    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[Timer()],
    )
    # generation, reward (environment, ledger, judge) and advantages, timed apart from the update
    trainer._generate_and_score_completions = clock.timed(trainer._generate_and_score_completions)  # type: ignore[method-assign]
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    setup_s = time.perf_counter() - setup_start
    rss_before = sampler.current()
    sampler.start()
    try:
        trainer.train()
    finally:
        peak_sampled = sampler.stop()
    return {
        "name": spec["name"],
        "trainer": "trl",
        "trl_version": trl.__version__,
        "max_attempts": 1,
        "setup_s": round(setup_s, 2),
        **clock.to_dict(),
        "part": "rollout",
        "rows": reward.log,
        "case_ids_per_step": [r["case_ids"] for r in reward.log],
        "prompt_ids_digest": {cases[i].public.case_id: _digest(ids) for i, ids in prompt_ids.items()},
        "turns_per_episode_mean": 1.0,
        "rss_before_steps_mib": _mib(rss_before),
        "rss_peak_during_steps_mib": _mib(peak_sampled),
        "rss_peak_process_mib": peak_rss_mib(),
        "memory_scope": "RSS of one process",
        "trainable_params": trainable,
        "activation_checkpointing": bool(getattr(trainer.model, "is_activation_checkpointing", False)),
        "prompt_tokens_mean": round(statistics.fmean(len(prompt_ids[i]) for i in order), 1),
    }


# --- the driver --------------------------------------------------------------------------------


def _child(role: str, spec: dict[str, Any], work: Path) -> dict[str, Any]:
    name = spec.get("name", role)
    spec_path, result_path = work / f"{name}.spec.json", work / f"{name}.result.json"
    spec_path.write_text(json.dumps(spec, indent=2))
    result_path.unlink(missing_ok=True)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": str(spec["threads"])}
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--role",
        role,
        "--spec",
        str(spec_path),
        "--result",
        str(result_path),
    ]
    subprocess.run(command, check=True, env=env, cwd=ROOT)
    return json.loads(result_path.read_text())


def _label(result: dict[str, Any]) -> str:
    if result["trainer"] == "trl":
        return f"TRL {result['trl_version']} GRPOTrainer"
    parts = [f"ours, max_attempts={result['max_attempts']}"]
    if result["ray"]:
        parts.append("Ray")
    if result["deepspeed"]:
        parts.append("DeepSpeed ZeRO-0")
    return ", ".join(parts)


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def aggregate(runs: list[dict[str, Any]], episodes: int) -> dict[str, Any]:
    """One trainer's figures over its rounds: timed steps pooled, memory at its worst round."""
    wall = [t for r in runs for t in step_times(r["ends"])]
    cpu = [t for r in runs for t in step_times(r["cpu_ends"])]
    part = [t for r in runs for t in step_times(r["part_ends"])]
    # ours times its update, TRL its rollout (generation + reward + advantages); the rest of the step is the other
    update = part if runs[0]["part"] == "update" else [w - p for w, p in zip(wall, part, strict=True)]
    timed_rows = [row for r in runs for row in r["rows"][1:]]
    mean = _mean(wall)
    return {
        "label": _label(runs[0]),
        "trainer": runs[0]["trainer"],
        "max_attempts": runs[0]["max_attempts"],
        "rounds": len(runs),
        "steps_timed": len(wall),
        "step_s": [round(t, 3) for t in wall],
        "mean_s": round(mean, 3),
        "median_s": round(statistics.median(wall), 3),
        "min_s": round(min(wall), 3),
        "round_mean_s": [round(_mean(step_times(r["ends"])), 3) for r in runs],
        "cpu_mean_s": round(_mean(cpu), 3),
        "update_mean_s": round(_mean(update), 3),
        "rollout_and_rest_mean_s": round(mean - _mean(update), 3),
        "cpu_median_s": round(statistics.median(cpu), 3),
        "episodes_per_s": round(episodes / mean, 2),
        "rss_before_steps_mib": max(r["rss_before_steps_mib"] for r in runs),
        "rss_peak_during_steps_mib": max(r["rss_peak_during_steps_mib"] for r in runs),
        "rss_peak_process_mib": max(r["rss_peak_process_mib"] for r in runs),
        "memory_scope": runs[0]["memory_scope"],
        "trainable_params": runs[0]["trainable_params"],
        "reward_mean": round(_mean([x["reward_mean"] for x in timed_rows]), 4),
        "semantic_success": round(_mean([x["semantic_success"] for x in timed_rows]), 4),
        "zero_variance_groups_per_step": round(_mean([x["zero_variance_groups"] for x in timed_rows]), 2),
        "generated_tokens_mean": round(_mean([x["generated_tokens_mean"] for x in timed_rows]), 1),
        "turns_per_episode_mean": runs[0]["turns_per_episode_mean"],
        "loadavg_1min": [r["loadavg_1min"] for r in runs],
        "setup_s": [r["setup_s"] for r in runs],
    }


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "| trainer | steps timed | mean s/step | median s/step | of which update | CPU s/step | episodes/s "
        "| RSS before steps | peak RSS, steps | peak RSS, process | reward mean | zero-var groups/step |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["summary"]:
        lines.append(
            f"| {r['label']} | {r['steps_timed']} | {r['mean_s']:.2f} | {r['median_s']:.2f} | {r['update_mean_s']:.2f} | "
            f"{r['cpu_mean_s']:.2f} | "
            f"{r['episodes_per_s']:.1f} | {r['rss_before_steps_mib']:.0f} MiB | {r['rss_peak_during_steps_mib']:.0f} MiB | "
            f"{r['rss_peak_process_mib']:.0f} MiB | {r['reward_mean']:+.3f} | {r['zero_variance_groups_per_step']:.1f} |"
        )
    lines.append("")
    for key, value in report["ratios"].items():
        verdict = f" (target ours <= 0.8x TRL: {'met' if value <= 0.8 else 'not met'})" if "wall" in key else ""
        lines.append(f"- {key}: **{value:.2f}x**{verdict}")
    lines.append("")
    lines.extend(f"- {c}" for c in report["caveats"])
    return "\n".join(lines) + "\n"


CAVEATS = [
    "TRL's GRPOTrainer samples one completion per prompt and cannot run multi-attempt repair episodes: its reward "
    "function plays a one-attempt episode; ours is compared at data.max_attempts=1.",
    "Ours drops groups with zero reward variance before the update (no forward/backward for them); TRL still "
    "runs its loss on every completion (their advantages are 0).",
    "Ours stops sampling a sequence once it holds a whole JSON answer (a stopping criterion that decodes the batch "
    "every token) and generates in batches of grpo.generation_batch_size (16) sorted by prompt length; TRL's "
    "transformers path stops on EOS or the length limit only and generates the whole step's batch at once.",
    "Ours reuses the log-probs recorded at sampling time as the old policy; TRL (one iteration, no vLLM) uses the "
    "detached current log-probs: neither does an extra forward pass.",
    "Sampling is random on both sides with different generators, so completions (and their lengths) differ.",
    "Where TRL's update time goes: TRL 1.16 computes log-probs with a fused LM-head function that, off Triton devices "
    "(this CPU), projects every position of prompt + completion onto the vocabulary; ours asks the model for the "
    "completion positions only (logits_to_keep). With prompts of several hundred tokens and a 2,048-token vocabulary, "
    "that projection is over half of TRL's update in a cProfile of its step here. Ours also sorts samples by length into "
    "micro-batches (less padding); TRL shuffles them and pads prompt and completion separately.",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps per trainer and round; step 1 is not timed")
    parser.add_argument("--group-size", type=int, default=4, help="episodes per case (TRL: num_generations)")
    parser.add_argument("--cases-per-step", type=int, default=8)
    parser.add_argument("--micro-batch-size", type=int, default=8, help="ours: grpo.micro_batch_size; TRL: per-device batch")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--max-attempts", type=int, nargs="+", default=[1], help="ours' episode budgets (TRL: always 1)")
    parser.add_argument("--lora", action="store_true", help="the config's LoRA on both (default: full fine-tuning)")
    parser.add_argument("--ours-ray", action="store_true", help="ours on Ray actors as tiny.yaml places them")
    parser.add_argument("--ours-deepspeed", action="store_true", help="ours with the DeepSpeed ZeRO-0 engine of tiny.yaml")
    parser.add_argument("--only", choices=("ours", "trl"), help="run one side only")
    parser.add_argument("--rounds", type=int, default=1, help="alternate ours and TRL this many times (shared-machine noise)")
    parser.add_argument("--sft-steps", type=int, default=60, help="shared SFT warm start (cached under --out)")
    parser.add_argument("--init-model", help="start both from this model directory instead of the warm start")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads per trainer process (1: two OpenMP threads stall badly when a 2-core machine is shared)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/bench_grpo_vs_trl")
    parser.add_argument("--trl-site", default="/work/trl_site", help="directory trl was installed into with pip --target")
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    parser.add_argument("--role", choices=("prepare", "ours", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.role:
        spec = json.loads(Path(args.spec).read_text())
        result = {"prepare": role_prepare, "ours": role_ours, "trl": role_trl}[args.role](spec)
        Path(args.result).write_text(json.dumps(result, indent=2))
        return 0

    episodes = args.cases_per_step * args.group_size
    if args.group_size < 2 or episodes % args.micro_batch_size:
        parser.error("--group-size must be >= 2 and cases-per-step x group-size a multiple of --micro-batch-size")
    if args.steps < 2 or args.rounds < 1:
        parser.error("--steps must be >= 2 (step 1 is not timed) and --rounds >= 1")
    if args.only != "ours":
        # fail before any work when TRL is missing
        site = args.trl_site
        probe = subprocess.run(
            [sys.executable, "-c", f"import sys; sys.path.append({site!r}); import trl; print(trl.__version__)"],
            capture_output=True,
            text=True,
        )
        if probe.returncode != 0:
            last = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else ""
            print(
                f"trl is not importable from --trl-site {site} ({last}).\n"
                f"Install it apart from the project's environment:\n    {TRL_INSTALL.format(site=site)}",
                file=sys.stderr,
            )
            return 2
    out = Path(args.out).resolve()
    work = out / "specs"
    work.mkdir(parents=True, exist_ok=True)
    spec: dict[str, Any] = {
        "out": str(out),
        "steps": args.steps,
        "group_size": args.group_size,
        "cases_per_step": args.cases_per_step,
        "micro_batch_size": args.micro_batch_size,
        "max_new_tokens": args.max_new_tokens,
        "lr": args.lr,
        "max_attempts": sorted({1, *args.max_attempts}),
        "lora": args.lora,
        "ours_ray": args.ours_ray,
        "ours_deepspeed": args.ours_deepspeed,
        "sft_steps": args.sft_steps,
        "init_model": str(Path(args.init_model).resolve()) if args.init_model else None,
        "threads": args.threads,
        "seed": args.seed,
        "trl_site": args.trl_site,
    }
    start = time.perf_counter()
    spec.update(_child("prepare", {**spec, "name": "prepare"}, work))
    runs: dict[str, list[dict[str, Any]]] = {}
    for round_no in range(1, args.rounds + 1):
        if args.only != "trl":
            for attempts in args.max_attempts:
                name = f"ours-a{attempts}" + ("-ray" if args.ours_ray else "") + ("-ds" if args.ours_deepspeed else "")
                result = _child("ours", {**spec, "name": f"{name}-r{round_no}", "attempts": attempts}, work)
                runs.setdefault(name, []).append(result)
        if args.only != "ours":
            runs.setdefault("trl", []).append(_child("trl", {**spec, "name": f"trl-r{round_no}"}, work))
    summaries = [aggregate(r, episodes) for r in runs.values()]

    trl_summary = next((r for r in summaries if r["trainer"] == "trl"), None)
    ratios = {}
    if trl_summary is not None:
        for r in summaries:
            if r["trainer"] == "ours":
                ratios[f"{r['label']} / TRL, mean wall s per step"] = r["mean_s"] / trl_summary["mean_s"]
                ratios[f"{r['label']} / TRL, median wall s per step"] = r["median_s"] / trl_summary["median_s"]
                ratios[f"{r['label']} / TRL, mean CPU s per step"] = r["cpu_mean_s"] / trl_summary["cpu_mean_s"]
                ratios[f"{r['label']} / TRL, peak RSS during steps"] = (
                    r["rss_peak_during_steps_mib"] / trl_summary["rss_peak_during_steps_mib"]
                )
    same_cases = same_prompts = None
    ours_one = next((runs[k] for k in runs if k.startswith("ours-a1")), None)
    if ours_one is not None and "trl" in runs:
        same_cases = all(o["case_ids_per_step"] == t["case_ids_per_step"] for o in ours_one for t in runs["trl"])
        # the first-turn prompt token ids ours generated from, against the ids TRL generated from
        same_prompts = all(
            o["prompt_ids_digest"] == t["prompt_ids_digest"] and len(t["prompt_ids_digest"]) > 0
            for o in ours_one
            for t in runs["trl"]
        )
    caveats = list(CAVEATS)
    if args.ours_ray:
        caveats.append(
            "Ours on Ray: its memory is the PSS (shared pages split between processes) summed over the driver and "
            "the Ray processes it started, sampled every 0.25 s, and its CPU time is summed over them too; its "
            "'peak RSS, process' column is the driver alone."
        )
    trl_version = next((r[0].get("trl_version") for r in runs.values() if r[0]["trainer"] == "trl"), None)
    report = {
        "benchmark": "bench_grpo_vs_trl",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, python {platform.python_version()}",
        "command": " ".join(["python", "benchmarks/bench_grpo_vs_trl.py", *(argv if argv is not None else sys.argv[1:])]),
        "trl_version": trl_version,
        "settings": {k: v for k, v in spec.items() if k != "out"},
        "episodes_per_step": episodes,
        "same_cases_per_step": same_cases,
        "same_prompt_ids": same_prompts,
        "wall_s": round(time.perf_counter() - start, 1),
        "summary": summaries,
        "ratios": ratios,
        "caveats": caveats,
        "runs": runs,
    }
    (out / "result.json").write_text(json.dumps(report, indent=2))
    header = (
        f"GRPO step, {args.cases_per_step} cases x {args.group_size} episodes, {args.steps} steps x {args.rounds} round(s) "
        f"(step 1 of each untimed), max_new_tokens {args.max_new_tokens}, {'LoRA' if args.lora else 'full fine-tuning'}, "
        f"{args.threads} torch thread(s); same cases per step: {same_cases}; same prompt token ids: {report['same_prompt_ids']}"
    )
    table = header + "\n\n" + markdown(report)
    (out / "result.md").write_text(table)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(table)
        print(f"written: {out / 'result.json'}, {out / 'result.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
