"""Tune's W&B callback, logging each trial's full resolved config.

Tune's ``WandbLoggerCallback`` records a trial's ``config``, which for a sweep is only the sampled
keys: a W&B run then could not say what model, data or steps it trained with. This subclass gives
``wandb.init`` the whole config the trial resolved (base, fixed overrides, sampled values) and its
hash, the same hash ``trials.parquet`` carries. Imported only when a sweep logs to W&B (it imports Ray).
"""

from __future__ import annotations

from typing import Any

from ray.air.integrations.wandb import WandbLoggerCallback

# how long the end of a sweep waits for W&B runs to close (Tune's default is 1800 s)
END_TIMEOUT_S = 60


class ResolvedConfigWandb(WandbLoggerCallback):  # type: ignore[misc]
    """A ``WandbLoggerCallback`` whose runs carry ``resolved_config(trial.config)``, and that lets
    an interrupted sweep end."""

    def __init__(self, *, base: dict[str, Any], kind: str, **kwargs: Any) -> None:
        super().__init__(upload_timeout=END_TIMEOUT_S, **kwargs)
        self.base = base
        self.kind = kind

    def log_trial_start(self, trial: Any) -> None:
        from .tune import resolved_config

        # the callback hands self.kwargs to wandb.init after its own arguments, so this config wins
        self.kwargs = {**self.kwargs, "config": resolved_config(trial.config, base=self.base, kind=self.kind)}
        super().log_trial_start(trial)

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        # Tune ends a trial's W&B run only when the trial ends; after Ctrl-C the running trial never
        # does, and the base callback waited up to its upload timeout (1800 s) for that run to close
        for trial in list(self._trial_queues):
            self._signal_logging_actor_stop(trial=trial)
        super().on_experiment_end(trials, **info)


__all__ = ["ResolvedConfigWandb"]
