"""What a model needs to train and generate well on a CPU: native bf16 products and a heap that
gives freed memory back.

**bf16.** A CPU with AMX or AVX512-BF16 runs bf16 matrix products about twice as fast as fp32
(benchmarks/RESULTS.md, "CPU compute"). Under ``torch.autocast`` the weights, the LoRA adapters and
the optimizer state stay fp32 and only the products run in bf16. GPUs get bf16 weights instead
(``model.dtype: auto``), and a CPU without native bf16 stays fp32: emulated bf16 is slower.

**The heap.** Every training step allocates activations of a different size (prompts differ in
length), and glibc keeps what was freed in its arenas: a LoRA run of SmolLM2-135M grew past 24 GB
and was killed, where the same steps with ``malloc_trim`` after each stay near 1.5 GB.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
from functools import cache
from typing import Any


@cache
def cpu_bf16_native() -> bool:
    """Whether this CPU computes bf16 natively (oneDNN reports AMX or AVX512-BF16)."""
    import torch

    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # pragma: no cover - builds without oneDNN
        return False


def compute_context(model: Any, enabled: bool = True) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast for an fp32 model on a CPU with native bf16 (when ``enabled``); else a no-op."""
    import torch

    param = next(model.parameters(), None)
    if not enabled or param is None or param.device.type != "cpu" or param.dtype != torch.float32 or not cpu_bf16_native():
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype=torch.bfloat16)


@cache
def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # pragma: no cover - a Linux without glibc (musl)
        return None


def release_memory() -> bool:
    """Give the heap's free pages back to the OS (glibc ``malloc_trim``); False where there is none."""
    libc = _libc()
    if libc is None or not hasattr(libc, "malloc_trim"):
        return False
    libc.malloc_trim(0)
    return True


__all__ = ["compute_context", "cpu_bf16_native", "release_memory"]
