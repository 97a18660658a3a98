"""`bench_learning.py --report R --pair A B`: two runs of one role, compared case by case.

The benchmark itself is run by hand (it trains for an hour); its report analysis is pure pandas over
a report's ``episodes.parquet``, tested here on small hand-built frames whose answers are known.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from contractrl.analysis import learning


def _episodes(run: str, solved: dict[str, bool], family: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run": run,
            "case_id": list(solved),
            "case_family": [family[c] for c in solved],
            "semantic_success": list(solved.values()),
            "arm": "contractrl",
            "stage": "sft",
            "policy": "hf:smollm2",
            "model": "smollm2",
        }
    )


FAMILY = {"c1": "wrong_type", "c2": "wrong_type", "c3": "multi_field", "c4": "multi_field", "c5": "unrepairable"}


def _report(tmp_path: Path) -> Path:
    a = _episodes("runs/a/eval/sft", {"c1": True, "c2": False, "c3": True, "c4": False, "c5": False}, FAMILY)
    b = _episodes("runs/b/eval/sft", {"c1": True, "c2": True, "c3": False, "c4": True, "c5": False}, FAMILY)
    report = tmp_path / "report"
    report.mkdir()
    pd.concat([a, b]).to_parquet(report / "episodes.parquet")
    return report


def test_pair_counts_gains_and_losses_per_family(tmp_path: Path) -> None:
    episodes = pd.read_parquet(_report(tmp_path) / "episodes.parquet")
    pair = learning.pair_runs(episodes, "runs/a", "runs/b")
    assert pair["gained"] == ["c2", "c4"] and pair["lost"] == ["c3"]
    pooled = pair["pooled"]
    assert (pooled["n"], pooled["a"], pooled["b"], pooled["gained"], pooled["lost"]) == (5, 0.4, 0.6, 2, 1)
    assert pooled["diff"] == pytest.approx(0.2)
    assert pooled["mcnemar_p"] == pytest.approx(1.0)  # 2 against 1 discordant pairs
    assert pair["single_field"]["n"] == 2 and pair["single_field"]["gained"] == 1
    assert pair["families"]["multi_field"] == {"n": 2, "baseline": 0.5, "candidate": 0.5, "gained": 1, "lost": 1}
    assert pair["families"]["unrepairable"]["baseline"] == 0.0


def test_pair_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = _report(tmp_path)
    assert learning.main(["--report", str(report), "--pair", "runs/a", "runs/b/eval/sft", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["pair"]["candidate"] == "runs/b/eval/sft" and result["cases"] == {"eval": 5}
    assert learning.main(["--report", str(report), "--pair", "runs/a", "runs/b"]) == 0
    table = capsys.readouterr().out
    assert "| multi_field | 2 | 0.500 | 0.500 | 1 | 1 |" in table
    assert "B - A, pooled: 0.400 -> 0.600, +0.200" in table


def _two_seed_report(tmp_path: Path) -> Path:
    """Pair 1 is _report's a -> b; pair 2 (c -> d, another seed) has no episode of c5. Per case over
    c1..c4 the summed difference B - A is +1, +1, 0, 0: two cases better, none worse."""
    report = _report(tmp_path)
    c = _episodes("runs/c/eval/sft", {"c1": False, "c2": False, "c3": False, "c4": True}, FAMILY)
    d = _episodes("runs/d/eval/sft", {"c1": True, "c2": False, "c3": True, "c4": False}, FAMILY)
    path = report / "episodes.parquet"
    pd.concat([pd.read_parquet(path), c, d]).to_parquet(path)
    return report


def test_pairs_pool_by_case_over_seeds(tmp_path: Path) -> None:
    episodes = pd.read_parquet(_two_seed_report(tmp_path) / "episodes.parquet")
    over = learning.pool_pairs(episodes, [("runs/a", "runs/b"), ("runs/c", "runs/d")])
    pooled = over["pooled"]
    assert over["pairs"] == 2 and pooled["n"] == 4  # c5 is not in pair 2: only the cases every pair ran
    assert (pooled["a"], pooled["b"]) == (pytest.approx(0.375), pytest.approx(0.625))
    assert (pooled["cases_better"], pooled["cases_worse"]) == (2, 0)
    assert pooled["sign_p"] == pytest.approx(0.5)  # one case counts once: not McNemar over 6 discordant pairs
    single = over["single_field"]  # c1, c2
    assert (single["n"], single["a"], single["b"], single["cases_better"]) == (2, 0.25, 0.75, 2)
    with pytest.raises(SystemExit, match="share no case ids"):
        other = _episodes("runs/x/eval/sft", {"x1": True}, {"x1": "wrong_type"})
        learning.pool_pairs(pd.concat([episodes, other]), [("runs/a", "runs/b"), ("runs/x", "runs/x")])


def test_pairs_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = str(_two_seed_report(tmp_path))
    assert learning.main(["--report", report, "--pair", "runs/a", "runs/b", "--pair", "runs/c", "runs/d", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [p["candidate"] for p in result["pairs"]] == ["runs/b", "runs/d"] and "pair" not in result
    assert result["over_pairs"]["pooled"]["diff"] == pytest.approx(0.25)
    assert learning.main(["--report", report, "--pair", "runs/a", "runs/b", "--pair", "runs/c", "runs/d"]) == 0
    text = capsys.readouterr().out
    assert text.count("A = runs/") == 2
    assert "pooled: 0.375 -> 0.625, +0.250" in text and "sign test p = 0.5; 2 cases better, 0 worse" in text


def test_pair_refuses_what_it_cannot_pair(tmp_path: Path) -> None:
    episodes = pd.read_parquet(_report(tmp_path) / "episodes.parquet")
    with pytest.raises(SystemExit, match="no run 'runs/c' in the report; its runs: runs/a/eval/sft, runs/b/eval/sft"):
        learning.pair_runs(episodes, "runs/a", "runs/c")
    with pytest.raises(SystemExit, match="more than one episode per case"):
        learning.pair_runs(episodes, "runs", "runs/a")  # "runs" holds both: one case, two episodes
    other = _episodes("runs/d/eval/sft", {"x1": True}, {"x1": "wrong_type"})
    with pytest.raises(SystemExit, match="share no case ids"):
        learning.pair_runs(pd.concat([episodes, other]), "runs/a", "runs/d")
    with pytest.raises(SystemExit):  # argparse: --pair needs a report to read
        learning.main(["--pair", "runs/a", "runs/b"])


def test_report_tables_every_system_per_family(capsys: pytest.CaptureFixture[str]) -> None:
    """A report of one full-regeneration run has no SFT or GRPO stage; its family table is still filled."""
    regen = _episodes("runs/r/eval/sft", {"c1": True, "c2": False, "c5": True}, FAMILY).assign(
        arm="full_regen",
        schema_valid=True,
        collateral=[0, 2, 0],
        generated_tokens=[50, 60, 1],
        retries=0,
        masked_attempts=0,
        latency_s=1.0,
        unsafe_dispatch=0,
    )
    result = {"model": "smollm2", "report": "r", "machine": "m", "cases": {"eval": 3}, **learning.analyse(regen)}
    assert "after_sft" not in result and result["by_family"]["full_regen"]["wrong_type"] == {"success": 0.5, "n": 2}
    learning.print_report(result)
    table = capsys.readouterr().out
    assert "| family | full_regen |" in table
    assert "| wrong_type | 0.500 (n=2) |" in table and "| pooled | 0.667 (n=3) |" in table


def test_pair_finds_a_run_the_report_holds_by_its_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    solved = {"c1": True, "c2": False}
    a = _episodes(str(tmp_path / "runs" / "a" / "eval" / "after-sft"), solved, FAMILY)
    b = _episodes(str(tmp_path / "runs" / "b" / "eval" / "after-sft"), {**solved, "c2": True}, FAMILY)
    monkeypatch.chdir(tmp_path)
    pair = learning.pair_runs(pd.concat([a, b]), "runs/a", "runs/b/")
    assert pair["gained"] == ["c2"] and pair["pooled"]["n"] == 2
    with pytest.raises(SystemExit, match="no run 'runs/ab'"):  # a prefix of a name is not a directory above it
        learning.pair_runs(pd.concat([a, b]), "runs/ab", "runs/b")


def _set_report(tmp_path: Path, name: str, a: dict[str, bool], b: dict[str, bool], family: dict[str, str]) -> Path:
    """One held-out set's report: runs/<name>_a and runs/<name>_b scored on the same cases, with
    each side's costs (A: 10 tokens and 1 collateral edit per episode, B: 4 and none)."""
    report = tmp_path / f"report_{name}"
    report.mkdir()
    side_a = _episodes(f"runs/{name}_a/eval/sft", a, family).assign(generated_tokens=10, collateral=1, schema_valid=True)
    side_b = _episodes(f"runs/{name}_b/eval/sft", b, family).assign(generated_tokens=4, collateral=0, schema_valid=True)
    pd.concat([side_a, side_b]).to_parquet(report / "episodes.parquet")
    return report


def test_pairs_on_disjoint_case_sets_are_stacked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two held-out sets, one report each: B solves 4 cases A does not (one per set would give
    McNemar p = 0.5 within a set, 0.125 together) and loses none."""
    family = {**FAMILY, "d1": "wrong_type", "d2": "unrepairable", "d3": "multi_field"}
    first = _set_report(tmp_path, "s1", {"c1": False, "c2": False, "c3": True}, {"c1": True, "c2": True, "c3": True}, family)
    second = _set_report(tmp_path, "s2", {"d1": False, "d2": False, "d3": True}, {"d1": True, "d2": True, "d3": True}, family)
    pairs = ["--pair", "runs/s1_a", "runs/s1_b", "--pair", "runs/s2_a", "runs/s2_b"]
    argv = ["--report", str(first), "--report", str(second), *pairs]
    assert learning.main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["report"] == [str(first), str(second)] and result["cases"] == {"eval": 6}
    assert "over_pairs" not in result
    stacked = result["over_sets"]
    assert stacked["sets"] == [3, 3] and stacked["gained"] == ["c1", "c2", "d1", "d2"] and stacked["lost"] == []
    pooled = stacked["pooled"]
    assert (pooled["n"], pooled["a"], pooled["b"]) == (6, pytest.approx(2 / 6), 1.0)
    assert pooled["mcnemar_p"] == pytest.approx(0.125)
    assert stacked["families"]["wrong_type"] == {"n": 3, "baseline": 0.0, "candidate": 1.0, "gained": 3, "lost": 0}
    assert stacked["sides"]["baseline"]["generated_tokens"] == 10.0 and stacked["sides"]["candidate"]["collateral"] == 0.0
    assert result["pairs"][0]["pooled"]["mcnemar_p"] == pytest.approx(0.5)
    assert learning.main(argv) == 0
    text = capsys.readouterr().out
    assert "over 2 disjoint case sets (3 + 3 cases)" in text
    assert "generated_tokens per episode: A 10.000, B 4.000 (B/A x0.40)" in text


def test_pairs_that_neither_share_nor_split_their_cases_are_refused(tmp_path: Path) -> None:
    """Pairs 1 and 2 share c1, pair 3 shares nothing with pair 1: neither seeds nor disjoint sets."""
    family = {**FAMILY, "d1": "wrong_type"}
    episodes = pd.concat(
        [
            _episodes("runs/a/eval/sft", {"c1": True, "c2": False}, family),
            _episodes("runs/b/eval/sft", {"c1": True, "c2": True}, family),
            _episodes("runs/c/eval/sft", {"c1": False, "d1": True}, family),
            _episodes("runs/d/eval/sft", {"c1": True, "d1": True}, family),
            _episodes("runs/e/eval/sft", {"d1": True}, family),
            _episodes("runs/f/eval/sft", {"d1": False}, family),
        ]
    )
    with pytest.raises(SystemExit, match="neither share their cases"):
        learning.combine_pairs(episodes, [("runs/a", "runs/b"), ("runs/c", "runs/d"), ("runs/e", "runs/f")])
    assert "over_pairs" in learning.combine_pairs(episodes, [("runs/a", "runs/b"), ("runs/c", "runs/d")])


def test_a_run_scored_in_two_reports_is_refused(tmp_path: Path) -> None:
    report = _report(tmp_path)
    with pytest.raises(SystemExit, match="more than one report"):
        learning.analyse_report([report, report], [("runs/a", "runs/b")])
    grouped = tmp_path / "grouped"  # a group of two episodes per case, in one report: not twice
    grouped.mkdir()
    group = _episodes("runs/g/eval/sft", {"c1": True, "c2": False}, FAMILY)
    pd.concat([group, group]).to_parquet(grouped / "episodes.parquet")
    assert len(learning.read_reports([grouped, report])) == 14
    with pytest.raises(SystemExit, match="no scored episodes at"):
        learning.analyse_report([report, tmp_path / "absent"])
