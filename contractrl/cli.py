"""The ``contractrl`` command: one entry point, one sub-command per job.

Exit statuses are part of the contract: 0 accepted / success, 1 rejected, 2 usage or input error,
130 interrupted (Ctrl-C), with one line that says how to continue.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import json
import os
import sys
import typing
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from . import __version__
from .analysis.options import ReportOptions
from .errors import ConfigError, ContractRLError
from .experiments.options import STUDIES, StudyOptions
from .gate.options import ServeOptions
from .io import read_bytes, read_json_file
from .rollout.options import PolicyOptions, RolloutOptions, require
from .rollout.prompts import FEEDBACK, MODES
from .tasks.arms import ARMS
from .validators import Budgets, RepairContract, Verifier, VerifierReport, load_contract
from .validators.contracts import EMPTY_CONTRACT
from .validators.patch import OP_KINDS
from .validators.schema import BACKENDS

T = TypeVar("T")
EXIT_OK, EXIT_REJECTED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
INTERRUPTED_HINT = {
    "run": "interrupted; run the same command again to resume (finished steps are kept)",
    "train": "interrupted; run the same command again with resume=true to continue from the last checkpoint",
    "train-selector": "interrupted; run the same command again with resume=true to continue from the last checkpoint",
    "tune": "interrupted; continue the sweep with: contractrl tune --resume <out>/<name>",
}


def _progress_bar(enabled: bool, **kwargs: Any) -> Any:
    """A live bar on a terminal; in a log (``ray job submit``, a redirected run) a line at most every
    30 s rather than silence, so a long rollout still says how far it is."""
    from tqdm import tqdm

    return tqdm(disable=not enabled, file=sys.stderr, mininterval=0.1 if sys.stderr.isatty() else 30.0, **kwargs)


def _library_output_to_stderr() -> contextlib.AbstractContextManager[Any]:
    """stdout carries a command's JSON result only: what libraries print while loading models or
    training (DeepSpeed's accelerator notice, W&B, Ray) goes to stderr."""
    return contextlib.redirect_stdout(sys.stderr)


def _emit(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def _verifier(args: argparse.Namespace) -> Verifier:
    schema = read_json_file(args.schema, "schema")
    contract = load_contract(read_json_file(args.contract, "contract")) if args.contract else EMPTY_CONTRACT
    return Verifier.build(schema, contract, backend=args.backend, lenient=args.lenient)


def cmd_check(args: argparse.Namespace) -> int:
    verifier = _verifier(args)
    report, _ = verifier.verify_text(read_bytes(args.call, "call"))
    _emit(report.to_dict())
    return EXIT_OK if report.accepted else EXIT_REJECTED


def _allowed_ops(text: str) -> frozenset[str]:
    ops = frozenset(o.strip() for o in text.split(",") if o.strip())
    unknown = ops - set(OP_KINDS)
    if unknown or not ops:
        raise argparse.ArgumentTypeError(f"--allow-ops takes a comma list of {','.join(OP_KINDS)}")
    return ops


def cmd_patch(args: argparse.Namespace) -> int:
    verifier = _verifier(args)
    call = read_json_file(args.call, "call")
    patch_text = read_bytes(args.patch, "patch")
    contract = RepairContract(verifier, Budgets(max_attempts=1, max_ops=args.max_ops, allowed_ops=args.allow_ops), args.immutable)
    # a call that already validates is still patched: the user asked for this edit to be checked
    state = replace(contract.initial_state(call), done=False, outcome=None)
    result = contract.step(state, patch_text)
    if result.patched is not None:
        report = result.state.report
    else:
        rec = result.record
        report = VerifierReport.single(result.outcome, rec.message, pointer=rec.pointer)
    _emit(
        {
            "outcome": result.outcome.value,
            "object": result.patched,
            "report": report.to_dict(),
            "collateral": list(result.collateral),
        }
    )
    return EXIT_OK if result.accepted_object is not None else EXIT_REJECTED


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import format_rows, initial_report_json, run_demo

    print("ContractRL mechanism demo: scripted actions through the real validator (not a learned policy).\n")
    print("Verifier report of the corrupted call:")
    print(initial_report_json())
    rows = run_demo()
    print()
    print(format_rows(rows))
    unsafe = [r for r in rows if r.dispatched and r.outcome != "accepted"]
    print(f"\n{len(rows)} attempts, {sum(r.dispatched for r in rows)} dispatched, {len(unsafe)} unsafe dispatches.")
    return EXIT_OK if not unsafe else EXIT_REJECTED


def _csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def cmd_cases_generate(args: argparse.Namespace) -> int:

    from .tasks.audit import DEFAULT_DISJOINT, OverlapIndex, audit, check_units, format_audit
    from .tasks.generate import GenerateConfig, generate_cases
    from .tasks.offline import read_cases
    from .tasks.sources import source_families
    from .tasks.store import write_case_set

    config = GenerateConfig(
        seed=args.seed,
        n=args.n,
        families=args.families or source_families(args.source),
        source=args.source,
        request_style=args.request_style,
        **({"tool_families": args.tool_families} if args.tool_families else {}),
    )
    disjoint = check_units(args.disjoint or DEFAULT_DISJOINT)
    excluded = [case for directory in args.exclude or [] for case in read_cases(directory)]
    index = OverlapIndex(excluded, disjoint) if excluded else None
    progress = _progress_bar(True, iterable=range(config.n), desc="cases", unit="case")
    cases = generate_cases(config, reject=index.collides if index else None, progress=progress)
    extra: dict[str, Any] = {}
    if excluded:
        rows = audit(excluded, cases, disjoint)
        print(format_audit(rows), file=sys.stderr)
        if not all(r.ok for r in rows):
            print("contractrl cases generate: refusing to write a split that overlaps on a disjoint unit", file=sys.stderr)
            return EXIT_REJECTED
        extra["split"] = {
            # one set is written as before (a string), so earlier split manifests stay byte-identical
            "disjoint_from": args.exclude[0] if len(args.exclude) == 1 else list(args.exclude),
            "disjoint_units": list(disjoint),
            "audit": [r.to_dict() for r in rows],
        }
    manifest = write_case_set(cases, args.out, config.to_dict(), extra)
    summary = {"out": str(args.out), "cases": manifest["cases"], "counts": manifest["counts"], "files": manifest["files"]}
    if "source_calls" in manifest:  # what the data gave: calls used, and those skipped with why
        summary["source_calls"] = manifest["source_calls"]
    _emit(summary)
    return EXIT_OK


def cmd_cases_audit(args: argparse.Namespace) -> int:
    from .tasks.audit import DEFAULT_DISJOINT, audit, check_units, format_audit
    from .tasks.offline import read_cases

    disjoint = check_units(args.disjoint or DEFAULT_DISJOINT)
    rows = audit(read_cases(args.train), read_cases(args.heldout), disjoint)
    if args.json:
        _emit([r.to_dict() for r in rows])
    else:
        print(format_audit(rows))
    return EXIT_OK if all(r.ok for r in rows) else EXIT_REJECTED


def cmd_screen(args: argparse.Namespace) -> int:
    from .tasks.screen import run_screen

    result = run_screen(args.bfcl, seed=args.seed)
    if args.json:
        _emit(result)
    else:
        for key, value in result.items():
            if key == "skipped":
                for reason, ids in value.items():
                    print(f"skipped ({reason}): {len(ids)}: {', '.join(ids)}")
            elif key == "failures":
                print(f"failures: {len(value)}")
                for failure in value:
                    print(f"  {failure['case']} {failure['function']} ({failure['family']}): {failure['reason']}")
            else:
                print(f"{key}: {value}")
    ok = result["schema_valid"] == result["object_match"] == result["cases"] and result["unsafe_dispatches"] == 0
    return EXIT_OK if ok else EXIT_REJECTED


def _policy_factory(options: PolicyOptions, cases_dir: str) -> Callable[[str], Any]:
    """feedback variant -> policy. Scripted policies read no prompt, so the variant does not change them."""
    spec, arm = options.policy, options.arm
    from .rollout.policies import HeuristicPolicy

    if spec == "heuristic":
        heuristic = HeuristicPolicy()
        return lambda feedback: heuristic
    if spec == "replay":
        from .experiments.studies import replay_policy

        replay = replay_policy(cases_dir, arm)
        return lambda feedback: replay
    if spec.startswith("hf:"):
        from .gate.policy import hf_model_target
        from .rollout.hf_policy import HFPolicy, SamplingConfig
        from .rollout.policy_pool import ActorPolicy, PolicySpec
        from .trainer.model_cache import MODELS_DIR
        from .trainer.presets import load_model

        # absolute paths, so an actor whose working directory differs finds (or builds) the same files
        target, preset = hf_model_target(spec)
        load = functools.partial(load_model, target, cache_dir=MODELS_DIR.resolve())
        sampling = SamplingConfig.from_options(options)
        mode = options.mode
        if options.policy_actors > 0:  # the model loads inside each actor, once
            return _PolicyPools(
                lambda feedback: ActorPolicy(
                    PolicySpec(load, mode, feedback, sampling, name=preset),
                    options.policy_actors,
                    num_gpus=options.gpus_per_actor,
                )
            )
        if options.threads:
            import torch

            torch.set_num_threads(options.threads)  # process-wide; a policy actor takes its CPUs
        model, tokenizer = load()
        return lambda feedback: HFPolicy(model, tokenizer, mode=mode, feedback=feedback, sampling=sampling, name=preset)
    if spec.startswith("selector:"):
        from .selector.policy import SelectorPolicy

        selector = SelectorPolicy.load(spec.removeprefix("selector:"), arm=arm)
        return lambda feedback: selector
    raise ConfigError(f"unknown policy {spec!r}; use replay, heuristic, hf:<name-or-path> or selector:<dir>")


class _PolicyPools:
    """feedback variant -> a pool of policy actors, started once per variant and shut down at the end."""

    def __init__(self, make: Callable[[str], Any]) -> None:
        self.make = make
        self.made: dict[str, Any] = {}

    def __call__(self, feedback: str) -> Any:
        if feedback not in self.made:
            self.made[feedback] = self.make(feedback)
        return self.made[feedback]

    def shutdown(self) -> None:
        for policy in self.made.values():
            policy.shutdown()


def _shutdown_policies(factory: Any) -> None:
    if isinstance(factory, _PolicyPools):
        factory.shutdown()


def _hf_policy_flags(parser: argparse.ArgumentParser, cls: type[PolicyOptions]) -> None:
    """The flags of an ``hf:`` policy's decoding, shared by rollout and study."""
    _option_flag(parser, cls, "max_new_tokens")
    _option_flag(parser, cls, "temperature")
    _option_flag(parser, cls, "shield_k")
    _option_flag(
        parser,
        cls,
        "enumerate",
        "--no-enumerate",
        action="store_const",
        const=False,
        help="hf policies, shielded: weigh only the model's own proposals, not the enumerated candidates",
    )
    _option_flag(parser, cls, "policy_actors")
    _option_flag(parser, cls, "gpus_per_actor")
    _option_flag(parser, cls, "threads")


def cmd_rollout(args: argparse.Namespace) -> int:
    options = _options(RolloutOptions, args)
    if options is None:
        return EXIT_OK
    require(options, "cases", "policy", "out")
    _check_labels(options.labels)

    from .rollout.pool import RayPool
    from .rollout.run import write_run
    from .rollout.runner import EpisodeRunner, LocalPool
    from .tasks.store import read_manifest, read_public

    cases = read_public(options.cases)
    with _library_output_to_stderr():
        factory = _policy_factory(options, options.cases)
        policy = factory(options.feedback)
        ray_pool = RayPool(options.workers) if options.workers > 0 else None
    runner = EpisodeRunner(policy, ray_pool or LocalPool(1), arm=options.arm, policy_name=options.policy_name)
    config = {
        "cases_files_sha256": read_manifest(options.cases)["files"],
        "policy": options.policy,
        "arm": options.arm,
        "group": options.group,
        "seed": options.seed,
        "mode": options.mode,
        "feedback": options.feedback,
        **({"policy_name": options.policy_name} if options.policy_name else {}),  # unset: the manifest of before
    }
    # a model's runs carry its name (as a study's do), so a report over several says which is which
    model = {"model": options.model} if options.model else {}
    labels = {"mode": options.mode, "feedback": options.feedback, **model, **options.labels}
    episodes = len(cases) * options.group
    progress = _progress_bar(options.progress, total=episodes, desc="episodes", unit="ep")
    try:
        with _library_output_to_stderr():
            digest = write_run(
                options.out, config, runner, cases, group=options.group, seed=options.seed, progress=progress, labels=labels
            )
    finally:
        progress.close()
        if ray_pool is not None:
            ray_pool.shutdown()
        _shutdown_policies(factory)
    _emit({"run_dir": str(options.out), "ledger_sha256": digest, "episodes": episodes})
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    """The gate behind an HTTP JSON API on Ray Serve until Ctrl-C or SIGTERM; then each replica
    freezes its ledger shard and the shards are printed (docs/gate.md, Serving)."""
    options = _options(ServeOptions, args)
    if options is None:
        return EXIT_OK
    from .gate.serve import serve_until_stopped

    def ready(info: dict[str, Any]) -> None:
        print(f"contractrl serve: {info['repair']} ({info['policy']}); Ctrl-C stops it", file=sys.stderr, flush=True)

    with _library_output_to_stderr():
        shards = serve_until_stopped(options, ready)
    _emit({"ledger": str(Path(options.ledger).resolve()), "shards": shards})
    return EXIT_OK


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError("--label takes key=value")
    return key, value


class _Pairs(argparse.Action):
    """A repeatable ``KEY=VALUE`` flag into one mapping (``--label``)."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: Any = None) -> None:
        pairs = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, {**(pairs if isinstance(pairs, dict) else {}), values[0]: values[1]})


def _check_labels(labels: dict[str, str]) -> None:
    from .analysis.join import RUN_LABELS

    unknown = sorted(set(labels) - set(RUN_LABELS))
    if unknown:
        # the policy is a column of every row, not a run label: it has an option of its own
        hint = " (the policy's name in the rows is --policy-name NAME)" if "policy" in unknown else ""
        raise ConfigError(f"run labels {unknown} unknown; a label's key is one of {', '.join(RUN_LABELS)}{hint}")


def cmd_study(args: argparse.Namespace) -> int:
    mine, training = split_study_overrides(getattr(args, f"{_SET}study", ""), args.overrides)
    options = _options(StudyOptions, args, mine, from_file=False)
    if options is None:
        return EXIT_OK
    require(options, "study", "out")
    from .experiments import studies
    from .rollout.pool import RayPool
    from .rollout.runner import LocalPool
    from .tasks.store import read_public, write_case_set

    if options.study == "transfer":
        from .configtree import load_config
        from .trainer.config import TrainConfig

        config = load_config(TrainConfig, args.config, training)
        with _library_output_to_stderr():
            runs = studies.transfer_study(
                config, options.out, heldout_cases=options.n, workers=options.workers, progress=options.progress
            )
        _emit({"study": options.study, "runs": [str(r) for r in runs]})
        return EXIT_OK
    if args.config:
        raise ConfigError("--config (a training config) applies to the transfer study only")
    case_dir = options.cases
    if options.study == "noise" and not case_dir:
        case_dir = str(Path(options.out) / "cases")
        if not (Path(case_dir) / "manifest.json").is_file():
            cases = studies.noise_cases(options.seed, options.n)
            write_case_set(cases, case_dir, {"seed": options.seed, "n": options.n, "study": "noise"})
    if not case_dir:
        raise ConfigError(f"the {options.study} study needs --cases (a held-out case set)")
    cases = read_public(case_dir)
    with _library_output_to_stderr():
        factory = _policy_factory(options, case_dir)
        pool = RayPool(options.workers) if options.workers > 0 else LocalPool(1)
    setup = studies.StudySetup(
        factory,
        pool,
        arm=options.arm,
        seed=options.seed,
        model=options.model,  # scripted policies have no model
        stage=options.stage,
        progress=options.progress,
    )
    driver = {
        "feedback": studies.feedback_study,
        "noise": studies.noise_study,
        "budget": studies.budget_study,
        "horizon": studies.horizon_study,
    }[options.study]
    try:
        with _library_output_to_stderr():
            runs = driver(setup, cases, options.out)
    finally:
        if isinstance(pool, RayPool):
            pool.shutdown()
        _shutdown_policies(factory)
    _emit({"study": options.study, "runs": [str(r) for r in runs], "cases": case_dir})
    return EXIT_OK


def split_study_overrides(study: str, overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """``key=value`` items of ``contractrl study`` -> (the study's options, the training config's).

    The transfer study's training keys are training's own, as documented (``study transfer
    --config FILE grpo.steps=3``): there a key of the training tree (``seed`` and ``out`` too) goes
    to training, every other to the study's options. Other studies train nothing: every key is the
    study's, and an unknown one is refused with the closest study key."""
    if study != "transfer":
        return list(overrides), []
    from .trainer.config import TrainConfig

    train_keys = {f.name for f in dataclasses.fields(TrainConfig)}
    return [o for o in overrides if _top_key(o) not in train_keys], [o for o in overrides if _top_key(o) in train_keys]


def _top_key(override: str) -> str:
    return override.partition("=")[0].strip().split(".")[0]


def cmd_report(args: argparse.Namespace) -> int:
    # RUN_DIR and key=value share the positional slots: an item naming an option's key is an override
    keys = {f.name for f in dataclasses.fields(ReportOptions)}
    items = [*args.items, *args.overrides]
    overrides = [item for item in items if "=" in item and _top_key(item) in keys]
    run_dirs = [item for item in items if item not in overrides]
    if run_dirs:
        setattr(args, f"{_SET}run_dirs", run_dirs)
    options = _options(ReportOptions, args, overrides)
    if options is None:
        return EXIT_OK
    require(options, "run_dirs", "out")
    from .analysis.report import build_report

    with _library_output_to_stderr():
        report = build_report(
            options.run_dirs,
            options.out,
            cases=options.cases,
            thresholds=options.thresholds,
            use_ray=options.workers > 0,
            workers=max(1, options.workers),
            progress=options.progress,
        )
    _emit(
        {
            "out": str(report.out),
            "episodes": report.episodes,
            "runs": len(report.runs),
            "index": str(report.index),
            "tables": [str(p) for p in report.tables],
            "plots": [str(p) for p in report.plots],
        }
    )
    return EXIT_OK


def _thresholds(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in _csv(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--thresholds takes comma-separated numbers in [0, 1]: {exc}") from exc


def cmd_ledger_verify(args: argparse.Namespace) -> int:
    """Exit 0 with the ledger's digests, or 1 with a typed refusal: the reason, the file at fault
    and the first bad row where one can be named. Nothing a ledger folder holds ends in a traceback."""
    from .rollout.ledger import verify_ledger

    expect = {"run_id": args.expect_run_id, "config_sha256": args.expect_config_sha256}
    return _ledger_action(lambda: verify_ledger(args.run_dir, expect=expect))


def cmd_ledger_repair(args: argparse.Namespace) -> int:
    """Exit 0 once the unfrozen ledger can be resumed (truncated to its last verified row, what it
    removed moved to ``quarantine-NNN/``), or 1 with a typed refusal (frozen, being written)."""
    from .rollout.ledger_repair import repair_ledger

    return _ledger_action(lambda: repair_ledger(args.run_dir))


def _ledger_action(action: Callable[[], dict[str, Any]]) -> int:
    """Print a ledger action's result, or its typed refusal as JSON with exit 1: nothing a ledger
    folder holds ends in a traceback."""
    from .rollout.ledger import LedgerError, LedgerIntegrityError

    try:
        _emit(action())
    except LedgerIntegrityError as exc:
        _emit(exc.to_dict())
        return EXIT_REJECTED
    except LedgerError as exc:  # not frozen, frozen, locked, a bad key: still a refusal of this ledger
        _emit({"ok": False, "reason": "ledger", "shard": None, "first_bad_row": None, "error": str(exc)})
        return EXIT_REJECTED
    return EXIT_OK


def _lm_summary(result: Any) -> dict[str, Any]:
    evals = {stage: e["semantic_success"] for stage, e in result.evals.items()}
    return {
        "steps": result.global_step,
        "rollout_digest": result.rollout_digest,
        "model_dir": result.model_dir,
        "eval_semantic_success": evals,
    }


def _selector_summary(result: Any) -> dict[str, Any]:
    return {
        "iterations": result.iterations,
        "selector_dir": result.selector_dir,
        "best_iteration": result.best_iteration,
        "best_eval_semantic_success": result.best_success,
        "seconds_to_best": round(result.best_wall_s, 1),
    }


# command -> (its config class, its training function, what it prints of the result); the modules
# are named, not imported, so torch and Ray load only when a training starts
TRAINERS: dict[str, tuple[str, str, Callable[[Any], dict[str, Any]]]] = {
    "train": (".trainer.config:TrainConfig", ".trainer.entry:train", _lm_summary),
    "train-selector": (".selector.config:SelectorConfig", ".selector.train:train_selector", _selector_summary),
}


def _named(target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module, __package__), name)


def cmd_train(args: argparse.Namespace) -> int:
    """``train`` and ``train-selector``: the config (or ``--print-config``), the training run with
    library output on stderr, its result as JSON."""
    config_class, entry, summary = TRAINERS[args.command]
    config = _options(_named(config_class), args)
    if config is None:
        return EXIT_OK
    train = _named(entry)
    with _library_output_to_stderr():
        result = train(config, progress=not args.no_progress)
    _emit({"out": result.out, **summary(result), "metrics": f"{result.out}/metrics.parquet"})
    return EXIT_OK


def _yaml_as_overrides(path: str) -> list[str]:
    """A main-job YAML file as ``key=value`` overrides (leaf keys, JSON values), applied before the
    command line's, so ``--config`` and overrides go through the one loader."""
    from .configtree import read_yaml

    def leaves(data: Any, prefix: str) -> list[str]:
        if isinstance(data, dict) and data:
            return [item for key, value in data.items() for item in leaves(value, f"{prefix}.{key}" if prefix else str(key))]
        return [f"{prefix}={json.dumps(data)}"]

    return leaves(read_yaml(path), "")


def _suggest_train_prefix(overrides: Sequence[str]) -> None:
    """``sft.steps=3`` on ``contractrl run`` is a training key without its ``train.`` prefix: name
    the key it meant instead of only listing the main job's sections."""
    import dataclasses

    from .pipeline import MainJobConfig
    from .trainer.config import TrainConfig

    main_keys = {f.name for f in dataclasses.fields(MainJobConfig)}
    train_keys = {f.name for f in dataclasses.fields(TrainConfig)}
    for item in overrides:
        key = item.partition("=")[0].strip()
        top = key.split(".")[0]
        if top not in main_keys and top in train_keys:
            raise ConfigError(
                f"unknown config key {key!r}; did you mean 'train.{key}'? (the main job's training keys are under train.)"
            )


def cmd_run(args: argparse.Namespace) -> int:
    from .configtree import to_commented_yaml
    from .pipeline import TINY_NOTE, format_summary, load_main_job_config, run_main_job

    overrides = [*_yaml_as_overrides(args.config), *args.overrides] if args.config else list(args.overrides)
    _suggest_train_prefix(overrides)
    config = load_main_job_config(quick=args.quick, out=args.out, overrides=overrides)
    if args.print_config:
        sys.stdout.write(to_commented_yaml(config))
        return EXIT_OK
    with _library_output_to_stderr():
        result = run_main_job(config, progress=not args.no_progress, ray_address=args.ray_address)
    unsafe = sum(int(row["unsafe_dispatch_total"]) for row in result.summary)
    print(f"\nHeld-out results ({result.report.episodes} episodes, same-information mode, all families pooled;")
    print("the tables keep families apart):\n")
    print(format_summary(result.summary))
    print(f"\nUnsafe dispatches: {unsafe}.")
    for line in result.report.standing:
        print(line)
    if config.train.model.name == "tiny":
        print(TINY_NOTE)
    print(f"Report: {result.report.index}")
    print(f"Tables: {result.report.out / 'tables'}  Episodes: {result.report.out / 'episodes.parquet'}")
    return EXIT_OK if unsafe == 0 else EXIT_REJECTED


def cmd_tune(args: argparse.Namespace) -> int:
    from .trainer.tune import (
        SweepInterrupted,
        check_capacity,
        check_inputs,
        load_saved_sweep,
        load_sweep,
        local_capacity,
        run_sweep,
        sweep_trials,
    )

    if args.resume:
        if args.config or args.overrides or args.local:
            raise ConfigError("--resume DIR continues a sweep as it was started: give no --config, --local or overrides")
        sweep, base = load_saved_sweep(args.resume)
    elif not args.config:
        raise ConfigError("give --config SWEEP.yaml (a new sweep) or --resume DIR (an interrupted one)")
    else:
        sweep, base = load_sweep(args.config, args.overrides, local=args.local)
    if args.print_config:
        from .configtree import to_commented_yaml

        sys.stdout.write(to_commented_yaml(sweep))
        return EXIT_OK
    if args.dry_run:
        # a cluster's size is known once connected; locally the machine's is what Ray will see
        if not os.environ.get("RAY_ADDRESS"):
            check_capacity(sweep, base, local_capacity())
        check_inputs(sweep, base)
        _emit({"name": sweep.name, "trials": sweep_trials(sweep), "search": sweep.search})
        return EXIT_OK
    try:
        with _library_output_to_stderr():
            path = run_sweep(sweep, base, resume=bool(args.resume))
    except SweepInterrupted as exc:
        print(f"contractrl tune: {exc}", file=sys.stderr)
        return EXIT_INTERRUPTED
    _emit({"name": sweep.name, "trials_table": str(path), "best": str(path.parent / "best")})
    return EXIT_OK


_SET = "set:"  # the argparse dest of a flag that sets a typed option: "set:" + the field's name


def _option_flag(parser: argparse.ArgumentParser, cls: type[Any], name: str, *flags: str, **kwargs: Any) -> None:
    """A flag that sets the typed option ``name`` of ``cls`` (``--max-new-tokens`` sets
    ``max_new_tokens``). Its help and its one default are the field's: argparse leaves the flag
    unset unless it is given, so the option's default applies, as it does to ``key=value``."""
    field = {f.name: f for f in dataclasses.fields(cls)}[name]
    default = field.default if field.default is not dataclasses.MISSING else field.default_factory()  # type: ignore[misc]
    if "action" not in kwargs and "type" not in kwargs and "choices" not in kwargs:
        kwargs["type"] = typing.get_type_hints(cls)[name]  # int, float or str: the tree checks the rest
    if kwargs.get("action") in (None, "append") and "choices" not in kwargs:
        kwargs.setdefault("metavar", name.upper())
    shown = f" (default: {default})" if "help" not in kwargs and default not in ("", (), {}) else ""
    kwargs["help"] = kwargs.get("help", field.metadata["help"] + shown).replace("%", "%%")
    parser.add_argument(*(flags or ("--" + name.replace("_", "-"),)), dest=_SET + name, default=argparse.SUPPRESS, **kwargs)


def _config_flags(parser: argparse.ArgumentParser, config_help: str | None, example: str) -> None:
    """``--config FILE``, ``key=value`` overrides and ``--print-config``: how every command takes its config."""
    if config_help is not None:
        parser.add_argument("--config", help=config_help)
    parser.add_argument("overrides", nargs="*", metavar="key=value", help=f"config overrides, e.g. {example}")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")


def _options(
    cls: type[T], args: argparse.Namespace, overrides: Sequence[str] | None = None, *, from_file: bool = True
) -> T | None:
    """A command's typed options: the ``--config`` YAML, then its flags, then ``key=value``
    overrides (the last win); None when ``--print-config`` printed them instead. ``from_file``
    False: ``--config`` is not these options' file (the transfer study's training config)."""
    from .configtree import from_dict, merge, parse_overrides, read_yaml, to_commented_yaml

    path = args.config if from_file else None
    flags = {key.removeprefix(_SET): value for key, value in vars(args).items() if key.startswith(_SET)}
    data = merge(read_yaml(path) if path else {}, flags)
    options = from_dict(cls, merge(data, parse_overrides(args.overrides if overrides is None else overrides)))
    if args.print_config:
        sys.stdout.write(to_commented_yaml(options))
        return None
    return options


def _add_verifier_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--schema",
        required=True,
        help=(
            "JSON Schema file (BFCL, draft-04/06/07 or 2020-12), or a tool definition holding one "
            "(MCP inputSchema, OpenAI parameters)"
        ),
    )
    p.add_argument("--call", required=True, help="the tool call's arguments as JSON")
    p.add_argument("--backend", choices=BACKENDS, default="rs", help="validation backend (default: rs)")
    p.add_argument("--contract", help="cross-field rules file: {'rules': [...]}")
    p.add_argument("--lenient", action="store_true", help="drop unknown schema keywords/formats instead of failing")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contractrl", description="Train and run tool-call repair policies.")
    parser.add_argument("--version", action="version", version=f"contractrl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = sub.add_parser("check", help="verify a tool call against a schema and print the typed report")
    _add_verifier_args(check)
    check.set_defaults(func=cmd_check)

    patch = sub.add_parser("patch", help="apply an RFC 6902 patch under the action mask and re-verify")
    _add_verifier_args(patch)
    patch.add_argument("--patch", required=True, help="the patch (JSON array of operations) or ABSTAIN")
    patch.add_argument(
        "--immutable", action="append", default=[], metavar="POINTER", help="a path the patch may not change (repeatable)"
    )
    patch.add_argument("--max-ops", type=int, default=2, help="operation budget K (default: 2)")
    patch.add_argument(
        "--allow-ops", type=_allowed_ops, default=frozenset(OP_KINDS), help="comma list of allowed ops (default: all six)"
    )
    patch.set_defaults(func=cmd_patch)

    demo = sub.add_parser("demo", help="walk through every repair outcome on a built-in tool")
    demo.set_defaults(func=cmd_demo)

    cases = sub.add_parser("cases", help="generate and audit repair cases")
    cases_sub = cases.add_subparsers(dest="cases_command", required=True, metavar="ACTION")
    gen = cases_sub.add_parser("generate", help="write public.parquet, offline.parquet and manifest.json")
    gen.add_argument("--seed", type=int, required=True)
    gen.add_argument("--n", type=int, required=True, help="number of cases")
    gen.add_argument(
        "--source",
        default="builtin",
        help="where valid calls come from: builtin (the tool catalog), bfcl:CATEGORY or bfcl:DIR (BFCL questions with "
        "possible answers), jsonschema:DIR, or a model's own BFCL run: bfcl-results:DIR (the verifier-rejected calls of "
        "its non-live result files) or bfcl-results-live:DIR (its live ones, held out)",
    )
    gen.add_argument(
        "--request-style",
        choices=("verbatim", "paraphrase"),
        default="verbatim",
        help="how requests state values: as JSON to copy, or in words (numbers, dates, yes/no) to understand",
    )
    gen.add_argument(
        "--families", type=_csv, help="corruption families, comma-separated (default: all the source can host: 13, BFCL 11)"
    )
    gen.add_argument("--tool-families", type=_csv, help="built-in tool families, comma-separated (default: all 5)")
    gen.add_argument(
        "--exclude",
        action="append",
        help="an existing case set the new one must be disjoint from (a held-out split); give it once per set",
    )
    gen.add_argument(
        "--disjoint", type=_csv, help="audit units that must not overlap (default: case ids, fingerprints, ops, clusters)"
    )
    gen.add_argument("--out", required=True, help="output directory")
    gen.set_defaults(func=cmd_cases_generate)
    aud = cases_sub.add_parser("audit", help="overlap audit of two case sets; exit 1 on overlap in a disjoint unit")
    aud.add_argument("train")
    aud.add_argument("heldout")
    aud.add_argument("--disjoint", type=_csv, help="units that must not overlap")
    aud.add_argument("--json", action="store_true")
    aud.set_defaults(func=cmd_cases_audit)

    rollout = sub.add_parser("rollout", help="run repair episodes over a case set into a frozen, hashed ledger")
    _option_flag(rollout, RolloutOptions, "cases")
    _option_flag(rollout, RolloutOptions, "policy")
    _option_flag(rollout, RolloutOptions, "arm", choices=ARMS)
    for name in ("workers", "group", "seed"):
        _option_flag(rollout, RolloutOptions, name)
    _option_flag(rollout, RolloutOptions, "mode", choices=MODES)
    _option_flag(rollout, RolloutOptions, "feedback", choices=FEEDBACK)
    _hf_policy_flags(rollout, RolloutOptions)
    _option_flag(
        rollout,
        RolloutOptions,
        "labels",
        "--label",
        type=_label,
        action=_Pairs,
        metavar="KEY=VALUE",
        help="a run label for the report",
    )
    _option_flag(rollout, RolloutOptions, "policy_name")
    _option_flag(rollout, RolloutOptions, "out")
    _option_flag(rollout, RolloutOptions, "progress", "--no-progress", action="store_const", const=False, help="no progress bars")
    _config_flags(
        rollout, "a YAML file of rollout options (as --print-config shows), applied before flags and overrides", "group=4"
    )
    rollout.set_defaults(func=cmd_rollout)

    serve = sub.add_parser("serve", help="the repair gate as an HTTP JSON API on Ray Serve (POST /repair, GET /healthz)")
    for name in ("tools", "policy", "ledger", "host", "port", "num_replicas"):
        _option_flag(serve, ServeOptions, name)
    _config_flags(
        serve, "a YAML file of serve options (as --print-config shows), applied before flags and overrides", "port=8001"
    )
    serve.set_defaults(func=cmd_serve)

    study = sub.add_parser("study", help="the runs of one study table: feedback, noise, budget, horizon or transfer")
    study.add_argument("set:study", nargs="?", default=argparse.SUPPRESS, metavar="STUDY", help=" | ".join(STUDIES))
    _option_flag(study, StudyOptions, "out")
    _option_flag(study, StudyOptions, "policy")
    _option_flag(study, StudyOptions, "cases", help="the held-out case set (noise: generated under --out when not given)")
    _option_flag(study, StudyOptions, "arm", choices=ARMS)
    for name in ("stage", "workers", "seed", "n"):
        _option_flag(study, StudyOptions, name)
    _hf_policy_flags(study, StudyOptions)
    _config_flags(
        study,
        "transfer: the training config YAML",
        "temperature=0.5; for transfer, training keys too (grpo.steps=10)",
    )
    _option_flag(study, StudyOptions, "progress", "--no-progress", action="store_const", const=False, help="no progress bars")
    study.set_defaults(func=cmd_study)

    report = sub.add_parser("report", help="join frozen runs to their targets: tables, plots and an HTML report")
    report.add_argument(
        "items", nargs="*", metavar="RUN_DIR", help="rollout runs, training outputs or study directories; key=value overrides"
    )
    _option_flag(report, ReportOptions, "out")
    _option_flag(report, ReportOptions, "cases", action="append", help="extra case sets the runs were made from (repeatable)")
    _option_flag(report, ReportOptions, "thresholds", type=_thresholds)
    _option_flag(report, ReportOptions, "workers", help="Ray Data scoring workers (0 = in-process, no Ray)")
    _option_flag(report, ReportOptions, "progress", "--no-progress", action="store_const", const=False, help="no progress bars")
    report.add_argument("--config", help="a YAML file of report options (as --print-config shows)")
    report.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    report.set_defaults(func=cmd_report, overrides=[])

    ledger = sub.add_parser("ledger", help="ledger tools")
    ledger_sub = ledger.add_subparsers(dest="ledger_command", required=True, metavar="ACTION")
    verify = ledger_sub.add_parser(
        "verify",
        help="exit 0 if every file digest, the hash chain, the frozen digest (and the HMAC, with a key) hold, 1 otherwise",
    )
    verify.add_argument("run_dir")
    verify.add_argument("--expect-run-id", help="refuse unless the ledger was frozen for this run id (manifest ledger_identity)")
    verify.add_argument("--expect-config-sha256", help="refuse unless the ledger was frozen for a config with this SHA-256")
    verify.set_defaults(func=cmd_ledger_verify)
    repair = ledger_sub.add_parser(
        "repair",
        help="truncate an unfrozen ledger to its last verified row so it can resume; removed files go to quarantine-NNN/",
    )
    repair.add_argument("run_dir")
    repair.set_defaults(func=cmd_ledger_repair)

    screen = sub.add_parser("screen", help="the BFCL mechanism screen (a protocol check, not a learned result)")
    screen.add_argument("--bfcl", required=True, help="BFCL data directory with possible_answer/")
    screen.add_argument("--seed", type=int, default=13)
    screen.add_argument("--json", action="store_true")
    screen.set_defaults(func=cmd_screen)

    train = sub.add_parser("train", help="SFT then GRPO training from a YAML config with key=value overrides")
    _config_flags(
        train, "training config YAML (e.g. tune_configs/tiny.yaml); defaults apply without one", "grpo.steps=10 resume=true"
    )
    train.add_argument("--no-progress", action="store_true", help="no progress bars")
    train.set_defaults(func=cmd_train)

    run = sub.add_parser("run", help="the main job: train, evaluate every arm, freeze, join and report")
    run.add_argument("--quick", action="store_true", help="a small version of the same pipeline (a few minutes)")
    run.add_argument("--out", help="the run directory (default runs/main, or runs/quick with --quick)")
    run.add_argument("--config", help="a YAML file of main-job keys (as --print-config shows), applied before the overrides")
    run.add_argument(
        "--ray-address",
        help="join this running Ray cluster (else RAY_ADDRESS; with neither the job starts a local Ray instance of its own)",
    )
    run.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, e.g. train.sft.steps=100")
    run.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    run.set_defaults(func=cmd_run)

    selector = sub.add_parser(
        "train-selector", help="PPO (RLlib) for a candidate-selection policy, no language model (docs/selector.md)"
    )
    _config_flags(
        selector, "selector config YAML (e.g. tune_configs/selector.yaml); defaults apply without one", "ppo.iterations=10"
    )
    selector.add_argument("--no-progress", action="store_true", help="no progress bars")
    selector.set_defaults(func=cmd_train)

    tune = sub.add_parser("tune", help="a Ray Tune sweep of training runs (tune_configs/*.yaml)")
    tune.add_argument("--config", help="sweep YAML: base config, search space, metric")
    tune.add_argument("overrides", nargs="*", metavar="key=value", help="overrides of the sweep file's keys")
    tune.add_argument("--local", action="store_true", help="apply the sweep file's local: section (its 2-core size)")
    tune.add_argument("--resume", metavar="DIR", help="continue an interrupted sweep from its directory (<out>/<name>)")
    tune.add_argument("--print-config", action="store_true", help="print the resolved sweep and exit")
    tune.add_argument(
        "--dry-run",
        action="store_true",
        help="validate every trial config and that a trial fits this machine, print the trial count, exit",
    )
    tune.set_defaults(func=cmd_tune)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # key=value overrides may follow flags (`rollout --workers 0 seed=3`), which argparse leaves over
    stray = [item for item in extra if item.startswith("-") or "=" not in item or not hasattr(args, "overrides")]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    try:
        return int(args.func(args))
    except ContractRLError as exc:
        print(f"contractrl {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        # one line, not the traceback of wherever the signal landed: finished steps are kept
        print(f"\ncontractrl {args.command}: {INTERRUPTED_HINT.get(args.command, 'interrupted')}", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
