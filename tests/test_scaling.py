"""The scaling study's table: per model size, success with its interval, costs from the training run,
and the paired difference from the smallest model; scaling.json with the issue's keys."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pandas as pd
import pytest

from contractrl.analysis.scaling import parameter_count, scaling, sizes, sizes_json, training_cost, training_costs
from contractrl.analysis.scaling_runs import finished_trials, main
from contractrl.errors import ContractRLError

SIZE_KEYS = {"model", "params", "success", "ci_low", "ci_high", "tokens", "p95_s", "train_s", "peak_rss_gb"}


def _safetensors(path: Path, shapes: dict[str, list[int]]) -> None:
    """A safetensors file whose header names these tensors (bf16 zeros)."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def test_parameters_are_counted_from_the_headers_and_a_bad_file_counts_as_unknown(tmp_path: Path) -> None:
    _safetensors(tmp_path / "model-1.safetensors", {"a.weight": [4, 8], "a.bias": [8]})
    _safetensors(tmp_path / "model-2.safetensors", {"b.weight": [3, 5, 2], "scalar": []})
    assert parameter_count(tmp_path) == 32 + 8 + 30 + 1
    assert parameter_count(tmp_path / "absent") is None
    (tmp_path / "model-3.safetensors").write_bytes(struct.pack("<Q", 1 << 40))  # a header too large to read
    assert parameter_count(tmp_path) is None
    (tmp_path / "model-3.safetensors").write_bytes(struct.pack("<Q", 5) + b"{nope")
    assert parameter_count(tmp_path) is None


def _training_run(directory: Path, walls: list[float], stages: list[str], peaks: list[float] | None = None) -> Path:
    directory.mkdir(parents=True)
    (directory / "manifest.json").write_text(json.dumps({"kind": "contractrl.train", "config": {"model": {"name": "tiny"}}}))
    metrics = {"step": list(range(1, len(walls) + 1)), "stage": stages, "wall_s": walls}
    if peaks is not None:
        metrics["peak_rss_gb"] = peaks
    pd.DataFrame(metrics).to_parquet(directory / "metrics.parquet")
    for stage in sorted(set(stages)):
        (directory / "eval" / f"after-{stage}").mkdir(parents=True)
    return directory


def test_a_stage_costs_every_step_up_to_its_end(tmp_path: Path) -> None:
    run = _training_run(tmp_path / "run", [1.0, 2.0, 3.0, 10.0, 20.0], ["sft"] * 3 + ["grpo"] * 2, [1.0, 2.5, 2.0, 3.0, 2.0])
    sft, grpo = training_cost(run, "sft"), training_cost(run, "grpo")
    assert sft is not None and (sft.steps, sft.train_s, sft.peak_rss_gb) == (3, 6.0, 2.5)
    assert grpo is not None and (grpo.steps, grpo.train_s, grpo.peak_rss_gb) == (5, 36.0, 3.0)
    assert training_cost(run, "whole") is None
    older = _training_run(tmp_path / "older", [1.0], ["sft"])  # before peak_rss_gb was recorded
    cost = training_cost(older, "sft")
    assert cost is not None and cost.peak_rss_gb is None
    # keyed as the episodes table names runs; a run not written by a training run has no cost
    (tmp_path / "eval" / "heuristic").mkdir(parents=True)
    costs = training_costs([run / "eval" / "after-sft", run / "eval" / "after-grpo", tmp_path / "eval" / "heuristic"], tmp_path)
    assert set(costs) == {"run/eval/after-sft", "run/eval/after-grpo"}


def _episodes(model: str, run: str, successes: list[bool], latency: float) -> pd.DataFrame:
    n = len(successes)
    return pd.DataFrame(
        {
            "study": "main",
            "model": model,
            "stage": "sft",
            "arm": "patch_sft",
            "run": run,
            "case_id": [f"c{i}" for i in range(n)],
            "case_family": ["wrong_type", "unrepairable"] * (n // 2) + ["wrong_type"] * (n % 2),
            "seed": 0,
            "sample": 0,
            "semantic_success": successes,
            "generated_tokens": [20] * n,
            "probes": [4] * n,
            "collateral": [0] * n,
            "latency_s": [latency] * n,
        }
    )


def test_every_size_is_compared_with_the_smallest_on_the_same_cases(tmp_path: Path) -> None:
    from contractrl.analysis.scaling import TrainingCost

    small = _episodes("small/lora-r16", "a/eval/after-sft", [True, False, True, False] * 5, 1.0)
    large = _episodes("large/lora-r16", "b/eval/after-sft", [True] * 20, 3.0)
    other = _episodes("", "h", [True] * 20, 0.0).assign(arm="contractrl")  # not a model: no row
    costs = {"a/eval/after-sft": TrainingCost(100, 30, 60.0, 2.0), "b/eval/after-sft": TrainingCost(1000, 30, 600.0, 9.0)}
    table = scaling(pd.concat([large, small, other]), costs, resamples=2000)
    frame = table.frame.set_index("model")
    assert list(frame.index) == ["large/lora-r16", "small/lora-r16"]
    assert frame.loc["small/lora-r16", "semantic_success_mean"] == 0.5 and frame.loc["small/lora-r16", "families"] == 2
    assert frame.loc["small/lora-r16", "semantic_success_ci_low"] < 0.5 < frame.loc["small/lora-r16", "semantic_success_ci_high"]
    assert frame.loc["large/lora-r16", "baseline"] == "small/lora-r16" and frame.loc["large/lora-r16", "pairs"] == 20
    assert frame.loc["large/lora-r16", "difference_mean"] == 0.5 and frame.loc["large/lora-r16", "ci_low"] > 0
    assert frame.loc["large/lora-r16", "mcnemar_p"] < 0.01
    assert pd.isna(frame.loc["small/lora-r16", "baseline"])  # the smallest is the reference
    assert (frame.loc["large/lora-r16", "train_s"], frame.loc["large/lora-r16", "peak_rss_gb"]) == (600.0, 9.0)

    # a rank change is never a size comparison: each rank has its own smallest model
    other_rank = _episodes("large/lora-r8", "c/eval/after-sft", [True] * 20, 3.0)
    costs["c/eval/after-sft"] = TrainingCost(1000, 30, 600.0, 9.0)
    ranked = scaling(pd.concat([large, small, other_rank]), costs, resamples=200).frame.set_index("model")
    assert pd.isna(ranked.loc["large/lora-r8", "baseline"]) and ranked.loc["large/lora-r16", "baseline"] == "small/lora-r16"

    rungs = sizes(table.frame)
    assert [r.model for r in rungs] == ["small/lora-r16", "large/lora-r16"]  # smallest first
    document = sizes_json(table.frame)
    assert document["stage"] == "sft" and document["cases"] == 20
    assert all(set(entry) == SIZE_KEYS for entry in document["sizes"])
    assert document["paired"] == [
        {
            "model": "large/lora-r16",
            "baseline": "small/lora-r16",
            "pairs": 20,
            "difference_mean": 0.5,
            "ci_low": pytest.approx(frame.loc["large/lora-r16", "ci_low"]),
            "ci_high": pytest.approx(frame.loc["large/lora-r16", "ci_high"]),
            "mcnemar_p": pytest.approx(frame.loc["large/lora-r16", "mcnemar_p"]),
        }
    ]
    json.dumps(document)  # plain JSON types


def test_a_sweep_without_a_finished_trial_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "runs" / "t1").mkdir(parents=True)
    (tmp_path / "runs" / "t1" / "manifest.json").write_text(json.dumps({"status": "running"}))
    with pytest.raises(ContractRLError, match="holds no finished trial"):
        finished_trials(tmp_path)
    assert main([str(tmp_path), "--out", str(tmp_path / "s.json")]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and not (tmp_path / "s.json").exists()


def test_a_metrics_file_from_elsewhere_is_read_bounded_or_refused_in_one_line(tmp_path: Path) -> None:
    from contractrl.analysis import scaling as module
    from contractrl.errors import InputFileError

    run = _training_run(tmp_path / "run", [1.0, 2.0], ["sft", "sft"], [1.0, 2.0])
    assert list(module.read_metrics(run / "metrics.parquet").columns) == ["stage", "wall_s", "peak_rss_gb"]
    (run / "metrics.parquet").write_bytes(b"PAR1 not a parquet file PAR1")
    with pytest.raises(InputFileError, match="not a readable metrics file") as raised:
        training_cost(run, "sft")
    assert "\n" not in str(raised.value)
    # a small file that would unpack to more than a metrics file holds is refused from its footer:
    # by its bytes, dictionary pages included, and by its rows (a dictionary-encoded column is tiny)
    pd.DataFrame({"stage": ["sft"] * 50_000, "wall_s": [1.0] * 50_000}).to_parquet(run / "metrics.parquet")
    for limit, value in (("MAX_METRICS_BYTES", 100), ("MAX_METRICS_ROWS", 1_000)):
        saved = getattr(module, limit)
        setattr(module, limit, value)
        try:
            with pytest.raises(InputFileError, match="bytes uncompressed: more than a metrics file holds"):
                training_cost(run, "sft")
        finally:
            setattr(module, limit, saved)
    assert training_cost(run, "sft") is not None  # within the real bounds
    (run / "metrics.parquet").unlink()
    (run / "metrics.parquet").mkdir()
    with pytest.raises(InputFileError):
        module.read_metrics(run / "metrics.parquet")
