"""Rollout: the environment, policies, the ledger, and the runner on local and real Ray workers."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from contractrl.cli import main
from contractrl.rollout.env import RepairEnv, episode_row
from contractrl.rollout.ledger import (
    LedgerError,
    LedgerFrozenError,
    LedgerIntegrityError,
    LedgerWriter,
    read_ledger,
)
from contractrl.rollout.policies import ABSTAIN, HeuristicPolicy, Observation, ReplayPolicy
from contractrl.rollout.run import write_run
from contractrl.rollout.runner import EpisodeRunner, LocalPool
from contractrl.tasks.cases import Case
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.tasks.offline import semantic_outcome
from contractrl.validators.jsonvalue import canonical_json


@cache
def _cases(n: int = 130) -> tuple[Case, ...]:
    return tuple(generate_cases(GenerateConfig(seed=17, n=n)))


def _replay() -> ReplayPolicy:
    return ReplayPolicy(
        {c.public.case_id: [ABSTAIN if c.offline.should_abstain else json.dumps(c.offline.target_patch)] for c in _cases()}
    )


def _play(case: Case, policy: Any) -> tuple[RepairEnv, dict[str, Any]]:
    env = RepairEnv(case.public)
    state = env.reset()
    while not env.done:
        state, _ = env.step(policy.generate([Observation(case.public, state, 0)])[0].text)
    return env, episode_row(case.public, env.log, arm="contractrl", policy=policy.name, seed=0, sample=0)


def test_env_starts_from_the_public_report_and_dispatches_once() -> None:
    noisy = next(c for c in _cases() if c.public.family == "wrong_pointer")
    env = RepairEnv(noisy.public)
    state = env.reset()
    assert state.report.to_dict() == noisy.public.report  # the noisy report, as the case says
    env.step(json.dumps(noisy.offline.target_patch))
    assert env.done and env.log.final_outcome == "accepted"
    assert env.log.tool_result is not None and env.log.tool_result["ok"] is True
    _, late = env.step(json.dumps(noisy.offline.target_patch))
    assert late.outcome == "attempts_exhausted"  # a finished episode evaluates nothing more
    assert env.log.final_outcome == "accepted"


@pytest.mark.parametrize(
    "refused",
    ['[{"op": "replace", "path": "/no_such_member", "value": 1}]', "not json at all", '[{"op": "remove", "path": ""}]'],
)
def test_a_refused_attempt_shows_the_real_report_next_never_the_noisy_one_again(refused: str) -> None:
    """After any first attempt the report comes from the real verifier, also when the mask or the
    parser refused the attempt and the call is unchanged."""
    changed = 0
    for case in _cases():
        env = RepairEnv(case.public)
        first = env.reset()
        state, rec = env.step(refused)
        assert rec.ops_applied == 0 and state.candidate == first.candidate
        real = env.contract.verifier.verify(case.public.candidate)
        assert state.report == real, case.public.family
        changed += state.report != first.report
        if case.public.family in ("wrong_pointer", "ambiguous_pointer", "malformed_feedback"):
            assert first.report.to_dict() == case.public.report != real.to_dict()
    assert changed == sum(c.public.family in ("wrong_pointer", "ambiguous_pointer", "malformed_feedback") for c in _cases())


def test_env_retry_exposes_the_next_report_and_budgets_end_the_episode() -> None:
    case = next(c for c in _cases() if c.public.family == "wrong_type")
    env = RepairEnv(case.public)
    env.reset()
    state, rec = env.step('[{"op": "replace", "path": "/nonexistent_field", "value": 1}]')
    assert rec.outcome == "path_unavailable" and rec.attempt_class == "schema_violation" and not env.done
    assert state.attempts_left == case.public.max_attempts - 1
    state, rec = env.step("not json at all")
    assert rec.outcome == "malformed_json" and env.done
    assert env.log.final_outcome == "attempts_exhausted" and env.log.dispatched is None
    row = episode_row(case.public, env.log, arm="contractrl", policy="p", seed=0, sample=0)
    assert row["patch_attempts"] == 2 and row["retries"] == 1 and not row["accepted"]
    assert [a["raw"] for a in row["attempts"]] == [
        '[{"op": "replace", "path": "/nonexistent_field", "value": 1}]',
        "not json at all",
    ]


def test_abstain_keeps_budget_and_dispatches_nothing() -> None:
    case = next(c for c in _cases() if c.public.family == "unrepairable")
    env, row = _play(case, ReplayPolicy({case.public.case_id: [ABSTAIN]}))
    assert row["abstained"] and not row["accepted"] and row["patch_attempts"] == 0 and row["retries"] == 0
    assert env.state is not None and env.state.attempts_left == case.public.max_attempts


def test_replay_of_gold_patches_succeeds_on_every_case() -> None:
    policy = _replay()
    for case in _cases():
        env, row = _play(case, policy)
        assert semantic_outcome(case.public, case.offline, env.log.dispatched, row["abstained"]).success, case.public.family
        assert row["patch_attempts"] <= 1


def test_heuristic_baseline_repairs_single_field_cases_and_abstains_when_it_must() -> None:
    wins: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    for case in _cases():
        env, row = _play(case, HeuristicPolicy())
        totals[case.public.family] += 1
        wins[case.public.family] += semantic_outcome(case.public, case.offline, env.log.dispatched, row["abstained"]).success
    for family in ("missing_required", "wrong_type", "constraint_violation", "unrepairable", "immutable_field"):
        assert wins[family] == totals[family], family
    assert sum(wins.values()) / sum(totals.values()) > 0.8


def test_policy_inputs_hold_no_offline_only_value() -> None:
    """The evidence boundary: nothing a policy is given contains the target or the gold patch."""
    for case in generate_cases(GenerateConfig(seed=29, n=1300)):
        env = RepairEnv(case.public)
        obs = Observation(case.public, env.reset(), 0)
        serialized = canonical_json({"case": case.public.to_row(), "state": asdict(obs.state)})
        assert canonical_json(case.offline.target_patch) not in serialized
        if case.offline.target is not None:
            assert canonical_json(case.offline.target) not in serialized
        assert canonical_json(case.offline.expected) not in serialized


# --- ledger ----------------------------------------------------------------------------------


def _ledger(tmp_path: Path, n: int = 7) -> Path:
    (tmp_path / "manifest.json").write_text("{}")
    writer = LedgerWriter(tmp_path, shard_rows=3)
    for i in range(n):
        writer.append({"i": i, "text": f"raw {i}", "nested": {"a": [i]}, "wall_s": 0.5 * i})
    writer.freeze()
    return tmp_path


def test_ledger_chain_freeze_and_read_back(tmp_path: Path) -> None:
    run = _ledger(tmp_path)
    rows = read_ledger(run)
    assert [r["i"] for r in rows] == list(range(7))
    assert len(list((run / "ledger").glob("shard-*.parquet"))) == 3
    assert rows[1]["prev_hash"] == rows[0]["row_hash"]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["ledger_rows"] == 7 and len(manifest["ledger_sha256"]) == 64


def test_frozen_ledger_refuses_writes(tmp_path: Path) -> None:
    run = _ledger(tmp_path)
    with pytest.raises(LedgerFrozenError):
        LedgerWriter(run)


def test_unfrozen_ledger_is_refused_for_joins(tmp_path: Path) -> None:
    writer = LedgerWriter(tmp_path)
    writer.append({"i": 1})
    writer.flush()
    with pytest.raises(LedgerError, match="not frozen"):
        read_ledger(tmp_path)
    assert len(read_ledger(tmp_path, require_frozen=False)) == 1


@pytest.mark.parametrize("tamper", ["edit", "drop", "swap"])
def test_tampered_ledger_is_refused_with_the_first_bad_row(
    tmp_path: Path, tamper: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    run = _ledger(tmp_path)
    shard = run / "ledger" / "shard-00001.parquet"
    rows = pq.read_table(shard).to_pylist()
    if tamper == "edit":
        rows[1]["text"] = "forged"
    elif tamper == "drop":
        del rows[0]
    else:
        rows[0], rows[1] = rows[1], rows[0]
    pq.write_table(pa.Table.from_pylist(rows), shard)
    with pytest.raises(LedgerIntegrityError) as info:
        read_ledger(run)
    assert info.value.row in (3, 4)
    assert main(["ledger", "verify", str(run)]) == 1
    assert json.loads(capsys.readouterr().out)["first_bad_row"] == info.value.row


def test_wall_clock_is_recorded_but_not_hashed(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for run, scale in ((a, 1.0), (b, 9.0)):
        run.mkdir()
        (run / "manifest.json").write_text("{}")
        writer = LedgerWriter(run)
        writer.append({"i": 1, "wall_s": scale, "gen_s": 2 * scale})
        writer.freeze()
    digest = [json.loads((r / "manifest.json").read_text())["ledger_sha256"] for r in (a, b)]
    assert digest[0] == digest[1]


# --- runner ----------------------------------------------------------------------------------


def _digest(tmp_path: Path, name: str, runner: EpisodeRunner, group: int = 2) -> str:
    cases = [c.public for c in _cases()[:39]]
    return write_run(tmp_path / name, {"policy": runner.policy.name}, runner, cases, group=group, seed=3)


def test_local_runner_digest_does_not_depend_on_worker_count(tmp_path: Path) -> None:
    one = _digest(tmp_path, "one", EpisodeRunner(HeuristicPolicy(), LocalPool(1)))
    three = _digest(tmp_path, "three", EpisodeRunner(HeuristicPolicy(), LocalPool(3), max_inflight=10))
    assert one == three
    rows = read_ledger(tmp_path / "one")
    assert len(rows) == 78 and len({r["episode_id"] for r in rows}) == 78


# The heuristic's ledgers over 39 cases (seed 3, two samples each), patch and whole-object arms.
# A change here changes what every ledger records: bump it only with a change that means to (last:
# 2026-12-07, every attempt records its committed answer's tokens, None for the heuristic).
GOLDEN_DIGESTS = {
    "contractrl": "7d886d6a05400fd9ea3bb5eae1829881ab47fd78ed6578f17b29e29b37c5c364",
    "full_regen": "a505c7e1b7cdefdccfb8f02c7eaee1f9c9502a984dd7aaa2c5d22924526f1ad3",
}


def test_ledger_digests_are_those_of_earlier_versions(tmp_path: Path) -> None:
    cases = [c.public for c in generate_cases(GenerateConfig(seed=3, n=39))]
    for arm, golden in GOLDEN_DIGESTS.items():
        runner = EpisodeRunner(HeuristicPolicy(), LocalPool(1), arm=arm)
        assert write_run(tmp_path / arm, {"policy": "h"}, runner, cases, group=2, seed=3) == golden, arm


def test_ledger_rows_read_back_decoded_with_their_identity_columns(tmp_path: Path) -> None:
    """read_ledger and decode_row give the JSON columns back as values; the identity columns (the
    start of the scored-episode schema) are in every row with their arrow types."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from contractrl.analysis.metrics import SCORED_SCHEMA
    from contractrl.rollout.ledger import IDENTITY_COLUMNS, JSON_COLUMNS, decode_row

    _digest(tmp_path, "run", EpisodeRunner(HeuristicPolicy(), LocalPool(1)), group=1)
    rows = read_ledger(tmp_path / "run")
    stored = pq.read_table(tmp_path / "run" / "ledger").to_pylist()
    assert any(r["accepted"] for r in rows) and any(not r["accepted"] for r in rows)
    for row, raw in zip(rows, stored, strict=True):
        assert isinstance(row["attempts"], list) and isinstance(raw["attempts"], str)
        assert row["dispatched"] is None or isinstance(row["dispatched"], dict)
        decoded = decode_row(raw)
        assert all(row[k] == value for k, value in decoded.items())  # read_ledger adds the timing fields
        assert all(raw[name] is None or isinstance(raw[name], str) for name in JSON_COLUMNS)
    identity = pa.schema(list(IDENTITY_COLUMNS))
    assert SCORED_SCHEMA.names[: len(identity)] == identity.names
    pa.Table.from_pylist([{k: r[k] for k in identity.names} for r in rows], schema=identity)  # types hold


class _FlakyPool(LocalPool):
    """A local pool whose worker 0 dies once, on the given round."""

    def __init__(self, size: int, fail_on_call: int) -> None:
        super().__init__(size)
        self.calls = 0
        self.fail_on_call = fail_on_call

    def call(self, method: str, batches: dict[int, list[Any]]) -> dict[int, Any]:
        self.calls += 1
        results = super().call(method, batches)
        if self.calls == self.fail_on_call and 0 in results:
            results[0] = RuntimeError("worker 0 died")
            self._workers[0] = None  # type: ignore[call-overload]
        return results


def test_runner_recovers_a_dead_worker_without_duplicate_or_missing_rows(tmp_path: Path) -> None:
    clean = _digest(tmp_path, "clean", EpisodeRunner(HeuristicPolicy(), LocalPool(2)))
    runner = EpisodeRunner(HeuristicPolicy(), _FlakyPool(2, fail_on_call=2))
    assert _digest(tmp_path, "flaky", runner) == clean
    assert runner.restarts == 1


@pytest.fixture(scope="module")
def ray_local() -> Any:
    ray = pytest.importorskip("ray", reason="ray is not installed")
    from contractrl.rollout.pool import ensure_ray

    ensure_ray(num_cpus=2)
    yield ray
    ray.shutdown()


def test_ray_workers_give_the_same_digest_with_1_and_2_workers_and_a_killed_one(ray_local: Any, tmp_path: Path) -> None:
    from contractrl.rollout.pool import RayPool

    local = _digest(tmp_path, "local", EpisodeRunner(HeuristicPolicy(), LocalPool(1)))
    single = RayPool(1)
    try:
        assert _digest(tmp_path, "ray1", EpisodeRunner(HeuristicPolicy(), single)) == local
    finally:
        single.shutdown()
    pair = RayPool(2)
    try:
        assert _digest(tmp_path, "ray2", EpisodeRunner(HeuristicPolicy(), pair)) == local

        def kill_once(round_no: int, pool: Any) -> None:
            if round_no == 1:
                pool.kill(1)

        runner = EpisodeRunner(HeuristicPolicy(), pair, after_round=kill_once)
        assert _digest(tmp_path, "killed", runner) == local
        assert runner.restarts >= 1
    finally:
        pair.shutdown()


def test_ray_pool_larger_than_the_cluster_is_a_clear_error(ray_local: Any) -> None:
    from contractrl.errors import ConfigError
    from contractrl.rollout.pool import RayPool

    with pytest.raises(ConfigError, match="CPUs"):
        RayPool(3, start_timeout_s=5)


@pytest.mark.slow
def test_rollout_cli_writes_a_verifiable_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = tmp_path / "cases"
    assert main(["cases", "generate", "--seed", "2", "--n", "26", "--out", str(cases)]) == 0
    capsys.readouterr()
    assert main(["rollout", "--cases", str(cases), "--policy", "replay", "--workers", "0", "--out", str(tmp_path / "run")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["episodes"] == 26 and len(out["ledger_sha256"]) == 64
    assert main(["ledger", "verify", str(tmp_path / "run")]) == 0
    assert main(["rollout", "--cases", str(cases), "--policy", "replay", "--workers", "0", "--out", str(tmp_path / "run")]) == 2
    assert main(["rollout", "--cases", str(cases), "--policy", "hf:gpt2", "--workers", "0", "--out", str(tmp_path / "r2")]) == 2


# --- prompts ---------------------------------------------------------------------------------


def test_prompts_of_every_arm_and_mode_hold_no_offline_only_value() -> None:
    from contractrl.rollout.prompts import MODES, render_messages, render_prompt
    from contractrl.tasks.arms import ARMS

    for case in generate_cases(GenerateConfig(seed=31, n=2600)):
        state = RepairEnv(case.public).reset()
        forbidden = [canonical_json(case.offline.target_patch), canonical_json(case.offline.expected)]
        if case.offline.target is not None:
            forbidden.append(canonical_json(case.offline.target))
        if case.public.family == "unrepairable":
            withheld = case.offline.corruption["withheld_value"]
            forbidden.append(withheld if isinstance(withheld, str) else canonical_json(withheld))
        for arm in ARMS:
            for mode in MODES:
                text = render_prompt(render_messages(case.public, state, arm, mode))
                for value in forbidden:
                    assert value not in text, (case.public.family, arm, mode)


def test_case_matched_mode_follows_the_comparator_contract() -> None:
    from contractrl.rollout.prompts import render_blocks

    case = next(c for c in _cases() if c.public.family == "wrong_type")
    state = RepairEnv(case.public).reset()
    assert "errors" not in render_blocks(case.public, state, "full_regen", "case_matched")
    assert "errors" in render_blocks(case.public, state, "patch_sft", "case_matched")
    assert {"immutable", "budget"} <= set(render_blocks(case.public, state, "contractrl", "case_matched"))
    # the history block appears once there is history (an empty one is left out for every arm alike)
    assert "history" not in render_blocks(case.public, state, "contractrl", "case_matched")
    env = RepairEnv(case.public)
    env.reset()
    later, _ = env.step('[{"op": "remove", "path": "/no-such-field"}]')
    assert "history" in render_blocks(case.public, later, "contractrl", "case_matched")
    assert "attempt 1: path_unavailable" in render_blocks(case.public, later, "full_regen", "same_information")["history"]
    same = {arm: render_blocks(case.public, state, arm, "same_information") for arm in ("full_regen", "contractrl")}
    assert same["full_regen"] == same["contractrl"]


def test_prompt_without_a_chat_template_uses_the_plain_layout() -> None:
    from contractrl.rollout.prompts import render_messages, render_prompt

    case = _cases()[0]
    messages = render_messages(case.public, RepairEnv(case.public).reset(), "contractrl")
    text = render_prompt(messages)
    assert text.startswith("<|system|>\n") and text.endswith("<|assistant|>\n")
    assert case.public.request in text and "Errors:" in text


def test_whole_object_arm_runs_through_env_runner_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = [c.public for c in _cases()[:26]]
    rows = EpisodeRunner(HeuristicPolicy(), LocalPool(1), arm="full_regen").run(cases)
    assert {r["arm"] for r in rows} == {"full_regen"}
    assert sum(r["accepted"] for r in rows) >= 15
    assert all(r["ops_applied"] == 0 for r in rows)
    case_dir = tmp_path / "cases"
    assert main(["cases", "generate", "--seed", "2", "--n", "26", "--out", str(case_dir)]) == 0
    capsys.readouterr()
    argv = ["rollout", "--cases", str(case_dir), "--policy", "replay", "--arm", "constrained", "--workers", "0"]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 0
    rows = read_ledger(tmp_path / "run")
    accepted = sum(r["accepted"] for r in rows)
    abstained = sum(r["abstained"] for r in rows)
    assert accepted + abstained == 26 and abstained == 4  # the two abstain families, two cases each


def _outcome_actions(case: Case) -> dict[str, str]:
    immutable = case.public.immutable[0]
    first_key = next(iter(case.public.candidate))
    return {
        "accepted": json.dumps(case.offline.target_patch),
        "abstain": "ABSTAIN: not enough information",
        "refusal": "I'm sorry, I can't help with that.",
        "malformed_json": "[{'op': 'replace'}]",
        "truncated": '[{"op": "replace", "path": "/x", "value": ',
        "duplicate_key": '[{"op": "remove", "op": "remove", "path": "/x"}]',
        "non_finite_number": '[{"op": "replace", "path": "/x", "value": NaN}]',
        "too_deep": "[" * 80 + "]" * 80,
        "too_large": json.dumps([{"op": "add", "path": "/x", "value": "y" * 1_100_000}]),
        "patch_malformed": '[{"op": "merge", "path": "/x"}]',
        "path_unavailable": '[{"op": "remove", "path": "/no_such_argument"}]',
        "path_immutable": json.dumps([{"op": "remove", "path": immutable}]),
        "root_write_forbidden": '[{"op": "replace", "path": "", "value": {}}]',
        "move_source_invalid": '[{"op": "move", "from": "/no_such_argument", "path": "/x"}]',
        "op_budget_exceeded": json.dumps([{"op": "test", "path": f"/{first_key}", "value": 0}] * 9),
        "test_failed": json.dumps([{"op": "test", "path": f"/{first_key}", "value": {"never": "equal"}}]),
    }


def test_each_outcome_code_through_the_env() -> None:
    case = next(c for c in _cases() if c.public.family == "wrong_type")
    for code, text in _outcome_actions(case).items():
        env = RepairEnv(case.public)
        env.reset()
        _, record = env.step(text)
        assert record.outcome == code, (code, record.message)
        assert (env.log.dispatched is not None) == (code == "accepted")


def test_a_long_generation_round_keeps_saying_it_is_alive() -> None:
    """The heartbeat refreshes the bar while the policy works and stops with the round."""
    import time

    from contractrl.rollout.runner import heartbeat

    class Bar:
        def __init__(self) -> None:
            self.postfixes: list[str] = []

        def set_postfix_str(self, text: str, refresh: bool = True) -> None:
            self.postfixes.append(text)

    bar = Bar()
    with heartbeat(bar, "decision 1: 3 episodes generating", every=0.05):
        time.sleep(0.3)
    beats = len(bar.postfixes)
    assert bar.postfixes[0] == "decision 1: 3 episodes generating" and beats >= 3
    assert all(p.startswith("decision 1: 3 episodes generating (") and p.endswith("s)") for p in bar.postfixes[1:])
    time.sleep(0.15)
    assert len(bar.postfixes) == beats  # the thread ended with the round
    with heartbeat(None, "nothing to refresh"):
        pass
