"""An engine checkpoint is loaded without running code (issue 49, section 6).

``engine.pt`` used to be read with a full unpickler, so resuming from a checkpoint directory
someone else wrote ran whatever the file named. These tests save and resume a real
:class:`TorchEngine` and hand it crafted files: a pickle payload must be refused, typed and on one
line, before it runs.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from contractrl.errors import ContractRLError  # noqa: E402
from contractrl.trainer.config import OptimConfig  # noqa: E402
from contractrl.trainer.engine import ENGINE_FILE, CheckpointError, TorchEngine  # noqa: E402

MARKER: list[str] = []


def _ran(note: str) -> None:
    """What the payload calls when it is unpickled: proof that code ran."""
    MARKER.append(note)


class Payload:
    """An object whose unpickling calls :func:`_ran` (any callable would do, ``os.system`` too)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_ran, ("payload ran",))


def _engine(seed: int) -> TorchEngine:
    torch.manual_seed(seed)
    return TorchEngine(torch.nn.Linear(4, 3), OptimConfig(), total_steps=10)


def _train_step(engine: TorchEngine) -> None:
    loss = engine.module(torch.ones(2, 4)).pow(2).sum()
    engine.backward(loss, last=True)
    engine.step()


def test_a_saved_engine_resumes_its_weights_optimizer_schedule_and_client_state(tmp_path: Path) -> None:
    engine = _engine(0)
    for _ in range(3):
        _train_step(engine)
    rng = {"python": random.getstate(), "torch": torch.get_rng_state()}
    engine.save(tmp_path, {"rng": rng, "step": 3})
    resumed = _engine(1)  # different initial weights: the checkpoint must overwrite them
    state = resumed.load(tmp_path)
    assert state["step"] == 3 and state["rng"]["python"] == rng["python"]
    assert torch.equal(state["rng"]["torch"], rng["torch"])
    for a, b in zip(engine.module.parameters(), resumed.module.parameters(), strict=True):
        assert torch.equal(a, b)
    assert resumed.lr() == engine.lr() and resumed.scheduler.last_epoch == 3
    # the next step is the same step on both: the optimizer moments came back too
    _train_step(engine)
    _train_step(resumed)
    for a, b in zip(engine.module.parameters(), resumed.module.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("where", ["client_state", "top"])
def test_a_pickle_payload_in_engine_pt_is_refused_before_it_runs(tmp_path: Path, where: str) -> None:
    engine = _engine(0)
    engine.save(tmp_path, {"rng": {}})
    state = torch.load(tmp_path / ENGINE_FILE, weights_only=True)
    if where == "client_state":
        state["client_state"]["rng"] = Payload()
        torch.save(state, tmp_path / ENGINE_FILE)
    else:
        torch.save(Payload(), tmp_path / ENGINE_FILE)
    MARKER.clear()
    with pytest.raises(CheckpointError) as info:
        _engine(0).load(tmp_path)
    assert MARKER == []
    message = str(info.value)
    assert isinstance(info.value, ContractRLError) and "\n" not in message
    assert ENGINE_FILE in message and "_ran" in message
    # the same file through a full unpickler does run the payload: the test's file is a real one
    torch.load(tmp_path / ENGINE_FILE, weights_only=False)
    assert MARKER == ["payload ran"]


@pytest.mark.parametrize("content", [b"", b"not a zip archive", "truncated", "wrong-keys"])
def test_a_damaged_or_foreign_engine_pt_is_a_typed_refusal(tmp_path: Path, content: Any) -> None:
    engine = _engine(0)
    engine.save(tmp_path, {"rng": {}})
    path = tmp_path / ENGINE_FILE
    if content == "truncated":
        path.write_bytes(path.read_bytes()[:200])
    elif content == "wrong-keys":
        torch.save({"weights": torch.zeros(2)}, path)
    else:
        path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        _engine(0).load(tmp_path)
    assert "\n" not in str(info.value) and ENGINE_FILE in str(info.value)


# --- DeepSpeed: its loader unpickles fully, so its files are checked first ---------------------


class _RecordingEngine:
    """Stands in for a ``deepspeed.initialize`` engine: records whether DeepSpeed's loader ran."""

    def __init__(self) -> None:
        self.loaded = False

    def load_checkpoint(self, directory: str, **kwargs: Any) -> tuple[None, dict[str, Any]]:
        self.loaded = True
        return None, {"rng": {}}


def _deepspeed_engine() -> Any:
    from contractrl.trainer.engine import DeepSpeedEngine

    engine = object.__new__(DeepSpeedEngine)  # no process group, no model: only load() is tested
    engine.engine = _RecordingEngine()
    return engine


def test_deepspeed_checkpoint_files_with_a_payload_are_refused_before_deepspeed_opens_them(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    tag = tmp_path / "engine"
    tag.mkdir()
    # what DeepSpeed's own optimizer files hold passes the check, and DeepSpeed then loads
    optim = {"loss_scaler": LossScaler(1), "zero_stage": ZeroStageEnum(2), "address": fragment_address(numel=3, start=0)}
    torch.save({**optim, "state": torch.zeros(3)}, tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    torch.save({"module": {"w": torch.ones(2)}, "ds_version": "0"}, tag / "mp_rank_00_model_states.pt")
    engine = _deepspeed_engine()
    assert engine.load(tmp_path) == {"rng": {}} and engine.engine.loaded
    # one crafted file, and DeepSpeed never opens any
    torch.save({"module": {}, "client_state": {"rng": Payload()}}, tag / "mp_rank_00_model_states.pt")
    MARKER.clear()
    engine = _deepspeed_engine()
    with pytest.raises(CheckpointError) as info:
        engine.load(tmp_path)
    assert MARKER == [] and not engine.engine.loaded
    assert "\n" not in str(info.value) and "mp_rank_00_model_states.pt" in str(info.value) and "_ran" in str(info.value)


_DEEPSPEED_ROUNDTRIP = """
import os, random, socket, sys
from pathlib import Path
import torch, torch.distributed as dist
sock = socket.socket(); sock.bind(("127.0.0.1", 0)); port = sock.getsockname()[1]; sock.close()
os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
from contractrl.trainer.config import DeepSpeedConfig, OptimConfig
from contractrl.trainer.engine import DeepSpeedEngine
out = Path(sys.argv[1])
for stage in (0, 2):
    torch.manual_seed(0)
    engine = DeepSpeedEngine(torch.nn.Linear(4, 3), OptimConfig(), 10, DeepSpeedConfig(zero_stage=stage), bf16=False)
    engine.backward(engine.module(torch.ones(2, 4)).sum(), last=True)
    engine.step()
    engine.save(out / f"stage-{stage}", {"rng": {"python": random.getstate()}})
    torch.manual_seed(1)
    fresh = DeepSpeedEngine(torch.nn.Linear(4, 3), OptimConfig(), 10, DeepSpeedConfig(zero_stage=stage), bf16=False)
    assert fresh.load(out / f"stage-{stage}")["rng"]["python"] == random.getstate()
    for a, b in zip(engine.module.parameters(), fresh.module.parameters()):
        assert torch.equal(a, b)
print("resumed")
"""


def test_a_real_deepspeed_checkpoint_passes_the_check_and_resumes(tmp_path: Path) -> None:
    """ZeRO 0 and 2 on the CPU, in a child process (DeepSpeed needs a process group of its own)."""
    pytest.importorskip("deepspeed")
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.run(
        [sys.executable, "-c", _DEEPSPEED_ROUNDTRIP, str(tmp_path)], cwd=repo, env=env, capture_output=True, text=True
    )
    assert child.returncode == 0 and child.stdout.strip().endswith("resumed"), child.stderr[-3000:]
