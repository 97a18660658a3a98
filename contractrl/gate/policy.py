"""A policy spec, as the ``rollout`` command reads it, turned into the policy a gate asks.

``heuristic`` (the schema-guided baseline), ``selector:DIR`` (a trained selector) and
``hf:MODEL`` (a preset, a hub name, a saved model or a LoRA adapter from ``contractrl train``),
the last with shielded decoding by default: K proposals and the enumerated candidates probed on
the public contract before one is committed (rollout/shield.py), as ``--shield-k`` gives a rollout.
The model is loaded in this process, once; a gate serialises calls into it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..rollout.options import DEFAULT_MAX_NEW_TOKENS
from ..rollout.policies import HeuristicPolicy, Policy
from ..tasks.arms import DEFAULT_ARM, arm_spec
from ..trainer.model_cache import MODELS_DIR


@dataclass(frozen=True)
class HFOptions:
    """Generation settings of an ``hf:`` policy (the rollout command's flags of the same names).
    A gate decodes greedily by default: the same call gets the same repair."""

    shield_k: int = 1
    enumerate: bool = True
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    temperature: float = 0.0
    mode: str = "same_information"
    feedback: str = "full"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.shield_k < 0:
            raise ConfigError(f"shield_k must be >= 0 (0: blind decoding), got {self.shield_k}")
        if self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")


def hf_model_target(spec: str) -> tuple[str, str]:
    """(what :func:`~contractrl.trainer.presets.load_model` loads, the policy's name) for ``hf:X``:
    a preset by name, an existing path made absolute (a Ray actor may run elsewhere), else a hub name."""
    preset = spec.removeprefix("hf:")
    from ..trainer.presets import PRESETS

    if preset in PRESETS:
        return preset, preset
    return (f"hf:{Path(preset).resolve()}" if Path(preset).exists() else spec), preset


def policy_from_spec(spec: str, *, arm: str = DEFAULT_ARM, hf: HFOptions = HFOptions()) -> Policy:
    """The policy named by ``spec``; an unknown spec or a model that cannot load is a ConfigError."""
    arm_spec(arm)  # an unknown arm is a ConfigError before a model loads
    if spec == "heuristic":
        return HeuristicPolicy()
    if spec.startswith("selector:"):
        from ..selector.policy import SelectorPolicy

        return SelectorPolicy.load(spec.removeprefix("selector:"), arm=arm)
    if spec.startswith("hf:") and len(spec) > 3:
        from ..rollout.hf_policy import HFPolicy, SamplingConfig
        from ..trainer.presets import load_model

        target, name = hf_model_target(spec)
        model, tokenizer = load_model(target, cache_dir=MODELS_DIR.resolve())
        sampling = SamplingConfig.from_options(hf)
        return HFPolicy(model, tokenizer, mode=hf.mode, feedback=hf.feedback, sampling=sampling, name=name)
    raise ConfigError(f"unknown gate policy {spec!r}; use heuristic, selector:<dir> or hf:<name-or-path>")


def policy_name(policy: Any) -> str:
    name = getattr(policy, "name", None)
    return name if isinstance(name, str) and name else type(policy).__name__


__all__ = ["HFOptions", "hf_model_target", "policy_from_spec", "policy_name"]
