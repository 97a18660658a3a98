"""A policy spec, as the ``rollout`` command reads it, turned into the policy a gate asks.

``heuristic`` (the schema-guided baseline), ``selector:DIR`` (a trained selector) and
``hf:MODEL`` (a preset, a hub name, a saved model or a LoRA adapter from ``contractrl train``),
the last with shielded decoding by default: K proposals and the enumerated candidates probed on
the public contract before one is committed (rollout/shield.py), as ``--shield-k`` gives a rollout.
The model is loaded in this process, once; a gate serialises calls into it.

Threads: a gate decodes one call at a time, so every forward is a one-row product whose OpenMP
parallel regions are short; with torch's default of one thread per core, on a machine whose cores
are also busy (the executor, the agent, other jobs), each region waits on a descheduled sibling
thread and spins. Measured on the 2-core development machine at load 6-11: one shielded SmolLM2
decision took 35-144 s with two threads (21-42 CPU s, most of it spinning) and 2.8-9.4 s with one
(2.6-2.9 CPU s); the 132-167 s first reported for the gate were this (docs/notebook/
2026-12-06-gate-compare.md). So ``hf:`` policies decode on ``HFOptions.threads`` threads, one by
default; 0 keeps torch's default for a machine the gate has to itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
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
    defer: bool = True
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    temperature: float = 0.0
    mode: str = "same_information"
    feedback: str = "full"
    seed: int = 0
    # torch threads for decoding (0: torch's default, one per core); a resource, not a result, so it
    # stays out of the gate's configuration digest
    threads: int = 1

    def __post_init__(self) -> None:
        if self.shield_k < 0:
            raise ConfigError(f"shield_k must be >= 0 (0: blind decoding), got {self.shield_k}")
        if self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if self.threads < 0:
            raise ConfigError(f"threads must be >= 0 (0: torch's default), got {self.threads}")

    def config(self) -> dict[str, Any]:
        """What decides the policy's answers: every field but ``threads``."""
        return {k: v for k, v in asdict(self).items() if k != "threads"}


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

        if hf.threads:
            import torch

            torch.set_num_threads(hf.threads)  # process-wide: see the module docstring
        target, name = hf_model_target(spec)
        model, tokenizer = load_model(target, cache_dir=MODELS_DIR.resolve())
        sampling = SamplingConfig.from_options(hf)
        return HFPolicy(model, tokenizer, mode=hf.mode, feedback=hf.feedback, sampling=sampling, name=name)
    raise ConfigError(f"unknown gate policy {spec!r}; use heuristic, selector:<dir> or hf:<name-or-path>")


def policy_name(policy: Any) -> str:
    name = getattr(policy, "name", None)
    return name if isinstance(name, str) and name else type(policy).__name__


__all__ = ["HFOptions", "hf_model_target", "policy_from_spec", "policy_name"]
