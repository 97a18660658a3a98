"""The validator/sandbox worker: owns environments and executes transitions in batches.

A plain class, unit-tested without Ray; :mod:`contractrl.rollout.pool` wraps it in a Ray actor.
Batches keep remote calls per round to one per worker, never one per transition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..tasks.cases import PublicCase
from ..validators import PublicState
from .env import RepairEnv, episode_row
from .policies import Generation


@dataclass(frozen=True)
class EpisodeKey:
    """Which episode: case position in the run, group member, and the labels of its ledger row."""

    index: int
    sample: int
    arm: str
    policy: str
    seed: int


@dataclass(frozen=True)
class StepOutcome:
    key: EpisodeKey
    state: PublicState
    row: dict[str, Any] | None  # the ledger row once the episode is over


class EpisodeWorker:
    """Holds the live environments of the episodes assigned to it."""

    def __init__(self) -> None:
        self._envs: dict[EpisodeKey, RepairEnv] = {}

    def reset(self, batch: list[tuple[EpisodeKey, PublicCase]]) -> list[StepOutcome]:
        out = []
        for key, case in batch:
            env = RepairEnv(case, arm=key.arm)
            self._envs[key] = env
            state = env.reset()
            out.append(StepOutcome(key, state, self._row(key) if env.done else None))
        return out

    def step(self, batch: list[tuple[EpisodeKey, Generation]]) -> list[StepOutcome]:
        out = []
        for key, gen in batch:
            env = self._envs[key]
            state, _ = env.commit(gen)
            out.append(StepOutcome(key, state, self._row(key) if env.done else None))
        return out

    def replay(self, batch: list[tuple[EpisodeKey, PublicCase, list[Generation]]]) -> list[StepOutcome]:
        """Rebuild episodes from their transcripts (after a worker was lost): same texts, same states."""
        out = []
        for key, case, transcript in batch:
            (outcome,) = self.reset([(key, case)])
            for gen in transcript:
                (outcome,) = self.step([(key, gen)])
            out.append(outcome)
        return out

    def _row(self, key: EpisodeKey) -> dict[str, Any]:
        env = self._envs.pop(key)
        return episode_row(env.case, env.log, arm=key.arm, policy=key.policy, seed=key.seed, sample=key.sample)

    def ping(self) -> bool:
        return True
