"""The gate runs a policy as a rollout does: the same prompt for the same call, and the decoding
threads its ``hf:`` options name (the cause of the slow SmolLM2 decisions, gate/policy.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from contractrl.errors import ConfigError
from contractrl.gate import RepairGate
from contractrl.gate import policy as gate_policy
from contractrl.gate.policy import HFOptions
from contractrl.rollout.env import RepairEnv
from contractrl.rollout.policies import Generation, Observation
from contractrl.rollout.prompts import render_messages
from contractrl.tasks.cases import ABSTAIN
from contractrl.tasks.catalog import all_tools
from contractrl.tasks.generate import CaseGenerator, GenerateConfig

# families whose public report is the verifier's own (the noisy-feedback ones hand a policy a wrong
# report on purpose; a gate hands it the verifier's, so their prompts differ by design)
HONEST = ("missing_required", "wrong_type", "constraint_violation", "nested_field", "array_element", "multi_field")


class Recording:
    """Keeps every observation it is shown and abstains."""

    name = "recording"

    def __init__(self) -> None:
        self.seen: list[Observation] = []

    def generate(self, observations: Sequence[Observation]) -> list[Generation]:
        self.seen.extend(observations)
        return [Generation(ABSTAIN) for _ in observations]


def test_the_gate_prompts_a_policy_exactly_as_a_rollout_does(tmp_path: Path) -> None:
    tools = all_tools()
    recording = Recording()
    gate = RepairGate(
        [{"name": t.name, "description": t.description, "inputSchema": t.schema} for t in tools],
        recording,
        contracts={t.name: t.contract for t in tools},
        immutable={t.name: list(t.immutable) for t in tools},
        ledger=tmp_path / "ledger",
    )
    generator = CaseGenerator(GenerateConfig(seed=52, n=40, families=HONEST))
    cases = [generator.case(i).public for i in range(12)]
    for case in cases:
        gate.repair({"name": case.tool, "arguments": case.candidate}, case.request)
    assert len(recording.seen) == len(cases)
    for case, seen in zip(cases, recording.seen, strict=True):
        rollout = render_messages(case, RepairEnv(case).reset(), seen.arm, "same_information", "full")
        assert render_messages(seen.case, seen.state, seen.arm, "same_information", "full") == rollout
        assert seen.case.max_attempts == case.max_attempts and seen.state.attempts_left == case.max_attempts


def test_hf_options_set_the_decoding_threads_and_leave_the_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from contractrl.trainer import presets

    loaded: list[str] = []

    def load(target: str, **kwargs: Any) -> tuple[object, object]:
        loaded.append(target)
        return object(), object()

    monkeypatch.setattr(presets, "load_model", load)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        policy = gate_policy.policy_from_spec("hf:tiny", hf=HFOptions(threads=1))
        assert torch.get_num_threads() == 1 and loaded == ["tiny"] and policy.name == "tiny"
        torch.set_num_threads(2)
        gate_policy.policy_from_spec("hf:tiny", hf=HFOptions(threads=0))  # 0: torch's default, untouched
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert HFOptions(threads=1).config() == HFOptions(threads=4).config()
    assert HFOptions(shield_k=2).config() != HFOptions().config()
    with pytest.raises(ConfigError, match="threads"):
        HFOptions(threads=-1)
