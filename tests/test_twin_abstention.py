"""`benchmarks/twin_abstention.py`: abstention on each twin of a GRPO run's contrast pairs.

The benchmark reads a finished run's frozen rollout ledgers by hand; its counting is a pure function
over ledger rows, tested here on hand-built steps whose rates are known.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contractrl.analysis import twin_abstention


def _group(case_id: str, family: str, abstained: list[bool]) -> list[dict[str, Any]]:
    return [{"case_id": case_id, "case_family": family, "abstained": a} for a in abstained]


def test_rates_per_side_and_block() -> None:
    # The contrast carries the missing_required family; it must count as the contrast side only.
    step1 = (
        _group("u1", "unrepairable", [True, True, True, True])
        + _group("u1-contrast", "missing_required", [True, True, True, True])
        + _group("m1", "missing_required", [False, True, False, False])
        + _group("w1", "wrong_type", [True, False, False, False])
    )
    step2 = _group("u2", "unrepairable", [True, False, True, False]) + _group("u2-contrast", "missing_required", [False] * 4)
    step3 = _group("u1", "unrepairable", [False] * 4)
    blocks = twin_abstention.block_rates([(1, step1), (2, step2), (3, step3)], block=2)

    assert [(b.first_step, b.last_step) for b in blocks] == [(1, 2), (3, 3)]
    first = blocks[0]
    assert first.side("unrepairable").rate == pytest.approx(6 / 8)
    assert first.side("unrepairable").all_abstain_groups == 1
    assert first.side("contrast").rate == pytest.approx(4 / 8)
    assert (first.side("contrast").groups, first.side("contrast").all_abstain_groups) == (2, 1)
    assert (first.side("missing_required").episodes, first.side("missing_required").abstained) == (4, 1)
    assert (first.pairs, first.all_abstain_pairs) == (2, 1)
    # A block with an unrepairable case and no contrast has no pair and no contrast rate.
    last = blocks[1]
    assert last.side("contrast").rate is None
    assert (last.pairs, last.side("unrepairable").rate) == (0, 0.0)


def test_same_case_in_two_steps_is_two_groups() -> None:
    steps = [(1, _group("u1", "unrepairable", [True] * 4)), (2, _group("u1", "unrepairable", [False] * 4))]
    (block,) = twin_abstention.block_rates(steps, block=5)
    assert block.side("unrepairable").groups == 2
    assert block.side("unrepairable").all_abstain_groups == 1


def test_bad_block_and_missing_rollouts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="block must be >= 1"):
        twin_abstention.block_rates([], block=0)
    assert twin_abstention.main([str(tmp_path)]) == 2
    assert "no rollouts/step-* directories" in capsys.readouterr().err


def test_reads_real_step_ledgers_and_refuses_an_altered_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from contractrl.cli import main as cli

    assert cli(["cases", "generate", "--seed", "4", "--n", "26", "--out", str(tmp_path / "cases")]) == 0
    run = tmp_path / "run"
    for step in ("step-000001", "step-000002"):
        out = run / "rollouts" / step
        assert (
            cli(["rollout", "--cases", str(tmp_path / "cases"), "--workers", "0", "--policy", "heuristic", "--out", str(out)])
            == 0
        )
    (run / "rollouts" / "step-notes").mkdir()  # not a step: ignored
    capsys.readouterr()

    assert twin_abstention.main([str(run), "--block", "1", "--json"]) == 0
    blocks = json.loads(capsys.readouterr().out)[str(run)]
    assert [(b["first_step"], b["last_step"]) for b in blocks] == [(1, 1), (2, 2)]
    unrepairable = {s["side"]: s for s in blocks[0]["sides"]}["unrepairable"]
    assert unrepairable["groups"] == 2 and unrepairable["episodes"] == 2  # two unrepairable cases, one episode each
    assert blocks[0]["rates"]["contrast"] is None

    shard = next((run / "rollouts" / "step-000002" / "ledger").glob("shard-*.parquet"))
    shard.write_bytes(shard.read_bytes()[:-1] + b"\x00")
    assert twin_abstention.main([str(run)]) == 2
    assert "error:" in capsys.readouterr().err
