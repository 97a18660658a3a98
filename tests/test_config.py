"""The typed config tree: YAML + key=value overrides, with clear errors for bad keys and values."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from contractrl.cli import main
from contractrl.configtree import load_config, parse_overrides, to_commented_yaml, to_dict
from contractrl.errors import ConfigError, InputFileError
from contractrl.trainer.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_are_the_main_jobs_training() -> None:
    """One default: ``contractrl run`` trains TrainConfig's defaults with exactly MAIN_JOB's budget
    changes on top, and tiny.yaml only differs."""
    from contractrl.configtree import merge
    from contractrl.pipeline import MAIN_JOB, load_main_job_config

    config = load_config(TrainConfig)
    assert config.model.name == "smollm2" and config.model.lora.enabled
    assert config.stages == ("sft", "grpo") and config.wandb.mode == "offline"
    assert (config.sft.arm, config.grpo.arm) == ("patch_sft", "contractrl")
    main_job = to_dict(load_main_job_config().train)
    defaults = to_dict(config)
    assert main_job.pop("out") == "runs/main/train" and main_job.pop("resume") is True
    defaults.pop("out"), defaults.pop("resume")
    assert main_job != defaults and main_job == merge(defaults, MAIN_JOB["train"])
    assert set(MAIN_JOB) == {"train"}  # the budget changes touch training only
    tiny = load_config(TrainConfig, ROOT / "tune_configs" / "tiny.yaml")
    assert tiny.model.name == "tiny" and not tiny.model.lora.enabled


def test_a_partial_section_keeps_the_fields_own_defaults(tmp_path: Path) -> None:
    """``sft.optim.lr=1e-3`` changes the rate and keeps SFT's cosine schedule and warmup (the
    field's default), where a fresh OptimConfig would be constant with no warmup."""
    base = load_config(TrainConfig).sft.optim
    config = load_config(TrainConfig, None, ["sft.optim.lr=1e-3"])
    assert config.sft.optim == type(base)(lr=1e-3, warmup_steps=base.warmup_steps, schedule=base.schedule)
    assert base.schedule == "cosine" and base.warmup_steps > 0
    path = tmp_path / "c.yaml"
    path.write_text("sft:\n  optim: {weight_decay: 0.1}\n")
    assert load_config(TrainConfig, path).sft.optim.schedule == "cosine"


def _config_classes(cls: type) -> list[type]:
    import dataclasses
    import typing

    found = [cls]
    for name, tp in typing.get_type_hints(cls).items():
        if dataclasses.is_dataclass(tp) and name in {f.name for f in dataclasses.fields(cls)}:
            found.extend(_config_classes(tp))  # type: ignore[arg-type]
    return found


def test_every_config_field_has_a_help_text_that_print_config_shows(capsys: pytest.CaptureFixture[str]) -> None:
    import dataclasses

    import yaml

    from contractrl.configtree import to_commented_yaml
    from contractrl.pipeline import MainJobConfig, load_main_job_config

    missing = [
        f"{cls.__name__}.{f.name}"
        for cls in _config_classes(MainJobConfig)
        for f in dataclasses.fields(cls)
        if not str(f.metadata.get("help", "")).strip()
    ]
    assert not missing, f"config fields without help: {missing}"
    for config in (load_main_job_config(), load_config(TrainConfig, ROOT / "tune_configs" / "tiny.yaml")):
        assert yaml.safe_load(to_commented_yaml(config)) == to_dict(config)  # the comments lose nothing
    assert main(["train", "--print-config", "sft.optim.lr=1e-3"]) == 0
    out = capsys.readouterr().out
    assert "lr: 0.001  # peak learning rate" in out and "abstain_repeat: 1  # repeat ABSTAIN" in out


def test_yaml_then_overrides_win(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("grpo:\n  steps: 7\n  group_size: 3\nmodel:\n  lora:\n    r: 4\n")
    config = load_config(TrainConfig, path, ["grpo.steps=9", "model.lora.target_modules=[q_proj,v_proj]", "stages=[sft]"])
    assert config.grpo.steps == 9
    assert config.grpo.group_size == 3
    assert config.model.lora.r == 4
    assert config.model.lora.target_modules == ("q_proj", "v_proj")
    assert config.stages == ("sft",)
    # floats accept integers; round trip through plain data keeps the values
    assert load_config(TrainConfig, None, ["reward.tokens=0"]).reward.tokens == 0.0
    assert to_dict(config)["grpo"]["steps"] == 9


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("grpo.lr_rate=1", "unknown config key 'grpo.lr_rate'"),
        ("grpo.stpes=3", "did you mean 'grpo.steps'"),
        ("grpo.steps=ten", "config key 'grpo.steps' must be int, got 'ten'"),
        ("grpo.steps=2.5", "must be int"),
        ("resume=yes please", "must be bool"),
        ("grpo.group_size=1", "grpo.group_size must be >= 2"),
        ("grpo.baseline=median", "one of 'mean', 'leave_one_out'"),
        ("stages=[grpo, sft]", "stages run in the order sft, grpo"),
        ("data.families=[nope]", "data.families: unknown ['nope']"),
        ("grpo.families=[nope]", "grpo.families: unknown ['nope']"),
        ("grpo.families=[]", "grpo.families: at least one family is needed"),
        ("grpo.family_weights.nope=2", "grpo.family_weights: ['nope'] not among grpo.families"),
        ("grpo.family_weights.wrong_type=0", "grpo.family_weights.wrong_type must be a finite number > 0"),
        ("grpo.family_weights.wrong_type=.inf", "grpo.family_weights.wrong_type must be a finite number > 0"),
        ("grpo.family_weights.wrong_type=lots", "config key 'grpo.family_weights.wrong_type' must be float"),
        ("grpo.family_weights=[wrong_type]", "config key 'grpo.family_weights' must be"),
        ("model.name=gpt", "model.name must be tiny"),
        ("deepspeed.zero_stage=3", "deepspeed.zero_stage must be 0, 1 or 2 (ZeRO-3 is not supported)"),
        ("resources.ray=false", "resources.ray=false runs one colocated learner"),
        ("sft.arm=full_regen", "sft.arm (full_regen) must be a patch arm"),
        ("grpo", "is not key=value"),
        ("grpo.steps=[1", "not valid YAML"),
        ("model=3", "model must be a mapping"),
        ("sft.optim.lr=1e-3x", "must be float, got '1e-3x'"),
        ("sft.optim.lr=nan", "must be float"),
        ("sft.max_tokens=8", "sft.max_tokens must be >= 16"),
        ("model.lora.top_layers=-1", "model.lora.top_layers must be >= 0"),
    ],
)
def test_bad_overrides_are_clear_errors(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(TrainConfig, None, [override])


def test_grpo_families_must_meet_the_data_families() -> None:
    with pytest.raises(ConfigError, match=re.escape("shares no family with data.families")):
        load_config(TrainConfig, None, ["data.families=[wrong_type]", "grpo.families=[unrepairable]"])
    # SFT alone does not draw GRPO cases
    assert load_config(TrainConfig, None, ["data.families=[wrong_type]", "grpo.families=[unrepairable]", "stages=[sft]"])


def test_grpo_contrasts_need_unrepairable_cases_in_grpo() -> None:
    with pytest.raises(ConfigError, match=r"grpo\.families .* leaves unrepairable out"):
        load_config(TrainConfig, None, ["grpo.contrast_unrepairable=true", "grpo.families=[wrong_type,missing_required]"])
    assert load_config(TrainConfig, None, ["grpo.contrast_unrepairable=true"]).grpo.contrast_unrepairable
    assert not TrainConfig().grpo.contrast_unrepairable  # off by default: the batches of earlier runs
    with pytest.raises(ConfigError, match=r"grpo\.contrast_baseline=pair .* set grpo\.contrast_unrepairable=true"):
        load_config(TrainConfig, None, ["grpo.contrast_baseline=pair"])
    paired = load_config(TrainConfig, None, ["grpo.contrast_unrepairable=true", "grpo.contrast_baseline=pair"]).grpo
    assert paired.contrast_baseline == "pair" and TrainConfig().grpo.contrast_baseline == "own"
    with pytest.raises(ConfigError, match="contrast_baseline"):
        load_config(TrainConfig, None, ["grpo.contrast_unrepairable=true", "grpo.contrast_baseline=both"])


def test_weighting_abstention_without_its_contrast_is_cautioned_not_refused() -> None:
    weighted = load_config(TrainConfig, None, ["grpo.family_weights.unrepairable=4"]).grpo
    (caution,) = weighted.cautions()
    assert "grpo.family_weights.unrepairable=4 without grpo.contrast_unrepairable=true" in caution
    with_contrast = load_config(TrainConfig, None, ["grpo.family_weights.unrepairable=4", "grpo.contrast_unrepairable=true"])
    assert with_contrast.grpo.cautions() == ()
    assert TrainConfig().grpo.cautions() == ()
    assert load_config(TrainConfig, None, ["grpo.family_weights.unrepairable=0.5"]).grpo.cautions() == ()


def test_grpo_family_weights_are_set_key_by_key() -> None:
    config = load_config(TrainConfig, None, ["grpo.family_weights.immutable_field=3", "grpo.family_weights.wrong_pointer=2"])
    assert config.grpo.family_weights == {"immutable_field": 3.0, "wrong_pointer": 2.0}
    assert TrainConfig().grpo.family_weights == {}  # none by default: the seeded epochs of earlier runs
    # the printed config loads back to the same tree
    assert yaml.safe_load(to_commented_yaml(config)) == to_dict(config)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="config file not found"):
        load_config(TrainConfig, tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("grpo: [unclosed\n")
    with pytest.raises(InputFileError, match="not valid YAML"):
        load_config(TrainConfig, bad)
    top = tmp_path / "list.yaml"
    top.write_text("- 1\n- 2\n")
    with pytest.raises(InputFileError, match="mapping at the top level"):
        load_config(TrainConfig, top)


def test_floats_in_exponent_form_are_read_as_yaml_users_write_them(tmp_path: Path) -> None:
    """PyYAML reads 1e-3 (no dot) as a string; YAML 1.2 and every user read it as a number."""
    assert load_config(TrainConfig, None, ["sft.optim.lr=1e-3"]).sft.optim.lr == 1e-3
    assert load_config(TrainConfig, None, ["grpo.optim.lr=+2E-1", "reward.tokens=.5e-2"]).reward.tokens == 0.005
    path = tmp_path / "c.yaml"
    path.write_text("sft:\n  optim: {lr: 2e-4}\n")
    assert load_config(TrainConfig, path).sft.optim.lr == 2e-4


def test_override_parsing() -> None:
    assert parse_overrides(["a.b=1", "a.c=x", "d=[1, 2]", "e="]) == {"a": {"b": 1, "c": "x"}, "d": [1, 2], "e": ""}
    with pytest.raises(ConfigError, match="conflicts"):
        parse_overrides(["a=1", "a.b=2"])


def test_shipped_configs_load() -> None:
    """Every shipped YAML loads as what it is: a sweep (with every corner trial checked against its
    base), a selector config or a training config."""
    from contractrl.configtree import read_yaml
    from contractrl.selector.config import SelectorConfig
    from contractrl.trainer.tune import SweepConfig, load_sweep

    selector_configs = {"selector.yaml"}
    kinds = {}
    for path in sorted((ROOT / "tune_configs").glob("*.yaml")):
        if "search" in read_yaml(path):
            sweep, base = load_sweep(path)
            assert isinstance(sweep, SweepConfig) and base
            kinds[path.name] = f"sweep:{sweep.kind}"
        elif path.name in selector_configs:
            assert isinstance(load_config(SelectorConfig, path), SelectorConfig)
            kinds[path.name] = "selector"
        else:
            assert isinstance(load_config(TrainConfig, path), TrainConfig)
            kinds[path.name] = "train"
    assert kinds["tiny.yaml"] == "train" and kinds["selector.yaml"] == "selector"
    assert kinds["selector_sweep.yaml"] == "sweep:selector"
    assert list(kinds.values()).count("sweep:train") >= 4


def test_cli_print_config_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--config", str(ROOT / "tune_configs" / "tiny.yaml"), "grpo.steps=3", "--print-config"]) == 0
    assert "steps: 3" in capsys.readouterr().out
    assert main(["train", "grpo.nope=1"]) == 2
    assert "unknown config key 'grpo.nope'" in capsys.readouterr().err
