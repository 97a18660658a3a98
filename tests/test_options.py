"""One config system: the rollout, study and report commands' options are typed sections of the
config tree, set by their flags and by ``key=value`` overrides, with one default each."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import yaml

from contractrl.analysis.options import DEFAULT_THRESHOLDS, ReportConfig, ReportOptions
from contractrl.cli import _SET, build_parser, main, split_study_overrides
from contractrl.configtree import from_dict, to_dict
from contractrl.experiments.options import StudyOptions
from contractrl.rollout.ledger import UNHASHED_FIELDS, read_ledger
from contractrl.rollout.options import DEFAULT_MAX_NEW_TOKENS, RolloutOptions
from contractrl.tasks.demonstrations import gold_answer
from contractrl.tasks.offline import read_cases

COMMANDS = {"rollout": RolloutOptions, "study": StudyOptions, "report": ReportOptions}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_print_config_shows_every_option_and_loads_back(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    cls = COMMANDS[command]
    assert main([command, "--print-config"]) == 0
    text = capsys.readouterr().out
    assert from_dict(cls, yaml.safe_load(text)) == cls()  # the printed defaults are the options' own
    for field in dataclasses.fields(cls):
        assert f"{field.name}: " in text and field.metadata["help"].split("(")[0].strip() in text, field.name


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_no_flag_has_a_default_of_its_own(command: str) -> None:
    """A command line without flags sets no option: every default is the typed field's, so a flag
    and an override of the same option cannot disagree about it."""
    argv = {"rollout": ["rollout"], "study": ["study"], "report": ["report"]}[command]
    args = build_parser().parse_args(argv)
    assert not [key for key in vars(args) if key.startswith(_SET)]


def _cases(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    cases = tmp_path / "cases"
    assert main(["cases", "generate", "--seed", "5", "--n", "13", "--out", str(cases)]) == 0
    capsys.readouterr()
    return cases


def _rollout(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert main(["rollout", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_flags_overrides_and_a_config_file_make_the_same_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = _cases(tmp_path, capsys)
    flags = _rollout(
        ["--cases", str(cases), "--policy", "heuristic", "--workers", "0", "--group", "2", "--out", str(tmp_path / "a")], capsys
    )
    keys = _rollout([f"cases={cases}", "policy=heuristic", "workers=0", "group=2", f"out={tmp_path / 'b'}"], capsys)
    config = tmp_path / "rollout.yaml"
    config.write_text(f"cases: {cases}\npolicy: heuristic\nworkers: 0\ngroup: 3\n")
    # the file, then the flags, then the overrides: group=2 wins over the file's 3
    mixed = _rollout(["--config", str(config), "--out", str(tmp_path / "c"), "--group", "1", "group=2"], capsys)
    assert flags["ledger_sha256"] == keys["ledger_sha256"] == mixed["ledger_sha256"]
    assert flags["episodes"] == 26


def test_options_are_refused_as_config_keys_are(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rollout", "--print-config", "workerz=1"]) == 2
    assert "did you mean 'workers'?" in capsys.readouterr().err
    assert main(["rollout", "--print-config", "--workers", "-1"]) == 2
    assert "workers must be >= 0" in capsys.readouterr().err
    assert main(["rollout", "--policy", "heuristic", "--out", "x"]) == 2
    assert "--cases is required (or cases=... as an override)" in capsys.readouterr().err
    assert main(["rollout", "--cases", "c", "--policy", "heuristic", "--out", "x", "--label", "colour=red"]) == 2
    assert "run labels ['colour'] unknown" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["rollout", "--print-config", "--wrkers", "1"])  # a mistyped flag is still argparse's error
    assert main(["study", "bogus", "--out", "x"]) == 2
    assert "study must be one of feedback" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("workers=-1", "workers must be >= 0, got -1"),
        ("max_new_tokens=0", "max_new_tokens must be >= 1, got 0"),
        ("temperature=-0.5", "temperature must be >= 0, got -0.5"),
        ("temperature=.nan", "temperature must be >= 0, got nan"),
        ("shield_k=-1", "shield_k must be >= 0 (0: blind decoding), got -1"),
        ("policy_actors=-2", "policy_actors must be >= 0, got -2"),
        ("gpus_per_actor=-0.25", "gpus_per_actor must be >= 0, got -0.25"),
        ("group=0", "group must be >= 1, got 0"),
        ("threads=-1", "threads must be >= 0, got -1"),
    ],
)
def test_rollout_options_refuse_out_of_range_values(override: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The ranges are field metadata (rollout/options.py): the command refuses each on one line naming the key."""
    assert main(["rollout", "--print-config", override]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("n=0", "n must be >= 1, got 0"),
        ("workers=-1", "workers must be >= 0, got -1"),  # a field the study re-declares keeps its range
        ("temperature=-1", "temperature must be >= 0, got -1"),
        ("shield_k=-1", "shield_k must be >= 0 (0: blind decoding), got -1"),  # and an inherited one
    ],
)
def test_study_options_refuse_out_of_range_values(override: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["study", "feedback", "--print-config", override]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("workers=-1", "workers must be >= 0, got -1"),
        ("thresholds=[]", "thresholds must not be empty"),
        ("thresholds=[0.5, 1.5]", "thresholds must lie in [0, 1]"),  # each threshold: a check by hand
    ],
)
def test_report_options_refuse_out_of_range_values(override: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The report command and the main job's report section (one class) refuse the same values."""
    from contractrl.errors import ConfigError
    from contractrl.pipeline import load_main_job_config

    assert main(["report", "--print-config", override]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    with pytest.raises(ConfigError, match=re.escape(f"report.{message}")):
        load_main_job_config(overrides=[f"report.{override}"])


def test_a_rollout_can_name_its_policy_as_the_main_job_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--policy-name`` reaches every row's ``policy`` column and so the system a table shows
    (``arm:policy@stage``, as the main job names its trained model); without it the rows and the
    manifest are those of before, and only the policy column tells the two runs apart."""
    from contractrl.analysis.join import join_runs, read_episodes
    from contractrl.rollout.run import read_manifest

    cases = _cases(tmp_path, capsys)
    common = ["--cases", str(cases), "--policy", "heuristic", "--workers", "0", "--label", "stage=grpo"]
    plain = _rollout([*common, "--out", str(tmp_path / "plain")], capsys)
    named = _rollout([*common, "--out", str(tmp_path / "named"), "--policy-name", "smollm2/lora-r16"], capsys)
    override = _rollout([*common, f"out={tmp_path / 'override'}", "policy_name=smollm2/lora-r16"], capsys)
    assert named["ledger_sha256"] == override["ledger_sha256"] != plain["ledger_sha256"]
    plain_rows, named_rows = read_ledger(tmp_path / "plain"), read_ledger(tmp_path / "named")
    assert {r["policy"] for r in plain_rows} == {"heuristic"} and {r["policy"] for r in named_rows} == {"smollm2/lora-r16"}
    volatile = UNHASHED_FIELDS | {"policy"}  # the timings and the chain, which hashes the policy too
    for a, b in zip(plain_rows, named_rows, strict=True):
        assert {k: v for k, v in a.items() if k not in volatile} == {k: v for k, v in b.items() if k not in volatile}
    assert "policy_name" not in read_manifest(tmp_path / "plain")["config"]
    assert read_manifest(tmp_path / "named")["config"]["policy_name"] == "smollm2/lora-r16"
    episodes = read_episodes(join_runs([tmp_path / "named"], [cases], tmp_path / "joined", use_ray=False))
    assert set(episodes["system"]) == {"contractrl:smollm2/lora-r16@grpo"}
    assert main(["rollout", "--cases", str(cases), "--policy", "heuristic", "--out", "x", "--label", "policy=y"]) == 2
    assert "--policy-name NAME" in capsys.readouterr().err


def test_threads_set_the_generating_process_torch_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--threads`` reaches torch before the model loads; 0 leaves torch's own count alone."""
    import torch

    from contractrl.cli import _policy_factory

    monkeypatch.chdir(tmp_path)  # the tiny preset builds into ./runs/models
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        _policy_factory(RolloutOptions(policy="hf:tiny", threads=0), "")
        assert torch.get_num_threads() == 2
        _policy_factory(RolloutOptions(policy="hf:tiny", threads=1), "")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_overrides_may_follow_flags(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["rollout", "--print-config", "--label", "condition=x", "labels.study=y", "--workers", "0", "seed=3"]
    assert main(argv) == 0
    options = from_dict(RolloutOptions, yaml.safe_load(capsys.readouterr().out))
    assert (options.workers, options.seed, options.labels) == (0, 3, {"condition": "x", "study": "y"})


def test_report_run_dirs_and_overrides_share_the_positionals(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "runs/a", "runs/b", "workers=0", "--thresholds", "0.5,0.7", "--print-config"]) == 0
    options = from_dict(ReportOptions, yaml.safe_load(capsys.readouterr().out))
    assert options.run_dirs == ("runs/a", "runs/b") and options.workers == 0 and options.thresholds == (0.5, 0.7)
    assert main(["report", "x", "--out", "r", "--thresholds", "0.5,2"]) == 2
    assert "thresholds" in capsys.readouterr().err


def test_the_main_jobs_report_section_is_the_report_commands() -> None:
    """One class and one check: ``run``'s report section and ``report``'s options. The main job
    scores its few hundred episodes in process (``pipeline.MAIN_JOB``); ``report`` on Ray Data."""
    from contractrl.pipeline import load_main_job_config

    report = load_main_job_config().report
    assert type(report) is ReportConfig and isinstance(ReportOptions(), ReportConfig)
    assert to_dict(report) == {"workers": 0, "thresholds": list(DEFAULT_THRESHOLDS)}
    assert ReportOptions().workers == 1


def test_study_options_keep_the_transfer_studys_training_keys() -> None:
    assert split_study_overrides("feedback", ["temperature=0.5", "grpo.steps=3"]) == (["temperature=0.5", "grpo.steps=3"], [])
    mine, training = split_study_overrides("transfer", ["grpo.steps=3", "n=8", "seed=2", "workers=1"])
    assert mine == ["n=8", "workers=1"] and training == ["grpo.steps=3", "seed=2"]


def test_study_defaults_decode_greedily_without_workers() -> None:
    study, rollout = StudyOptions(), RolloutOptions()
    assert (study.temperature, study.workers, study.policy) == (0.0, 0, "heuristic")
    assert (rollout.temperature, rollout.workers) == (1.0, 2)


def test_cli_replay_sends_the_gold_answers_the_main_job_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One replay: ``rollout --policy replay`` and the main job's reference replay send each case's
    gold answer for the arm (tasks/demonstrations.gold_answer)."""
    cases = _cases(tmp_path, capsys)
    for arm in ("contractrl", "full_regen"):
        _rollout(
            ["--cases", str(cases), "--policy", "replay", "--arm", arm, "--workers", "0", "--out", str(tmp_path / arm)], capsys
        )
        gold = {case.public.case_id: gold_answer(case, arm) for case in read_cases(cases)}
        rows = read_ledger(tmp_path / arm)
        assert len(rows) == 13
        for row in rows:
            assert row["attempts"][0]["raw"] == gold[row["case_id"]], row["case_id"]


def test_one_default_generation_budget_and_one_attempt_budget() -> None:
    """``max_new_tokens`` and the attempt and operation budgets are stated once; every place that
    defaults them agrees (it was 3 and 4 restatements)."""
    from contractrl.gate.gate import GateBudgets
    from contractrl.gate.policy import HFOptions
    from contractrl.pipeline import WholeObjectConfig
    from contractrl.rollout.hf_policy import SamplingConfig
    from contractrl.tasks.generate import GenerateConfig
    from contractrl.trainer.config import DataConfig
    from contractrl.validators.transition import DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_OPS, Budgets

    tokens = [SamplingConfig(), HFOptions(), WholeObjectConfig(), RolloutOptions(), StudyOptions()]
    assert {t.max_new_tokens for t in tokens} == {DEFAULT_MAX_NEW_TOKENS}
    budgets = [Budgets(), GenerateConfig(seed=0, n=1), GateBudgets(), DataConfig()]
    assert {(b.max_attempts, b.max_ops) for b in budgets} == {(DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_OPS)}


def test_the_rollout_and_the_gate_decode_alike() -> None:
    """One translation of the decoding options: the rollout's and the gate's option objects pass
    whole to SamplingConfig.from_options; temperature 0 decodes greedily."""
    from contractrl.gate.policy import HFOptions
    from contractrl.rollout.hf_policy import SamplingConfig

    values = {"max_new_tokens": 40, "temperature": 0.0, "seed": 7, "shield_k": 3, "enumerate": False, "defer": False}
    expected = SamplingConfig(
        max_new_tokens=40, temperature=0.0, do_sample=False, seed=7, shield_k=3, shield_enumerate=False, shield_defer=False
    )
    for options in (RolloutOptions(**values), StudyOptions(**values), HFOptions(**values)):
        assert SamplingConfig.from_options(options) == expected, type(options).__name__
    sampled = SamplingConfig.from_options(RolloutOptions())
    assert (sampled.do_sample, sampled.temperature, sampled.shield_k, sampled.shield_enumerate, sampled.shield_defer) == (
        True,
        1.0,
        1,
        True,
        True,
    )
    assert HFOptions().defer and SamplingConfig.from_options(HFOptions()).shield_defer  # the gate defers too


def test_one_model_cache_default() -> None:
    """The model cache's default path is stated once (trainer/model_cache.py): the training config,
    the preset builders and every command that loads a policy use that constant, not a copy."""
    import ast

    from contractrl.trainer.config import TrainConfig
    from contractrl.trainer.model_cache import MODELS_DIR
    from contractrl.trainer.presets import tiny_path

    assert TrainConfig().model.cache_dir == str(MODELS_DIR) == "runs/models"
    assert tiny_path().parent == MODELS_DIR.resolve()
    package = Path(__file__).resolve().parents[1] / "contractrl"
    copies = [
        f"{path.relative_to(package)}:{node.lineno}"
        for path in sorted(package.rglob("*.py"))
        if path.name != "model_cache.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.rstrip("/") == str(MODELS_DIR)
    ]
    assert not copies, f"the model cache's path written again: {copies}"


def test_tune_prints_its_resolved_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``tune --print-config``: the sweep file with its overrides applied, every key with its help,
    which loads back to the same sweep."""
    from contractrl.trainer.tune import SweepConfig, load_sweep

    sweep_file = Path(__file__).resolve().parents[1] / "tune_configs" / "lora_rank.yaml"
    assert main(["tune", "--config", str(sweep_file), "--print-config", "num_samples=2"]) == 0
    text = capsys.readouterr().out
    assert "# the trial metric the sweep ranks by" in text
    assert from_dict(SweepConfig, yaml.safe_load(text)) == load_sweep(sweep_file, ["num_samples=2"])[0]
