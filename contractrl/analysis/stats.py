"""Paired statistics over case ids: bootstrap intervals and the exact McNemar test.

Two arms (or two checkpoints) evaluated on the same cases are compared case by case, so the
uncertainty comes from which cases were drawn, not from two independent samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import comb

import numpy as np


@dataclass(frozen=True)
class PairedDifference:
    """mean(b - a) over paired cases, with a percentile bootstrap interval."""

    n: int
    mean_a: float
    mean_b: float
    difference: float
    low: float
    high: float
    level: float


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], *, resamples: int = 10_000, level: float = 0.95, seed: int = 0
) -> PairedDifference:
    """Percentile bootstrap of mean(b - a), resampling case ids with replacement."""
    if len(a) != len(b):
        raise ValueError(f"paired samples need equal lengths, got {len(a)} and {len(b)}")
    if not a:
        raise ValueError("paired samples are empty")
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    diff = y - x
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(diff), size=(resamples, len(diff)))
    means = diff[idx].mean(axis=1)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return PairedDifference(len(diff), float(x.mean()), float(y.mean()), float(diff.mean()), float(low), float(high), level)


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> float:
    """Two-sided exact McNemar p-value for paired binary outcomes (binomial test on discordant pairs)."""
    if len(a) != len(b):
        raise ValueError(f"paired samples need equal lengths, got {len(a)} and {len(b)}")
    only_a = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    only_b = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2.0 * tail)


__all__ = ["PairedDifference", "mcnemar_exact", "paired_bootstrap"]
