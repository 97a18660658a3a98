"""The selector's network: one shared scorer per candidate, masked logits, and a value head.

A candidate list has no fixed order that means anything (slot 3 is ``enum`` in one state and
``request`` in the next), so the logits are not a dense layer over all slots: one small MLP scores
``[state features, candidate features]`` for each slot with the same weights, and the action mask
adds ``log(0) -> FLOAT_MIN`` to every slot the contract refuses (and to padding), so PPO never
samples them and their probability is exactly zero after the softmax. The value head reads the
state and the mean of the admissible candidates' features.

Written against RLlib's new API stack (``TorchRLModule`` + ``ValueFunctionAPI``), which PPO needs.
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.torch_utils import FLOAT_MIN
from torch import nn

DEFAULT_HIDDEN = 64


def masked_logits(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``scores`` with every slot whose mask is 0 pushed to ``FLOAT_MIN``."""
    return scores + torch.clamp(torch.log(mask), min=FLOAT_MIN)


class SelectorModule(TorchRLModule, ValueFunctionAPI):
    """Masked candidate scoring for PPO (``model_config``: ``{"hidden": int}``)."""

    def setup(self) -> None:
        space: Any = self.observation_space
        state_dim = space["observations"].shape[0]
        _, cand_dim = space["candidates"].shape
        hidden = int((self.model_config or {}).get("hidden", DEFAULT_HIDDEN))
        self.scorer = nn.Sequential(
            nn.Linear(state_dim + cand_dim, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, 1),
        )
        self.value_head = nn.Sequential(nn.Linear(state_dim + cand_dim, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def logits(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        state, cands, mask = obs["observations"], obs["candidates"], obs["action_mask"]
        paired = torch.cat([state.unsqueeze(-2).expand(*cands.shape[:-1], state.shape[-1]), cands], dim=-1)
        return masked_logits(self.scorer(paired).squeeze(-1), mask)

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self.logits(batch[Columns.OBS])}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        obs = batch[Columns.OBS]
        mask = obs["action_mask"].unsqueeze(-1)
        pooled = (obs["candidates"] * mask).sum(-2) / mask.sum(-2).clamp(min=1.0)
        return self.value_head(torch.cat([obs["observations"], pooled], dim=-1)).squeeze(-1)


__all__ = ["DEFAULT_HIDDEN", "SelectorModule", "masked_logits"]
