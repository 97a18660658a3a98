"""`recover_outcomes.py`: per-case outcomes of recorded runs, from their saved pairs and one re-made run.

The round trip is the test: score runs, save their pairs as bench_learning does, keep only the
deterministic anchor, and the recovery must give back every other run case by case, or refuse.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from contractrl.analysis import learning, recovery

FAMILY = {f"c{i}": ("wrong_type" if i % 2 else "unrepairable") for i in range(8)}
SOLVED = {
    "runs/heur": [True, True, True, False, True, True, True, True],
    "runs/regen": [True, False, True, True, False, False, True, False],
    "runs/patch": [False, True, True, True, True, False, True, True],
}


def _episodes(run: str, solved: list[bool]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run": run,
            "case_id": list(FAMILY),
            "case_family": list(FAMILY.values()),
            "semantic_success": solved,
            "generated_tokens": 10.0,
            "model": "smollm2",
        }
    )


def _record(tmp_path: Path) -> Path:
    """The pairs heur -> patch and regen -> patch, saved as bench_learning saves them."""
    episodes = pd.concat([_episodes(run, solved) for run, solved in SOLVED.items()], ignore_index=True)
    pairs = [learning.pair_runs(episodes, "runs/heur", "runs/patch"), learning.pair_runs(episodes, "runs/regen", "runs/patch")]
    path = tmp_path / "record.json"
    path.write_text(json.dumps({"model": "smollm2", "comparisons": {"x": {"pairs": pairs}}}))
    return path


def _anchor_report(tmp_path: Path, solved: list[bool]) -> Path:
    report = tmp_path / "anchor"
    report.mkdir()
    _episodes("runs/heur", solved).to_parquet(report / "episodes.parquet")
    return report


def test_every_run_joined_to_the_anchor_comes_back_case_by_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = _record(tmp_path)
    report = _anchor_report(tmp_path, SOLVED["runs/heur"])
    out = tmp_path / "recovered"
    assert recovery.main(["--record", str(record), "--report", str(report), "--out", str(out)]) == 0
    capsys.readouterr()
    frame = pd.read_parquet(out / "episodes.parquet")
    for run in ("runs/patch", "runs/regen"):  # regen only through patch: two steps from the anchor
        got = frame[frame["run"] == run].set_index("case_id")["semantic_success"]
        assert got.loc[list(FAMILY)].tolist() == SOLVED[run]
    summary = json.loads((out / "recovered.json").read_text())
    assert summary["recovered"]["runs/regen"]["from"] == ["runs/regen", "runs/patch"]
    assert summary["not_recovered"] == []


def test_a_recovered_run_pairs_against_a_new_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "recovered"
    recovery.main(
        [
            "--record",
            str(_record(tmp_path)),
            "--report",
            str(_anchor_report(tmp_path, SOLVED["runs/heur"])),
            "--out",
            str(out),
        ]
    )
    new = tmp_path / "new"
    new.mkdir()
    _episodes("runs/regen_new", [True] * 8).to_parquet(new / "episodes.parquet")
    capsys.readouterr()
    assert learning.main(["--report", str(new), "--report", str(out), "--pair", "runs/patch", "runs/regen_new"]) == 0
    printed = capsys.readouterr().out
    assert "0.750 -> 1.000" in printed and "2 gained, 0 lost" in printed
    assert "generated_tokens" not in printed  # the recovered side holds success only: no ratio to print


def test_an_anchor_that_is_not_the_recorded_run_is_refused(tmp_path: Path) -> None:
    solved = list(SOLVED["runs/heur"])
    solved[3] = True  # the one case the anchor failed, now solved: its rate is no longer the recorded one
    report = _anchor_report(tmp_path, solved)
    with pytest.raises(SystemExit, match=r"records 0\.875"):
        recovery.main(["--record", str(_record(tmp_path)), "--report", str(report), "--out", str(tmp_path / "o")])


def test_a_discordant_case_the_anchor_contradicts_is_refused_at_the_same_rate() -> None:
    # the anchor's rate is the recorded one, but it solved the case the record says only the other solved
    known = pd.Series({"c0": True, "c1": False, "c2": True})
    pair = recovery.RecordedPair(
        baseline="a",
        candidate="b",
        n=3,
        rate_baseline=2 / 3,
        rate_candidate=2 / 3,
        gained=frozenset({"c0"}),
        lost=frozenset({"c2"}),
    )
    with pytest.raises(SystemExit, match="differs from its record on discordant cases"):
        recovery.other_side(known, pair, known_is_baseline=True)


def test_two_paths_that_disagree_are_refused() -> None:
    known = {"a": pd.Series({"c0": True, "c1": False}), "b": pd.Series({"c0": True, "c1": True})}
    # the record says a and b agree on every case, while the anchors differ on c1
    pair = recovery.RecordedPair(
        baseline="a", candidate="b", n=2, rate_baseline=0.5, rate_candidate=0.5, gained=frozenset(), lost=frozenset()
    )
    with pytest.raises(SystemExit, match="comes out differently"):
        recovery.recover(known, [pair])
