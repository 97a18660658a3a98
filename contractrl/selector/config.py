"""The selector's config tree (``contractrl train-selector``): cases, PPO, network, runners, evaluation.

Cases, reward charges, checkpoints and W&B reuse the training tree's sections (:class:`DataConfig`,
:class:`RewardConfig`, :class:`CheckpointConfig`, :class:`WandbConfig`), so one YAML vocabulary covers both trainers and the
same ``data`` section gives the same cases, byte for byte. The defaults train on this 2-core
machine in minutes. Ranges are field metadata (:func:`~contractrl.configtree.setting`); only
cross-field checks are code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..configtree import check, setting
from ..trainer.config import CheckpointConfig, DataConfig, RewardConfig, WandbConfig
from .env import DEFAULT_CANDIDATES
from .module import DEFAULT_HIDDEN


def _data() -> DataConfig:
    return DataConfig(train_cases=520, eval_cases=130)


def _checkpoint() -> CheckpointConfig:
    return CheckpointConfig(every=5)  # every 5 PPO iterations


@dataclass(frozen=True)
class PPOSettings:
    """RLlib PPO (new API stack): one ``iteration`` collects ``train_batch`` env steps, then learns."""

    iterations: int = setting(30, help="PPO iterations (collect, then learn)", ge=1)
    train_batch: int = setting(1024, help="env steps collected per iteration", ge=8)
    minibatch: int = setting(256, help="env steps per SGD minibatch", ge=1)
    epochs: int = setting(6, help="passes over each collected batch", ge=1)
    lr: float = setting(1e-3, help="Adam learning rate", gt=0)
    entropy_coeff: float = setting(0.01, help="entropy bonus", ge=0)
    clip: float = setting(0.2, help="PPO clip range", gt=0, lt=1)
    vf_coeff: float = setting(0.5, help="value loss weight", ge=0)
    gamma: float = setting(1.0, help="discount (episodes are at most a few steps)", ge=0, le=1)
    lambda_: float = setting(1.0, help="GAE lambda", ge=0, le=1)

    def __post_init__(self) -> None:
        check(self.minibatch <= self.train_batch, f"ppo.minibatch must be in [1, train_batch], got {self.minibatch}")


@dataclass(frozen=True)
class SelectorNetConfig:
    candidates: int = setting(DEFAULT_CANDIDATES, help="candidate slots per decision (ABSTAIN included)", ge=2)
    hidden: int = setting(DEFAULT_HIDDEN, help="width of the candidate scorer and the value head", ge=1)


@dataclass(frozen=True)
class RunnerConfig:
    """RLlib env runners: Ray actors that step environments (0 = sample in the driver)."""

    env_runners: int = setting(1, help="env-runner actors", ge=0)
    envs_per_runner: int = setting(1, help="environments each runner steps", ge=1)
    cpus_per_runner: float = setting(1.0, help="CPUs reserved per env runner", gt=0)


@dataclass(frozen=True)
class SelectorEvalConfig:
    every: int = setting(5, help="evaluate the held-out cases every N iterations (and after the last)", ge=1)


@dataclass(frozen=True)
class SelectorConfig:
    out: str = setting("runs/selector", help="the run's directory")
    resume: bool = setting(False, help="continue the run in out from its last checkpoint")
    seed: int = setting(0, help="seed of the env runners' case draws, exploration and weights")
    data: DataConfig = setting(factory=_data, help="training and held-out cases (the training tree's section)")
    ppo: PPOSettings = setting(factory=PPOSettings, help="PPO")
    model: SelectorNetConfig = setting(factory=SelectorNetConfig, help="the candidate scorer")
    runners: RunnerConfig = setting(factory=RunnerConfig, help="env runners")
    reward: RewardConfig = setting(factory=RewardConfig, help="the episode reward's charges (as in GRPO)")
    eval: SelectorEvalConfig = setting(factory=SelectorEvalConfig, help="held-out evaluation")
    checkpoint: CheckpointConfig = setting(factory=_checkpoint, help="checkpoints for resume (every N PPO iterations)")
    wandb: WandbConfig = setting(factory=WandbConfig, help="W&B tracking")

    # the data keys that became experimental options of ``contractrl train`` (trainer/experimental.py):
    # the selector draws its cases with their defaults
    REMOVED_KEYS: ClassVar[dict[str, str]] = {
        key: f"it is {new} of contractrl train now; the selector's cases use its default"
        for key, new in {
            "data.contrast_form": "experimental.contrast.form",
            "data.disjoint": "experimental.split.disjoint",
            "data.tool_families": "experimental.transfer.tool_families",
        }.items()
    } | {"wandb.sample_episodes": "the selector never logged episode tables (and GRPO logs 8 a step)"}


__all__ = [
    "PPOSettings",
    "RunnerConfig",
    "SelectorConfig",
    "SelectorEvalConfig",
    "SelectorNetConfig",
]
