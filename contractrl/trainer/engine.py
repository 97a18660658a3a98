"""Optimizer engines behind one small interface: a DeepSpeed engine (CPU or GPU, any ZeRO stage)
or plain torch AdamW, with the learning-rate schedule of the stage.

The learner calls ``backward(loss, last=...)`` once per micro-batch and ``step()`` once per update,
so a variable number of micro-batches (groups with no signal are dropped) accumulates into one
optimizer step; on several ranks DeepSpeed averages the gradients at the last micro-batch.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Protocol

from .config import DeepSpeedConfig, OptimConfig
from .safe_load import CheckpointError, check_deepspeed_checkpoint, load_engine_state

ENGINE_FILE = "engine.pt"


def lr_lambda(optim: OptimConfig, total_steps: int) -> Any:
    """Multiplier of the base lr at each step: linear warmup, then constant, linear or cosine decay."""

    def factor(step: int) -> float:
        if optim.warmup_steps and step < optim.warmup_steps:
            return (step + 1) / optim.warmup_steps
        if optim.schedule == "constant" or total_steps <= optim.warmup_steps:
            return 1.0
        progress = min(1.0, (step - optim.warmup_steps) / max(1, total_steps - optim.warmup_steps))
        if optim.schedule == "linear":
            return max(0.0, 1.0 - progress)
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


class TrainEngine(Protocol):
    module: Any

    def backward(self, loss: Any, *, last: bool) -> None: ...

    def step(self) -> float: ...

    def lr(self) -> float: ...

    def save(self, directory: Path, client_state: dict[str, Any]) -> None: ...

    def load(self, directory: Path) -> dict[str, Any]: ...


def _trainable(module: Any) -> list[Any]:
    return [p for p in module.parameters() if p.requires_grad]


def _grad_norm(params: list[Any]) -> float:
    import torch

    grads = [p.grad.detach().float().norm() for p in params if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.stack(grads))) if grads else 0.0


class TorchEngine:
    """AdamW + LambdaLR + gradient clipping; for runs with DeepSpeed switched off."""

    def __init__(self, module: Any, optim: OptimConfig, total_steps: int) -> None:
        import torch

        self.module = module
        self.params = _trainable(module)
        self.optimizer = torch.optim.AdamW(self.params, lr=optim.lr, weight_decay=0.0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda(optim, total_steps))
        self.grad_clip = optim.grad_clip

    def backward(self, loss: Any, *, last: bool) -> None:
        loss.backward()

    def step(self) -> float:
        import torch

        if self.grad_clip > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip))
        else:
            norm = _grad_norm(self.params)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def lr(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    def save(self, directory: Path, client_state: dict[str, Any]) -> None:
        import torch

        directory.mkdir(parents=True, exist_ok=True)
        trainable = {n: p.detach().clone() for n, p in self.module.named_parameters() if p.requires_grad}
        state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(), "trainable": trainable}
        torch.save({**state, "client_state": client_state}, directory / ENGINE_FILE)

    def load(self, directory: Path) -> dict[str, Any]:
        import torch

        state = load_engine_state(directory / ENGINE_FILE)
        params = dict(self.module.named_parameters())
        with torch.no_grad():
            for name, value in state["trainable"].items():
                params[name].copy_(value)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        return dict(state["client_state"])


class DeepSpeedEngine:
    """A ``deepspeed.initialize`` engine on the learner's device (the CPU accelerator works too)."""

    TAG = "engine"

    def __init__(self, module: Any, optim: OptimConfig, total_steps: int, ds: DeepSpeedConfig, *, bf16: bool) -> None:
        import deepspeed
        import torch

        params = _trainable(module)
        config: dict[str, Any] = {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,
            "gradient_clipping": optim.grad_clip,
            "zero_optimization": {"stage": ds.zero_stage},
            "bf16": {"enabled": bf16},
            "steps_per_print": 10**9,
            "wall_clock_breakdown": False,
        }
        optimizer = torch.optim.AdamW(params, lr=optim.lr, weight_decay=0.0)
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=module,
            model_parameters=params,
            optimizer=optimizer,
            lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(optim, total_steps)),
            config=config,
        )
        self.module = self.engine.module
        self.params = params
        self.zero_stage = ds.zero_stage

    def backward(self, loss: Any, *, last: bool) -> None:
        self.engine.set_gradient_accumulation_boundary(last)
        self.engine.backward(loss)

    def step(self) -> float:
        norm = _grad_norm(self.params) if self.zero_stage <= 1 else None
        self.engine.set_gradient_accumulation_boundary(True)
        self.engine.step()
        if norm is None:
            norm = float(self.engine.get_global_grad_norm() or 0.0)
        return norm

    def lr(self) -> float:
        return float(self.engine.get_lr()[0])

    def save(self, directory: Path, client_state: dict[str, Any]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.engine.save_checkpoint(str(directory), tag=self.TAG, client_state=client_state, exclude_frozen_parameters=True)

    def load(self, directory: Path) -> dict[str, Any]:
        # DeepSpeed unpickles its files fully: each is first read with weights_only=True and only
        # DeepSpeed's own state classes allowed, so a crafted file is refused before DeepSpeed opens it
        check_deepspeed_checkpoint(directory / self.TAG)
        _, client_state = self.engine.load_checkpoint(str(directory), tag=self.TAG, load_module_strict=False)
        if client_state is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint in {directory}")
        return dict(client_state)


__all__ = ["CheckpointError", "DeepSpeedEngine", "TorchEngine", "TrainEngine", "load_engine_state", "lr_lambda"]
