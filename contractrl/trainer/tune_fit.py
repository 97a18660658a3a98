"""Does one trial of a sweep fit the machine or cluster it will run on?

Ray Tune keeps a trial whose placement group is larger than the whole cluster PENDING forever; the
only sign is a warning every 60 s. So the sweep checks before it starts (and ``--dry-run`` checks
too), against the machine's cores and GPUs locally or ``ray.cluster_resources()`` on a cluster, and
refuses with a one-line fix instead of hanging. An autoscaling cluster grows on demand, so there
``wait_for_resources: true`` skips the check.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class Capacity:
    """What a trial can be given: logical CPUs and GPUs, and where the numbers come from."""

    cpus: float
    gpus: float
    where: str


def local_capacity() -> Capacity:
    """This machine, as a local Ray instance started without ``num_cpus`` would see it."""
    return Capacity(float(os.cpu_count() or 1), float(_local_gpus()), "this machine")


def _local_gpus() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    try:
        import torch

        return int(torch.cuda.device_count())
    except Exception:  # no torch, no driver: no GPU to give
        return 0


def ray_capacity() -> Capacity:
    """The Ray instance this process is connected to (local or a cluster)."""
    import ray

    total = ray.cluster_resources()
    where = "this Ray cluster" if os.environ.get("RAY_ADDRESS") else "the local Ray instance"
    return Capacity(float(total.get("CPU", 0.0)), float(total.get("GPU", 0.0)), where)


def trial_need(bundles: Sequence[dict[str, float]]) -> tuple[float, float]:
    """(CPUs, GPUs) one trial's placement group reserves."""
    return (sum(b.get("CPU", 0.0) for b in bundles), sum(b.get("GPU", 0.0) for b in bundles))


def check_fits(bundles: Sequence[dict[str, float]], capacity: Capacity, fixes: Sequence[str]) -> None:
    """Raise a one-line :class:`ConfigError` when one trial needs more than ``capacity`` holds.

    ``fixes`` are the sweep-specific ways out (``--local``, an override), named in the message.
    """
    cpus, gpus = trial_need(bundles)
    short = []
    if cpus > capacity.cpus + 1e-9:
        short.append(f"{cpus:g} CPUs; {capacity.where} has {capacity.cpus:g}")
    if gpus > capacity.gpus + 1e-9:
        short.append(f"{gpus:g} GPUs; {capacity.where} has {capacity.gpus:g}")
    if short:
        ways = " or ".join(fixes) if fixes else "lower the trial's resources"
        raise ConfigError(
            f"a trial needs {' and '.join(short)}, so it would stay PENDING forever: {ways} "
            "(on an autoscaling cluster: wait_for_resources=true)"
        )


__all__ = ["Capacity", "check_fits", "local_capacity", "ray_capacity", "trial_need"]
