"""The CR-MDP as a Gymnasium environment: choose one of the enumerated candidates, or ABSTAIN.

The environment wraps the same :class:`~contractrl.rollout.env.RepairEnv` (validator, action mask,
sandbox dispatch) that every other policy runs in. An action is an index into the state's candidate
list (:mod:`contractrl.rollout.candidates`); its text goes through the contract like any model's
answer, so a masked or out-of-list index is refused by the contract itself and costs an attempt.

Observation (``gymnasium.spaces.Dict``, every entry in [0, 1]):

- ``observations``: the state's features (:data:`~contractrl.selector.features.STATE_FEATURES`);
- ``candidates``: one row of features per candidate slot (zero rows pad the list);
- ``action_mask``: 1 where the contract admits the candidate (ABSTAIN always).

Reward and the evidence boundary. Each finished episode becomes the ledger row every rollout
writes (:func:`~contractrl.rollout.env.episode_row`). The row is appended to the environment's
hash chain (``prev_hash``/``row_hash`` as in the ledger), and only then does the judge join the
offline half to it; the reward is the trainer's episode reward of that row. The policy sees one
scalar after its last action, never a target: the GRPO batch order, at the scale of one episode.
The chain stays in memory (a training run makes tens of thousands of short episodes); held-out
evaluation writes real, frozen ledgers (:mod:`contractrl.selector.train`).

Registered as ``contractrl/Selector-v0``; ``gymnasium.make("contractrl/Selector-v0", case_dir=...)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from ..configtree import from_dict
from ..errors import ConfigError
from ..evidence.judge import Judge
from ..rollout.env import RepairEnv, episode_row
from ..rollout.ledger import row_hash
from ..tasks.arms import DEFAULT_ARM
from ..tasks.cases import PublicCase
from ..tasks.store import read_public
from ..trainer.config import RewardConfig
from ..trainer.reward import episode_reward
from .features import CANDIDATE_FEATURES, STATE_FEATURES
from .observe import Decision, decide, terminal_obs

ENV_ID = "contractrl/Selector-v0"
DEFAULT_CANDIDATES = 16
POLICY_NAME = "selector"
_GENESIS = "0" * 64


class EpisodeScorer:
    """Chains finished episode rows, then joins the judge's verdict to each for its reward."""

    def __init__(self, judge: Judge, weights: RewardConfig) -> None:
        self.judge = judge
        self.weights = weights
        self.head = _GENESIS
        self.rows = 0

    def score(self, row: dict[str, Any]) -> tuple[float, bool]:
        """(reward, semantic success) of a finished episode's row."""
        self.head = row_hash(self.head, row)  # the row is fixed before the offline half is opened
        self.rows += 1
        verdict = self.judge.verdict(row)
        return episode_reward(row, verdict.success, self.weights).reward, verdict.success


class SelectorEnv(gym.Env[dict[str, np.ndarray], np.int64]):
    """Repair episodes over one case set; each ``reset`` draws a case (or takes ``options['index']``)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        settings = {**dict(config or {}), **kwargs}
        unknown = sorted(set(settings) - {"case_dir", "candidates", "reward"})
        if unknown:
            raise ConfigError(f"SelectorEnv: unknown settings {unknown}; it takes case_dir, candidates, reward")
        if "case_dir" not in settings:
            raise ConfigError("SelectorEnv needs case_dir: a case set with its offline half (contractrl cases generate)")
        case_dir = Path(settings["case_dir"])
        self.size = int(settings.get("candidates", DEFAULT_CANDIDATES))
        if self.size < 2:
            raise ConfigError(f"SelectorEnv: candidates must be >= 2 (ABSTAIN and one patch), got {self.size}")
        reward = settings.get("reward") or {}
        weights = reward if isinstance(reward, RewardConfig) else from_dict(RewardConfig, dict(reward), "reward")
        self.cases: list[PublicCase] = read_public(case_dir)
        if not self.cases:
            raise ConfigError(f"SelectorEnv: {case_dir} holds no cases")
        self.scorer = EpisodeScorer(Judge.from_case_dir(case_dir), weights)
        self.observation_space = gym.spaces.Dict(
            {
                "observations": gym.spaces.Box(0.0, 1.0, (len(STATE_FEATURES),), np.float32),
                "candidates": gym.spaces.Box(0.0, 1.0, (self.size, len(CANDIDATE_FEATURES)), np.float32),
                "action_mask": gym.spaces.Box(0.0, 1.0, (self.size,), np.float32),
            }
        )
        self.action_space = gym.spaces.Discrete(self.size)
        self._env: RepairEnv | None = None
        self._decision: Decision | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        index = (options or {}).get("index")
        if index is None:
            index = int(self.np_random.integers(len(self.cases)))
        elif not 0 <= int(index) < len(self.cases):
            raise ConfigError(f"SelectorEnv.reset: index {index} is outside the {len(self.cases)} cases")
        case = self.cases[int(index)]
        self._env = RepairEnv(case)
        state = self._env.reset()
        self._decision = decide(case, self._env.contract, state, self.size)
        return self._decision.obs, {"case_id": case.case_id, "candidates": len(self._decision.candidates)}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self._env is None or self._decision is None:
            raise RuntimeError("call reset() before step()")
        env, decision = self._env, self._decision
        choice = int(action)
        state, record = env.step(decision.text(choice))
        info: dict[str, Any] = {
            "case_id": env.case.case_id,
            "outcome": record.outcome,
            "masked": not bool(decision.obs["action_mask"][choice]) if 0 <= choice < self.size else True,
        }
        if not state.done:
            self._decision = decide(env.case, env.contract, state, self.size)
            info["candidates"] = len(self._decision.candidates)
            return self._decision.obs, 0.0, False, False, info
        row = episode_row(env.case, env.log, arm=DEFAULT_ARM, policy=POLICY_NAME, seed=0, sample=0)
        reward, success = self.scorer.score(row)
        # the row's own hash (not the chain head, which depends on the episodes before it)
        info.update({"success": success, "row_hash": row_hash(_GENESIS, row), "final_outcome": row["outcome"]})
        self._env, self._decision = None, None
        return terminal_obs(self.size), float(reward), True, False, info


def register() -> None:
    """Register :data:`ENV_ID` with Gymnasium (idempotent)."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="contractrl.selector.env:SelectorEnv", disable_env_checker=True)


__all__ = ["DEFAULT_CANDIDATES", "ENV_ID", "POLICY_NAME", "EpisodeScorer", "SelectorEnv", "register"]
