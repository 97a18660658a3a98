"""The data dictionary: every column the report writes, its dtype and what it means.

One entry per column name, and one name per quantity: a name means the same thing (and has the
same dtype) in ``episodes.parquet``, in every table and in the overview. Per-episode quantities
carry their plain name (``collateral``); an aggregate says how it aggregates with a suffix
(``collateral_mean``, ``latency_s_p95``, ``unsafe_dispatch_total``, ``exact_patch_match_n``,
``semantic_success_seed_sd``), so a table's mean is never mistaken for an episode's count.

Why a module and not only prose: the writer (:func:`write_parquet`) casts each column to its
declared dtype and stores the description in the parquet field metadata, so a file explains itself
without this repository; docs/analysis.md carries :func:`markdown` verbatim (a test checks both),
so the docs cannot drift from the files.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

DESCRIPTION = b"description"  # the field-metadata key of a column's description


@dataclass(frozen=True)
class Column:
    """One column: its name, the pandas dtype it is written with and what it means.

    dtype is ``str``, ``int64``, ``Int64`` (an integer that may be missing), ``float64``, ``bool``
    or ``boolean`` (a boolean that may be missing)."""

    name: str
    dtype: str
    description: str


def _columns(*rows: tuple[str, str, str]) -> tuple[Column, ...]:
    return tuple(Column(*row) for row in rows)


EPISODE_COLUMNS = _columns(
    ("episode_key", "str", "Unique key of the episode in the joined table: `run` + `/` + `episode_id`."),
    ("episode_id", "str", "The ledger's episode id, `case_id/arm/seed/sample`: unique within a run only."),
    ("case_id", "str", "The case the episode repaired."),
    (
        "case_family",
        "str",
        "The corruption family of the case (the paper's tables never pool families; the overview and `scaling` say how "
        "many they pool).",
    ),
    ("tool", "str", "The tool whose call was repaired."),
    ("tool_family", "str", "The tool's family: file, calendar, database, http, code (built-in); bfcl, jsonschema (imported)."),
    ("arm", "str", "The prompt and answer format: contractrl, patch_sft, full_regen or constrained."),
    ("policy", "str", "The policy's name in the ledger: heuristic, replay (the oracle), selector, a model preset or path."),
    (
        "system",
        "str",
        "What produced the episode, `arm:policy@stage`; runs of one system that hold the same episode "
        "get ` [run]` appended. Group by this, not by `arm`.",
    ),
    ("seed", "int64", "The run's seed."),
    ("sample", "int64", "The episode's index within its case's group (0 .. G-1)."),
    ("outcome", "str", "How the episode ended, as the ledger records it."),
    (
        "semantic_success",
        "bool",
        "The tool got the intended object and returned the expected result and side effects "
        "(on an abstain case: a correct abstention).",
    ),
    ("schema_valid", "bool", "An object was released and it passes its schema and contract."),
    (
        "final_object_match",
        "bool",
        "The released object equals the canonical target (abstain case: abstained, nothing released).",
    ),
    ("exact_patch_match", "boolean", "The accepted operations equal the canonical patch; missing for whole-object arms."),
    ("pointer_fix", "boolean", "The accepted attempt edited exactly the canonical patch's paths; missing for whole-object arms."),
    ("first_attempt_valid", "bool", "The first attempt was accepted."),
    ("first_outcome", "str", "The first attempt's outcome (empty without attempts)."),
    ("collateral", "int64", "Changed leaf paths not covered by the emitted operations' paths, summed over attempts."),
    ("off_pointer", "int64", "Edited paths away from every reported pointer."),
    ("retries", "int64", "Attempts after the first that consumed budget (attempts - 1)."),
    ("attempts", "int64", "Attempts that consumed budget."),
    ("masked_attempts", "int64", "Attempts the action mask refused."),
    ("malformed_attempts", "int64", "Attempts that did not parse."),
    ("unsafe_dispatch", "int64", "1 if an object that fails its own schema or contract was released (must be 0)."),
    ("fail_closed", "bool", "Nothing was released and the policy did not abstain (every attempt refused or budget spent)."),
    ("abstained", "bool", "The policy abstained."),
    ("should_abstain", "bool", "The case's correct action is to abstain."),
    ("generated_tokens", "int64", "Tokens the policy generated in the episode (0 for non-model policies)."),
    ("prompt_tokens", "int64", "Prompt tokens the policy read in the episode."),
    ("validator_calls", "int64", "Calls to the public validator in the episode."),
    ("probes", "int64", "Candidates a shielded policy checked on the public validator before committing one."),
    (
        "latency_s",
        "float64",
        "End-to-end episode time in seconds: generation (its share of batched calls) plus validation and sandbox.",
    ),
    ("confidence", "float64", "exp(mean token log-probability) of the first answer; NaN without log-probabilities."),
    ("leakage", "int64", "1 if the public half of the case holds an offline-only value (must be 0)."),
    ("op_family", "str", "The operation kinds of the canonical repair, e.g. `replace` or `add+remove`; `abstain`."),
    ("structure", "str", "The shape of the canonical repair: flat, nested, array, union, long_pointer, multi_field, abstain."),
    ("study", "str", "The study the run belongs to (`main` unless labelled: feedback, budget, horizon, noise, transfer, bfcl)."),
    ("condition", "str", "The run's condition within its study, e.g. `bfcl:live_simple`; empty if none."),
    ("mode", "str", "same_information (identical public block for every arm) or case_matched (each arm its own block)."),
    (
        "feedback",
        "str",
        "How much of the typed verifier report the prompt showed: full, pointer_only, code_only, text, context_only.",
    ),
    ("stage", "str", "The training stage of the weights (sft, grpo); empty for untrained policies."),
    ("model", "str", "The model's label (e.g. `smollm2/lora-r16`); empty for non-model policies."),
    ("max_attempts", "Int64", "The attempt budget B a budget-study run was given; missing for other runs."),
    ("max_ops", "Int64", "The operation budget K a budget-study run was given; missing for other runs."),
    ("train_tool_families", "str", "Transfer study: the tool families trained on (comma-separated); empty otherwise."),
    ("heldout_tool_family", "str", "Transfer study: the tool family evaluated on; empty otherwise."),
    ("horizon", "Int64", "Horizon study: steps per chained trajectory; missing otherwise."),
    ("trajectory", "Int64", "Horizon study: the trajectory's index within its run; missing otherwise."),
    ("step", "Int64", "Horizon study: the episode's step within its trajectory (0-based); missing otherwise."),
    ("run", "str", "The run directory, relative to the job directory (`job_dir` in report.json)."),
    ("row_hash", "str", "The ledger row's hash (links the row to its frozen ledger)."),
)

TABLE_COLUMNS = _columns(
    ("slice", "str", "Overview: the run's condition, else `built-in` for the main study's cases, else its study."),
    ("cohort", "str", "verifier_noise: `clean` or the noise family."),
    (
        "baseline",
        "str",
        "paired: the system compared against `system`; scaling: the smallest model of the row's stage, arm and adapter rank.",
    ),
    ("metric", "str", "paired: the per-episode column compared."),
    ("threshold", "float64", "calibration: the confidence threshold, fixed before scoring."),
    ("episodes", "int64", "Episodes the row aggregates."),
    ("cases", "int64", "Distinct case ids the row aggregates."),
    ("seeds", "int64", "Distinct seeds the row aggregates."),
    ("families", "int64", "Overview, scaling: distinct case families the row pools."),
    ("trajectories", "int64", "horizon: chained trajectories the row aggregates."),
    ("first_cases", "int64", "horizon: distinct first cases of those trajectories."),
    ("pairs", "Int64", "paired, scaling: (case, seed, sample) units both sides ran."),
    ("semantic_success_mean", "float64", "Mean of `semantic_success` over the row's episodes (the semantic success rate)."),
    ("semantic_success_seed_sd", "float64", "Standard deviation of the per-seed `semantic_success_mean` (NaN with one seed)."),
    ("schema_valid_mean", "float64", "Mean of `schema_valid`."),
    ("final_object_match_mean", "float64", "Mean of `final_object_match`."),
    ("exact_patch_match_mean", "float64", "Mean of `exact_patch_match` over the episodes where it is defined."),
    ("exact_patch_match_n", "int64", "Episodes where `exact_patch_match` is defined (patch arms)."),
    ("pointer_fix_mean", "float64", "Mean of `pointer_fix` over the episodes where it is defined."),
    ("pointer_fix_n", "int64", "Episodes where `pointer_fix` is defined (patch arms)."),
    ("first_attempt_valid_mean", "float64", "Mean of `first_attempt_valid`."),
    ("accepted_after_retry_mean", "float64", "Share of episodes accepted after a failed first attempt."),
    ("abstained_mean", "float64", "Mean of `abstained`."),
    ("fail_closed_mean", "float64", "Mean of `fail_closed`."),
    ("generated_tokens_mean", "float64", "Mean of `generated_tokens` per episode."),
    ("prompt_tokens_mean", "float64", "Mean of `prompt_tokens` per episode."),
    ("validator_calls_mean", "float64", "Mean of `validator_calls` per episode."),
    ("probes_mean", "float64", "Mean of `probes` per episode."),
    ("collateral_mean", "float64", "Mean of `collateral` per episode."),
    ("off_pointer_mean", "float64", "Mean of `off_pointer` per episode."),
    ("retries_mean", "float64", "Mean of `retries` per episode."),
    ("retried_mean", "float64", "Share of episodes with at least one retry."),
    ("masked_attempts_mean", "float64", "Mean of `masked_attempts` per episode."),
    ("malformed_attempts_mean", "float64", "Mean of `malformed_attempts` per episode."),
    ("leakage_mean", "float64", "Mean of `leakage` (must be 0)."),
    ("latency_s_mean", "float64", "Mean of `latency_s`, seconds."),
    ("latency_s_p95", "float64", "95th percentile of `latency_s` (linear interpolation), seconds."),
    ("unsafe_dispatch_total", "int64", "Sum of `unsafe_dispatch` (must be 0)."),
    ("completion_mean", "float64", "horizon: share of trajectories with every step present and decided (released or abstained)."),
    ("trajectory_success_mean", "float64", "horizon: share of trajectories with every step present and semantically correct."),
    ("trajectory_success_seed_sd", "float64", "horizon: standard deviation of the per-seed `trajectory_success_mean`."),
    ("trajectory_retries_mean", "float64", "horizon: mean over trajectories of the retries summed over their steps."),
    (
        "trajectory_generated_tokens_mean",
        "float64",
        "horizon: mean over trajectories of the generated tokens summed over their steps.",
    ),
    ("trajectory_latency_s_mean", "float64", "horizon: mean over trajectories of the latency summed over their steps, seconds."),
    ("trajectory_collateral_mean", "float64", "horizon: mean over trajectories of the collateral edits summed over their steps."),
    ("covered_episodes", "int64", "calibration: released episodes whose confidence reaches the threshold."),
    ("coverage", "float64", "calibration: `covered_episodes` / `episodes`."),
    ("risk", "float64", "calibration: share of covered episodes that are not semantically correct (NaN if none covered)."),
    (
        "wrong_withheld_share",
        "float64",
        "calibration: share of would-be wrong releases (valid but wrong) the threshold withholds.",
    ),
    ("confidence_mean", "float64", "calibration: mean `confidence` of the row's episodes."),
    ("system_mean", "float64", "paired: mean of `metric` for `system` on the shared units."),
    ("baseline_mean", "float64", "paired: mean of `metric` for `baseline` on the shared units."),
    (
        "difference_mean",
        "float64",
        "paired: `system_mean` - `baseline_mean`; scaling: the row's success minus `baseline`'s on those units.",
    ),
    ("ci_low", "float64", "paired, scaling: lower end of the 95% percentile bootstrap interval of `difference_mean`."),
    ("ci_high", "float64", "paired, scaling: upper end of that interval."),
    ("mcnemar_p", "float64", "paired, scaling: exact two-sided McNemar p (binary metrics; NaN for continuous ones)."),
    (
        "semantic_success_ci_low",
        "float64",
        "scaling: lower end of the 95% percentile bootstrap interval (over cases) of `semantic_success_mean`.",
    ),
    ("semantic_success_ci_high", "float64", "scaling: upper end of that interval."),
    ("params", "Int64", "scaling: the base model's parameters as stored in its safetensors files; missing if not found."),
    ("steps", "Int64", "scaling: optimizer steps of the training run through the row's stage."),
    ("train_s", "float64", "scaling: wall time of those steps, seconds (model loading and evaluation not included)."),
    ("peak_rss_gb", "float64", "scaling: the learners' peak resident memory through the stage, GB (summed over ranks)."),
    ("effect_size_dz", "float64", "paired: Cohen's d_z of the paired differences (continuous metrics; NaN for binary ones)."),
    ("difference_seed_sd", "float64", "paired: standard deviation of the per-seed mean difference (NaN with one seed)."),
)

DICTIONARY: dict[str, Column] = {c.name: c for c in (*EPISODE_COLUMNS, *TABLE_COLUMNS)}
assert len(DICTIONARY) == len(EPISODE_COLUMNS) + len(TABLE_COLUMNS), "a column name is defined twice"


def describe(name: str) -> Column:
    """The dictionary entry of a column; an undocumented column is an error, not a silent gap."""
    try:
        return DICTIONARY[name]
    except KeyError:
        raise KeyError(f"column {name!r} is not in the data dictionary (contractrl/analysis/dictionary.py)") from None


def typed(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with every column cast to its declared dtype (an empty frame's columns too)."""
    return frame.astype({name: describe(name).dtype for name in frame.columns})


def to_arrow(frame: pd.DataFrame) -> pa.Table:
    """The typed frame as an arrow table whose fields carry their descriptions."""
    table = pa.Table.from_pandas(typed(frame), preserve_index=False)
    fields = [f.with_metadata({DESCRIPTION: describe(f.name).description.encode()}) for f in table.schema]
    return table.cast(pa.schema(fields, metadata=table.schema.metadata))


def write_parquet(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write a frame as parquet with declared dtypes and a description per field."""
    pq.write_table(to_arrow(frame), path)
    return Path(path)


def descriptions(path: str | Path) -> dict[str, str]:
    """The descriptions stored in a parquet file's schema, by column."""
    schema = pq.read_schema(path)
    return {f.name: (f.metadata or {}).get(DESCRIPTION, b"").decode() for f in schema}


def _rows(columns: Iterable[Column]) -> list[str]:
    return [f"| `{c.name}` | {c.dtype} | {c.description} |" for c in columns]


def markdown() -> str:
    """The dictionary as docs/analysis.md shows it (the docs carry this text verbatim)."""
    head = ["| column | dtype | meaning |", "|---|---|---|"]
    return "\n".join(
        [
            "Columns of `episodes.parquet` (one row per episode):",
            "",
            *head,
            *_rows(EPISODE_COLUMNS),
            "",
            "Columns of the tables and the overview (one row per group; group keys are the episode columns of the same name):",
            "",
            *head,
            *_rows(TABLE_COLUMNS),
        ]
    )


__all__ = [
    "DICTIONARY",
    "EPISODE_COLUMNS",
    "TABLE_COLUMNS",
    "Column",
    "describe",
    "descriptions",
    "markdown",
    "to_arrow",
    "typed",
    "write_parquet",
]
