"""Evidence that a repair policy learns, and the paper's central comparison, on the main job.

Runs ``contractrl run`` (the embedded default: SmolLM2-135M-Instruct with LoRA on a DeepSpeed
engine, the built-in catalog, local Ray) at the benchmark's sizes below, then reads the report's
scored held-out episodes and gives, with denominators:

* semantic success per corruption family and pooled, after SFT (the Patch-SFT arm) and after GRPO
  (the ContractRL arm), and on the single-field families alone;
* the paired difference GRPO - SFT over the same held-out cases: bootstrap 95% interval over case
  ids and McNemar's exact p, plus the paired change in retries, masked attempts and tokens;
* the central comparison on the same cases, budgets and validator: ContractRL against full
  regeneration and constrained decoding (the same base model, each trained by the pipeline) and
  the schema-guided heuristic: semantic success, schema validity, collateral edits, generated
  tokens per episode and end-to-end episode latency (generation + validation).

    python benchmarks/bench_learning.py --out runs/bench_learning [key=value ...] [--json]
        [--save benchmarks/results/learning-smollm2.json]

``key=value`` are overrides of the main job's config (``contractrl run --print-config`` lists them), e.g.
``train.model.name=tiny``. An interrupted benchmark resumes where it stopped, like ``contractrl run``.
Record the output in benchmarks/RESULTS.md.

    python benchmarks/bench_learning.py --report runs/report_300 [--json] [--save FILE]

analyses a report written earlier (``contractrl report RUN_DIR ... --out runs/report_300``) instead of
running the main job: arms trained apart on the same case keys, say at other SFT budgets, compared
by the same figures. Its JSON holds no ``config`` or ``wall_s``: the runs' own directories have them.

    python benchmarks/bench_learning.py --report runs/report_hint --pair runs/exp_a runs/exp_b [--json]

compares two runs of that report, say two SFT runs with and without a prompt change (which the role
tables cannot hold side by side) or two arms: per family and pooled success of each, the paired difference
B - A with its bootstrap interval and McNemar p, and the cases each side alone solved. Two SFT runs
whose demonstrations differ by a tenth flip about one held-out case in ten, evenly both ways
(RESULTS.md), so read a change on the families it touches, against that churn.

    python benchmarks/bench_learning.py --report R --pair runs/sft_s0 runs/grpo_s0 --pair runs/sft_s1 runs/grpo_s1

gives each pair as above and then the pairs together, say GRPO against its own SFT policy over
several SFT seeds: per case the mean of each side over the pairs, the bootstrap interval over cases
of B - A, and the exact sign test over the cases whose summed difference is not 0, so a case counts
once however many seeds ran it. Its inference is over cases: two or three seeds show whether the
effect repeats, not how it varies over every seed.

    python benchmarks/bench_learning.py --report R1 --report R2 --pair runs/a1 runs/b1 --pair runs/a2 runs/b2

gives one comparison on several held-out sets, one report per set (``contractrl report`` joins one
case set's targets): each pair as above, and then, since the pairs' case sets are disjoint, their
cases put together, each an independent draw, with McNemar's p and the bootstrap over all of them.
Every pair also gives each side's schema validity, collateral edits, generated tokens and latency
per episode.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from contractrl.analysis.stats import mcnemar_exact, paired_bootstrap, sign_test
from contractrl.analysis.tables import p95
from contractrl.configtree import to_dict
from contractrl.pipeline import load_main_job_config, run_main_job
from contractrl.rollout.cpu import cpu_bf16_native

SINGLE_FIELD = ("missing_required", "wrong_type", "constraint_violation", "nested_field", "array_element")
# sized to finish in about an hour on a 2-core CPU (every family, 10 held-out cases each)
DEFAULTS = (
    "train.data.train_cases=520",
    "train.data.eval_cases=130",
    "train.sft.steps=150",
    "train.grpo.steps=16",
    "whole_object.sft_steps=150",  # the same SFT budget as the patch arms
    "train.wandb.mode=disabled",
    # the recorded run's settings (RESULTS.md, 2026-12-01), since changed in the defaults; the later
    # sections of RESULTS.md give the overrides of each measured change
    "train.experimental.contrast.sft=false",
    "train.experimental.noisy_retries.enabled=false",
    "train.eval.shield_k=0",
    "train.model.lora.top_layers=0",  # every layer adapted (the main job adapts the top 15 since 2026-12-03)
)


def _systems(episodes: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The benchmark's systems by role, each one episode per held-out case."""
    learned = episodes[~episodes["policy"].isin(["heuristic", "replay"])]
    roles = {
        "patch_sft": learned[(learned["arm"] == "patch_sft") & (learned["stage"] == "sft")],
        "contractrl": learned[(learned["arm"] == "contractrl") & (learned["stage"] == "grpo")],
        "full_regen": learned[learned["arm"] == "full_regen"],
        "constrained": learned[learned["arm"] == "constrained"],
        "heuristic": episodes[episodes["policy"] == "heuristic"],
        "replay": episodes[episodes["policy"] == "replay"],
    }
    for name, frame in roles.items():
        if frame["case_id"].duplicated().any():
            runs = ", ".join(sorted(frame["run"].unique()))
            raise SystemExit(f"{name} has more than one episode per case ({runs}): report one run per role")
    return {name: frame.set_index("case_id").sort_index() for name, frame in roles.items() if len(frame)}


def success_by_family(frame: pd.DataFrame) -> dict[str, Any]:
    """{family: {success, n}} plus ``pooled`` and ``single_field`` (each with its own n)."""
    out: dict[str, Any] = {
        family: {"success": float(group["semantic_success"].mean()), "n": len(group)}
        for family, group in frame.groupby("case_family", sort=True)
    }
    single = frame[frame["case_family"].isin(SINGLE_FIELD)]
    out["single_field"] = {"success": float(single["semantic_success"].mean()), "n": len(single)}
    out["pooled"] = {"success": float(frame["semantic_success"].mean()), "n": len(frame)}
    return out


def paired(a: pd.DataFrame, b: pd.DataFrame, column: str = "semantic_success", seed: int = 0) -> dict[str, Any]:
    """b - a over the cases both ran: mean difference, bootstrap 95% CI, McNemar p for binary columns."""
    common = a.index.intersection(b.index)
    x = a.loc[common, column].astype(float).to_numpy()
    y = b.loc[common, column].astype(float).to_numpy()
    diff = paired_bootstrap(x, y, seed=seed)
    out = {"n": diff.n, "a": diff.mean_a, "b": diff.mean_b, "diff": diff.difference, "ci_low": diff.low, "ci_high": diff.high}
    if a[column].dtype == bool:
        out["mcnemar_p"] = mcnemar_exact(x.astype(bool).tolist(), y.astype(bool).tolist())
    return out


def arm_summary(frame: pd.DataFrame) -> dict[str, Any]:
    return {
        "episodes": len(frame),
        "semantic_success": float(frame["semantic_success"].mean()),
        "schema_valid": float(frame["schema_valid"].mean()),
        "collateral": float(frame["collateral"].mean()),
        "generated_tokens": float(frame["generated_tokens"].mean()),
        "retries": float(frame["retries"].mean()),
        "masked_attempts": float(frame["masked_attempts"].mean()),
        "latency_mean_s": float(frame["latency_s"].mean()),
        "latency_p95_s": p95(frame["latency_s"]),
        "unsafe_dispatch": int(frame["unsafe_dispatch"].sum()),
    }


def analyse(episodes: pd.DataFrame, seed: int = 0) -> dict[str, Any]:
    systems = _systems(episodes)
    by_family = {name: success_by_family(frame) for name, frame in systems.items()}
    out: dict[str, Any] = {"families": sorted(episodes["case_family"].unique())}
    # the issue's keys for the two learned stages: the patch arm after SFT, ContractRL after GRPO
    if "patch_sft" in by_family:
        out["after_sft"] = by_family["patch_sft"]
    if "contractrl" in by_family:
        out["after_grpo"] = by_family["contractrl"]
    if {"patch_sft", "contractrl"} <= set(systems):
        sft, grpo = systems["patch_sft"], systems["contractrl"]
        single = sft[sft["case_family"].isin(SINGLE_FIELD)]
        # GRPO - SFT on semantic success over every held-out case at the top level, the rest beside it
        out["paired"] = {
            **paired(sft, grpo, seed=seed),
            "single_field": paired(single, grpo.loc[single.index], seed=seed),
            **{column: paired(sft, grpo, column, seed) for column in ("retries", "masked_attempts", "generated_tokens")},
        }
    out["arms"] = {name: arm_summary(frame) for name, frame in systems.items()}
    out["by_family"] = by_family
    # the central comparison's subject: ContractRL, or Patch-SFT where a run stopped before GRPO
    name = next((n for n in ("contractrl", "patch_sft") if n in systems), None)
    if name is not None:
        subject = systems[name]
        out["central_subject"] = name
        out["central"] = {
            other: {
                "semantic_success": paired(systems[other], subject, seed=seed),
                "collateral": paired(systems[other], subject, "collateral", seed),
                "generated_tokens_ratio": _ratio(subject["generated_tokens"], systems[other]["generated_tokens"]),
            }
            for other in ("full_regen", "constrained", "heuristic")
            if other in systems
        }
    return out


def run_episodes(episodes: pd.DataFrame, name: str) -> pd.DataFrame:
    """The episodes of one run, by its directory (a training output holds its evaluations below it),
    indexed by case id; one system only, so each case has one episode. The directory may be given
    as the report holds it or relative to here (:func:`read_reports` makes the report's paths absolute)."""
    runs = matching_runs(episodes, name)
    if not runs:
        raise SystemExit(f"no run {name!r} in the report; its runs: {', '.join(sorted(episodes['run'].unique()))}")
    frame = episodes[episodes["run"].isin(runs)]
    if frame["case_id"].duplicated().any():
        raise SystemExit(f"{name!r} holds more than one episode per case ({', '.join(runs)}): name one of these runs")
    return frame.set_index("case_id").sort_index()


def matching_runs(episodes: pd.DataFrame, name: str) -> list[str]:
    """The report's runs at or below the directory ``name``."""
    names = {name.rstrip("/"), str(Path(name).resolve())}
    return sorted(r for r in episodes["run"].unique() if any(r == n or r.startswith(n + "/") for n in names))


def pair_runs(episodes: pd.DataFrame, baseline: str, candidate: str, seed: int = 0) -> dict[str, Any]:
    """candidate - baseline over the held-out cases both ran, with the cases each alone solved."""
    a, b = _shared_cases(episodes, baseline, candidate)
    return _pair_frames(a, b, baseline, candidate, seed)


def _shared_cases(episodes: pd.DataFrame, baseline: str, candidate: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    a, b = run_episodes(episodes, baseline), run_episodes(episodes, candidate)
    common = a.index.intersection(b.index)
    if not len(common):
        raise SystemExit(f"{baseline!r} and {candidate!r} share no case ids: they were not scored on one case set")
    return a.loc[common], b.loc[common]


# what a side costs beside its success: the central comparison's other columns
SIDE_COLUMNS = ("schema_valid", "collateral", "generated_tokens", "latency_s")


def _side(frame: pd.DataFrame) -> dict[str, float]:
    """The columns every episode of ``frame`` holds (a run recovered from a record holds success only)."""
    return {column: float(frame[column].mean()) for column in SIDE_COLUMNS if column in frame and frame[column].notna().all()}


def _pair_frames(a: pd.DataFrame, b: pd.DataFrame, baseline: str, candidate: str, seed: int) -> dict[str, Any]:
    """b - a over two frames indexed by the same case ids, in the same order."""
    gained = b["semantic_success"].astype(bool) & ~a["semantic_success"].astype(bool)
    lost = a["semantic_success"].astype(bool) & ~b["semantic_success"].astype(bool)

    def counts(index: pd.Index) -> dict[str, Any]:
        return {"gained": int(gained.loc[index].sum()), "lost": int(lost.loc[index].sum())}

    single = a.index[a["case_family"].isin(SINGLE_FIELD)]
    figures = {"pooled": a.index, **({"single_field": single} if len(single) else {})}
    return {
        "baseline": baseline,
        "candidate": candidate,
        **{name: {**paired(a.loc[index], b.loc[index], seed=seed), **counts(index)} for name, index in figures.items()},
        "families": {
            family: {
                "n": len(index),
                "baseline": float(a.loc[index, "semantic_success"].mean()),
                "candidate": float(b.loc[index, "semantic_success"].mean()),
                **counts(index),
            }
            for family, index in a.groupby("case_family", sort=True).groups.items()
        },
        "sides": {"baseline": _side(a), "candidate": _side(b)},
        "gained": sorted(gained.index[gained]),
        "lost": sorted(lost.index[lost]),
    }


def stack_pairs(episodes: pd.DataFrame, pairs: Sequence[Sequence[str]], seed: int = 0) -> dict[str, Any]:
    """Candidate - baseline over pairs scored on disjoint case sets (say one policy pair on each of
    three held-out sets): their cases put together, so each case is one independent draw and
    McNemar's exact test and the bootstrap apply over all of them."""
    frames = [_shared_cases(episodes, a, b) for a, b in pairs]
    a = pd.concat([f[0] for f in frames])
    b = pd.concat([f[1] for f in frames])
    return {
        **_pair_frames(a, b, " + ".join(p[0] for p in pairs), " + ".join(p[1] for p in pairs), seed),
        "sets": [len(f[0]) for f in frames],
    }


def combine_pairs(episodes: pd.DataFrame, pairs: Sequence[Sequence[str]], seed: int = 0) -> dict[str, Any]:
    """Several pairs together: pooled per case when they ran the same cases (seeds of one
    comparison), stacked when their case sets are disjoint (one comparison on several sets)."""
    cases = [_shared_cases(episodes, a, b)[0].index for a, b in pairs]
    if all(len(c.intersection(cases[0])) for c in cases[1:]):
        return {"over_pairs": pool_pairs(episodes, pairs, seed)}
    if cases[0].append(cases[1:]).has_duplicates:
        raise SystemExit(
            "the pairs neither share their cases (seeds of one comparison) nor have disjoint case sets "
            "(one comparison on several sets): pair runs of one kind at a time"
        )
    return {"over_sets": stack_pairs(episodes, pairs, seed)}


def pool_pairs(episodes: pd.DataFrame, pairs: Sequence[Sequence[str]], seed: int = 0) -> dict[str, Any]:
    """Candidate - baseline over several pairs, on the held-out cases every pair ran: per case the
    mean of each side over the pairs, resampled by case (the pairs share their cases, so their
    outcomes on one case are not independent draws), and the sign test over per-case differences."""
    frames = [(run_episodes(episodes, a), run_episodes(episodes, b)) for a, b in pairs]
    common = frames[0][0].index
    for a, b in frames:
        common = common.intersection(a.index).intersection(b.index)
    if not len(common):
        raise SystemExit(f"the pairs {', '.join(' / '.join(p) for p in pairs)} share no case ids")
    # per case the success rate of each side over the pairs: floats, so paired() adds no McNemar p
    mean_a, mean_b = (
        pd.DataFrame({"semantic_success": sum(f.loc[common, "semantic_success"].astype(float) for f in side) / len(frames)})
        for side in zip(*frames, strict=True)
    )
    family = frames[0][0].loc[common, "case_family"]

    def figures(index: pd.Index) -> dict[str, Any]:
        per_case = mean_b.loc[index, "semantic_success"] - mean_a.loc[index, "semantic_success"]
        better, worse = int((per_case > 0).sum()), int((per_case < 0).sum())
        return {
            **paired(mean_a.loc[index], mean_b.loc[index], seed=seed),
            "cases_better": better,
            "cases_worse": worse,
            "sign_p": sign_test(better, worse),
        }

    single = common[family.isin(SINGLE_FIELD).to_numpy()]
    return {"pairs": len(frames), "pooled": figures(common), **({"single_field": figures(single)} if len(single) else {})}


def print_pair(pair: dict[str, Any]) -> None:
    print(f"\nA = {pair['baseline']}, B = {pair['candidate']}")
    print("\n| family | n | A | B | gained | lost |\n|---|---|---|---|---|---|")
    for family, row in pair["families"].items():
        print(f"| {family} | {row['n']} | {row['baseline']:.3f} | {row['candidate']:.3f} | {row['gained']} | {row['lost']} |")
    for name in ("single_field", "pooled"):
        if name in pair:
            p = pair[name]
            mcnemar = f"McNemar p = {p['mcnemar_p']:.3g}; {p['gained']} gained, {p['lost']} lost"
            print(f"B - A, {name}: {_change(p)} (n={p['n']}), {mcnemar}")
    sides = pair.get("sides", {"baseline": {}, "candidate": {}})
    for column, a in sides["baseline"].items():
        if column not in sides["candidate"]:  # a side recovered from a record holds success only
            continue
        b = sides["candidate"][column]
        ratio = f" (B/A x{b / a:.2f})" if a else ""
        print(f"  {column} per episode: A {a:.3f}, B {b:.3f}{ratio}")


def print_pairs(result: dict[str, Any]) -> None:
    print(result["machine"])
    for pair in result.get("pairs", [result.get("pair")]):
        print_pair(pair)
    if "over_sets" in result:
        stacked = result["over_sets"]
        sizes = " + ".join(map(str, stacked["sets"]))
        print(f"\nB - A over {len(stacked['sets'])} disjoint case sets ({sizes} cases), put together:")
        print_pair(stacked)
        return
    if "over_pairs" not in result:
        return
    over = result["over_pairs"]
    print(f"\nB - A over {over['pairs']} pairs, per case the mean over the pairs:")
    for name in ("single_field", "pooled"):
        if name in over:
            p = over[name]
            print(
                f"  {name}: {_change(p)} (n={p['n']} cases), sign test p = {p['sign_p']:.3g}; "
                f"{p['cases_better']} cases better, {p['cases_worse']} worse"
            )


def _change(p: dict[str, Any]) -> str:
    return f"{p['a']:.3f} -> {p['b']:.3f}, {p['diff']:+.3f} [{p['ci_low']:+.3f}, {p['ci_high']:+.3f}]"


def _ratio(a: pd.Series, b: pd.Series) -> float | None:
    """a's mean over b's; None (JSON null, not NaN) where b generates nothing, like the heuristic."""
    return float(a.mean() / b.mean()) if b.mean() else None


def _times(ratio: float | None) -> str:
    return "n/a (it generates none)" if ratio is None else f"x{ratio:.2f}"


def _fmt(row: dict[str, Any]) -> str:
    return f"{row['success']:.3f} (n={row['n']})"


def print_report(result: dict[str, Any]) -> None:
    took = f"{result['wall_s']:.0f} s" if "wall_s" in result else f"from {result['report']}"
    print(f"model {result['model']}, {result['cases']['eval']} held-out cases, {took}, {result['machine']}")
    # every system's success per family: after SFT (patch_sft) and GRPO (contractrl) and the others
    columns = result["by_family"]
    print("\n| family | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for family in [*result["families"], "single_field", "pooled"]:
        print(f"| {family} | " + " | ".join(_fmt(c[family]) if family in c else "-" for c in columns.values()) + " |")
    if "paired" in result:
        pooled = result["paired"]
        nested = {key: value for key, value in pooled.items() if isinstance(value, dict)}
        for name, p in {"success": pooled, **nested}.items():
            extra = f", McNemar p = {p['mcnemar_p']:.3g}" if "mcnemar_p" in p else ""
            print(f"GRPO - SFT, {name}: {p['diff']:+.3f} [{p['ci_low']:+.3f}, {p['ci_high']:+.3f}] (n={p['n']}){extra}")
    print("\n| system | success | schema-valid | collateral | gen tokens | retries | latency mean s | latency p95 s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, a in result["arms"].items():
        print(
            f"| {name} | {a['semantic_success']:.3f} | {a['schema_valid']:.3f} | {a['collateral']:.3f} | "
            f"{a['generated_tokens']:.1f} | {a['retries']:.3f} | {a['latency_mean_s']:.3f} | {a['latency_p95_s']:.3f} |"
        )
    for other, c in result.get("central", {}).items():
        s = c["semantic_success"]
        print(
            f"{result['central_subject']} - {other}: success {s['diff']:+.3f} [{s['ci_low']:+.3f}, {s['ci_high']:+.3f}], "
            f"McNemar p = {s['mcnemar_p']:.3g}; tokens {_times(c['generated_tokens_ratio'])}; "
            f"collateral {c['collateral']['diff']:+.3f}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/bench_learning")
    parser.add_argument("--json", action="store_true", help="print the result as JSON (its last line)")
    parser.add_argument("--save", help="also write the JSON result to this file")
    parser.add_argument(
        "--report",
        action="append",
        help="analyse this report directory (its episodes.parquet) instead of running; repeat it for one report per case set",
    )
    parser.add_argument(
        "--pair",
        nargs=2,
        action="append",
        metavar=("A", "B"),
        help="with --report: run B against run A (their directories) on shared cases; repeat it to pool pairs over seeds",
    )
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args(argv)
    if args.pair and not args.report:
        parser.error("--pair compares two runs of a report: give --report REPORT_DIR")
    if args.report:
        if args.overrides:
            parser.error("--report analyses finished runs: key=value overrides do not apply")
        result = analyse_report([Path(r) for r in args.report], args.pair)
        return _emit(result, args)
    config = load_main_job_config(out=args.out, overrides=[*DEFAULTS, *args.overrides])
    start = time.perf_counter()
    result_run = run_main_job(config, progress=not args.json)
    wall = time.perf_counter() - start
    episodes = pd.read_parquet(Path(result_run.report.out) / "episodes.parquet")
    result = {
        "model": config.train.model.label,
        "date": time.strftime("%Y-%m-%d"),
        "machine": _machine(),
        "wall_s": round(wall, 1),
        "cases": {"train": config.train.data.train_cases, "eval": int(episodes["case_id"].nunique())},
        "config": to_dict(config),
        **analyse(episodes, seed=config.train.seed),
    }
    return _emit(result, args)


def _machine() -> str:
    """This machine, with whether its CPU has native bf16: the same SFT command ends 0.05 apart with
    and without it (RESULTS.md), so a figure is read with the arithmetic that made it."""
    bf16 = "native bf16" if cpu_bf16_native() else "no native bf16"
    return f"{platform.machine()}, {os.cpu_count()} CPUs, {bf16}, python {platform.python_version()}"


def read_reports(report_dirs: Sequence[Path]) -> pd.DataFrame:
    """The scored episodes of one or more reports (one per held-out set: `contractrl report` joins
    one case set's targets), refused where two reports score the same run on the same case."""
    frames = []
    for report_dir in report_dirs:
        path = report_dir / "episodes.parquet"
        if not path.is_file():
            hint = f"write it with `contractrl report RUN_DIR ... --out {report_dir}`"
            raise SystemExit(f"no scored episodes at {path}: {hint}")
        frame = pd.read_parquet(path)
        settings = report_dir / "report.json"  # `run` is relative to the report's job directory
        job_dir = json.loads(settings.read_text()).get("job_dir") if settings.is_file() else None
        if job_dir:  # absolute again, so a run named relative to here or absolutely matches (matching_runs)
            frame["run"] = [str(Path(job_dir) / run) for run in frame["run"]]
        frames.append(frame)
    # a run may hold several episodes of a case in one report (a group); in two reports it is twice
    keys = pd.concat([f[["run", "case_id"]].drop_duplicates() for f in frames], ignore_index=True)
    twice = keys.duplicated()
    if twice.any():
        row = keys[twice].iloc[0]
        raise SystemExit(f"run {row['run']} is scored on case {row['case_id']} in more than one report: give each once")
    return pd.concat(frames, ignore_index=True)


def analyse_report(report_dirs: Sequence[Path], pairs: Sequence[Sequence[str]] | None = None) -> dict[str, Any]:
    """The benchmark's figures over reports' scored episodes (every learned run in them), or, with
    ``pairs`` [(A, B), ...], each run B against its run A, and with more than one pair, them
    together (:func:`combine_pairs`)."""
    dirs = list(report_dirs)
    episodes = read_reports(dirs)
    models = sorted(m for m in episodes["model"].unique() if m)
    head = {
        "model": ", ".join(models),
        "date": time.strftime("%Y-%m-%d"),
        "machine": _machine(),
        "report": str(dirs[0]) if len(dirs) == 1 else [str(d) for d in dirs],
        "cases": {"eval": int(episodes["case_id"].nunique())},
    }
    if not pairs:
        return {**head, **analyse(episodes)}
    compared = [pair_runs(episodes, a, b) for a, b in pairs]
    if len(compared) == 1:  # the shape of the results recorded before pairs could be pooled
        return {**head, "pair": compared[0]}
    return {**head, "pairs": compared, **combine_pairs(episodes, pairs)}


def _emit(result: dict[str, Any], args: argparse.Namespace) -> int:
    if args.save:
        Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        Path(args.save).write_text(json.dumps(result, indent=2) + "\n")
    if args.json:
        print(json.dumps(result))
    elif "pair" in result or "pairs" in result:
        print_pairs(result)
    else:
        print_report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
