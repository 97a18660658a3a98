"""Which system produced an episode: the ``system`` column of every scored row and table.

A *system* is what produced an episode: its arm, its policy and (for trained policies) the stage
the weights come from, e.g. ``contractrl:smollm2/lora-r16@grpo``, ``contractrl:heuristic`` or
``contractrl:replay`` (the oracle replay). Grouping by ``arm`` alone pools the heuristic, the oracle
and the learned policy, which all use the contractrl arm; ``system`` keeps them apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath

import numpy as np
import pandas as pd

# the slice of the main study's own cases (report overview, headline table)
BUILT_IN = "built-in"
# what makes one episode of a system: two runs of a system that share one of these are two systems
_EPISODE_UNIT = ("study", "condition", "mode", "case_id", "seed", "sample", "trajectory", "step")


def with_system(frame: pd.DataFrame) -> pd.DataFrame:
    """The episodes with a ``system`` column (arm, policy and stage).

    Runs of one system pool (more seeds, other studies) unless they hold the same episode: then
    they are variants, say GRPO from one adapter under two settings, and each is named after its
    run, ``system [run]``; pooling them would pair one case with two episodes.
    """
    out = frame.copy()
    stage = out["stage"].fillna("")
    policy = out["policy"].map(policy_label)
    out["system"] = out["arm"] + ":" + policy + np.where(stage != "", "@" + stage, "")
    if "run" not in out.columns:
        return out
    unit = [c for c in _EPISODE_UNIT if c in out.columns]
    for system, rows in out.groupby("system", sort=False):
        if rows.drop_duplicates(["run", *unit]).duplicated(unit).any():
            names = run_names(sorted(rows["run"].unique()))
            out.loc[rows.index, "system"] = system + " [" + rows["run"].map(names) + "]"
    return out


# the directories a training run keeps its weights in (docs/training.md), and the sweep's best link
_WEIGHT_DIRS = ("adapter", "model", "stages", "best")


def policy_label(policy: str) -> str:
    """The policy as a system names it. ``--policy hf:/home/me/runs/tiny/adapter`` records the
    absolute path, which differs per machine and checkout; it becomes the path from the run
    directory on (``tiny/adapter``, ``tiny/stages/sft``), or its last two parts. Names (a preset,
    a hub name, ``heuristic``) and relative paths stay as they are."""
    path = PurePath(policy)
    if not path.is_absolute():
        return policy
    parts = path.parts[1:]
    cut = next((i for i, part in enumerate(parts) if part in _WEIGHT_DIRS and i > 0), max(len(parts) - 2, 0))
    start = max(cut - 1, 0) if parts[cut] in _WEIGHT_DIRS else cut
    return "/".join(parts[start:]) or policy


def run_names(runs: Sequence[str]) -> dict[str, str]:
    """Each run path cut to the parts that tell it from the others (``runs/a/eval/x`` and
    ``runs/b/eval/x``: ``a`` and ``b``)."""
    parts = [PurePath(run).parts for run in runs]
    shortest = min(len(p) for p in parts)
    head = next((i for i in range(shortest) if len({p[i] for p in parts}) > 1), shortest)
    tail = next((i for i in range(shortest - head) if len({p[len(p) - 1 - i] for p in parts}) > 1), shortest - head)
    return {run: "/".join(p[head : len(p) - tail]) or run for run, p in zip(runs, parts, strict=True)}


def slice_labels(episodes: pd.DataFrame) -> pd.Series:
    """Each episode's slice: its run's ``condition`` label when it has one (``contractrl rollout
    --label condition=bfcl:simple``, or the source of a training run's given held-out set), else
    ``built-in`` for the main study's cases, else its study; so a summary never pools real users'
    questions with the catalog's cases."""
    condition = episodes["condition"].fillna("")
    study = episodes["study"].fillna("")
    fallback = study.where(study != "main", BUILT_IN)
    return condition.where(condition != "", fallback)


__all__ = ["BUILT_IN", "policy_label", "run_names", "slice_labels", "with_system"]
