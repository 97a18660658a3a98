"""A trained selector as a rollout policy (``contractrl rollout --policy selector:PATH``).

It plugs into the same :class:`~contractrl.rollout.runner.EpisodeRunner` as every other policy, so
its episodes land in ordinary frozen ledgers and are scored by the same judge. Each decision is the
masked argmax over the candidate list (greedy, deterministic: the first best slot wins a tie).

A selector directory (written by ``contractrl train-selector``) holds the RLlib module
(``module/``) and ``selector.json``: the slot count and the feature names the module was trained
on, checked on load so a module never reads features it was not trained on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..rollout.policies import Generation, Observation
from ..tasks.arms import DEFAULT_ARM, PATCH_ARMS, arm_spec
from ..validators import RepairContract
from .features import CANDIDATE_FEATURES, STATE_FEATURES
from .observe import OBS_KEYS, contract_for, decide

SELECTOR_FILE = "selector.json"
MODULE_DIR = "module"


def selector_meta(candidates: int) -> dict[str, Any]:
    return {
        "format": 1,
        "candidates": candidates,
        "state_features": list(STATE_FEATURES),
        "candidate_features": list(CANDIDATE_FEATURES),
    }


def save_selector(module: Any, directory: Path, candidates: int) -> None:
    """Write ``module`` (an RLlib RLModule) and its metadata to ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    module.save_to_path(str((directory / MODULE_DIR).resolve()))
    (directory / SELECTOR_FILE).write_text(json.dumps(selector_meta(candidates), indent=2) + "\n")


def greedy(logits: np.ndarray) -> np.ndarray:
    """The first highest-scoring slot per row."""
    return np.argmax(logits, axis=-1)


class SelectorPolicy:
    """Chooses among enumerated candidates with a trained module (no language model)."""

    def __init__(self, module: Any, candidates: int, name: str = "selector", arm: str = DEFAULT_ARM) -> None:
        if arm_spec(arm).whole_object:
            raise ConfigError(f"a selector answers with patches; use a patch arm ({', '.join(sorted(PATCH_ARMS))}), not {arm}")
        self.module = module
        self.size = candidates
        self.name = name
        self._contracts: dict[str, RepairContract] = {}

    @classmethod
    def load(cls, path: str | Path, arm: str = DEFAULT_ARM) -> SelectorPolicy:
        directory = Path(path)
        meta_path = directory / SELECTOR_FILE
        if not meta_path.is_file():
            raise ConfigError(f"{directory} is not a selector (no {SELECTOR_FILE}); train one with contractrl train-selector")
        meta = json.loads(meta_path.read_text())
        expected = selector_meta(int(meta.get("candidates", 0)))
        if meta != expected:
            raise ConfigError(f"{directory} was trained on other features or slots than this version computes; retrain it")
        from ray.rllib.core.rl_module.rl_module import RLModule

        module = RLModule.from_checkpoint(str((directory / MODULE_DIR).resolve()))
        return cls(module, int(meta["candidates"]), arm=arm)

    def _contract(self, obs: Observation) -> RepairContract:
        case_id = obs.case.case_id
        if case_id not in self._contracts:
            self._contracts[case_id] = contract_for(obs.case)
        return self._contracts[case_id]

    def scores(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """Masked logits for a batch of observations (keys :data:`OBS_KEYS`)."""
        import torch

        with torch.no_grad():
            tensors = {key: torch.as_tensor(batch[key]) for key in OBS_KEYS}
            return self.module.logits(tensors).numpy()

    def generate(self, observations: Sequence[Observation]) -> list[Generation]:
        if not observations:
            return []
        start = time.perf_counter()
        decisions = [decide(o.case, self._contract(o), o.state, self.size) for o in observations]
        batch = {key: np.stack([d.obs[key] for d in decisions]) for key in OBS_KEYS}
        chosen = greedy(self.scores(batch))
        share = (time.perf_counter() - start) / len(observations)
        # every candidate was probed on the public contract to build its features and mask
        return [Generation(d.text(int(a)), gen_s=share, probes=len(d.probes)) for d, a in zip(decisions, chosen, strict=True)]


__all__ = ["MODULE_DIR", "SELECTOR_FILE", "SelectorPolicy", "greedy", "save_selector", "selector_meta"]
