"""`bench_learning.py --report R --pair A B`: two runs of one role, compared case by case.

The benchmark itself is run by hand (it trains for an hour); its report analysis is pure pandas over
a report's ``episodes.parquet``, tested here on small hand-built frames whose answers are known.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pandas as pd
import pytest

from .conftest import load_benchmark


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("bench_learning")


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


def test_pair_counts_gains_and_losses_per_family(bench: ModuleType, tmp_path: Path) -> None:
    episodes = pd.read_parquet(_report(tmp_path) / "episodes.parquet")
    pair = bench.pair_runs(episodes, "runs/a", "runs/b")
    assert pair["gained"] == ["c2", "c4"] and pair["lost"] == ["c3"]
    pooled = pair["pooled"]
    assert (pooled["n"], pooled["a"], pooled["b"], pooled["gained"], pooled["lost"]) == (5, 0.4, 0.6, 2, 1)
    assert pooled["diff"] == pytest.approx(0.2)
    assert pooled["mcnemar_p"] == pytest.approx(1.0)  # 2 against 1 discordant pairs
    assert pair["single_field"]["n"] == 2 and pair["single_field"]["gained"] == 1
    assert pair["families"]["multi_field"] == {"n": 2, "baseline": 0.5, "candidate": 0.5, "gained": 1, "lost": 1}
    assert pair["families"]["unrepairable"]["baseline"] == 0.0


def test_pair_from_the_command_line(bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = _report(tmp_path)
    assert bench.main(["--report", str(report), "--pair", "runs/a", "runs/b/eval/sft", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["pair"]["candidate"] == "runs/b/eval/sft" and result["cases"] == {"eval": 5}
    assert bench.main(["--report", str(report), "--pair", "runs/a", "runs/b"]) == 0
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


def test_pairs_pool_by_case_over_seeds(bench: ModuleType, tmp_path: Path) -> None:
    episodes = pd.read_parquet(_two_seed_report(tmp_path) / "episodes.parquet")
    over = bench.pool_pairs(episodes, [("runs/a", "runs/b"), ("runs/c", "runs/d")])
    pooled = over["pooled"]
    assert over["pairs"] == 2 and pooled["n"] == 4  # c5 is not in pair 2: only the cases every pair ran
    assert (pooled["a"], pooled["b"]) == (pytest.approx(0.375), pytest.approx(0.625))
    assert (pooled["cases_better"], pooled["cases_worse"]) == (2, 0)
    assert pooled["sign_p"] == pytest.approx(0.5)  # one case counts once: not McNemar over 6 discordant pairs
    single = over["single_field"]  # c1, c2
    assert (single["n"], single["a"], single["b"], single["cases_better"]) == (2, 0.25, 0.75, 2)
    with pytest.raises(SystemExit, match="share no case ids"):
        other = _episodes("runs/x/eval/sft", {"x1": True}, {"x1": "wrong_type"})
        bench.pool_pairs(pd.concat([episodes, other]), [("runs/a", "runs/b"), ("runs/x", "runs/x")])


def test_pairs_from_the_command_line(bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = str(_two_seed_report(tmp_path))
    assert bench.main(["--report", report, "--pair", "runs/a", "runs/b", "--pair", "runs/c", "runs/d", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [p["candidate"] for p in result["pairs"]] == ["runs/b", "runs/d"] and "pair" not in result
    assert result["over_pairs"]["pooled"]["diff"] == pytest.approx(0.25)
    assert bench.main(["--report", report, "--pair", "runs/a", "runs/b", "--pair", "runs/c", "runs/d"]) == 0
    text = capsys.readouterr().out
    assert text.count("A = runs/") == 2
    assert "pooled: 0.375 -> 0.625, +0.250" in text and "sign test p = 0.5; 2 cases better, 0 worse" in text


def test_pair_refuses_what_it_cannot_pair(bench: ModuleType, tmp_path: Path) -> None:
    episodes = pd.read_parquet(_report(tmp_path) / "episodes.parquet")
    with pytest.raises(SystemExit, match="no run 'runs/c' in the report; its runs: runs/a/eval/sft, runs/b/eval/sft"):
        bench.pair_runs(episodes, "runs/a", "runs/c")
    with pytest.raises(SystemExit, match="more than one episode per case"):
        bench.pair_runs(episodes, "runs", "runs/a")  # "runs" holds both: one case, two episodes
    other = _episodes("runs/d/eval/sft", {"x1": True}, {"x1": "wrong_type"})
    with pytest.raises(SystemExit, match="share no case ids"):
        bench.pair_runs(pd.concat([episodes, other]), "runs/a", "runs/d")
    with pytest.raises(SystemExit):  # argparse: --pair needs a report to read
        bench.main(["--pair", "runs/a", "runs/b"])


def test_report_tables_every_system_per_family(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
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
    result = {"model": "smollm2", "report": "r", "machine": "m", "cases": {"eval": 3}, **bench.analyse(regen)}
    assert "after_sft" not in result and result["by_family"]["full_regen"]["wrong_type"] == {"success": 0.5, "n": 2}
    bench.print_report(result)
    table = capsys.readouterr().out
    assert "| family | full_regen |" in table
    assert "| wrong_type | 0.500 (n=2) |" in table and "| pooled | 0.667 (n=3) |" in table


def test_pair_finds_a_run_the_report_holds_by_its_absolute_path(
    bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    solved = {"c1": True, "c2": False}
    a = _episodes(str(tmp_path / "runs" / "a" / "eval" / "after-sft"), solved, FAMILY)
    b = _episodes(str(tmp_path / "runs" / "b" / "eval" / "after-sft"), {**solved, "c2": True}, FAMILY)
    monkeypatch.chdir(tmp_path)
    pair = bench.pair_runs(pd.concat([a, b]), "runs/a", "runs/b/")
    assert pair["gained"] == ["c2"] and pair["pooled"]["n"] == 2
    with pytest.raises(SystemExit, match="no run 'runs/ab'"):  # a prefix of a name is not a directory above it
        bench.pair_runs(pd.concat([a, b]), "runs/ab", "runs/b")
