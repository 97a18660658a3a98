"""Which demonstrations and cases each step sees, and which episodes share a baseline.

Pure functions of (seed, stage, step) and the case lists, so a resumed run and an uninterrupted one
draw the same batches, and the ledgers they write have the same digests.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConfigError
from ..tasks.cases import PublicCase
from ..validators.jsonvalue import canonical_json


def derived_seed(*parts: Any) -> int:
    """A 32-bit seed from any JSON-able parts: batches and sampling depend on (seed, stage, step) only."""
    return int(hashlib.sha256(canonical_json(list(parts)).encode()).hexdigest()[:8], 16)


def grpo_cases(train_cases: Sequence[PublicCase], families: Sequence[str]) -> list[PublicCase]:
    """The training cases GRPO draws from, in their order (all of them under the default families,
    so the batches, and the ledgers, are those of a run without the option)."""
    keep = set(families)
    cases = [case for case in train_cases if case.family in keep]
    if not cases:
        raise ConfigError(
            f"experimental.grpo_families.families {sorted(keep)}: none of the {len(train_cases)} training cases "
            "is of these families"
        )
    return cases


def with_contrasts(cases: Sequence[PublicCase], contrasts: Mapping[str, PublicCase]) -> list[PublicCase]:
    """The step's cases, each followed by its contrast (keyed by the case's id) where it has one:
    the two groups land in one update, whatever the batch size."""
    out: list[PublicCase] = []
    for case in cases:
        out.append(case)
        if (twin := contrasts.get(case.case_id)) is not None:
            out.append(twin)
    return out


def advantage_spans(cases: Sequence[PublicCase], group_size: int) -> list[tuple[int, int]]:
    """The episode ranges whose rewards share a baseline, for ``group_size`` episodes per case in
    the cases' order: each case's episodes, a contrast's too (joining a contrast with its
    unrepairable case was measured neutral and removed)."""
    return [(j * group_size, (j + 1) * group_size) for j in range(len(cases))]


def batch_indices(seed: int, stage: str, step: int, n: int, size: int) -> list[int]:
    """Indices of step ``step``'s batch: epochs of seeded permutations, read in order."""
    out = []
    perms: dict[int, list[int]] = {}
    for position in range(step * size, (step + 1) * size):
        epoch = position // n
        if epoch not in perms:
            order = list(range(n))
            random.Random(derived_seed(seed, stage, epoch)).shuffle(order)
            perms[epoch] = order
        out.append(perms[epoch][position % n])
    return out


def weighted_batch_indices(seed: int, stage: str, step: int, weights: Sequence[float], size: int) -> list[int]:
    """Indices of step ``step``'s batch when cases weigh differently (``experimental.grpo_families.weights``).

    Distinct cases, drawn without replacement with probabilities proportional to ``weights``
    (Efraimidis-Spirakis keys ``log(u) / w``, largest first), from a generator seeded by
    ``(seed, stage, step)`` alone, so a batch does not depend on the steps before it (resume) or on
    the worker count. A batch larger than the pool takes every case, then draws again.
    """
    bad = [(i, w) for i, w in enumerate(weights) if not (w > 0 and math.isfinite(w))]
    if not weights or bad:
        raise ValueError(f"weights must be finite and > 0; got {len(weights)} weights, bad (index, weight): {bad[:3]}")
    rng = random.Random(derived_seed(seed, stage, "weighted", step))
    out: list[int] = []
    while len(out) < size:
        keys = sorted(((math.log(1.0 - rng.random()) / w, i) for i, w in enumerate(weights)), reverse=True)
        out.extend(i for _, i in keys[: size - len(out)])
    return out


__all__ = ["advantage_spans", "batch_indices", "derived_seed", "grpo_cases", "weighted_batch_indices", "with_contrasts"]
