"""Policies as Ray actors: generation spread over actors must be generation in one process."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from contractrl.cli import main
from contractrl.rollout.env import RepairEnv
from contractrl.rollout.hf_policy import HFPolicy, SamplingConfig, plan_batches
from contractrl.rollout.policies import Observation
from contractrl.rollout.policy_pool import PolicySpec, PolicyWorker
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.trainer.presets import load_model


def _observations(n: int = 9) -> list[Observation]:
    cases = [c.public for c in generate_cases(GenerateConfig(seed=4, n=n))]
    return [Observation(case, RepairEnv(case).reset(), sample=0) for case in cases]


def test_batches_are_planned_from_the_observations_alone() -> None:
    observations = _observations()
    plan = plan_batches(observations, 4)
    assert sorted(i for batch in plan for i in batch) == list(range(len(observations)))
    assert all(1 <= len(batch) <= 4 for batch in plan) and len(plan) == 3
    assert plan == plan_batches(list(observations), 4)


def test_a_policy_worker_generates_what_the_driver_would(tmp_path: Path) -> None:
    load = functools.partial(load_model, "tiny", cache_dir=tmp_path)
    sampling = SamplingConfig(max_new_tokens=12, temperature=1.0, do_sample=True, batch_size=4, seed=3)
    worker = PolicyWorker(PolicySpec(load, sampling=sampling, name="tiny"))
    model, tokenizer = load()
    driver = HFPolicy(model, tokenizer, sampling=sampling, name="tiny")
    observations = _observations(4)
    assert [g.text for g in worker.generate_batch(observations)] == [g.text for g in driver.generate_batch(observations)]
    assert worker.ping()


def test_a_policy_worker_uses_the_threads_its_spec_names(tmp_path: Path) -> None:
    import torch

    before = torch.get_num_threads()
    load = functools.partial(load_model, "tiny", cache_dir=tmp_path)
    wanted = 1 if before != 1 else 2
    try:
        PolicyWorker(PolicySpec(load, name="tiny", threads=wanted))
        assert torch.get_num_threads() == wanted
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
def test_ledger_digest_does_not_depend_on_the_number_of_policy_actors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["cases", "generate", "--seed", "6", "--n", "13", "--out", "cases"]) == 0
    digests = {}
    for actors in (0, 1, 2):
        capsys.readouterr()
        args = ["rollout", "--cases", "cases", "--policy", "hf:tiny", "--workers", "0", "--temperature", "1.0"]
        args += ["--max-new-tokens", "16", "--policy-actors", str(actors), "--out", f"run-{actors}", "--no-progress"]
        assert main(args) == 0
        digests[actors] = json.loads(capsys.readouterr().out)["ledger_sha256"]
    assert digests[0] == digests[1] == digests[2], digests
