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
    # the budget changes touch training, and where the report scores (in process: pipeline.MAIN_JOB)
    assert set(MAIN_JOB) == {"train", "report"} and MAIN_JOB["report"] == {"workers": 0}
    tiny = load_config(TrainConfig, ROOT / "tune_configs" / "tiny.yaml")
    assert tiny.model.name == "tiny" and not tiny.model.lora.enabled
    # the main job's training as a file (the base of sweeps over the real model) is the same config
    as_file = to_dict(load_config(TrainConfig, ROOT / "tune_configs" / "main.yaml"))
    as_file.pop("out"), as_file.pop("resume")
    assert as_file == main_job


def test_a_partial_section_keeps_the_fields_own_defaults(tmp_path: Path) -> None:
    """``sft.optim.lr=1e-3`` changes the rate and keeps SFT's cosine schedule and warmup (the
    field's default), where a fresh OptimConfig would be constant with no warmup."""
    base = load_config(TrainConfig).sft.optim
    config = load_config(TrainConfig, None, ["sft.optim.lr=1e-3"])
    assert config.sft.optim == type(base)(lr=1e-3, warmup_steps=base.warmup_steps, schedule=base.schedule)
    assert base.schedule == "cosine" and base.warmup_steps > 0
    path = tmp_path / "c.yaml"
    path.write_text("sft:\n  optim: {grad_clip: 0.5}\n")
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
    assert "lr: 0.001  # peak learning rate" in out and "  contrast:  # minimal contrasts of unrepairable cases" in out


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
        ("experimental.grpo_families.families=[nope]", "experimental.grpo_families.families: unknown ['nope']"),
        ("experimental.grpo_families.families=[]", "experimental.grpo_families.families must not be empty"),
        (
            "experimental.grpo_families.weights.nope=2",
            "experimental.grpo_families.weights: ['nope'] not among experimental.grpo_families.families",
        ),
        ("experimental.grpo_families.weights.wrong_type=0", "weights.wrong_type must be a finite number > 0"),
        ("experimental.grpo_families.weights.wrong_type=.inf", "weights.wrong_type must be a finite number > 0"),
        (
            "experimental.grpo_families.weights.wrong_type=lots",
            "config key 'experimental.grpo_families.weights.wrong_type' must be float",
        ),
        ("experimental.grpo_families.weights=[wrong_type]", "config key 'experimental.grpo_families.weights' must be"),
        ("experimental.contrast.decision_weight=0", "experimental.contrast.decision_weight must be > 0, got 0"),
        ("experimental.ranking.negatives=-1", "experimental.ranking.negatives must be >= 0, got -1"),
        ("experimental.split.disjoint=[nope]", "experimental.split.disjoint: unknown audit units ['nope']"),
        ("experimental.transfer.tool_families=[nope]", "experimental.transfer.tool_families: unknown ['nope']"),
        ("model.name=gpt", "model.name must be tiny"),
        ("model.hidden_size=60", "model.hidden_size must be a multiple of 8, got 60"),
        ("model.hidden_size=8", "model.hidden_size must be >= 16, got 8"),
        ("model.lora.target_modules=[]", "model.lora.target_modules must not be empty"),
        ("grpo.clip_low=1", "grpo.clip_low must be in [0, 1), got 1"),
        ("sft.optim.lr=0", "sft.optim.lr must be > 0, got 0"),
        ("grpo.optim.grad_clip=-1", "grpo.optim.grad_clip must be >= 0 (0 disables it), got -1"),
        ("deepspeed.zero_stage=3", "deepspeed.zero_stage must be in [0, 2] (ZeRO-3 is not supported), got 3"),
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


GRPO_FAMILIES = "experimental.grpo_families.families"
WEIGHTS = "experimental.grpo_families.weights"


def test_grpo_families_must_meet_the_data_families() -> None:
    with pytest.raises(ConfigError, match=re.escape("shares no family with data.families")):
        load_config(TrainConfig, None, ["data.families=[wrong_type]", f"{GRPO_FAMILIES}=[unrepairable]"])
    # SFT alone does not draw GRPO cases
    assert load_config(TrainConfig, None, ["data.families=[wrong_type]", f"{GRPO_FAMILIES}=[unrepairable]", "stages=[sft]"])


def test_grpo_contrasts_need_unrepairable_cases_in_grpo() -> None:
    """The contrast sub-section's cross-field check: GRPO's contrasts need unrepairable cases to pair."""
    with pytest.raises(ConfigError, match=r"experimental\.contrast\.grpo pairs .* leaves unrepairable out"):
        load_config(TrainConfig, None, ["experimental.contrast.grpo=true", f"{GRPO_FAMILIES}=[wrong_type,missing_required]"])
    assert load_config(TrainConfig, None, ["experimental.contrast.grpo=true"]).experimental.contrast.grpo
    assert not TrainConfig().experimental.contrast.grpo  # off by default: the batches of earlier runs


def test_weighting_abstention_without_its_contrast_is_cautioned_not_refused() -> None:
    weighted = load_config(TrainConfig, None, [f"{WEIGHTS}.unrepairable=4"]).experimental
    (caution,) = weighted.cautions()
    assert f"{WEIGHTS}.unrepairable=4 without experimental.contrast.grpo=true" in caution
    with_contrast = load_config(TrainConfig, None, [f"{WEIGHTS}.unrepairable=4", "experimental.contrast.grpo=true"])
    assert with_contrast.experimental.cautions() == ()
    assert TrainConfig().experimental.cautions() == ()
    assert load_config(TrainConfig, None, [f"{WEIGHTS}.unrepairable=0.5"]).experimental.cautions() == ()


def test_grpo_family_weights_are_set_key_by_key() -> None:
    config = load_config(TrainConfig, None, [f"{WEIGHTS}.immutable_field=3", f"{WEIGHTS}.wrong_pointer=2"])
    assert config.experimental.grpo_families.weights == {"immutable_field": 3.0, "wrong_pointer": 2.0}
    assert TrainConfig().experimental.grpo_families.weights == {}  # none by default: the seeded epochs of earlier runs
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


def _bounded_fields(cls: type, prefix: str = "") -> list[tuple[type, str, str, dict]]:
    """Every field of the tree under ``cls`` with range metadata: (its class, the class's dotted
    prefix, the field's name, its metadata)."""
    import dataclasses
    import typing

    found = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            found.extend(_bounded_fields(hints[f.name], f"{prefix}{f.name}."))
        elif {"ge", "gt", "le", "lt"} & set(f.metadata):
            found.append((cls, prefix.rstrip("."), f.name, dict(f.metadata)))
    return found


def _outside(meta: dict) -> list[float]:
    """Values just outside a field's bounds (and NaN, which fits no bound)."""
    values = [float("nan")]
    values += [meta["ge"] - 1] if "ge" in meta else []
    values += [meta["gt"]] if "gt" in meta else []
    values += [meta["le"] + 1] if "le" in meta else []
    values += [meta["lt"]] if "lt" in meta else []
    return values


def test_every_range_in_field_metadata_is_checked_naming_the_key() -> None:
    """The ranges are metadata, so the loader checks each one: a value just outside any bound of
    any field of both trees fails on one line naming the dotted key, and the defaults fit."""
    from contractrl.configtree import from_dict
    from contractrl.selector.config import SelectorConfig

    checked = 0
    for tree in (TrainConfig, SelectorConfig):
        fields = _bounded_fields(tree)
        assert len(fields) >= 20
        load_config(tree)  # every default fits its own bounds
        for cls, prefix, name, meta in fields:
            key = f"{prefix}.{name}" if prefix else name
            for value in _outside(meta):
                with pytest.raises(ConfigError, match=re.escape(key)) as raised:
                    from_dict(cls, parse_overrides([f"{name}={'.nan' if value != value else value}"]), prefix)
                assert "\n" not in str(raised.value), (key, value)
                checked += 1
    assert checked >= 80


def test_range_errors_say_the_bound_and_the_value() -> None:
    from contractrl.configtree import range_error

    assert range_error({"ge": 1}, 1, "a.b") is None and range_error({"ge": 1}, 0, "a.b") == "a.b must be >= 1, got 0"
    assert range_error({"gt": 0, "lt": 1}, 1.0, "p") == "p must be in (0, 1), got 1.0"
    assert range_error({"ge": 0, "le": 2, "why": "(no 3)"}, 3, "z") == "z must be in [0, 2] (no 3), got 3"
    assert range_error({"ge": 0}, float("nan"), "x") == "x must be >= 0, got nan"
    assert range_error({"ge": 16, "multiple_of": 8}, 60, "h") == "h must be a multiple of 8, got 60"
    assert range_error({"nonempty": True}, (), "t") == "t must not be empty"
    assert range_error({"help": "no bounds"}, -5, "free") is None
