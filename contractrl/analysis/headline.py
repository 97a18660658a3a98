"""The headline table: semantic success per system and slice, with what it cost, and ContractRL's
paired difference from every other system.

Rows are the systems a user would choose between (the schema-guided heuristic, the PPO selector,
full regeneration, constrained decoding, Patch-SFT, ContractRL); columns are the slices the project
is judged on (the built-in catalog with paraphrased requests, BFCL non-live, BFCL live held out,
natural failures). The built-in catalog with verbatim requests is not a column: rules copy its
values, so it cannot tell a learned policy from a heuristic.

Each cell is computed from joined episodes (:func:`~.join.read_episodes`): success with its case
count and a percentile bootstrap interval, mean generated tokens, mean probes, mean collateral
edits and the 95th percentile of episode time. ``paired`` compares ContractRL with each other
system on the cases both ran (matched by case, seed and sample): the mean difference, its paired
bootstrap interval and the exact McNemar p-value. A system or slice with no episodes is a cell
with ``n`` 0 and nulls, so the table always has its full shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ContractRLError
from .stats import mcnemar_exact, paired_bootstrap
from .systems import slice_labels

SYSTEMS: tuple[str, ...] = ("heuristic", "selector", "full_regen", "constrained", "patch_sft", "contractrl")
SLICES: tuple[str, ...] = ("builtin_paraphrase", "bfcl_nonlive", "bfcl_live", "natural")
HELD_OUT_SLICES = frozenset({"bfcl_live"})
REFERENCE = "contractrl"
CELL_KEYS = ("success", "n", "ci_low", "ci_high", "tokens", "probes", "collateral", "p95_s")
_UNIT = ("case_id", "seed", "sample")


def _mean(values: pd.Series) -> float | None:
    return float(values.mean()) if len(values) else None


def cell(rows: pd.DataFrame, *, resamples: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """One system on one slice: success with its bootstrap interval, and the costs per episode."""
    if rows.empty:
        return {key: (0 if key == "n" else None) for key in CELL_KEYS}
    success = rows["semantic_success"].astype(bool).to_numpy(dtype=float)
    interval = paired_bootstrap(np.zeros_like(success), success, resamples=resamples, seed=seed)
    return {
        "success": float(success.mean()),
        "n": len(rows),
        "ci_low": interval.low,
        "ci_high": interval.high,
        "tokens": _mean(rows["generated_tokens"].astype(float)),
        "probes": _mean(rows["probes"].astype(float)),
        "collateral": _mean(rows["collateral"].astype(float)),
        "p95_s": float(np.quantile(rows["latency_s"].astype(float), 0.95)),
    }


def paired(reference: pd.DataFrame, other: pd.DataFrame, *, resamples: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """``reference`` minus ``other`` on the episodes both ran; nulls when they share none."""
    unit = [c for c in _UNIT if c in reference.columns and c in other.columns]
    both = reference[[*unit, "semantic_success"]].merge(other[[*unit, "semantic_success"]], on=unit, suffixes=("_ref", "_other"))
    if both.empty:
        return {"n": 0, "diff": None, "ci_low": None, "ci_high": None, "mcnemar_p": None}
    ref = both["semantic_success_ref"].astype(bool).tolist()
    oth = both["semantic_success_other"].astype(bool).tolist()
    diff = paired_bootstrap([float(x) for x in oth], [float(x) for x in ref], resamples=resamples, seed=seed)
    return {
        "n": len(both),
        "diff": diff.difference,
        "ci_low": diff.low,
        "ci_high": diff.high,
        "mcnemar_p": mcnemar_exact(oth, ref),
    }


def headline(
    episodes: pd.DataFrame,
    systems: Mapping[str, str],
    slices: Mapping[str, str],
    *,
    extra: Mapping[str, str] | None = None,
    resamples: int = 10_000,
    seed: int = 0,
) -> dict[str, Any]:
    """The table from joined episodes. ``systems`` maps a headline row (:data:`SYSTEMS`) to the
    ``system`` label of its episodes (``contractrl:hf@grpo``), ``slices`` a headline column
    (:data:`SLICES`) to the ``slice`` label of its episodes (``bfcl:live_simple``); rows and
    columns not mapped stay in the table, empty. ``extra`` adds rows after the six under names of
    their own (the same recipe on a larger model, say): ContractRL is paired with them too."""
    extra = dict(extra or {})
    unknown = sorted((set(systems) - set(SYSTEMS)) | (set(slices) - set(SLICES)))
    if unknown:
        raise ContractRLError(f"not a headline row or column: {unknown}; rows {', '.join(SYSTEMS)}; columns {', '.join(SLICES)}")
    if clash := sorted(set(extra) & set(SYSTEMS)):
        raise ContractRLError(f"extra rows {clash} would replace headline rows; name them apart from {', '.join(SYSTEMS)}")
    systems = {**systems, **extra}
    names = (*SYSTEMS, *extra)
    for column in ("system", "slice", "semantic_success", "generated_tokens", "probes", "collateral", "latency_s"):
        if column not in episodes.columns:
            raise ContractRLError(f"the episodes have no {column!r} column: join the runs first (analysis/join.py)")

    def rows(system: str, slice_name: str) -> pd.DataFrame:
        if system not in systems or slice_name not in slices:
            return episodes.iloc[0:0]
        return episodes[(episodes["system"] == systems[system]) & (episodes["slice"] == slices[slice_name])]

    table = {s: {c: cell(rows(s, c), resamples=resamples, seed=seed) for c in SLICES} for s in names}
    pairs = {
        s: {c: paired(rows(REFERENCE, c), rows(s, c), resamples=resamples, seed=seed) for c in SLICES}
        for s in names
        if s != REFERENCE
    }
    return {
        "systems": table,
        "slices": {c: {"label": slices.get(c), "held_out": c in HELD_OUT_SLICES} for c in SLICES},
        "paired": pairs,
        "reference": REFERENCE,
        "labels": {"systems": dict(systems), "slices": dict(slices)},
        "resamples": resamples,
        "seed": seed,
    }


__all__ = ["CELL_KEYS", "HELD_OUT_SLICES", "REFERENCE", "SLICES", "SYSTEMS", "cell", "headline", "paired", "slice_labels"]
