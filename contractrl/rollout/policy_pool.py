"""Generation on a pool of policy actors: each Ray actor holds the model once (a GPU each, where
there are GPUs), and the runner's observations are spread over them in whole batches.

Evaluating a real model on a cluster then uses every device the cluster has, not the driver's
alone. Batches are planned as :meth:`HFPolicy.generate` plans them (:func:`plan_batches`), and
each batch is generated whole by one actor with the per-batch seed of :class:`HFPolicy`, so the
same seed gives the same generations, hence the same ledger digest, with 0, 1 or N actors. The
trainer's learner placements are separate (``trainer/group.py``) and unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConfigError
from .hf_policy import HFPolicy, SamplingConfig, in_callers_order, plan_batches
from .policies import Generation, Observation

# builds (model, tokenizer) inside the actor's own process: a picklable callable, e.g.
# functools.partial(trainer.presets.load_model, "smollm2")
ModelFactory = Callable[[], tuple[Any, Any]]


@dataclass(frozen=True)
class PolicySpec:
    """Everything an actor needs to build the same :class:`HFPolicy` the driver would."""

    load: ModelFactory
    mode: str = "same_information"
    feedback: str = "full"
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    name: str = "hf"
    cpu_bf16: bool = True
    # torch threads in the actor; 0 until ActorPolicy records the driver's. On some CPUs (AVX2, fp32)
    # a different thread count changes the logits' last bits and so the sampled tokens: the same
    # count keeps the ledger digest independent of the number of actors
    threads: int = 0

    def build(self) -> HFPolicy:
        model, tokenizer = self.load()
        return HFPolicy(
            model,
            tokenizer,
            mode=self.mode,
            feedback=self.feedback,
            sampling=self.sampling,
            name=self.name,
            cpu_bf16=self.cpu_bf16,
        )


class PolicyWorker:
    """What one policy actor runs (a plain class: tested without Ray)."""

    def __init__(self, spec: PolicySpec) -> None:
        if spec.threads:
            import torch

            torch.set_num_threads(spec.threads)
        self.policy = spec.build()

    def ping(self) -> bool:
        return True

    def generate_batch(self, observations: list[Observation]) -> list[Generation]:
        return self.policy.generate_batch(observations)


class ActorPolicy:
    """A :class:`Policy` whose generation runs on ``actors`` Ray actors, each holding the model."""

    def __init__(
        self,
        spec: PolicySpec,
        actors: int,
        *,
        num_gpus: float = 0.0,
        num_cpus: float = 1.0,
        start_timeout_s: float = 600.0,
    ) -> None:
        import ray

        from .pool import ensure_ray

        if actors < 1:
            raise ConfigError(f"a policy pool needs at least one actor, got {actors}")
        ensure_ray()
        if not spec.threads:
            import torch

            spec = replace(spec, threads=torch.get_num_threads())
        self.spec = spec
        self.name = spec.name
        remote = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0)(PolicyWorker)
        self.actors = [remote.remote(spec) for _ in range(actors)]
        try:
            ray.get([a.ping.remote() for a in self.actors], timeout=start_timeout_s)
        except ray.exceptions.GetTimeoutError as exc:
            self.shutdown()
            free = ray.available_resources()
            raise ConfigError(
                f"{actors} policy actors need {actors * num_cpus:g} CPUs and {actors * num_gpus:g} GPUs; "
                f"the Ray cluster has {free.get('CPU', 0):g} CPUs and {free.get('GPU', 0):g} GPUs free"
            ) from exc

    def generate(self, observations: Sequence[Observation]) -> list[Generation]:
        import ray

        batches = plan_batches(observations, self.spec.sampling.batch_size)
        futures = [
            self.actors[n % len(self.actors)].generate_batch.remote([observations[i] for i in batch])
            for n, batch in enumerate(batches)
        ]
        return in_callers_order(batches, ray.get(futures))

    def shutdown(self) -> None:
        import ray

        for actor in self.actors:
            with contextlib.suppress(Exception):  # already gone
                ray.kill(actor)
        self.actors = []


__all__ = ["ActorPolicy", "ModelFactory", "PolicySpec", "PolicyWorker"]
