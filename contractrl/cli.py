"""The ``contractrl`` command: one entry point, one sub-command per job.

Exit statuses are part of the contract: 0 accepted / success, 1 rejected, 2 usage or input error,
130 interrupted (Ctrl-C), with one line that says how to continue.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from . import __version__
from .errors import ConfigError, ContractRLError
from .io import read_bytes, read_json_file
from .rollout.prompts import FEEDBACK, MODES
from .tasks.arms import ARMS, DEFAULT_ARM, arm_spec
from .validators import Budgets, RepairContract, Verifier, VerifierReport, load_contract
from .validators.contracts import EMPTY_CONTRACT
from .validators.patch import OP_KINDS
from .validators.schema import BACKENDS

EXIT_OK, EXIT_REJECTED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
INTERRUPTED_HINT = {
    "run": "interrupted; run the same command again to resume (finished steps are kept)",
    "train": "interrupted; run the same command again with resume=true to continue from the last checkpoint",
    "train-selector": "interrupted; run the same command again with resume=true to continue from the last checkpoint",
    "tune": "interrupted; continue the sweep with: contractrl tune --resume <out>/<name>",
}


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
    from tqdm import tqdm

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
    progress = tqdm(range(config.n), desc="cases", unit="case", disable=None, file=sys.stderr)
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


def _policy_factory(args: argparse.Namespace) -> Callable[[str], Any]:
    """feedback variant -> policy. Scripted policies read no prompt, so the variant does not change them."""
    spec, cases_dir, arm = args.policy, args.cases, args.arm
    from .rollout.policies import ABSTAIN, HeuristicPolicy, ReplayPolicy

    if spec == "heuristic":
        heuristic = HeuristicPolicy()
        return lambda feedback: heuristic
    if spec == "replay":
        # the mechanism check replays the precomputed answers: read here, never inside rollout code
        from .tasks.offline import read_offline

        def answer(off: Any) -> str:
            if off.should_abstain:
                return ABSTAIN
            return json.dumps(off.target if arm_spec(arm).whole_object else off.target_patch)

        replay = ReplayPolicy({case_id: [answer(off)] for case_id, off in read_offline(cases_dir).items()})
        return lambda feedback: replay
    if spec.startswith("hf:"):
        from .gate.policy import hf_model_target
        from .rollout.hf_policy import HFPolicy, SamplingConfig
        from .rollout.policy_pool import ActorPolicy, PolicySpec
        from .trainer.presets import load_model

        # absolute paths, so an actor whose working directory differs finds (or builds) the same files
        target, preset = hf_model_target(spec)
        load = functools.partial(load_model, target, cache_dir=Path("runs/models").resolve())
        if args.policy_actors < 0 or args.gpus_per_actor < 0:
            raise ConfigError("--policy-actors and --gpus-per-actor must be >= 0")
        if args.shield_k < 0:
            raise ConfigError(f"--shield-k must be >= 0 (0: blind decoding), got {args.shield_k}")
        sampling = SamplingConfig.from_options(
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            seed=args.seed,
            shield_k=args.shield_k,
            enumerate_candidates=not args.no_enumerate,
        )
        if args.policy_actors > 0:  # the model loads inside each actor, once
            return _PolicyPools(
                lambda feedback: ActorPolicy(
                    PolicySpec(load, args.mode, feedback, sampling, name=preset),
                    args.policy_actors,
                    num_gpus=args.gpus_per_actor,
                )
            )
        model, tokenizer = load()
        return lambda feedback: HFPolicy(model, tokenizer, mode=args.mode, feedback=feedback, sampling=sampling, name=preset)
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


def _hf_policy_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shield-k",
        type=int,
        default=1,
        help="hf policies: shielded decoding with K proposals per decision, probed on the public contract with the "
        "enumerated candidates before one is committed (0 = blind: the decoded answer is sent as it is; "
        "rollout/shield.py)",
    )
    parser.add_argument(
        "--no-enumerate",
        action="store_true",
        help="hf policies, shielded: weigh only the model's own proposals, not the enumerated candidates",
    )
    parser.add_argument(
        "--policy-actors",
        type=int,
        default=0,
        help="hf policies: generate on N Ray actors, each holding the model (0 = in this process)",
    )
    parser.add_argument("--gpus-per-actor", type=float, default=0.0, help="hf policies: GPUs per policy actor")


def cmd_rollout(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .rollout.pool import RayPool
    from .rollout.run import write_run
    from .rollout.runner import EpisodeRunner, LocalPool
    from .tasks.store import read_manifest, read_public

    cases = read_public(args.cases)
    if args.workers < 0 or args.group < 1:
        raise ConfigError("--workers must be >= 0 and --group >= 1")
    with _library_output_to_stderr():
        factory = _policy_factory(args)
        policy = factory(args.feedback)
        ray_pool = RayPool(args.workers) if args.workers > 0 else None
    runner = EpisodeRunner(policy, ray_pool or LocalPool(1), arm=args.arm)
    config = {
        "cases_files_sha256": read_manifest(args.cases)["files"],
        "policy": args.policy,
        "arm": args.arm,
        "group": args.group,
        "seed": args.seed,
        "mode": args.mode,
        "feedback": args.feedback,
    }
    # a model's runs carry its name (as a study's do), so a report over several says which is which
    model = {"model": args.policy.removeprefix("hf:")} if args.policy.startswith("hf:") else {}
    labels = {"mode": args.mode, "feedback": args.feedback, **model, **dict(args.label or [])}
    progress = tqdm(
        total=len(cases) * args.group, desc="episodes", unit="ep", disable=True if args.no_progress else None, file=sys.stderr
    )
    try:
        with _library_output_to_stderr():
            digest = write_run(
                args.out, config, runner, cases, group=args.group, seed=args.seed, progress=progress, labels=labels
            )
    finally:
        progress.close()
        if ray_pool is not None:
            ray_pool.shutdown()
        _shutdown_policies(factory)
    _emit({"run_dir": str(args.out), "ledger_sha256": digest, "episodes": len(cases) * args.group})
    return EXIT_OK


def _label(text: str) -> tuple[str, str]:
    from .analysis.join import RUN_LABELS

    key, sep, value = text.partition("=")
    if not sep or key not in RUN_LABELS:
        raise argparse.ArgumentTypeError(f"--label takes key=value with key one of {', '.join(RUN_LABELS)}")
    return key, value


def cmd_study(args: argparse.Namespace) -> int:
    from .experiments import studies
    from .rollout.pool import RayPool
    from .rollout.runner import LocalPool
    from .tasks.store import read_public, write_case_set

    if args.study == "transfer":
        from .configtree import load_config
        from .trainer.config import TrainConfig

        config = load_config(TrainConfig, args.config, args.overrides)
        with _library_output_to_stderr():
            runs = studies.transfer_study(
                config, args.out, heldout_cases=args.n, workers=args.workers, progress=not args.no_progress
            )
        _emit({"study": args.study, "runs": [str(r) for r in runs]})
        return EXIT_OK
    if args.overrides or args.config:
        raise ConfigError("--config and key=value overrides apply to the transfer study only")
    if args.study == "noise" and not args.cases:
        args.cases = str(Path(args.out) / "cases")
        if not (Path(args.cases) / "manifest.json").is_file():
            cases = studies.noise_cases(args.seed, args.n)
            write_case_set(cases, args.cases, {"seed": args.seed, "n": args.n, "study": "noise"})
    if not args.cases:
        raise ConfigError(f"the {args.study} study needs --cases (a held-out case set)")
    if args.workers < 0:
        raise ConfigError("--workers must be >= 0")
    cases = read_public(args.cases)
    with _library_output_to_stderr():
        factory = _policy_factory(args)
        pool = RayPool(args.workers) if args.workers > 0 else LocalPool(1)
    setup = studies.StudySetup(
        factory,
        pool,
        arm=args.arm,
        seed=args.seed,
        model=args.policy.removeprefix("hf:") if args.policy.startswith("hf:") else "",  # scripted policies have no model
        stage=args.stage,
        progress=not args.no_progress,
    )
    driver = {
        "feedback": studies.feedback_study,
        "noise": studies.noise_study,
        "budget": studies.budget_study,
        "horizon": studies.horizon_study,
    }[args.study]
    try:
        with _library_output_to_stderr():
            runs = driver(setup, cases, args.out)
    finally:
        if isinstance(pool, RayPool):
            pool.shutdown()
        _shutdown_policies(factory)
    _emit({"study": args.study, "runs": [str(r) for r in runs], "cases": args.cases})
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from .analysis.report import build_report

    with _library_output_to_stderr():
        report = build_report(
            args.run_dirs,
            args.out,
            cases=args.cases or (),
            thresholds=args.thresholds,
            use_ray=args.workers > 0,
            workers=max(1, args.workers),
            progress=not args.no_progress,
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
        values = tuple(float(part) for part in _csv(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--thresholds takes comma-separated numbers in [0, 1]: {exc}") from exc
    if not values or any(not 0.0 <= v <= 1.0 for v in values):
        raise argparse.ArgumentTypeError("--thresholds takes comma-separated numbers in [0, 1]")
    return values


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


def _config_or_print(cls: type[Any], args: argparse.Namespace) -> Any:
    """The config from ``--config`` and the overrides; None when ``--print-config`` printed it instead."""
    from .configtree import load_config, to_commented_yaml

    config = load_config(cls, args.config, args.overrides)
    if args.print_config:
        sys.stdout.write(to_commented_yaml(config))
        return None
    return config


def cmd_train(args: argparse.Namespace) -> int:
    from .trainer.config import TrainConfig

    config = _config_or_print(TrainConfig, args)
    if config is None:
        return EXIT_OK
    from .trainer.entry import train

    with _library_output_to_stderr():
        result = train(config, progress=not args.no_progress)
    _emit(
        {
            "out": result.out,
            "steps": result.global_step,
            "rollout_digest": result.rollout_digest,
            "model_dir": result.model_dir,
            "eval_semantic_success": {stage: e["semantic_success"] for stage, e in result.evals.items()},
            "metrics": f"{result.out}/metrics.parquet",
        }
    )
    return EXIT_OK


def cmd_train_selector(args: argparse.Namespace) -> int:
    from .selector.config import SelectorConfig

    config = _config_or_print(SelectorConfig, args)
    if config is None:
        return EXIT_OK
    from .selector.train import train_selector

    with _library_output_to_stderr():
        result = train_selector(config, progress=not args.no_progress)
    _emit(
        {
            "out": result.out,
            "iterations": result.iterations,
            "selector_dir": result.selector_dir,
            "best_iteration": result.best_iteration,
            "best_eval_semantic_success": result.best_success,
            "seconds_to_best": round(result.best_wall_s, 1),
            "metrics": f"{result.out}/metrics.parquet",
        }
    )
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
    if args.dry_run:
        # a cluster's size is known once connected; locally the machine's is what Ray will see
        if not os.environ.get("RAY_ADDRESS"):
            check_capacity(sweep, base, local_capacity())
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
    rollout.add_argument("--cases", required=True, help="a case set written by `cases generate`")
    rollout.add_argument(
        "--policy",
        required=True,
        help="replay | heuristic | hf:<preset: tiny, smollm2, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b> "
        "| hf:<name-or-path> | selector:<dir>",
    )
    rollout.add_argument("--arm", default=DEFAULT_ARM, choices=ARMS)
    rollout.add_argument("--workers", type=int, default=2, help="Ray validator workers (0 = in-process, no Ray)")
    rollout.add_argument("--group", type=int, default=1, help="episodes per case (G)")
    rollout.add_argument("--seed", type=int, default=0)
    rollout.add_argument("--max-new-tokens", type=int, default=160, help="hf policies: generation budget per attempt")
    rollout.add_argument("--temperature", type=float, default=1.0, help="hf policies: sampling temperature")
    rollout.add_argument("--mode", choices=MODES, default="same_information", help="hf policies: which public blocks")
    rollout.add_argument("--feedback", choices=FEEDBACK, default="full", help="hf policies: how much of the typed report")
    _hf_policy_options(rollout)
    rollout.add_argument("--label", type=_label, action="append", metavar="KEY=VALUE", help="a run label for the report")
    rollout.add_argument("--out", required=True, help="a new run directory")
    rollout.add_argument("--no-progress", action="store_true", help="no progress bars")
    rollout.set_defaults(func=cmd_rollout)

    study = sub.add_parser("study", help="the runs of one study table: feedback, noise, budget, horizon or transfer")
    study.add_argument("study", choices=("feedback", "noise", "budget", "horizon", "transfer"))
    study.add_argument("--out", required=True, help="the study's directory (re-running resumes it)")
    study.add_argument(
        "--policy",
        default="heuristic",
        help="replay | heuristic | hf:<preset> | hf:<trained model or adapter dir> | selector:<dir>",
    )
    study.add_argument("--cases", help="the held-out case set (noise: generated under --out when not given)")
    study.add_argument("--arm", default=DEFAULT_ARM, choices=ARMS)
    study.add_argument("--stage", default="", help="a label for the policy's training stage, e.g. grpo")
    study.add_argument("--workers", type=int, default=0, help="Ray validator workers (0 = in-process, no Ray)")
    study.add_argument("--seed", type=int, default=0)
    study.add_argument("--n", type=int, default=64, help="noise and transfer: held-out cases to generate")
    study.add_argument("--max-new-tokens", type=int, default=160, help="hf policies: generation budget per attempt")
    study.add_argument("--temperature", type=float, default=0.0, help="hf policies: 0 = greedy")
    _hf_policy_options(study)
    study.add_argument("--config", help="transfer: the training config YAML")
    study.add_argument("overrides", nargs="*", metavar="key=value", help="transfer: training config overrides")
    study.add_argument("--no-progress", action="store_true", help="no progress bars")
    study.set_defaults(func=cmd_study, mode="same_information")

    report = sub.add_parser("report", help="join frozen runs to their targets: tables, plots and an HTML report")
    report.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="rollout runs, training outputs or study directories")
    report.add_argument("--out", required=True, help="the report directory")
    report.add_argument("--cases", action="append", help="extra case sets the runs were made from (repeatable)")
    report.add_argument("--thresholds", type=_thresholds, default=(0.5, 0.6, 0.7, 0.8, 0.9), help="calibration thresholds")
    report.add_argument("--workers", type=int, default=1, help="Ray Data scoring workers (0 = in-process, no Ray)")
    report.add_argument("--no-progress", action="store_true", help="no progress bars")
    report.set_defaults(func=cmd_report)

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
    train.add_argument("--config", help="training config YAML (e.g. tune_configs/tiny.yaml); defaults apply without one")
    train.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, e.g. grpo.steps=10 resume=true")
    train.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
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
    selector.add_argument("--config", help="selector config YAML (e.g. tune_configs/selector.yaml); defaults apply without one")
    selector.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, e.g. ppo.iterations=10")
    selector.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    selector.add_argument("--no-progress", action="store_true", help="no progress bars")
    selector.set_defaults(func=cmd_train_selector)

    tune = sub.add_parser("tune", help="a Ray Tune sweep of training runs (tune_configs/*.yaml)")
    tune.add_argument("--config", help="sweep YAML: base config, search space, metric")
    tune.add_argument("overrides", nargs="*", metavar="key=value", help="overrides of the sweep file's keys")
    tune.add_argument("--local", action="store_true", help="apply the sweep file's local: section (its 2-core size)")
    tune.add_argument("--resume", metavar="DIR", help="continue an interrupted sweep from its directory (<out>/<name>)")
    tune.add_argument(
        "--dry-run",
        action="store_true",
        help="validate every trial config and that a trial fits this machine, print the trial count, exit",
    )
    tune.set_defaults(func=cmd_tune)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
