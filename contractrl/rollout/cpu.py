"""What a model needs to train and generate well on a CPU: native bf16 products and a heap that
gives freed memory back.

**bf16.** A CPU with AMX or AVX512-BF16 runs bf16 matrix products faster than fp32: a LoRA SFT step
of SmolLM2-135M on four 300-token prompts takes 2.6-3.2 s instead of 3.9-4.0 s on this project's
2-core Xeon, a forward pass 1.0-1.1 s instead of 1.6 s (benchmarks/RESULTS.md, "CPU compute").
Under ``torch.autocast`` the weights, the LoRA adapters and the optimizer state stay fp32 and only
the products run in bf16. GPUs get bf16 weights instead
(``model.dtype: auto``), and a CPU without native bf16 stays fp32: emulated bf16 is slower.

**The heap.** Every training step allocates activations of a different size (prompts differ in
length), and glibc keeps what was freed in its arenas: twelve LoRA steps of SmolLM2-135M on prompts
of 200-700 tokens leave 6.2 GB resident, 1.5 GB with ``malloc_trim`` after each. Trimming every step
costs page faults on the next one, so it happens only once the process holds more than a quarter
of the machine's memory.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
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


def _autocasts(model: Any, enabled: bool) -> bool:
    import torch

    param = next(model.parameters(), None)
    return bool(
        enabled and param is not None and param.device.type == "cpu" and param.dtype == torch.float32 and cpu_bf16_native()
    )


def compute_context(model: Any, enabled: bool = True) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast for an fp32 model on a CPU with native bf16 (when ``enabled``); else a no-op."""
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16) if _autocasts(model, enabled) else contextlib.nullcontext()


def product_dtype(model: Any, enabled: bool = True) -> str:
    """The dtype of the matrix products under :func:`compute_context` (``"bfloat16"``, ``"float32"``).

    ``model.cpu_bf16`` is a request a CPU without native bf16 declines, and the same run gives other
    figures with and without it; a run records this answer so its figures say which they are.
    """
    if _autocasts(model, enabled):
        return "bfloat16"
    param = next(model.parameters(), None)
    return "none" if param is None else str(param.dtype).removeprefix("torch.")


@cache
def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # pragma: no cover - a Linux without glibc (musl)
        return None


def resident_bytes() -> int:
    """This process's resident memory (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def peak_resident_bytes() -> int:
    """The most this process has held resident since it started (``ru_maxrss``, KiB on Linux): what
    a machine must have for the run, which ``resident_bytes`` after a trim understates."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def release_memory(above: float = 0.25) -> bool:
    """Give the heap's free pages back to the OS (glibc ``malloc_trim``) once this process holds more
    than ``above`` of the machine's memory (0 trims always); True when it trimmed."""
    libc = _libc()
    if libc is None or not hasattr(libc, "malloc_trim"):
        return False
    if above > 0 and resident_bytes() <= above * os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"):
        return False
    libc.malloc_trim(0)
    return True


__all__ = ["compute_context", "cpu_bf16_native", "peak_resident_bytes", "product_dtype", "release_memory", "resident_bytes"]
