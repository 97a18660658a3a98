"""Paired statistics over case ids: bootstrap intervals and the exact McNemar test.

Two arms (or two checkpoints) evaluated on the same cases are compared case by case, so the
uncertainty comes from which cases were drawn, not from two independent samples. Where pairs come
from several training seeds, the bootstrap resamples seeds first and cases within each drawn seed,
so the interval also carries seed-to-seed variation; the seed spread itself is reported apart
(:func:`seed_spread`), never folded into a confidence interval.
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
    a: Sequence[float],
    b: Sequence[float],
    *,
    clusters: Sequence[object] | None = None,
    resamples: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
) -> PairedDifference:
    """Percentile bootstrap of mean(b - a), resampling case ids with replacement; with ``clusters``
    (the seed of each pair) holding more than one value, seeds are resampled first, then cases."""
    if len(a) != len(b) or (clusters is not None and len(clusters) != len(a)):
        raise ValueError(f"paired samples need equal lengths, got {len(a)} and {len(b)}")
    if not len(a):
        raise ValueError("paired samples are empty")
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    diff = y - x
    rng = np.random.default_rng(seed)
    groups = _groups(clusters) if clusters is not None else []
    if len(groups) > 1:
        means = np.empty(resamples)
        for r in range(resamples):
            drawn = [groups[i] for i in rng.integers(0, len(groups), size=len(groups))]
            means[r] = np.concatenate([diff[g[rng.integers(0, len(g), size=len(g))]] for g in drawn]).mean()
    else:
        idx = rng.integers(0, len(diff), size=(resamples, len(diff)))
        means = diff[idx].mean(axis=1)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return PairedDifference(len(diff), float(x.mean()), float(y.mean()), float(diff.mean()), float(low), float(high), level)


def _groups(clusters: Sequence[object]) -> list[np.ndarray]:
    order: dict[object, list[int]] = {}
    for index, key in enumerate(clusters):
        order.setdefault(key, []).append(index)
    return [np.asarray(v) for _, v in sorted(order.items(), key=lambda kv: str(kv[0]))]


def effect_size(a: Sequence[float], b: Sequence[float]) -> float:
    """Standardised paired difference d_z = mean(b - a) / sd(b - a); NaN when the differences do not vary."""
    diff = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    if len(diff) < 2:
        return float("nan")
    sd = diff.std(ddof=1)
    return float(diff.mean() / sd) if sd > 0 else float("nan")


def seed_spread(values_by_seed: dict[object, float]) -> float:
    """Standard deviation across seeds of a per-seed estimate; NaN with fewer than two seeds."""
    values = np.asarray(list(values_by_seed.values()), dtype=float)
    return float(values.std(ddof=1)) if len(values) > 1 else float("nan")


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> float:
    """Two-sided exact McNemar p-value for paired binary outcomes (binomial test on discordant pairs)."""
    if len(a) != len(b):
        raise ValueError(f"paired samples need equal lengths, got {len(a)} and {len(b)}")
    only_a = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    only_b = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    return sign_test(only_b, only_a)


def sign_test(positive: int, negative: int) -> float:
    """Two-sided exact sign test: how likely a split at least this uneven is when each nonzero
    difference is as likely up as down. McNemar's test is this over the discordant pairs; over
    several seeds it takes each case's summed difference, so one case counts once however many
    seeds ran it."""
    if positive < 0 or negative < 0:
        raise ValueError(f"counts cannot be negative, got {positive} and {negative}")
    n = positive + negative
    if n == 0:
        return 1.0
    k = min(positive, negative)
    tail = sum(comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2.0 * tail)


__all__ = ["PairedDifference", "effect_size", "mcnemar_exact", "paired_bootstrap", "seed_spread", "sign_test"]
