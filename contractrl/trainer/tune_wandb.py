"""Tune's W&B callback, logging each trial's full resolved config.

Tune's ``WandbLoggerCallback`` records a trial's ``config``, which for a sweep is only the sampled
keys: a W&B run then could not say what model, data or steps it trained with. This subclass gives
``wandb.init`` the whole config the trial resolved (base, fixed overrides, sampled values) and its
hash, the same hash ``trials.parquet`` carries. Imported only when a sweep logs to W&B (it imports Ray).
"""

from __future__ import annotations

from typing import Any

from ray.air.integrations.wandb import WandbLoggerCallback


class ResolvedConfigWandb(WandbLoggerCallback):  # type: ignore[misc]
    """A ``WandbLoggerCallback`` whose runs carry ``resolved_config(trial.config)``."""

    def __init__(self, *, base: dict[str, Any], kind: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base = base
        self.kind = kind

    def log_trial_start(self, trial: Any) -> None:
        from .tune import resolved_config

        # the callback hands self.kwargs to wandb.init after its own arguments, so this config wins
        self.kwargs = {**self.kwargs, "config": resolved_config(trial.config, base=self.base, kind=self.kind)}
        super().log_trial_start(trial)


__all__ = ["ResolvedConfigWandb"]
