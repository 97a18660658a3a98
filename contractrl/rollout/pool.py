"""Ray at the edge: a pool of CPU actors that wrap :class:`EpisodeWorker`.

Locally this starts Ray on one machine; under ``ray job submit`` (or with ``RAY_ADDRESS`` set) the
same code connects to the cluster.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from ..errors import ConfigError, RayStartError
from .worker import EpisodeWorker, StepOutcome


def ensure_ray(num_cpus: int | None = None) -> None:
    """Start (or connect to) Ray once per process."""
    import ray

    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        init_ray(None)
    else:
        init_ray(None, num_cpus=num_cpus, include_dashboard=False)


def init_ray(address: str | None, **options: Any) -> None:
    """``ray.init`` that fails with one line instead of Ray's traceback: on a loaded machine the
    raylet may miss Ray's start-up deadline ("The current node timed out during startup"), and a
    cluster address may not answer. ``address`` ``local`` starts an instance of this process's own
    (no dashboard); ``None`` lets Ray read ``RAY_ADDRESS``; else it is the cluster to join."""
    import ray

    if address == "local":
        options = {"include_dashboard": False, **options}
    try:
        ray.init(address=address, log_to_driver=False, **options)
    except Exception as exc:  # Ray raises bare Exception, RuntimeError or ConnectionError here
        cluster = address or os.environ.get("RAY_ADDRESS")
        where = f"join the Ray cluster at {cluster}" if cluster and address != "local" else "start Ray"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        hint = (
            "check the address and that the head runs"
            if cluster and address != "local"
            else "the machine may be overloaded: run the command again when it is quieter; Ray's logs are under /tmp/ray"
        )
        raise RayStartError(f"could not {where}: {first} ({hint})") from exc


class RayPool:
    """``size`` ValidatorWorker actors (one CPU each); a dead actor is replaced on request."""

    def __init__(self, size: int, num_cpus_per_worker: float = 1.0, start_timeout_s: float = 120.0) -> None:
        import ray

        ensure_ray()
        self.size = size
        self._actor_cls = ray.remote(num_cpus=num_cpus_per_worker, max_restarts=0)(EpisodeWorker)
        self.actors = [self._actor_cls.remote() for _ in range(size)]
        try:
            ray.get([actor.ping.remote() for actor in self.actors], timeout=start_timeout_s)
        except ray.exceptions.GetTimeoutError as exc:
            self.shutdown()
            free = ray.available_resources().get("CPU", 0)
            raise ConfigError(
                f"{size} validator workers need {size * num_cpus_per_worker:g} CPUs; the Ray cluster has {free:g} free"
            ) from exc

    def call(self, method: str, batches: dict[int, list[Any]]) -> dict[int, list[StepOutcome] | Exception]:
        import ray

        futures = {slot: getattr(self.actors[slot], method).remote(batch) for slot, batch in batches.items()}
        results: dict[int, list[StepOutcome] | Exception] = {}
        for slot, future in futures.items():
            try:
                results[slot] = ray.get(future)
            except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as exc:
                results[slot] = exc
        return results

    def restart(self, slot: int) -> None:
        import ray

        with contextlib.suppress(Exception):  # the actor may already be dead
            ray.kill(self.actors[slot])
        self.actors[slot] = self._actor_cls.remote()

    def kill(self, slot: int, timeout_s: float = 60.0) -> None:
        """Kill one actor without replacing it (used by fault-injection tests), and return only once
        it is seen dead: ``ray.kill`` is asynchronous, and a task sent straight after it can still
        run on the dying actor, so a test that kills a worker would otherwise not always see it fail."""
        import ray

        actor = self.actors[slot]
        ray.kill(actor, no_restart=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                ray.get(actor.ping.remote(), timeout=max(0.1, deadline - time.monotonic()))
            except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError):
                return
            except ray.exceptions.GetTimeoutError:
                break
            time.sleep(0.05)
        raise RuntimeError(f"worker {slot} was not seen dead within {timeout_s:g} s of ray.kill")

    def shutdown(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)
