"""The main job end to end: `contractrl run --quick`, as the README shows it. The slowest test."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from contractrl.analysis.plots import PLOTS
from contractrl.analysis.report import TABLE_NAMES, discover
from contractrl.configtree import to_dict
from contractrl.errors import ConfigError
from contractrl.pipeline import TINY_NOTE, load_main_job_config
from contractrl.rollout.ledger import read_ledger
from contractrl.tasks.arms import ARMS

from .conftest import REPO_ROOT


def _run(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("contractrl")
    prefix = [str(exe)] if exe.exists() else [sys.executable, "-m", "contractrl"]
    # --quick as the README shows it, with half its held-out cases to keep the suite short
    args = ["run", "--quick", "--out", str(out), "--no-progress", "train.data.eval_cases=8", *extra]
    return subprocess.run([*prefix, *args], capture_output=True, text=True)


@pytest.mark.slow
def test_quick_run_end_to_end_then_resume(tmp_path: Path) -> None:
    assert "contractrl run --quick --out runs/quick" in (REPO_ROOT / "README.md").read_text()
    out = tmp_path / "quick"
    # the main job leaves constrained decoding off and scores the report in process: here both are
    # switched on, to cover every arm and Ray Data's scoring
    proc = _run(out, "whole_object.constrained=true", "report.workers=1")
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    assert "Unsafe dispatches: 0." in proc.stdout and f"Report: {out}/report/index.html" in proc.stdout
    assert TINY_NOTE in proc.stdout  # --quick runs tiny, and says what that shows
    assert "p95 episode s (gen+check)" in proc.stdout

    everything = pd.read_parquet(out / "report" / "episodes.parquet")
    episodes = everything[everything["study"] == "main"]
    assert set(episodes["arm"]) == set(ARMS)  # full regeneration, constrained, Patch-SFT, ContractRL
    assert {"heuristic", "replay"} <= set(episodes["policy"])
    assert (episodes["mode"] == "same_information").all()
    assert episodes.groupby(["arm", "policy"])["case_id"].nunique().eq(8).all()  # the same held-out cases
    assert episodes["unsafe_dispatch"].sum() == 0
    # the summary table has a row per slice and system, and one line per slice says who leads
    for system in ("contractrl:tiny-h64-l2@grpo", "patch_sft:tiny-h64-l2@sft", "full_regen:tiny-h64-l2@sft"):
        assert re.search(rf"^built-in\s+{re.escape(system)}\s+8\s", proc.stdout, flags=re.MULTILINE), proc.stdout
    # real users' questions from the BFCL wheel: evaluated for ContractRL, regeneration and the heuristic, never trained on
    bfcl = everything[everything["study"] == "bfcl"]
    assert set(bfcl["condition"]) == {"bfcl:live_simple"} and set(bfcl["arm"]) == {"contractrl", "full_regen"}
    assert bfcl.groupby(["arm", "policy"])["case_id"].nunique().eq(6).all() and "heuristic" in set(bfcl["policy"])
    for system in ("contractrl:tiny-h64-l2@grpo", "contractrl:heuristic"):
        assert re.search(rf"^bfcl:live_simple\s+{re.escape(system)}\s+6\s", proc.stdout, flags=re.MULTILINE), proc.stdout
    # one system leads, or two or more tie ("a and b tie at", "a, b and c tie at")
    assert re.search(r"^built-in: (\S+ leads with|\S+(, \S+)* and \S+ tie at)", proc.stdout, flags=re.MULTILINE), proc.stdout
    assert re.search(r"^bfcl:live_simple: (\S+ leads with|\S+(, \S+)* and \S+ tie at)", proc.stdout, flags=re.MULTILINE)
    assert "probes" in proc.stdout
    # every ledger verifies: held-out runs and the GRPO training batches
    runs, _ = discover(out)
    assert len(runs) == 9
    batches = sorted((out / "train" / "rollouts").iterdir())
    assert len(batches) == 2
    digests = {}
    for run in [*runs, *batches]:
        read_ledger(run, require_frozen=True)
        digests[run] = json.loads((run / "manifest.json").read_text())["ledger_sha256"]
    for name in TABLE_NAMES:
        assert (out / "report" / "tables" / f"{name}.parquet").is_file()
    assert all((out / "report" / "plots" / f"{name}.png").is_file() for name in PLOTS)
    assert len(pd.read_parquet(out / "report" / "tables" / "paired.parquet")) > 0
    # the scaling table reads each evaluated training run's cost: steps through the stage, their time, peak memory
    scaling = pd.read_parquet(out / "report" / "tables" / "scaling.parquet").set_index(["stage", "arm"])
    assert dict(scaling["steps"].dropna()) == {("sft", "patch_sft"): 20, ("grpo", "contractrl"): 22, ("sft", "full_regen"): 10}
    trained = scaling.loc[[("sft", "patch_sft"), ("grpo", "contractrl"), ("sft", "full_regen")]]
    assert (trained["train_s"] > 0).all() and (trained["peak_rss_gb"] > 0.1).all() and (trained["params"] > 10_000).all()
    assert (out / "report" / "tables" / "scaling.md").read_text().count("tiny-h64-l2") >= 3

    # run again: every finished step is kept (same digests), the report is rebuilt (in process, the main job's default)
    again = _run(out, "whole_object.constrained=true")
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("finished earlier with this config: kept") == 2
    assert {run: json.loads((run / "manifest.json").read_text())["ledger_sha256"] for run in digests} == digests


def test_run_config_overrides_and_errors(tmp_path: Path) -> None:
    overrides = ["train.sft.steps=5", "whole_object.enabled=false"]
    config = load_main_job_config(quick=True, out=str(tmp_path / "x"), overrides=overrides)
    assert (config.train.sft.steps, config.whole_object.enabled) == (5, False)
    assert config.train.out == str(tmp_path / "x" / "train") and config.train.resume
    assert to_dict(load_main_job_config())["train"]["sft"]["arm"] == "patch_sft"
    # the embedded default trains the model that learns; --quick trades it for tiny's speed
    assert load_main_job_config().train.model.name == "smollm2" and load_main_job_config().train.model.lora.enabled
    assert config.train.model.name == "tiny"
    # constrained decoding is the headline benchmark's row; the main job's summary compares regeneration and the heuristic
    assert not load_main_job_config().whole_object.constrained
    assert load_main_job_config().report.workers == 0  # a few hundred episodes score faster than a Ray Data pool starts
    with pytest.raises(ConfigError, match="whole_objct"):
        load_main_job_config(overrides=["whole_objct.enabled=false"])
    with pytest.raises(ConfigError, match="sft_steps"):
        load_main_job_config(overrides=["whole_object.sft_steps=0"])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("whole_object.sft_steps=0", "whole_object.sft_steps must be >= 1, got 0"),
        ("whole_object.max_new_tokens=7", "whole_object.max_new_tokens must be >= 8, got 7"),
        ("whole_object.policy_actors=-1", "whole_object.policy_actors must be >= 0, got -1"),
        ("whole_object.gpus_per_actor=-0.5", "whole_object.gpus_per_actor must be >= 0, got -0.5"),
        ("bfcl.cases=0", "bfcl.cases must be >= 1, got 0"),
    ],
)
def test_main_job_sections_refuse_out_of_range_values(override: str, message: str) -> None:
    """WholeObjectConfig's and BfclSliceConfig's ranges are field metadata: one line naming the dotted key."""
    with pytest.raises(ConfigError, match=re.escape(message)) as raised:
        load_main_job_config(overrides=[override])
    assert "\n" not in str(raised.value)


def test_a_bfcl_slice_that_cannot_be_had_is_skipped_with_its_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No wheel and no registry: the main job says why and goes on; nothing is written for the slice."""
    from contractrl.pipeline import _evaluate_bfcl
    from contractrl.tasks import bfcl_wheel

    monkeypatch.setenv(bfcl_wheel.PIN.env, str(tmp_path / "missing.whl"))
    monkeypatch.setenv(bfcl_wheel.CACHE_ENV, str(tmp_path / "cache"))
    config = load_main_job_config(quick=True, out=str(tmp_path / "job"), overrides=["bfcl.category=simple_java"])
    reason = _evaluate_bfcl(config, None, tmp_path / "job" / "bfcl", progress=False)
    assert f"{bfcl_wheel.PIN.env} names {tmp_path / 'missing.whl'}, which is not a file" in reason
    assert not (tmp_path / "job" / "bfcl").exists()
    with pytest.raises(ConfigError, match=re.escape("bfcl.category: unknown BFCL category 'simpel'")):
        load_main_job_config(overrides=["bfcl.category=simpel"])
