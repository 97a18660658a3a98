"""The selector's config tree (``contractrl train-selector``): cases, PPO, network, runners, evaluation.

Cases, reward charges, checkpoints and W&B reuse the training tree's sections (:class:`DataConfig`,
:class:`RewardConfig`, :class:`CheckpointConfig`, :class:`WandbConfig`), so one YAML vocabulary covers both trainers and the
same ``data`` section gives the same cases, byte for byte. The defaults train on this 2-core
machine in minutes.
"""

from __future__ import annotations

from dataclasses import dataclass

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

    iterations: int = setting(30, help="PPO iterations (collect, then learn)")
    train_batch: int = setting(1024, help="env steps collected per iteration")
    minibatch: int = setting(256, help="env steps per SGD minibatch")
    epochs: int = setting(6, help="passes over each collected batch")
    lr: float = setting(1e-3, help="Adam learning rate")
    entropy_coeff: float = setting(0.01, help="entropy bonus")
    clip: float = setting(0.2, help="PPO clip range")
    vf_coeff: float = setting(0.5, help="value loss weight")
    gamma: float = setting(1.0, help="discount (episodes are at most a few steps)")
    lambda_: float = setting(1.0, help="GAE lambda")

    def __post_init__(self) -> None:
        check(self.iterations >= 1, f"ppo.iterations must be >= 1, got {self.iterations}")
        check(self.train_batch >= 8, f"ppo.train_batch must be >= 8, got {self.train_batch}")
        check(1 <= self.minibatch <= self.train_batch, f"ppo.minibatch must be in [1, train_batch], got {self.minibatch}")
        check(self.epochs >= 1, f"ppo.epochs must be >= 1, got {self.epochs}")
        check(self.lr > 0, f"ppo.lr must be > 0, got {self.lr}")
        check(0 < self.clip < 1, f"ppo.clip must be in (0, 1), got {self.clip}")
        check(0 <= self.gamma <= 1 and 0 <= self.lambda_ <= 1, "ppo.gamma and ppo.lambda_ must be in [0, 1]")
        check(self.entropy_coeff >= 0 and self.vf_coeff >= 0, "ppo.entropy_coeff and ppo.vf_coeff must be >= 0")


@dataclass(frozen=True)
class SelectorNetConfig:
    candidates: int = setting(DEFAULT_CANDIDATES, help="candidate slots per decision (ABSTAIN included)")
    hidden: int = setting(DEFAULT_HIDDEN, help="width of the candidate scorer and the value head")

    def __post_init__(self) -> None:
        check(self.candidates >= 2, f"model.candidates must be >= 2, got {self.candidates}")
        check(self.hidden >= 1, f"model.hidden must be >= 1, got {self.hidden}")


@dataclass(frozen=True)
class RunnerConfig:
    """RLlib env runners: Ray actors that step environments (0 = sample in the driver)."""

    env_runners: int = setting(1, help="env-runner actors")
    envs_per_runner: int = setting(1, help="environments each runner steps")
    cpus_per_runner: float = setting(1.0, help="CPUs reserved per env runner")

    def __post_init__(self) -> None:
        check(self.env_runners >= 0, f"runners.env_runners must be >= 0, got {self.env_runners}")
        check(self.envs_per_runner >= 1, f"runners.envs_per_runner must be >= 1, got {self.envs_per_runner}")
        check(self.cpus_per_runner > 0, f"runners.cpus_per_runner must be > 0, got {self.cpus_per_runner}")


@dataclass(frozen=True)
class SelectorEvalConfig:
    every: int = setting(5, help="evaluate the held-out cases every N iterations (and after the last)")

    def __post_init__(self) -> None:
        check(self.every >= 1, f"eval.every must be >= 1, got {self.every}")


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


__all__ = [
    "PPOSettings",
    "RunnerConfig",
    "SelectorConfig",
    "SelectorEvalConfig",
    "SelectorNetConfig",
]
