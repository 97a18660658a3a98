"""The freeze-checked join: verified ledgers only, one scored row per episode, Ray Data and local
paths agree, and the per-episode metrics on hand-built rows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from contractrl.analysis.join import join_runs, read_episodes
from contractrl.analysis.metrics import episode_metrics
from contractrl.errors import ContractRLError
from contractrl.rollout.ledger import LedgerError, LedgerIntegrityError, decode_row
from contractrl.rollout.policies import HeuristicPolicy
from contractrl.rollout.run import write_run
from contractrl.rollout.runner import EpisodeRunner, LocalPool
from contractrl.tasks.cases import OfflineCase, PublicCase
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.tasks.offline import read_cases, semantic_outcome
from contractrl.tasks.store import read_public, write_case_set


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("join")
    config = GenerateConfig(seed=21, n=39)
    write_case_set(generate_cases(config), root / "cases", config.to_dict())
    runner = EpisodeRunner(HeuristicPolicy(), LocalPool(1), arm="contractrl")
    write_run(root / "run", {"policy": "heuristic"}, runner, read_public(root / "cases"), group=2, seed=0)
    return root / "cases", root / "run"


@pytest.mark.slow
def test_join_scores_every_episode_with_ray_data_and_locally(run: tuple[Path, Path], tmp_path: Path) -> None:
    cases, run_dir = run
    with_ray = read_episodes(join_runs([run_dir], [cases], tmp_path / "ray", use_ray=True))
    local = read_episodes(join_runs([run_dir], [cases], tmp_path / "local", use_ray=False))
    # what Ray Data wrote is a parquet dataset pandas reads directly
    assert len(pd.read_parquet(tmp_path / "ray" / "episodes")) == 78
    assert len(with_ray) == 78
    pd.testing.assert_frame_equal(with_ray, local)
    # the semantic column is the oracle's verdict on the dispatched object
    truth = {c.public.case_id: c for c in read_cases(cases)}
    for row in with_ray.head(20).to_dict("records"):
        case = truth[row["case_id"]]
        ledger_row = next(r for r in pq.read_table(run_dir / "ledger").to_pylist() if r["episode_id"] == row["episode_id"])
        dispatched = json.loads(ledger_row["dispatched"]) if ledger_row["accepted"] else None
        assert row["semantic_success"] == semantic_outcome(case.public, case.offline, dispatched, ledger_row["abstained"]).success
    assert with_ray["unsafe_dispatch"].sum() == 0
    assert set(with_ray["case_family"]) == set(GenerateConfig(seed=0, n=1).families)


def test_join_refuses_unfrozen_and_tampered_ledgers(run: tuple[Path, Path], tmp_path: Path) -> None:
    cases, run_dir = run

    unfrozen = tmp_path / "unfrozen"
    shutil.copytree(run_dir, unfrozen)
    manifest = json.loads((unfrozen / "manifest.json").read_text())
    del manifest["ledger_sha256"]
    (unfrozen / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(LedgerError, match="not frozen"):
        join_runs([unfrozen], [cases], tmp_path / "out", use_ray=False)
    tampered = tmp_path / "tampered"
    shutil.copytree(run_dir, tampered)
    shard = next((tampered / "ledger").glob("shard-*.parquet"))
    table = pq.read_table(shard).to_pandas()
    table.loc[3, "collateral"] = 0 if table.loc[3, "collateral"] else 1
    table.to_parquet(shard, index=False)
    # the edited shard is refused on its digest, unparsed: its rows, from its first, are suspect
    with pytest.raises(LedgerIntegrityError, match=r"shard-00000\.parquet: .* not parsed: its rows, from row 0 on"):
        join_runs([tampered], [cases], tmp_path / "out", use_ray=False)
    assert not (tmp_path / "out").exists()  # nothing is written before every ledger verifies


def _offline(target_patch: object, target: object) -> OfflineCase:
    return OfflineCase("c1", target, target_patch, {}, "cluster-c1", {})  # type: ignore[arg-type]


PUBLIC = PublicCase(
    case_id="c1",
    family="wrong_type",
    tool="t",
    tool_family="calendar",
    schema={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    schema_sha256="0" * 64,
    schema_version=1,
    contract={},
    request="set a to 2",
    candidate={"a": "2", "b": 1},
    report={"accepted": False, "errors": []},
    immutable=("/id",),
    max_attempts=2,
    max_ops=2,
    world_seed=0,
)


def _row(**extra: object) -> dict:
    row = {
        "episode_id": "c1/contractrl/0/0",
        "case_id": "c1",
        "case_family": "wrong_type",
        "tool": "t",
        "tool_family": "calendar",
        "arm": "contractrl",
        "policy": "p",
        "seed": 0,
        "sample": 0,
        "outcome": "accepted",
        "accepted": True,
        "abstained": False,
        "dispatched": json.dumps({"a": 2, "b": 1}),
        "attempts": json.dumps(
            [
                {"outcome": "path_immutable", "ops": [{"op": "remove", "path": "/id"}]},
                {"outcome": "accepted", "ops": [{"op": "replace", "path": "/a", "value": 2}]},
            ]
        ),
        "first_attempt_valid": False,
        "collateral": 1,
        "retries": 1,
        "patch_attempts": 2,
        "generated_tokens": 30,
        "prompt_tokens": 600,
        "validator_calls": 2,
        "wall_s": 0.25,
    }
    row.update(extra)
    return decode_row(row)  # written as a shard stores it, read as every reader gets it


def test_episode_metrics_by_hand() -> None:
    gold = _offline([{"op": "replace", "path": "/a", "value": 2}], {"a": 2, "b": 1})
    m = episode_metrics(_row(), PUBLIC, gold, success=True, unsafe=False)
    assert (m["semantic_success"], m["schema_valid"], m["final_object_match"], m["exact_patch_match"]) == (True, True, True, True)
    assert (m["retries"], m["attempts"], m["collateral"], m["fail_closed"], m["first_attempt_valid"]) == (1, 2, 1, False, False)
    assert m["latency_s"] == 0.25
    # end to end: the policy's generation time counts with the transitions
    assert episode_metrics(_row(gen_s=1.5), PUBLIC, gold, success=True, unsafe=False)["latency_s"] == 1.75
    # a different accepted patch reaching a different object
    other = _offline([{"op": "replace", "path": "/a", "value": 3}], {"a": 3, "b": 1})
    m = episode_metrics(_row(), PUBLIC, other, success=False, unsafe=False)
    assert (m["final_object_match"], m["exact_patch_match"]) == (False, False)
    # whole-object arms have no patch to match
    assert episode_metrics(_row(arm="full_regen"), PUBLIC, gold, success=True, unsafe=False)["exact_patch_match"] is None
    # nothing released, no abstention: fail-closed
    closed = _row(accepted=False, dispatched=None, outcome="attempts_exhausted")
    m = episode_metrics(closed, PUBLIC, gold, success=False, unsafe=False)
    assert (m["fail_closed"], m["schema_valid"], m["final_object_match"]) == (True, False, False)
    # an abstain case: abstaining matches, releasing does not
    abstain = _offline("ABSTAIN", None)
    m = episode_metrics(_row(accepted=False, abstained=True, dispatched=None), PUBLIC, abstain, success=True, unsafe=False)
    assert (m["final_object_match"], m["exact_patch_match"], m["fail_closed"]) == (True, True, False)
    # an unsafe dispatch is counted and is not schema-valid
    m = episode_metrics(_row(), PUBLIC, gold, success=False, unsafe=True)
    assert (m["unsafe_dispatch"], m["schema_valid"]) == (1, False)


def test_confidence_pointer_fix_and_leakage_by_hand() -> None:
    import dataclasses
    import math

    gold = _offline([{"op": "replace", "path": "/a", "value": 2}], {"a": 2, "b": 1})
    answer = [
        {"outcome": "accepted", "ops": [{"op": "replace", "path": "/a", "value": 2}], "logprob": -3.0, "generated_tokens": 6}
    ]
    m = episode_metrics(_row(attempts=json.dumps(answer), first_attempt_valid=True), PUBLIC, gold, success=True, unsafe=False)
    assert m["confidence"] == pytest.approx(math.exp(-0.5))  # geometric-mean token probability
    # a shielded answer: the mean is over the committed answer's tokens, not over what was decoded
    # (here an enumerated candidate of 2 tokens, committed with nothing decoded at all)
    for decoded in (0, 9):
        shielded = [{**answer[0], "generated_tokens": decoded, "answer_tokens": 2}]
        got = episode_metrics(_row(attempts=json.dumps(shielded)), PUBLIC, gold, success=True, unsafe=False)["confidence"]
        assert got == pytest.approx(math.exp(-1.5))
    assert (m["pointer_fix"], m["leakage"], m["op_family"], m["structure"]) == (True, 0, "replace", "flat")
    elsewhere = [{**answer[0], "ops": [{"op": "replace", "path": "/b", "value": 1}]}]
    assert (
        episode_metrics(_row(attempts=json.dumps(elsewhere)), PUBLIC, gold, success=False, unsafe=False)["pointer_fix"] is False
    )
    # a public half that quotes the hidden target is leakage
    leaky = dataclasses.replace(PUBLIC, request='set it to {"a":2,"b":1}')
    assert episode_metrics(_row(), leaky, gold, success=True, unsafe=False)["leakage"] == 1


def test_runs_are_named_relative_to_the_job_directory(tmp_path: Path) -> None:
    from contractrl.analysis.join import job_dir, relative_run

    runs = [tmp_path / "job" / "train" / "eval" / "after-sft", tmp_path / "job" / "eval" / "heuristic"]
    base = job_dir(runs)
    assert base == (tmp_path / "job").resolve()
    assert [relative_run(r, base) for r in runs] == ["train/eval/after-sft", "eval/heuristic"]
    assert relative_run(tmp_path / "job" / "h", job_dir([tmp_path / "job" / "h"])) == "h"  # one run keeps its name
    with pytest.raises(ContractRLError, match="not below the job directory"):
        relative_run(tmp_path / "elsewhere", base)


def test_the_joined_rows_match_the_data_dictionary_and_duplicates_are_refused(run: tuple[Path, Path], tmp_path: Path) -> None:
    from contractrl.analysis.dictionary import EPISODE_COLUMNS
    from contractrl.analysis.join import EPISODE_SCHEMA

    # the dictionary documents every scored column, plus the two read_episodes adds
    assert {c.name for c in EPISODE_COLUMNS} == {*EPISODE_SCHEMA.names, "system", "episode_key"}
    cases, run_dir = run
    frame = read_episodes(join_runs([run_dir], [cases], tmp_path / "once", use_ray=False))
    assert set(frame["run"]) == {"run"} and set(frame["system"]) == {"contractrl:heuristic"}
    assert frame["episode_key"].is_unique and len(frame) == 78
    twice = join_runs([run_dir, run_dir], [cases], tmp_path / "twice", use_ray=False)
    assert len(read_episodes(twice)) == 78  # one run given twice is scored once
    shutil.copy(twice / "part-0.parquet", twice / "part-1.parquet")  # rows read twice are refused, not pooled
    with pytest.raises(ContractRLError, match="share a run and an episode id"):
        read_episodes(twice)
