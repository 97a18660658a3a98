"""Analysis: metrics on hand-built ledgers with known answers, every table's arithmetic, the study
drivers, and the report of a small real run (every table and plot, parquet that pandas reads)."""

from __future__ import annotations

import html
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from contractrl.analysis.join import join_runs, read_episodes
from contractrl.analysis.plots import PLOTS
from contractrl.analysis.report import TABLE_NAMES
from contractrl.analysis.tables import TABLES, build_tables, calibration, p95, summarize, trajectories, with_system
from contractrl.experiments.studies import StudySetup, budget_study, chain_cases, evaluate, horizon_study, rebudget
from contractrl.rollout.policies import HeuristicPolicy, ReplayPolicy
from contractrl.rollout.prompts import FEEDBACK, render_blocks
from contractrl.rollout.run import write_run
from contractrl.rollout.runner import EpisodeRunner, LocalPool
from contractrl.tasks.cases import Case
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.tasks.store import write_case_set


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Case]]:
    root = tmp_path_factory.mktemp("analysis")
    config = GenerateConfig(seed=5, n=26)
    generated = generate_cases(config)
    write_case_set(generated, root / "cases", config.to_dict())
    return root / "cases", generated


def _first(generated: list[Case], family: str) -> Case:
    return next(c for c in generated if c.public.family == family)


# --- hand-built ledgers: scripted answers through the real transition, known metrics ----------


def test_metrics_of_a_hand_built_ledger(cases: tuple[Path, list[Case]], tmp_path: Path) -> None:
    case_dir, generated = cases
    fixed = _first(generated, "missing_required")
    retried = _first(generated, "wrong_type")
    refused = _first(generated, "constraint_violation")
    abstain = _first(generated, "immutable_field")
    wrong_pointer = _first(generated, "wrong_pointer")
    gold = json.dumps(fixed.offline.target_patch)
    script = {
        fixed.public.case_id: [gold],
        retried.public.case_id: ['[{"op": "remove", "path": "/no_such_field"}]', json.dumps(retried.offline.target_patch)],
        refused.public.case_id: ["not json", "still not json"],
        abstain.public.case_id: ["ABSTAIN"],
    }
    chosen = [fixed, retried, refused, abstain]
    write_run(
        tmp_path / "patch",
        {},
        EpisodeRunner(ReplayPolicy(script), LocalPool(1)),
        [c.public for c in chosen],
        group=1,
        seed=0,
    )
    # a whole object equal to the target, on a case whose report points elsewhere: one collateral leaf
    whole = {wrong_pointer.public.case_id: [json.dumps(wrong_pointer.offline.target)]}
    runner = EpisodeRunner(ReplayPolicy(whole), LocalPool(1), arm="full_regen")
    write_run(tmp_path / "whole", {}, runner, [wrong_pointer.public], group=1, seed=0, labels={"mode": "case_matched"})

    frame = read_episodes(join_runs([tmp_path / "patch", tmp_path / "whole"], [case_dir], tmp_path / "joined", use_ray=False))
    by_case = frame.set_index("case_id")
    row = by_case.loc[fixed.public.case_id]
    assert (row.semantic_success, row.exact_patch_match, row.pointer_fix, row.first_attempt_valid) == (True, True, True, True)
    assert (row.retries, row.attempts, row.collateral, row.masked_attempts) == (0, 1, 0, 0)
    row = by_case.loc[retried.public.case_id]
    assert (row.semantic_success, row.first_attempt_valid, row.first_outcome) == (True, False, "path_unavailable")
    assert (row.retries, row.attempts, row.masked_attempts) == (1, 2, 1)  # r = a - 1
    row = by_case.loc[refused.public.case_id]
    assert (row.fail_closed, row.schema_valid, row.semantic_success, row.malformed_attempts) == (True, False, False, 2)
    row = by_case.loc[abstain.public.case_id]
    assert (row.abstained, row.semantic_success, row.final_object_match, row.fail_closed) == (True, True, True, False)
    assert row.op_family == "abstain" and row.structure == "abstain"
    row = by_case.loc[wrong_pointer.public.case_id]
    assert (row.arm, row["mode"], row.final_object_match, row.collateral) == ("full_regen", "case_matched", True, 1)
    assert pd.isna(row.exact_patch_match) and pd.isna(row.pointer_fix)  # undefined for whole objects
    assert frame["unsafe_dispatch"].sum() == 0 and frame["leakage"].sum() == 0
    assert frame["confidence"].isna().all()  # scripted policies have no log-probabilities
    assert (frame["study"] == "main").all() and (frame["feedback"] == "full").all()


def test_structure_and_op_family_follow_the_canonical_repair(cases: tuple[Path, list[Case]]) -> None:
    from contractrl.analysis.metrics import op_family, structure

    _, generated = cases
    shapes = {c.public.family: structure(c.public, c.offline) for c in generated}
    assert shapes["multi_field"] == "multi_field"
    assert shapes["array_element"] == "array"
    assert shapes["immutable_field"] == "abstain"
    stale = _first(generated, "stale_schema")
    assert op_family(stale.offline) == "move"


# --- tables on hand-made frames ------------------------------------------------------------------


def _episodes(**columns: list) -> pd.DataFrame:
    n = len(next(iter(columns.values())))
    base = {
        "episode_id": [f"e{i}" for i in range(n)],
        "case_id": [f"c{i}" for i in range(n)],
        "case_family": ["wrong_type"] * n,
        "arm": ["contractrl"] * n,
        "policy": ["hf"] * n,
        "stage": [""] * n,
        "seed": [0] * n,
        "sample": [0] * n,
        "study": ["main"] * n,
        "mode": ["same_information"] * n,
        "run": ["r"] * n,
    }
    base.update(columns)
    return with_system(pd.DataFrame(base))


def test_p95_and_denominators() -> None:
    latency = [0.1, 0.2, 0.3, 0.4, 10.0]
    assert p95(pd.Series(latency)) == pytest.approx(np.percentile(latency, 95))
    assert math.isnan(p95(pd.Series([], dtype=float)))
    frame = _episodes(
        latency_s=latency,
        semantic_success=[True, False, True, True, False],
        exact_patch_match=[True, None, False, None, True],
        seed=[0, 0, 1, 1, 1],
        case_family=["wrong_type", "wrong_type", "wrong_type", "wrong_type", "nested_field"],
    )
    table = summarize(
        frame, ["case_family"], [("semantic_success", "mean"), ("exact_patch_match", "rate_n"), ("latency_s", "p95")]
    )
    wrong = table.set_index("case_family").loc["wrong_type"]
    assert (wrong.episodes, wrong.cases, wrong.seeds) == (4, 4, 2)
    assert wrong.semantic_success_mean == 0.75
    assert (wrong.exact_patch_match_mean, wrong.exact_patch_match_n) == (0.5, 2)  # its own denominator
    assert wrong.latency_s_p95 == pytest.approx(np.percentile(latency[:4], 95))
    assert wrong.semantic_success_seed_sd == pytest.approx(np.std([0.5, 1.0], ddof=1))
    assert len(table) == 2  # families are never pooled


def test_coverage_and_risk_at_fixed_thresholds() -> None:
    frame = _episodes(
        confidence=[0.95, 0.85, 0.75, 0.55, 0.40, float("nan")],
        schema_valid=[True, True, True, True, True, False],
        semantic_success=[True, False, True, False, True, False],
        case_id=[f"c{i}" for i in range(6)],
    )
    table = calibration(frame, (0.5, 0.8)).frame.set_index("threshold")
    # NaN-confidence episodes are not part of calibration: 5 episodes
    assert table.loc[0.5, "episodes"] == 5
    assert table.loc[0.5, "coverage"] == pytest.approx(4 / 5)
    assert table.loc[0.5, "risk"] == pytest.approx(2 / 4)
    assert table.loc[0.5, "wrong_withheld_share"] == 0.0  # both wrong releases are still covered
    assert table.loc[0.8, "coverage"] == pytest.approx(2 / 5)
    assert table.loc[0.8, "risk"] == pytest.approx(1 / 2)
    assert table.loc[0.8, "wrong_withheld_share"] == pytest.approx(1 / 2)  # the 0.55 wrong release is withheld


def test_figures_facet_by_system_and_say_what_did_not_run(tmp_path: Path) -> None:
    """A per-family figure has a panel per system and one legend entry per family, outside the
    axes; a figure whose study was not given is a "not run: <command>" note, not an empty box."""
    from contractrl.analysis.plots import _per_system_families, write_plots
    from contractrl.analysis.tables import Table

    families = ["wrong_type", "nested_field", "enum_x"]
    frame = _episodes(
        confidence=[0.9, 0.8, 0.7, 0.6, 0.9, 0.4] * 2,
        schema_valid=[True] * 12,
        semantic_success=[True, False] * 6,
        case_family=[families[i % 3] for i in range(12)],
        arm=["contractrl"] * 6 + ["full_regen"] * 6,
    )
    table = calibration(frame, (0.5, 0.8))
    figure = _per_system_families("t", table.frame, "threshold", "coverage", "risk", "coverage", "risk", "nothing")
    visible = [ax for ax in figure.axes if ax.get_visible()]
    assert [ax.get_title() for ax in visible] == sorted(set(table.frame["system"]))  # a panel per system
    (legend,) = figure.legends
    assert sorted(t.get_text() for t in legend.get_texts()) == sorted(families)  # each family once
    assert all(not ax.get_legend() for ax in visible)  # no legend inside a panel
    assert not any(t.get_text() == "nothing" for ax in visible for t in ax.texts)
    # a system none of whose answers reached a threshold: risk is undefined, and its panel says so
    blind = table.frame.assign(risk=np.where(table.frame["system"] == "full_regen:hf", np.nan, table.frame["risk"]))
    figure = _per_system_families("t", blind, "threshold", "coverage", "risk", "coverage", "risk", "nothing")
    notes = {ax.get_title(): [t.get_text() for t in ax.texts] for ax in figure.axes if ax.get_visible()}
    assert notes == {"contractrl:hf": [], "full_regen:hf": ["nothing"]}
    empty = Table("budget", "Table 30", "t", table.frame.iloc[0:0])
    plots = {
        p.name: p
        for p in write_plots(
            [table, empty, *(Table(n, "t", "", table.frame.iloc[0:0]) for n in ("same_information", "scaling", "horizon"))],
            tmp_path,
        )
    }
    assert plots["coverage_risk"].not_run is None
    assert plots["budget_frontier"].not_run == "not run: contractrl study budget --cases DIR --policy POLICY --out STUDY"
    assert all(p.path.read_bytes()[:4] == b"\x89PNG" for p in plots.values())  # the same files either way


def test_horizon_success_needs_every_step() -> None:
    frame = _episodes(
        study=["horizon"] * 7,
        horizon=[3] * 7,
        trajectory=[0, 0, 0, 1, 1, 1, 2],
        step=[0, 1, 2, 0, 1, 2, 0],
        semantic_success=[True, True, True, True, False, True, True],
        schema_valid=[True] * 7,
        abstained=[False] * 7,
        retries=[0, 1, 0, 0, 0, 0, 0],
        generated_tokens=[10] * 7,
        latency_s=[0.1] * 7,
        collateral=[0, 0, 1, 0, 0, 0, 0],
    )
    chains = trajectories(frame).set_index("trajectory")
    assert chains.loc[0, "trajectory_success"] and not chains.loc[1, "trajectory_success"]
    assert not chains.loc[2, "trajectory_success"] and not chains.loc[2, "completion"]  # 1 of 3 steps: incomplete
    first = chains.loc[0, ["trajectory_retries", "trajectory_collateral", "trajectory_generated_tokens"]]
    assert first.tolist() == [1, 1, 30]  # sums over the steps
    table = TABLES["horizon"](frame).frame
    assert table.loc[0, "trajectories"] == 3 and table.loc[0, "trajectory_success_mean"] == pytest.approx(1 / 3)
    assert table.loc[0, "trajectory_generated_tokens_mean"] == pytest.approx(70 / 3)  # 30, 30 and 10 tokens


def test_paired_table_matches_the_statistics_functions() -> None:
    from contractrl.analysis.stats import mcnemar_exact, paired_bootstrap

    rng = np.random.default_rng(0)
    n = 40
    mine = rng.random(n) < 0.8
    theirs = rng.random(n) < 0.5
    rows = []
    for arm, policy, success in (("contractrl", "hf", mine), ("full_regen", "hf", theirs)):
        rows.append(
            _episodes(
                case_id=[f"c{i}" for i in range(n)],
                arm=[arm] * n,
                policy=[policy] * n,
                semantic_success=success.tolist(),
                schema_valid=[True] * n,
                retries=[0] * n,
                generated_tokens=rng.integers(10, 40, n).tolist(),
                collateral=[0] * n,
                latency_s=[0.1] * n,
            )
        )
    frame = pd.concat(rows, ignore_index=True)
    table = TABLES["paired"](frame).frame.set_index("metric")
    row = table.loc["semantic_success"]
    assert (row.system, row.baseline, row.pairs) == ("contractrl:hf", "full_regen:hf", n)
    assert row.mcnemar_p == pytest.approx(mcnemar_exact(theirs.tolist(), mine.tolist()))
    order = sorted(range(n), key=lambda i: f"c{i}")  # the table pairs units in case-id order
    boot = paired_bootstrap(theirs[order].astype(float), mine[order].astype(float), resamples=2000, seed=0)
    assert (row.difference_mean, row.ci_low, row.ci_high) == pytest.approx((boot.difference, boot.low, boot.high))
    assert (row.system_mean, row.baseline_mean) == pytest.approx((mine.mean(), theirs.mean()))
    assert not math.isnan(table.loc["generated_tokens", "effect_size_dz"])


def _grpo_variant(run: str, success: list[bool], seed: int = 0) -> pd.DataFrame:
    n = len(success)
    return _episodes(
        case_id=[f"c{i}" for i in range(n)],
        stage=["grpo"] * n,
        seed=[seed] * n,
        run=[run] * n,
        semantic_success=success,
        schema_valid=success,
        retries=[0] * n,
        generated_tokens=[20] * n,
        collateral=[0] * n,
        latency_s=[0.1] * n,
    )


def test_runs_of_one_system_that_share_episodes_are_named_apart() -> None:
    """Two GRPO variants from one adapter carry the same arm, policy and stage; pooled, the paired
    table would pair each case with two episodes (it raised on unequal lengths)."""
    n = 12
    sft = _grpo_variant("runs/base/eval/after-sft", [i % 2 == 0 for i in range(n)]).assign(arm="patch_sft", stage="sft")
    a = _grpo_variant("runs/kl/eval/after-grpo", [True] * n)
    b = _grpo_variant("runs/t07/eval/after-grpo", [i % 3 == 0 for i in range(n)])
    frame = with_system(pd.concat([sft, a, b], ignore_index=True))
    assert sorted(frame["system"].unique()) == ["contractrl:hf@grpo [kl]", "contractrl:hf@grpo [t07]", "patch_sft:hf@sft"]
    table = TABLES["paired"](frame).frame
    success = table[table["metric"] == "semantic_success"].set_index("baseline")
    assert set(success.index) == {"contractrl:hf@grpo [t07]", "patch_sft:hf@sft"}
    assert (success["pairs"] == n).all()
    assert success.loc["patch_sft:hf@sft", "difference_mean"] == pytest.approx(0.5)


def test_runs_of_one_system_on_other_seeds_pool() -> None:
    frame = with_system(
        pd.concat(
            [_grpo_variant("runs/s0/eval/after-grpo", [True] * 4, 0), _grpo_variant("runs/s1/eval/after-grpo", [False] * 4, 1)],
            ignore_index=True,
        )
    )
    assert set(frame["system"]) == {"contractrl:hf@grpo"}


def test_an_absolute_policy_path_becomes_a_short_system_name() -> None:
    """``--policy hf:/home/me/runs/tiny/adapter`` records the absolute path as the policy; the
    system names it from the run directory on, the same on every machine and checkout."""
    from contractrl.analysis.systems import policy_label

    here = _grpo_variant("runs/a/eval", [True] * 2).assign(policy="/home/me/checkout/runs/tiny/adapter", stage=None)
    there = _grpo_variant("runs/b/eval", [True] * 2, seed=1).assign(policy="/srv/ci/w/runs/tiny/adapter", stage=None)
    assert set(with_system(pd.concat([here, there], ignore_index=True))["system"]) == {"contractrl:tiny/adapter"}
    assert policy_label("/data/runs/tiny/stages/sft") == "tiny/stages/sft"
    assert policy_label("/data/runs/tune/lora_rank-local/best/adapter") == "lora_rank-local/best/adapter"
    assert policy_label("/models/qwen2.5-0.5b-instruct") == "models/qwen2.5-0.5b-instruct"
    # names and relative paths are kept: a hub name has a slash too
    for name in ("heuristic", "smollm2/lora-r16", "Qwen/Qwen2.5-0.5B-Instruct", "runs/tiny/adapter"):
        assert policy_label(name) == name


def test_run_names_keep_only_the_parts_that_differ() -> None:
    from contractrl.analysis.tables import run_names

    assert run_names(["/w/runs/a/eval/after-grpo", "/w/runs/b/eval/after-grpo"]) == {
        "/w/runs/a/eval/after-grpo": "a",
        "/w/runs/b/eval/after-grpo": "b",
    }
    assert run_names(["runs/x/1", "runs/y/2"]) == {"runs/x/1": "x/1", "runs/y/2": "y/2"}


# --- prompts and drivers -----------------------------------------------------------------------


def test_feedback_variants_show_only_their_part_of_the_report(cases: tuple[Path, list[Case]]) -> None:
    from contractrl.rollout.env import RepairEnv

    case = _first(cases[1], "wrong_type").public
    state = RepairEnv(case).reset()
    error = state.report.errors[0]
    blocks = {v: render_blocks(case, state, "contractrl", feedback=v) for v in FEEDBACK}
    assert error.code.value in blocks["full"]["errors"] and error.pointer in blocks["full"]["errors"]
    assert error.pointer in blocks["pointer_only"]["errors"] and error.code.value not in blocks["pointer_only"]["errors"]
    assert error.code.value in blocks["code_only"]["errors"] and error.pointer not in blocks["code_only"]["errors"]
    assert blocks["text"]["errors"] == f"- {error.message}"
    assert "errors" not in blocks["context_only"] and blocks["context_only"]["candidate"] == blocks["full"]["candidate"]


def test_chains_stay_within_a_family_and_are_seeded(cases: tuple[Path, list[Case]]) -> None:
    public = [c.public for c in cases[1]] * 1
    family = {c.case_id: c.family for c in public}
    chains = chain_cases(public, 2, seed=1)
    assert chains == chain_cases(public, 2, seed=1)
    assert all(len(chain) == 2 and len({family[c] for c in chain}) == 1 for chain in chains)
    assert len({c for chain in chains for c in chain}) == 2 * len(chains)  # each case once
    assert chain_cases(public, 5, seed=1) == []  # two cases per family cannot fill five steps
    with pytest.raises(ValueError):
        chain_cases(public, 0, seed=1)
    assert {(c.max_attempts, c.max_ops) for c in rebudget(public, 3, 1)} == {(3, 1)}


def test_study_runs_resume_and_carry_their_labels(cases: tuple[Path, list[Case]], tmp_path: Path) -> None:
    case_dir, generated = cases
    public = [c.public for c in generated]
    made = []

    def make(feedback: str) -> HeuristicPolicy:
        made.append(feedback)
        return HeuristicPolicy()

    setup = StudySetup(make, LocalPool(1), progress=False)
    runs = budget_study(setup, public, tmp_path, budgets=((1, 1), (2, 2)))
    runs += horizon_study(setup, public, tmp_path, horizons=(1, 2))
    assert len(made) == 4
    again = budget_study(setup, public, tmp_path, budgets=((1, 1), (2, 2)))
    assert again == runs[:2] and len(made) == 4  # frozen runs are kept, not redone
    frame = read_episodes(join_runs(runs, [case_dir], tmp_path / "joined", use_ray=False))
    budgets = frame[frame["study"] == "budget"].groupby(["max_attempts", "max_ops"]).size()
    assert budgets.to_dict() == {(1, 1): 26, (2, 2): 26}
    two = frame[frame["horizon"] == 2]
    assert all(sorted(steps) == [0, 1] for steps in two.groupby("trajectory")["step"].apply(list))
    # an interrupted (unfrozen) run is redone
    manifest = json.loads((runs[0] / "manifest.json").read_text())
    del manifest["ledger_sha256"]
    (runs[0] / "manifest.json").write_text(json.dumps(manifest))
    evaluate(setup, public[:3], runs[0], {"study": "budget"})
    assert json.loads((runs[0] / "manifest.json").read_text())["ledger_sha256"]


def test_unknown_run_labels_are_refused(cases: tuple[Path, list[Case]], tmp_path: Path) -> None:
    from contractrl.errors import ContractRLError

    case_dir, generated = cases
    runner = EpisodeRunner(HeuristicPolicy(), LocalPool(1))
    write_run(tmp_path / "run", {}, runner, [generated[0].public], group=1, seed=0, labels={"studdy": "x"})
    with pytest.raises(ContractRLError, match="unknown run labels"):
        join_runs([tmp_path / "run"], [case_dir], tmp_path / "out", use_ray=False)


# --- the report of a small real run -------------------------------------------------------------


def _cli(*args: str, cwd: Path) -> dict:
    exe = Path(sys.executable).with_name("contractrl")
    prefix = [str(exe)] if exe.exists() else [sys.executable, "-m", "contractrl"]
    proc = subprocess.run([*prefix, *args], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, (args, proc.stdout[-1000:], proc.stderr[-3000:])
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_report_of_a_small_real_run(tmp_path: Path) -> None:
    _cli("cases", "generate", "--seed", "4", "--n", "39", "--out", "cases", cwd=tmp_path)
    common = ("--cases", "cases", "--workers", "0")
    _cli("rollout", *common, "--policy", "heuristic", "--out", "runs/heuristic", cwd=tmp_path)
    _cli("rollout", *common, "--policy", "replay", "--out", "runs/replay", cwd=tmp_path)
    _cli(
        "rollout",
        *common,
        "--policy",
        "replay",
        "--arm",
        "full_regen",
        "--mode",
        "case_matched",
        "--out",
        "runs/fr",
        cwd=tmp_path,
    )
    _cli("rollout", *common, "--policy", "heuristic", "--mode", "case_matched", "--out", "runs/heur-cm", cwd=tmp_path)
    # the model's runs (the only ones with log-probabilities) use a smaller case set: CPU generation
    _cli("cases", "generate", "--seed", "6", "--n", "8", "--out", "few", cwd=tmp_path)
    tiny = ("--cases", "few", "--policy", "hf:tiny", "--max-new-tokens", "16", "--temperature", "0")
    _cli("rollout", *tiny, "--workers", "0", "--out", "runs/tiny", cwd=tmp_path)
    _cli("study", "feedback", *tiny, "--out", "runs/feedback", "--no-progress", cwd=tmp_path)
    _cli("rollout", "--cases", "few", "--workers", "0", "--policy", "heuristic", "--out", "runs/heuristic-few", cwd=tmp_path)
    for study in ("budget", "horizon"):
        _cli("study", study, "--cases", "cases", "--out", f"runs/{study}", "--no-progress", cwd=tmp_path)
    _cli("study", "noise", "--n", "16", "--out", "noise", "--no-progress", cwd=tmp_path)
    args = ("--cases", "cases", "--cases", "few", "--out", "report", "--workers", "0", "--no-progress")
    result = _cli("report", "runs", "noise", *args, cwd=tmp_path)  # the Ray Data join is tested in test_join

    out = tmp_path / "report"
    assert result["runs"] == 6 + 5 + 5 + 2 + 1  # 6 rollouts, 5 feedback variants, 5 budgets, horizons 1 and 3, noise
    assert {Path(p).stem for p in result["tables"]} == set(TABLE_NAMES) == {*TABLES, "scaling"}
    for name in TABLE_NAMES:
        frame = pd.read_parquet(out / "tables" / f"{name}.parquet")
        assert (out / "tables" / f"{name}.md").read_text().startswith("# ")
        if name != "transfer":  # the transfer study trains five policies; tested on its own
            assert len(frame) > 0, name
            # rows never pool families, or say how many they pool (the scaling table: one figure a size)
            assert "case_family" in frame.columns or "families" in frame.columns, name
    for name in PLOTS:
        assert (out / "plots" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    episodes = pd.read_parquet(out / "episodes.parquet")
    assert episodes["unsafe_dispatch"].sum() == 0
    assert set(episodes["feedback"]) == set(FEEDBACK)
    by_run = episodes.groupby("run")["model"].agg(set)
    assert by_run[by_run.index.str.endswith("tiny")].tolist() == [{"tiny"}]  # a model's rollout carries its name
    assert by_run[by_run.index.str.endswith("heuristic-few")].tolist() == [{""}]
    paired = pd.read_parquet(out / "tables" / "paired.parquet")
    assert set(paired["system"]) == {"contractrl:tiny"} and set(paired["baseline"]) == {"contractrl:heuristic"}
    calibration_rows = pd.read_parquet(out / "tables" / "calibration.parquet")
    assert set(calibration_rows["system"]) == {"contractrl:tiny"}  # only the model has log-probabilities
    index = (out / "index.html").read_text()
    assert all(f"plots/{name}.png" in index for name in PLOTS) and "Table 36" in index
    assert json.loads((out / "report.json").read_text())["thresholds"] == [0.5, 0.6, 0.7, 0.8, 0.9]
    # the same inputs give the same tables (rows sorted, scoring order does not matter)
    again = build_tables(episodes)
    pd.testing.assert_frame_equal(again[0].frame, pd.read_parquet(out / "tables" / "same_information.parquet"))


def test_report_refuses_a_tampered_run(tmp_path: Path) -> None:
    _cli("cases", "generate", "--seed", "4", "--n", "13", "--out", "cases", cwd=tmp_path)
    _cli("rollout", "--cases", "cases", "--workers", "0", "--policy", "heuristic", "--out", "runs/h", cwd=tmp_path)
    shard = next((tmp_path / "runs/h/ledger").glob("shard-*.parquet"))
    table = pd.read_parquet(shard)
    table.loc[0, "generated_tokens"] = 999
    table.to_parquet(shard, index=False)
    exe = Path(sys.executable).with_name("contractrl")
    proc = subprocess.run(
        [str(exe), "report", "runs", "--cases", "cases", "--out", "rep"], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 2 and "were frozen; not parsed" in proc.stderr  # refused on its size, never read
    assert not (tmp_path / "rep" / "episodes.parquet").exists()


def test_report_cli_errors(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("contractrl")
    proc = subprocess.run([str(exe), "report", str(tmp_path), "--out", str(tmp_path / "r")], capture_output=True, text=True)
    assert proc.returncode == 2 and "no rollout runs" in proc.stderr
    proc = subprocess.run([str(exe), "report", "x", "--out", "r", "--thresholds", "0.5,2"], capture_output=True, text=True)
    assert proc.returncode == 2 and "thresholds" in proc.stderr


def test_transfer_trains_on_the_other_families_and_evaluates_on_the_held_out_one(tmp_path: Path) -> None:
    from contractrl.configtree import load_config
    from contractrl.experiments.studies import transfer_study
    from contractrl.trainer.config import TrainConfig

    overrides = [
        "model.name=tiny",
        "data.train_cases=12",
        "data.eval_cases=0",
        "stages=[sft]",
        "sft.steps=2",
        "sft.batch_size=4",
        "eval.enabled=false",
        "eval.max_new_tokens=12",
        "resources.ray=false",
        "resources.num_workers=0",
        "deepspeed.enabled=false",
        "wandb.mode=disabled",
        f"model.cache_dir={tmp_path / 'models'}",
    ]
    config = load_config(TrainConfig, None, overrides)
    runs = transfer_study(config, tmp_path / "transfer", families=("file", "calendar"), heldout_cases=4, progress=False)
    assert [r.parent.name for r in runs] == ["transfer-file", "transfer-calendar"]
    frame = read_episodes(join_runs(runs, [r.parent / "cases" / "heldout" for r in runs], tmp_path / "joined", use_ray=False))
    assert set(zip(frame["heldout_tool_family"], frame["train_tool_families"], strict=True)) == {
        ("file", "calendar"),
        ("calendar", "file"),
    }
    assert (frame["tool_family"] == frame["heldout_tool_family"]).all()  # evaluated only on the held-out family
    train_manifest = json.loads(
        (tmp_path / "transfer" / "transfer-file" / "train" / "cases" / "train" / "manifest.json").read_text()
    )
    assert train_manifest["tool_family_counts"].keys() == {"calendar"}
    table = TABLES["transfer"](with_system(frame)).frame
    assert set(table["heldout_tool_family"]) == {"file", "calendar"}
    assert transfer_study(config, tmp_path / "transfer", families=("file", "calendar"), heldout_cases=4, progress=False) == runs


def test_standing_names_the_leader_its_margin_and_the_families_behind_it() -> None:
    """One line per slice (the catalog first), never pooling real users' questions with it."""
    import pandas as pd

    from contractrl.analysis.report import standing

    def episodes(policy: str, stage: str, wins: dict[str, list[bool]], study: str = "main") -> list[dict[str, object]]:
        condition = "" if study == "main" else "bfcl:live_simple"
        return [
            {
                "arm": "contractrl",
                "policy": policy,
                "stage": stage,
                "case_family": family,
                "case_id": f"{study}{family}{i}",
                "seed": 0,
                "sample": 0,
                "semantic_success": won,
                "study": study,
                "condition": condition,
            }
            for family, outcomes in wins.items()
            for i, won in enumerate(outcomes)
        ]

    frame = pd.DataFrame(
        episodes("lm", "grpo", {"immutable_field": [True, True], "wrong_type": [True, False]})
        + episodes("heuristic", "", {"immutable_field": [False, False], "wrong_type": [True, True]})
        + episodes("replay", "", {"immutable_field": [True, True], "wrong_type": [True, True]})
        + episodes("lm", "grpo", {"wrong_type": [False, False]}, study="bfcl")
        + episodes("heuristic", "", {"wrong_type": [True, False]}, study="bfcl")
    )
    line, bfcl = standing(frame)
    assert line.startswith(
        "built-in: contractrl:lm@grpo leads with 0.750 semantic success, +0.250 over contractrl:heuristic (0.500)"
    )
    assert "ahead on immutable_field (+1.00)" in line and "behind on wrong_type (-0.50)" in line
    assert "replay" not in line  # the oracle is a mechanism check, not a contender
    assert bfcl.startswith("bfcl:live_simple: contractrl:heuristic leads with 0.500 semantic success, +0.500 over")


def test_a_tie_at_the_top_is_called_a_tie_with_what_still_differs() -> None:
    import pandas as pd

    from contractrl.analysis.report import standing

    def rows(policy: str, arm: str, wins: list[bool], tokens: float) -> list[dict[str, object]]:
        return [
            {
                "arm": arm,
                "policy": policy,
                "stage": "sft" if policy == "lm" else "",
                "case_family": "wrong_type",
                "case_id": f"c{i}",
                "seed": 0,
                "sample": 0,
                "semantic_success": won,
                "study": "main",
                "condition": "",
                "generated_tokens": tokens,
            }
            for i, won in enumerate(wins)
        ]

    frame = pd.DataFrame(
        rows("lm", "contractrl", [True, True], 25.0)
        + rows("lm", "full_regen", [True, True], 66.0)
        + rows("heuristic", "contractrl", [True, False], 0.0)
    )
    (line,) = standing(frame)
    assert line == (
        "built-in: contractrl:lm@sft and full_regen:lm@sft tie at 1.000 semantic success; next is "
        "contractrl:heuristic (0.500); of the tied, contractrl:lm@sft generates the fewest tokens (25.0 per episode)."
    )


# --- outputs that explain themselves: a small report read as a user reads it ---------------------


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A job directory laid out as docs/analysis.md's snippets expect: ``runs/cases-heldout``, a
    heuristic and an oracle-replay rollout (both on the contractrl arm), budget and horizon studies
    and ``runs/report``."""
    from contractrl.analysis.report import build_report
    from contractrl.tasks.demonstrations import gold_answer

    root = tmp_path_factory.mktemp("job")
    runs = root / "runs"
    config = GenerateConfig(seed=4, n=26)
    generated = generate_cases(config)
    write_case_set(generated, runs / "cases-heldout", config.to_dict())
    public = [c.public for c in generated]
    heuristic = EpisodeRunner(HeuristicPolicy(), LocalPool(1))
    write_run(runs / "rollout-heuristic", {"policy": "heuristic"}, heuristic, public, group=1, seed=0)
    replay = ReplayPolicy({c.public.case_id: [gold_answer(c, "contractrl")] for c in generated})
    write_run(runs / "rollout-replay", {"policy": "replay"}, EpisodeRunner(replay, LocalPool(1)), public, group=1, seed=0)
    setup = StudySetup(lambda _: HeuristicPolicy(), LocalPool(1), progress=False)
    budget_study(setup, public, runs / "study-heuristic", budgets=((1, 1), (2, 2)))
    horizon_study(setup, public, runs / "study-heuristic", horizons=(1, 2))
    roots = [runs / "rollout-heuristic", runs / "rollout-replay", runs / "study-heuristic"]
    build_report(roots, runs / "report", cases=[runs / "cases-heldout"], use_ray=False, progress=False)
    return root


def _parquet_files(report: Path) -> list[Path]:
    return [report / "episodes.parquet", report / "overview.parquet", *sorted((report / "tables").glob("*.parquet"))]


def test_episodes_carry_their_system_a_unique_key_and_relative_runs(job: Path) -> None:
    report = job / "runs" / "report"
    episodes = pd.read_parquet(report / "episodes.parquet")
    assert episodes["episode_key"].is_unique
    assert not episodes["episode_id"].is_unique  # why the key exists: every run repeats case/arm/seed/sample
    assert json.loads((report / "report.json").read_text())["job_dir"] == str((job / "runs").resolve())
    assert {"rollout-heuristic", "rollout-replay", "study-heuristic/budget-b1-k1"} <= set(episodes["run"])
    assert not any(run.startswith("/") for run in episodes["run"])
    assert (episodes["episode_key"] == episodes["run"] + "/" + episodes["episode_id"]).all()
    main = episodes[episodes["study"] == "main"]
    # one arm, two systems: grouping by arm alone would pool the heuristic with the oracle
    assert set(main["arm"]) == {"contractrl"}
    assert set(main["system"]) == {"contractrl:heuristic", "contractrl:replay"}
    horizon = episodes[episodes["study"] == "horizon"]
    assert horizon["step"].notna().all() and main["step"].isna().all()


def test_every_written_column_is_typed_described_and_documented(job: Path) -> None:
    from contractrl.analysis.dictionary import DICTIONARY, descriptions, markdown

    docs = (Path(__file__).resolve().parents[1] / "docs" / "analysis.md").read_text()
    assert markdown() in docs  # the docs carry the dictionary verbatim
    written: set[str] = set()
    for path in _parquet_files(job / "runs" / "report"):
        described = descriptions(path)
        frame = pd.read_parquet(path)
        for column in frame.columns:
            written.add(column)
            assert described[column] == DICTIONARY[column].description != "", (path.name, column)
            assert str(frame[column].dtype) == DICTIONARY[column].dtype, (path.name, column, frame[column].dtype)
            assert f"| `{column}` |" in docs, column
        assert not [c for c in frame.columns if frame[c].dtype == object], path.name
    episodes = pd.read_parquet(job / "runs" / "report" / "episodes.parquet")
    assert str(episodes["max_attempts"].dtype) == "Int64" and episodes["max_attempts"].notna().any()
    assert str(episodes["exact_patch_match"].dtype) == "boolean"
    # an empty table (no case-matched runs were given) still has its typed, described columns
    case_matched = pd.read_parquet(job / "runs" / "report" / "tables" / "case_matched.parquet")
    assert case_matched.empty and str(case_matched["semantic_success_mean"].dtype) == "float64"
    # one name per quantity: no table reuses a per-episode name for an aggregate
    per_episode = {"collateral", "generated_tokens", "latency_s", "semantic_success", "retries", "probes"}
    for path in _parquet_files(job / "runs" / "report")[1:]:
        assert not per_episode & set(pd.read_parquet(path).columns), path.name


def _python_blocks(markdown_text: str) -> list[str]:
    blocks, current = [], None
    for line in markdown_text.splitlines():
        if current is None and line.strip() == "```python":
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_the_docs_pandas_snippets_give_the_tables_answers(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ```python block of docs/analysis.md runs against a generated report (their asserts
    compare the documented groupby with the written tables)."""
    blocks = _python_blocks((Path(__file__).resolve().parents[1] / "docs" / "analysis.md").read_text())
    assert len(blocks) >= 3
    monkeypatch.chdir(job)
    for block in blocks:
        exec(compile(block, "docs/analysis.md", "exec"), {})


CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
# appended to a copy of the page: after load, the page's and each table box's widths, and the images
_PROBE = """<script>
window.addEventListener("load", () => {
  const boxes = [...document.querySelectorAll(".scroll")];
  const result = {
    scrollWidth: document.documentElement.scrollWidth,
    innerWidth: window.innerWidth,
    images: document.images.length,
    broken: [...document.images].filter((i) => !i.complete || i.naturalWidth === 0).map((i) => i.src),
    wideTables: boxes.filter((b) => b.scrollWidth > b.clientWidth + 1).length,
  };
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(result);
  document.body.appendChild(pre);
});
</script>"""
_BROWSER = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,2000")


def _probe(page: Path) -> dict:
    probe = page.with_name(f"probe-{page.name}")
    probe.write_text(page.read_text().replace("</body>", _PROBE + "</body>"))
    args = [str(CHROMIUM), *_BROWSER, "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()]
    dom = subprocess.run(args, capture_output=True, text=True, timeout=120).stdout
    found = re.search(r'<pre id="probe">([^<]*)</pre>', dom)
    assert found, dom[-2000:]
    return json.loads(html.unescape(found.group(1)))


def _not_blank(png: Path) -> None:
    from matplotlib.image import imread

    pixels = imread(png)
    assert pixels.std() > 0.01, f"{png.name} is blank"


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install -y chromium): nothing renders the page")
def test_the_report_page_renders_without_blank_figures_or_overflow(job: Path, tmp_path: Path) -> None:
    report = job / "runs" / "report"
    probe = _probe(report / "index.html")
    assert probe["scrollWidth"] <= probe["innerWidth"], probe  # nothing widens the page past the window
    not_run = (report / "index.html").read_text().count("class='not-run'")  # no model ran: no coverage, no scaling
    assert probe["images"] == len(PLOTS) - not_run == 3 and probe["broken"] == [], probe
    assert probe["wideTables"] == 0, probe  # at 1280 px every table of this report shows all its columns
    shot = tmp_path / "page.png"
    subprocess.run([str(CHROMIUM), *_BROWSER, f"--screenshot={shot}", (report / "index.html").as_uri()], timeout=120, check=True)
    _not_blank(shot)
    for name in PLOTS:
        _not_blank(report / "plots" / f"{name}.png")
    # the probe can fail: a page with a block wider than the window is caught
    wide = tmp_path / "wide.html"
    wide.write_text("<!doctype html><html><body><div style='width:3000px'>x</div></body></html>")
    assert _probe(wide)["scrollWidth"] > 1280
