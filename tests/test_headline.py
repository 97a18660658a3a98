"""The headline table: its cells and paired differences from hand-made episodes, and the benchmark
script end to end over real frozen runs of natural-failure cases."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from contractrl.analysis import headline_runs
from contractrl.analysis.headline import CELL_KEYS, SLICES, SYSTEMS, headline
from contractrl.analysis.stats import sign_test
from contractrl.errors import ContractRLError

from .test_natural import _run, wheel  # noqa: F401  (the fixture: a small BFCL wheel in a cache)


def _episodes(system: str, slice_name: str, successes: list[bool], latency: float = 0.1) -> pd.DataFrame:
    n = len(successes)
    return pd.DataFrame(
        {
            "system": [system] * n,
            "slice": [slice_name] * n,
            "case_id": [f"c{i}" for i in range(n)],
            "seed": [0] * n,
            "sample": [0] * n,
            "semantic_success": successes,
            "generated_tokens": [10 * (i + 1) for i in range(n)],
            "probes": [1] * n,
            "collateral": [i % 2 for i in range(n)],
            "latency_s": [latency * (i + 1) for i in range(n)],
        }
    )


def test_cells_and_paired_differences() -> None:
    frame = pd.concat(
        [
            _episodes("contractrl:hf@grpo", "natural", [True, True, True, False]),
            _episodes("contractrl:heuristic", "natural", [False, True, False, False]),
            _episodes("contractrl:heuristic", "built-in", [True, True]),
        ]
    )
    systems = {"contractrl": "contractrl:hf@grpo", "heuristic": "contractrl:heuristic"}
    table = headline(frame, systems, {"natural": "natural", "builtin_paraphrase": "built-in"}, resamples=2000)
    assert set(table) >= {"systems", "slices", "paired"} and list(table["systems"]) == list(SYSTEMS)
    ours = table["systems"]["contractrl"]["natural"]
    assert set(ours) == set(CELL_KEYS) and ours["n"] == 4 and ours["success"] == 0.75
    assert ours["ci_low"] <= 0.75 <= ours["ci_high"] and ours["ci_low"] < ours["ci_high"]
    assert ours["tokens"] == 25.0 and ours["probes"] == 1.0 and ours["collateral"] == 0.5
    assert ours["p95_s"] == pytest.approx(pd.Series([0.1, 0.2, 0.3, 0.4]).quantile(0.95))
    pair = table["paired"]["heuristic"]["natural"]
    assert pair["n"] == 4 and pair["diff"] == 0.5 and pair["ci_low"] <= 0.5 <= pair["ci_high"]
    assert pair["mcnemar_p"] == sign_test(2, 0)  # two cases only ContractRL repairs, none the other way
    assert table["systems"]["heuristic"]["builtin_paraphrase"]["success"] == 1.0
    assert table["systems"]["selector"]["bfcl_live"] == {k: (0 if k == "n" else None) for k in CELL_KEYS}
    assert table["paired"]["heuristic"]["builtin_paraphrase"]["diff"] is None  # ContractRL has no built-in episode
    assert table["slices"]["bfcl_live"]["held_out"] and list(table["slices"]) == list(SLICES)
    with pytest.raises(ContractRLError, match="not a headline row or column"):
        headline(frame, {"oracle": "contractrl:replay"}, {})
    # an extra row (the recipe on another model) follows the six and is paired like them
    wider = headline(frame, systems, {"natural": "natural"}, extra={"larger": "contractrl:heuristic"}, resamples=200)
    assert list(wider["systems"]) == [*SYSTEMS, "larger"] and wider["paired"]["larger"]["natural"]["diff"] == 0.5
    with pytest.raises(ContractRLError, match="would replace headline rows"):
        headline(frame, systems, {}, extra={"selector": "contractrl:heuristic"})
    with pytest.raises(ContractRLError, match="--extra 'Selector=x'"):
        headline_runs._extra(["Selector=x"])
    with pytest.raises(ContractRLError, match="no 'probes' column"):
        headline(frame.drop(columns="probes"), systems, {})


@pytest.mark.usefixtures("wheel")
def test_the_script_tables_frozen_runs_of_natural_failures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Natural-failure cases, replayed (the gold patch) and repaired by the heuristic, both frozen
    with the slice as their condition: the script writes headline.json with both rows filled."""
    from contractrl.cli import main as cli

    cases = tmp_path / "cases"
    monkeypatch.chdir(tmp_path)
    assert (
        cli(
            [
                "cases",
                "generate",
                "--seed",
                "2",
                "--n",
                "4",
                "--source",
                f"bfcl-results:{_run(tmp_path / 'run')}",
                "--out",
                str(cases),
            ]
        )
        == 0
    )
    runs = []
    for policy in ("replay", "heuristic"):
        runs.append(str(tmp_path / policy))
        args = ["rollout", "--cases", str(cases), "--policy", policy, "--workers", "0", "--out", runs[-1], "--no-progress"]
        assert cli([*args, "--label", "condition=natural"]) == 0
    out = tmp_path / "headline.json"
    argv = [
        *runs,
        "--cases",
        str(cases),
        "--system",
        "contractrl=contractrl:replay",
        "--system",
        "heuristic=contractrl:heuristic",
    ]
    assert headline_runs.main([*argv, "--slice", "natural=natural", "--resamples", "500", "--out", str(out)]) == 0
    table = json.loads(out.read_text())
    assert table["systems"]["contractrl"]["natural"]["success"] == 1.0 and table["systems"]["contractrl"]["natural"]["n"] == 4
    assert table["systems"]["heuristic"]["natural"]["n"] == 4 and table["paired"]["heuristic"]["natural"]["n"] == 4
    assert headline_runs.main([*runs, "--cases", str(cases), "--system", "oracle=x", "--out", str(out)]) == 2
