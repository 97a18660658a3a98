"""Loading engine checkpoints without running code from them.

A checkpoint directory may come from someone else (a shared run, a copied ``runs/`` folder), and a
full unpickler runs whatever callable a crafted file names. So every engine file is read with
``torch.load(weights_only=True)``, which accepts tensors and plain containers only, plus, for
DeepSpeed's files, the three DeepSpeed state classes its optimizer checkpoints hold (a loss
scaler, a tensor fragment address and the ZeRO stage enum: data, no behaviour on load). Anything
else is a one-line :class:`CheckpointError` naming the file and the refused global, raised before
any of it runs.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

from ..errors import ContractRLError

_ENGINE_KEYS = frozenset({"optimizer", "scheduler", "trainable", "client_state"})


class CheckpointError(ContractRLError):
    """An engine checkpoint holds something other than tensors and plain values (a pickled object
    that would run code when loaded), or is not an engine checkpoint at all."""


def _weights_only_load(path: Path, allowed: list[Any], **kwargs: Any) -> Any:
    """``torch.load(weights_only=True)`` with ``allowed`` added, every failure one typed line."""
    import torch

    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(path, weights_only=True, **kwargs)
    except pickle.UnpicklingError as exc:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
        what = f"it names {found.group(1)}" if found else str(exc).strip().splitlines()[0][:200]
        raise CheckpointError(f"{path}: refused, not a plain-tensor checkpoint ({what})") from None
    except (RuntimeError, EOFError, ValueError) as exc:  # not a torch zip archive: empty, truncated, garbage
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path}: not a readable checkpoint ({first})") from None


def load_engine_state(path: Path) -> dict[str, Any]:
    """The state ``TorchEngine.save`` wrote: its weights, optimizer and schedule state and its
    client state (RNG states), which are tensors and plain values only."""
    state = _weights_only_load(path, [])
    if not isinstance(state, dict) or set(state) != _ENGINE_KEYS or not isinstance(state["client_state"], dict):
        raise CheckpointError(f"{path}: not an engine checkpoint (expected the keys {sorted(_ENGINE_KEYS)})")
    return state


def deepspeed_safe_globals() -> list[Any]:
    """The DeepSpeed classes its own checkpoints hold (found by saving ZeRO 0-2, bf16 or not,
    offloaded or not, with ``torch.serialization.get_unsafe_globals_in_checkpoint``)."""
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [LossScaler, ZeroStageEnum, fragment_address]


def check_deepspeed_checkpoint(folder: Path) -> None:
    """Read every ``*.pt`` file of a DeepSpeed checkpoint tag with ``weights_only=True`` (memory
    mapped: the tensors are not read) before DeepSpeed, which unpickles fully, opens any of them."""
    allowed = deepspeed_safe_globals()
    for path in sorted(folder.glob("*.pt")):
        _weights_only_load(path, allowed, mmap=True, map_location="cpu")


__all__ = ["CheckpointError", "check_deepspeed_checkpoint", "deepspeed_safe_globals", "load_engine_state"]
