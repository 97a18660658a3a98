"""One decision of the selector: the candidates of a state, their probes, and the observation arrays.

Shared by the Gymnasium environment (training) and :class:`~contractrl.selector.policy.SelectorPolicy`
(rollouts), so the policy sees at evaluation exactly what it saw in training.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..rollout.candidates import Candidate, enumerate_candidates
from ..rollout.env import contract_for
from ..tasks.cases import PublicCase
from ..validators import PublicState, RepairContract
from .features import CANDIDATE_FEATURES, STATE_FEATURES, Probe, action_mask, encode_candidates, encode_state, probe

OBS_KEYS = ("observations", "candidates", "action_mask")


@dataclass(frozen=True)
class Decision:
    """The candidate list of one state and the arrays the selector reads (keys :data:`OBS_KEYS`)."""

    candidates: tuple[Candidate, ...]
    probes: tuple[Probe, ...]
    obs: dict[str, np.ndarray]

    def text(self, action: int) -> str:
        """The text of candidate ``action``; an index past the list is an empty (malformed) answer,
        which the contract refuses like any malformed response."""
        return self.candidates[action].text if 0 <= action < len(self.candidates) else ""


def decide(case: PublicCase, contract: RepairContract, state: PublicState, size: int) -> Decision:
    """Candidates (ABSTAIN first), their probes and the observation for one state."""
    candidates = tuple(enumerate_candidates(case, state, size))
    probes = tuple(probe(contract, state, c) for c in candidates)
    obs = {
        "observations": encode_state(case, state),
        "candidates": encode_candidates(case, state, candidates, probes, size),
        "action_mask": action_mask(candidates, probes, size),
    }
    return Decision(candidates, probes, obs)


def terminal_obs(size: int) -> dict[str, np.ndarray]:
    """The observation after the episode ended: zeros, with only ABSTAIN left (a valid mask)."""
    mask = np.zeros(size, dtype=np.float32)
    mask[0] = 1.0
    return {
        "observations": np.zeros(len(STATE_FEATURES), dtype=np.float32),
        "candidates": np.zeros((size, len(CANDIDATE_FEATURES)), dtype=np.float32),
        "action_mask": mask,
    }


__all__ = ["OBS_KEYS", "Decision", "contract_for", "decide", "terminal_obs"]
