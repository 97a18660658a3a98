"""Learner ranks and the generator, in process or as Ray actors (Ray stays at this edge).

``LearnerGroup`` owns N data-parallel :class:`Learner` ranks. With ``placement: colocated`` the
ranks also generate the rollouts (each samples a shard of the batch with its own, identical
weights). With ``placement: separate`` one extra generator holds its own copy of the policy and,
after every update, receives only the trainable tensors (the LoRA adapter when LoRA is on). Both
paths end with :meth:`LearnerGroup.weights_in_use`, which the trainer compares before and after
each update to assert that rollouts really come from the new weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..rollout.hf_policy import SamplingConfig
from ..rollout.policies import Generation, Observation
from .config import OptimConfig, TrainConfig
from .grpo import PolicySample
from .learner import Learner
from .ranking import SftExample


def _shards(items: Sequence[Any], parts: int) -> list[list[Any]]:
    """Contiguous, nearly equal shards (every rank gets a list, possibly empty)."""
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for rank in range(parts):
        end = start + size + (1 if rank < extra else 0)
        out.append(list(items[start:end]))
        start = end
    return out


def _sum(results: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for result in results:
        for key, value in result.items():
            out[key] = out.get(key, 0.0) + value
    # rank-independent quantities: every rank reports the same value after the all-reduce
    for key in ("grad_norm", "lr"):
        if key in out:
            out[key] = results[0][key]
    return out


class LearnerGroup:
    def __init__(self, config: TrainConfig, *, use_ray: bool) -> None:
        res = config.resources
        self.config = config
        self.use_ray = use_ray
        self.world_size = res.num_learners
        if not use_ray:
            if res.num_learners != 1 or res.placement != "colocated":
                raise ValueError("in-process training runs one colocated learner; use Ray for more")
            learner = Learner(config, 0, 1)
            if config.deepspeed.enabled:
                learner.init_distributed(None)
            self._local: list[Learner] = [learner]
            return
        import ray

        from ..rollout.pool import ensure_ray

        ensure_ray()
        actor = ray.remote(max_restarts=0)(Learner)
        self.ranks = [
            actor.options(num_cpus=res.learner_cpus, num_gpus=res.learner_gpus).remote(config, rank, self.world_size)
            for rank in range(self.world_size)
        ]
        if config.deepspeed.enabled or self.world_size > 1:
            master = ray.get(self.ranks[0].rendezvous.remote())
            ray.get([r.init_distributed.remote(master) for r in self.ranks])
        self.generator = None
        if res.placement == "separate":
            self.generator = actor.options(num_cpus=res.generator_cpus, num_gpus=res.generator_gpus).remote(config, 0, 1)

    # --- fan-out -------------------------------------------------------------------------------

    def _all(self, method: str, per_rank: list[tuple[Any, ...]] | None = None) -> list[Any]:
        args = per_rank or [()] * self.world_size
        if not self.use_ray:
            return [getattr(self._local[0], method)(*args[0])]
        import ray

        return ray.get([getattr(rank, method).remote(*a) for rank, a in zip(self.ranks, args, strict=True)])

    def _generator_call(self, method: str, *args: Any) -> Any:
        if not self.use_ray:
            return getattr(self._local[0], method)(*args)
        import ray

        target = self.generator if self.generator is not None else self.ranks[0]
        return ray.get(getattr(target, method).remote(*args))

    # --- training ------------------------------------------------------------------------------

    def start_stage(self, stage: str, total_steps: int, optim: OptimConfig | None = None) -> None:
        """Every rank starts ``stage`` with a fresh optimizer (``optim``; by default the stage's section's)."""
        self._all("start_stage", [(stage, total_steps, optim)] * self.world_size)

    def sft_step(
        self, examples: Sequence[SftExample], token_denominator: float, pair_denominator: float = 0.0
    ) -> dict[str, float]:
        shards = _shards(examples, self.world_size)
        return _sum(self._all("sft_step", [(s, token_denominator, pair_denominator) for s in shards]))

    def grpo_step(self, samples: Sequence[PolicySample], token_denominator: float) -> dict[str, float]:
        shards = _shards(samples, self.world_size)
        return _sum(self._all("grpo_step", [(s, token_denominator) for s in shards]))

    def after_update(self) -> None:
        """Hand the new weights to the separate generator (the adapter tensors only, under LoRA)."""
        if self.use_ray and self.generator is not None:
            import ray

            state = ray.get(self.ranks[0].trainable_state.remote())
            ray.get(self.generator.load_trainable_state.remote(state))

    # --- generation ----------------------------------------------------------------------------

    def generate(self, observations: Sequence[Observation], sampling: SamplingConfig) -> list[Generation]:
        if not self.use_ray or self.generator is not None:
            return list(self._generator_call("generate", list(observations), sampling))
        out: list[Generation] = []
        for shard_result in self._all("generate", [(s, sampling) for s in _shards(observations, self.world_size)]):
            out.extend(shard_result)
        return out

    def product_dtype(self) -> str:
        """The dtype of the generating model's matrix products (what held-out episodes ran in)."""
        return str(self._generator_call("product_dtype"))

    def rank_fingerprints(self) -> list[str]:
        """Each rank's weight fingerprint: data-parallel ranks must stay identical."""
        return list(self._all("fingerprint"))

    def weights_in_use(self) -> tuple[str, list[str]]:
        """(fingerprint of the weights rollouts are sampled with, every rank's fingerprint)."""
        ranks = self.rank_fingerprints()
        if self.use_ray and self.generator is not None:
            return self._generator_call("fingerprint"), ranks
        return ranks[0], ranks

    # --- persistence ---------------------------------------------------------------------------

    def trainable_state(self) -> dict[str, Any]:
        return dict(self._all("trainable_state")[0])

    def load_trainable_state(self, state: dict[str, Any]) -> None:
        self._all("load_trainable_state", [(state,)] * self.world_size)
        self.after_update()

    def save_checkpoint(self, directory: str) -> None:
        self._all("save_checkpoint", [(directory,)] * self.world_size)

    def load_checkpoint(self, directory: str) -> None:
        self._all("load_checkpoint", [(directory,)] * self.world_size)
        self.after_update()

    def save_pretrained(self, directory: str) -> str:
        """Rank 0 writes the adapter (every rank holds the same weights under ZeRO stages 0-2)."""
        if not self.use_ray:
            return self._local[0].save_pretrained(directory)
        import ray

        return str(ray.get(self.ranks[0].save_pretrained.remote(directory)))

    def shutdown(self) -> None:
        if not self.use_ray:
            return
        import ray

        for actor in [*self.ranks, *([self.generator] if self.generator is not None else [])]:
            ray.kill(actor)


class GroupPolicy:
    """The rollout runner's policy: observations go to whichever actor holds the current weights
    (each observation carries its arm)."""

    def __init__(self, group: LearnerGroup, sampling: SamplingConfig, name: str) -> None:
        self.group = group
        self.sampling = sampling
        self.name = name

    def generate(self, observations: Sequence[Observation]) -> list[Generation]:
        return self.group.generate(observations, self.sampling)


__all__ = ["GroupPolicy", "LearnerGroup"]
