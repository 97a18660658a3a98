"""CPU knobs: bf16 autocast only where the CPU has native bf16 and the model is fp32; freed heap
memory handed back after a step."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

from contractrl.rollout import cpu  # noqa: E402
from contractrl.rollout.cpu import compute_context, cpu_bf16_native, product_dtype, release_memory, resident_bytes  # noqa: E402


def _autocast_on() -> bool:
    return bool(torch.is_autocast_enabled("cpu"))


def test_autocast_only_for_fp32_models_on_native_bf16_cpus() -> None:
    fp32 = torch.nn.Linear(4, 4)
    with compute_context(fp32):
        assert _autocast_on() is cpu_bf16_native()
        if cpu_bf16_native():
            assert fp32(torch.ones(1, 4)).dtype == torch.bfloat16
    with compute_context(fp32, enabled=False):
        assert not _autocast_on()
    with compute_context(torch.nn.Linear(4, 4).to(torch.bfloat16)):
        assert not _autocast_on()  # bf16 weights need no autocast
    with compute_context(torch.nn.Module()):
        assert not _autocast_on()  # no parameters, nothing to decide on
    assert not _autocast_on()


def test_the_product_dtype_says_whether_the_bf16_request_was_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    fp32 = torch.nn.Linear(4, 4)
    assert product_dtype(fp32) == ("bfloat16" if cpu_bf16_native() else "float32")
    for native in (True, False):
        monkeypatch.setattr(cpu, "cpu_bf16_native", lambda native=native: native)
        assert product_dtype(fp32) == ("bfloat16" if native else "float32")
        assert product_dtype(fp32, enabled=False) == "float32"
        with compute_context(fp32):
            assert _autocast_on() is native  # the context and the record agree
    assert product_dtype(torch.nn.Linear(4, 4).to(torch.bfloat16)) == "bfloat16"
    assert product_dtype(torch.nn.Module()) == "none"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's")
def test_release_memory_trims_the_heap_on_linux() -> None:
    assert resident_bytes() > 0
    assert release_memory(above=0) is True  # always
    assert release_memory(above=1.0) is False  # never: no process holds more than the machine
