"""The paper's tables, as pure functions of the joined episodes frame.

Every table keeps its denominators: each row says how many episodes, distinct cases and seeds it
averages over, and a metric that is undefined for some episodes (exact-patch match for the
whole-object arms, confidence for policies without log-probabilities) carries its own ``*_n``
count. Rows never pool case families: ``case_family`` is part of every grouping.

Rows are per *system* (``systems.py``: arm, policy and stage, e.g. ``contractrl:heuristic``). A
column says how it aggregates (``semantic_success_mean``, ``latency_s_p95``,
``unsafe_dispatch_total``): every name is in the data dictionary (``dictionary.py``), and each table
is cast to its dtypes there, so an empty table has the same typed columns as a full one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..tasks.corruptions import CLEAN_FAMILIES, NOISE_FAMILIES
from .dictionary import typed
from .options import DEFAULT_THRESHOLDS
from .stats import effect_size, mcnemar_exact, paired_bootstrap, seed_spread
from .systems import run_names, with_system

REFERENCE_POLICIES = frozenset({"heuristic", "replay"})
# policies without a language model: never the subject of the paired report about the LM policy
NON_LM_POLICIES = REFERENCE_POLICIES | {"selector"}
BINARY = ("schema_valid", "semantic_success")
CONTINUOUS = ("retries", "generated_tokens", "collateral", "latency_s")


@dataclass(frozen=True)
class Table:
    """One output table: a frame plus what a reader needs to interpret it."""

    name: str
    paper: str  # the paper table it reproduces
    title: str
    frame: pd.DataFrame
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_markdown(self) -> str:
        lines = [f"# {self.title}", "", f"Reproduces the paper's {self.paper}.", ""]
        lines += [f"- {note}" for note in self.notes]
        lines.append("")
        if self.frame.empty:
            lines.append("_No episodes of this study were given to the report._")
        else:
            lines.append(_markdown(self.frame))
        return "\n".join(lines) + "\n"


def _markdown(frame: pd.DataFrame) -> str:
    def cell(value: object) -> str:
        if value is pd.NA:  # a missing Int64 or boolean
            return ""
        if isinstance(value, float | np.floating):
            return "" if np.isnan(value) else f"{value:.4f}"
        return str(value).replace("|", "\\|")

    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


# --- aggregation ---------------------------------------------------------------------------------


def p95(values: pd.Series) -> float:
    """The 95th percentile (linear interpolation, numpy's default); NaN for no values."""
    clean = values.dropna().to_numpy(dtype=float)
    return float(np.percentile(clean, 95)) if len(clean) else float("nan")


def _mean(values: pd.Series) -> float:
    clean = values.dropna()
    return float(clean.astype(float).mean()) if len(clean) else float("nan")


Agg = tuple[str, str]  # (column, how): how is mean, rate_n (mean with its own denominator), p95 or sum
# how -> the suffixes of the columns it writes: one name per quantity, the suffix says how it aggregates
SUFFIXES = {"mean": ("_mean",), "rate_n": ("_mean", "_n"), "p95": ("_p95",), "sum": ("_total",)}
DENOMINATORS = ("episodes", "cases", "seeds")


def summary_columns(by: Sequence[str], metrics: Sequence[Agg], spread: str | None) -> list[str]:
    """The columns :func:`summarize` writes, in order (an empty table has them too)."""
    names = [*by, *DENOMINATORS]
    for column, how in metrics:
        if how not in SUFFIXES:
            raise ValueError(f"unknown aggregation {how!r}")
        names += [column + suffix for suffix in SUFFIXES[how]]
    return names + ([f"{spread}_seed_sd"] if spread else [])


def summarize(
    frame: pd.DataFrame, by: Sequence[str], metrics: Sequence[Agg], spread: str | None = "semantic_success"
) -> pd.DataFrame:
    """One row per group: the denominators, then each metric; ``spread`` adds the seed spread of a
    metric (the standard deviation of its per-seed means), reported apart from any interval."""
    columns = summary_columns(by, metrics, spread)
    rows = []
    for key, group in frame.groupby(list(by), sort=True, dropna=False) if len(frame) else []:
        keys = key if isinstance(key, tuple) else (key,)
        row: dict[str, object] = dict(zip(by, keys, strict=True))
        row.update(episodes=len(group), cases=group["case_id"].nunique(), seeds=group["seed"].nunique())
        for column, how in metrics:
            values = group[column]
            if how == "mean":
                row[f"{column}_mean"] = _mean(values)
            elif how == "rate_n":
                row[f"{column}_mean"] = _mean(values)
                row[f"{column}_n"] = int(values.notna().sum())
            elif how == "p95":
                row[f"{column}_p95"] = p95(values)
            else:  # sum
                row[f"{column}_total"] = int(values.sum())
        if spread:
            per_seed = group.groupby("seed")[spread].mean()
            row[f"{spread}_seed_sd"] = seed_spread(per_seed.astype(float).to_dict())
        rows.append(row)
    return typed(pd.DataFrame(rows, columns=columns))


def _study(frame: pd.DataFrame, study: str) -> pd.DataFrame:
    return frame[frame["study"] == study]


def _with_retried(frame: pd.DataFrame) -> pd.DataFrame:
    """``retried``: the episode retried at least once (its mean is the share of episodes that did)."""
    return frame.assign(retried=frame["retries"] > 0)


def case_matched(frame: pd.DataFrame, by: Sequence[str] = ("case_family",)) -> pd.DataFrame:
    """Only the (case, seed, sample) units every system in the same stratum has an episode for."""
    if frame.empty:
        return frame
    unit = ["case_id", "seed", "sample"]
    systems = frame.groupby(list(by))["system"].transform("nunique")
    covered = frame.groupby([*by, *unit])["system"].transform("nunique")
    return frame[covered == systems]


# --- the tables ----------------------------------------------------------------------------------

OUTCOME = [
    ("semantic_success", "mean"),
    ("schema_valid", "mean"),
    ("final_object_match", "mean"),
    ("exact_patch_match", "rate_n"),
    ("generated_tokens", "mean"),
    ("probes", "mean"),
    ("collateral", "mean"),
    ("retries", "mean"),
    ("latency_s", "p95"),
    ("fail_closed", "mean"),
    ("unsafe_dispatch", "sum"),
]
MAIN_BY = ("case_family", "arm", "system")


def same_information(frame: pd.DataFrame) -> Table:
    rows = _study(frame, "main")
    rows = rows[rows["mode"] == "same_information"]
    return Table(
        "same_information",
        "Table 2",
        "Same-information comparison: every arm sees the identical public block",
        summarize(rows, MAIN_BY, OUTCOME),
        ("*_mean columns are episode means; exact_patch_match is undefined for whole-object arms (its own _n).",),
    )


def case_matched_comparison(frame: pd.DataFrame) -> Table:
    rows = case_matched(_study(frame, "main").query("mode == 'case_matched'"))
    metrics = [
        ("schema_valid", "mean"),
        ("semantic_success", "mean"),
        ("retries", "mean"),
        ("generated_tokens", "mean"),
        ("latency_s", "mean"),
        ("collateral", "mean"),
    ]
    return Table(
        "case_matched",
        "Table 3",
        "Case-matched comparison: each arm sees its own public block, on the same case ids",
        summarize(rows, MAIN_BY, metrics),
        ("Only (case, seed, sample) units that every system of the family ran are kept.",),
    )


def retry_efficiency(frame: pd.DataFrame) -> Table:
    rows = _with_retried(case_matched(_study(frame, "main").query("mode == 'case_matched'")))
    metrics = [
        ("first_attempt_valid", "mean"),
        ("schema_valid", "mean"),
        ("retries", "mean"),
        ("retried", "mean"),
        ("generated_tokens", "mean"),
        ("prompt_tokens", "mean"),
        ("validator_calls", "mean"),
        ("probes", "mean"),
        ("latency_s", "p95"),
        ("semantic_success", "mean"),
    ]
    return Table(
        "retry_efficiency", "Table 10", "Retry and efficiency under the case-matched ledger", summarize(rows, MAIN_BY, metrics)
    )


def transitions(frame: pd.DataFrame) -> Table:
    rows = _study(frame, "main").copy()
    rows["accepted_after_retry"] = rows["schema_valid"] & ~rows["first_attempt_valid"]
    metrics = [
        ("first_attempt_valid", "mean"),
        ("accepted_after_retry", "mean"),
        ("abstained", "mean"),
        ("fail_closed", "mean"),
        ("masked_attempts", "mean"),
        ("malformed_attempts", "mean"),
        ("unsafe_dispatch", "sum"),
    ]
    return Table(
        "transitions",
        "Table 11",
        "Typed-feedback transition outcomes",
        summarize(rows, ("case_family", "mode", "arm", "system"), metrics, spread=None),
        ("masked_attempts: attempts the action mask refused, per episode.",),
    )


def family_boundary(frame: pd.DataFrame) -> Table:
    metrics = [
        ("schema_valid", "mean"),
        ("semantic_success", "mean"),
        ("retries", "mean"),
        ("collateral", "mean"),
        ("off_pointer", "mean"),
        ("generated_tokens", "mean"),
        ("latency_s", "p95"),
    ]
    rows = _study(frame, "main")
    return Table(
        "family_boundary",
        "Table 13",
        "Structural and semantic boundary per case family",
        summarize(rows, ("mode", *MAIN_BY), metrics),
    )


def retry_by_op(frame: pd.DataFrame) -> Table:
    metrics = [
        ("first_attempt_valid", "mean"),
        ("schema_valid", "mean"),
        ("retries", "mean"),
        ("retried", "mean"),
        ("masked_attempts", "mean"),
        ("semantic_success", "mean"),
    ]
    rows = _with_retried(_study(frame, "main"))
    return Table(
        "retry_by_op",
        "Table 15",
        "Retry cost by the operation family of the canonical repair",
        summarize(rows, ("case_family", "op_family", "arm", "system"), metrics, spread=None),
    )


def feedback(frame: pd.DataFrame) -> Table:
    metrics = [
        ("semantic_success", "mean"),
        ("final_object_match", "mean"),
        ("retries", "mean"),
        ("collateral", "mean"),
        ("fail_closed", "mean"),
        ("schema_valid", "mean"),
    ]
    rows = _study(frame, "feedback")
    return Table(
        "feedback",
        "Table 27",
        "Verifier-feedback ablation: full typed block, pointer only, code only, free text, context only",
        summarize(rows, ("case_family", "feedback", "arm", "system"), metrics),
    )


def budget(frame: pd.DataFrame) -> Table:
    metrics = [
        ("semantic_success", "mean"),
        ("generated_tokens", "mean"),
        ("collateral", "mean"),
        ("retries", "mean"),
        ("fail_closed", "mean"),
        ("latency_s", "p95"),
    ]
    rows = _study(frame, "budget")
    return Table(
        "budget",
        "Table 30",
        "Budget frontier: operation budget K and attempt budget B",
        summarize(rows, ("case_family", "max_ops", "max_attempts", "arm", "system"), metrics),
    )


def structure_shift(frame: pd.DataFrame) -> Table:
    metrics = [
        ("semantic_success", "mean"),
        ("pointer_fix", "rate_n"),
        ("collateral", "mean"),
        ("retries", "mean"),
        ("latency_s", "p95"),
    ]
    rows = _study(frame, "main")
    return Table(
        "structure",
        "Table 31",
        "Structure shift: flat, nested, array, union, long-pointer and multi-field repairs",
        summarize(rows, ("case_family", "structure", "arm", "system"), metrics),
        ("structure is the shape of the canonical repair (its pointer depth, arrays, unions, number of paths).",),
    )


def verifier_noise(frame: pd.DataFrame) -> Table:
    rows = frame[frame["study"].isin(["main", "noise"]) & frame["case_family"].isin([*CLEAN_FAMILIES, *NOISE_FAMILIES])].copy()
    rows["cohort"] = np.where(rows["case_family"].isin(NOISE_FAMILIES), rows["case_family"], "clean")
    metrics = [
        ("semantic_success", "mean"),
        ("fail_closed", "mean"),
        ("schema_valid", "mean"),
        ("leakage", "mean"),
        ("unsafe_dispatch", "sum"),
    ]
    return Table(
        "verifier_noise",
        "Table 32",
        "Verifier noise and adversarial feedback",
        summarize(rows, ("study", "cohort", "case_family", "arm", "system"), metrics),
        ("leakage: the public half of the case holds an offline-only value (must be 0).",),
    )


def trajectories(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per chained trajectory: it succeeds only if it has every step and each step succeeded.

    Its sums over steps are named ``trajectory_*`` (``trajectory_retries``): a trajectory's retries
    are not an episode's, and the horizon table's means of them say so."""
    rows = _study(frame, "horizon")
    rows = rows[rows["trajectory"].notna()]
    if rows.empty:
        return pd.DataFrame(columns=["case_id", "seed", "case_family", "horizon", "arm", "system"])
    keys = ["run", "trajectory", "seed", "sample"]
    rows = rows.assign(decided=rows["schema_valid"] | rows["abstained"])
    agg = rows.groupby(keys, sort=True).agg(
        case_family=("case_family", "first"),
        families=("case_family", "nunique"),
        arm=("arm", "first"),
        system=("system", "first"),
        horizon=("horizon", "first"),
        steps=("step", "nunique"),
        completed=("decided", "all"),
        step_success=("semantic_success", "all"),
        trajectory_retries=("retries", "sum"),
        trajectory_generated_tokens=("generated_tokens", "sum"),
        trajectory_latency_s=("latency_s", "sum"),
        trajectory_collateral=("collateral", "sum"),
        case_id=("case_id", "first"),
    )
    if (agg["families"] > 1).any():
        raise ValueError("a trajectory mixes case families; build trajectories within one family")
    agg["complete"] = agg["steps"] == agg["horizon"]
    agg["completion"] = agg["completed"] & agg["complete"]
    agg["trajectory_success"] = agg["step_success"] & agg["complete"]
    return agg.reset_index()


def horizon(frame: pd.DataFrame) -> Table:
    chains = trajectories(frame)
    metrics = [
        ("completion", "mean"),
        ("trajectory_success", "mean"),
        ("trajectory_retries", "mean"),
        ("trajectory_generated_tokens", "mean"),
        ("trajectory_latency_s", "mean"),
        ("trajectory_collateral", "mean"),
    ]
    table = summarize(chains, ("case_family", "horizon", "arm", "system"), metrics, spread="trajectory_success")
    table = table.rename(columns={"episodes": "trajectories", "cases": "first_cases"})
    return Table(
        "horizon",
        "Table 33",
        "Long-horizon chained trajectories (1, 3, 5, 8 steps)",
        table,
        (
            "A trajectory succeeds only if it has every step and each step is semantically correct.",
            "completion: every step ended in a released valid object or an abstention.",
            "trajectory_* means are of sums over the trajectory's steps (retries, tokens, latency, collateral).",
        ),
    )


def transfer(frame: pd.DataFrame) -> Table:
    metrics = [
        ("semantic_success", "mean"),
        ("pointer_fix", "rate_n"),
        ("collateral", "mean"),
        ("schema_valid", "mean"),
        ("retries", "mean"),
    ]
    rows = _study(frame, "transfer")
    return Table(
        "transfer",
        "Table 34",
        "Transfer: train on some tool families (or one case source), evaluate on a held-out one (a family, or BFCL)",
        summarize(rows, ("heldout_tool_family", "train_tool_families", "case_family", "arm", "system"), metrics),
    )


CALIBRATION_COLUMNS = [
    *MAIN_BY,
    "threshold",
    *DENOMINATORS,
    "covered_episodes",
    "coverage",
    "risk",
    "wrong_withheld_share",
    "confidence_mean",
]


def calibration(frame: pd.DataFrame, thresholds: Sequence[float] = DEFAULT_THRESHOLDS) -> Table:
    """Coverage and semantic risk of releasing only answers with confidence >= threshold.

    covered_episodes: the answer was released (accepted) and its confidence reaches the threshold;
    risk: the failure rate on the covered episodes; wrong_withheld_share: the share of would-be
    wrong releases (accepted but semantically wrong) that the threshold withholds (1.0 when there
    are none to withhold).
    """
    rows = _study(frame, "main")
    rows = rows[rows["confidence"].notna()]
    out = []
    for key, group in rows.groupby(["case_family", "arm", "system"], sort=True):
        wrong = group["schema_valid"] & ~group["semantic_success"]
        for threshold in thresholds:
            covered = group["schema_valid"] & (group["confidence"] >= threshold)
            n_covered = int(covered.sum())
            withheld_wrong = int((wrong & ~covered).sum())
            out.append(
                {
                    **dict(zip(("case_family", "arm", "system"), key, strict=True)),
                    "threshold": threshold,
                    "episodes": len(group),
                    "cases": group["case_id"].nunique(),
                    "seeds": group["seed"].nunique(),
                    "covered_episodes": n_covered,
                    "coverage": n_covered / len(group),
                    "risk": float((~group["semantic_success"][covered]).mean()) if n_covered else float("nan"),
                    "wrong_withheld_share": withheld_wrong / int(wrong.sum()) if int(wrong.sum()) else 1.0,
                    "confidence_mean": float(group["confidence"].mean()),
                }
            )
    return Table(
        "calibration",
        "Table 35",
        "Calibration and selective risk at fixed confidence thresholds",
        typed(pd.DataFrame(out, columns=CALIBRATION_COLUMNS)),
        (
            f"Thresholds fixed before scoring: {', '.join(f'{t:.2f}' for t in thresholds)}.",
            "confidence = exp(mean token log-probability) of the first answer; risk is measured on the covered subset only.",
        ),
    )


def subject_system(frame: pd.DataFrame) -> str | None:
    """The system the paired report is about: the ContractRL arm of a learned language-model policy,
    preferring the latest stage (GRPO over SFT)."""
    learned = frame[(frame["arm"] == "contractrl") & ~frame["policy"].isin(NON_LM_POLICIES)]
    if learned.empty:
        learned = frame[frame["arm"] == "contractrl"]
    if learned.empty:
        return None
    systems = sorted(set(learned["system"]), key=lambda s: (not s.endswith("@grpo"), s))
    return systems[0]


PAIRED_COLUMNS = [
    "mode",
    "case_family",
    "system",
    "baseline",
    "metric",
    "pairs",
    "seeds",
    "system_mean",
    "baseline_mean",
    "difference_mean",
    "ci_low",
    "ci_high",
    "mcnemar_p",
    "effect_size_dz",
    "difference_seed_sd",
]


def paired(frame: pd.DataFrame, *, resamples: int = 2000, seed: int = 0) -> Table:
    """ContractRL against each other system on the same (case, seed, sample) units, per family."""
    rows = _study(frame, "main")
    subject = subject_system(rows)
    out = []
    if subject is not None:
        unit = ["case_id", "seed", "sample"]
        for (mode, family), stratum in rows.groupby(["mode", "case_family"], sort=True):
            mine = stratum[stratum["system"] == subject].set_index(unit)
            for other in sorted(set(stratum["system"]) - {subject}):
                theirs = stratum[stratum["system"] == other].set_index(unit)
                common = mine.index.intersection(theirs.index).sort_values()
                if not len(common):
                    continue
                a, b = theirs.loc[common], mine.loc[common]
                seeds = [u[1] for u in common]
                for metric in (*BINARY, *CONTINUOUS):
                    x, y = a[metric].astype(float).to_numpy(), b[metric].astype(float).to_numpy()
                    boot = paired_bootstrap(x, y, clusters=seeds, resamples=resamples, seed=seed)
                    diff_by_seed = pd.Series(y - x).groupby(seeds).mean().to_dict()
                    out.append(
                        {
                            "mode": mode,
                            "case_family": family,
                            "system": subject,
                            "baseline": other,
                            "metric": metric,
                            "pairs": len(common),
                            "seeds": len(set(seeds)),
                            "system_mean": boot.mean_b,
                            "baseline_mean": boot.mean_a,
                            "difference_mean": boot.difference,
                            "ci_low": boot.low,
                            "ci_high": boot.high,
                            "mcnemar_p": mcnemar_exact(x.astype(bool), y.astype(bool)) if metric in BINARY else float("nan"),
                            "effect_size_dz": effect_size(x, y) if metric in CONTINUOUS else float("nan"),
                            "difference_seed_sd": seed_spread(diff_by_seed),
                        }
                    )
    return Table(
        "paired",
        "Table 36",
        "Paired uncertainty and effect sizes, on the same case ids",
        typed(pd.DataFrame(out, columns=PAIRED_COLUMNS)),
        (
            "difference_mean = system_mean - baseline_mean; 95% percentile bootstrap over case ids (seeds first, where there "
            "are several).",
            "McNemar: exact two-sided test for binary endpoints; effect_size_dz: d_z for continuous ones.",
            "difference_seed_sd: the spread of the per-seed difference, reported apart from the interval.",
        ),
    )


TABLES: dict[str, Callable[[pd.DataFrame], Table]] = {
    "same_information": same_information,
    "case_matched": case_matched_comparison,
    "retry_efficiency": retry_efficiency,
    "transitions": transitions,
    "family_boundary": family_boundary,
    "retry_by_op": retry_by_op,
    "feedback": feedback,
    "budget": budget,
    "structure": structure_shift,
    "verifier_noise": verifier_noise,
    "horizon": horizon,
    "transfer": transfer,
    "calibration": calibration,
    "paired": paired,
}  # and last, the scaling table, which also reads the training runs (scaling.py; report.build_report)


def build_tables(frame: pd.DataFrame, thresholds: Sequence[float] = DEFAULT_THRESHOLDS) -> list[Table]:
    """Every table, in the paper's order, from one joined episodes frame."""
    if "system" not in frame.columns:  # read_episodes adds it; a hand-made frame may not have it
        frame = with_system(frame)
    return [calibration(frame, thresholds) if name == "calibration" else build(frame) for name, build in TABLES.items()]


__all__ = [
    "DEFAULT_THRESHOLDS",
    "TABLES",
    "Table",
    "build_tables",
    "case_matched",
    "p95",
    "run_names",
    "subject_system",
    "summarize",
    "summary_columns",
    "trajectories",
    "with_system",
]
