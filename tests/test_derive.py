"""``derive``: a typed variant of a config, equal to the dict round trip it replaces, key by key."""

from __future__ import annotations

from pathlib import Path

import pytest

from contractrl.configtree import derive, from_dict, load_config, merge, nest, parse_overrides, to_dict
from contractrl.errors import ConfigError
from contractrl.pipeline import MainJobConfig, load_main_job_config
from contractrl.selector.config import SelectorConfig
from contractrl.trainer.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


def _round_trip(config: object, flat: dict[str, object]) -> object:
    """What pipeline, studies and tune did before ``derive``: to plain data and back."""
    return from_dict(type(config), merge(to_dict(config), nest(flat)))


def _shipped() -> list[object]:
    configs: list[object] = [load_main_job_config(), load_main_job_config(quick=True), load_config(TrainConfig)]
    configs.append(load_config(TrainConfig, ROOT / "tune_configs" / "tiny.yaml"))
    configs.append(load_config(SelectorConfig, ROOT / "tune_configs" / "selector.yaml"))
    return configs


VARIANTS = [
    {"out": "runs/x", "resume": True},
    {"experimental.transfer.tool_families": ["file", "http"]},  # the transfer study's fold
    {"resources.num_workers": 0},  # tune's fix for a trial that does not fit
    {"stages": ["sft"], "sft.steps": 7, "sft.arm": "full_regen", "eval.max_new_tokens": 160},  # the whole-object run
    {"sft.optim.lr": "3e-4"},  # a partial section keeps the field's own defaults; YAML 1.1's exponent string
    {"experimental.grpo_families.weights": {"wrong_type": 2.0}},  # a mapping merges into the one there
    {"model.lora.r": 4, "model.lora.enabled": False},
]


@pytest.mark.parametrize("flat", VARIANTS)
def test_derive_equals_the_dict_round_trip_on_every_shipped_config(flat: dict[str, object]) -> None:
    for config in _shipped():
        train = config.train if isinstance(config, MainJobConfig) else config
        if not isinstance(train, TrainConfig):
            continue
        derived = derive(train, flat)
        assert derived == _round_trip(train, flat)
        assert to_dict(derived) == to_dict(_round_trip(train, flat))  # key by key, values and types
    main_job = load_main_job_config()
    nested = {f"train.{k}": v for k, v in flat.items()}
    assert derive(main_job, nested) == _round_trip(main_job, nested)


def test_derive_with_nothing_changed_is_the_same_config() -> None:
    for config in _shipped():
        assert derive(config) == config and derive(config) == _round_trip(config, {})


def test_derive_takes_command_line_overrides_and_top_level_fields() -> None:
    base = load_config(TrainConfig)
    items = ["grpo.steps=3", "experimental.transfer.tool_families=[file]", "model.lora.r=4"]
    assert derive(base, items) == load_config(TrainConfig, None, items)
    assert derive(base, items) == derive(base, nest(parse_overrides(items)))
    variant = derive(base, {"grpo.steps": 3}, out="runs/v", resume=True)
    assert (variant.out, variant.resume, variant.grpo.steps) == ("runs/v", True, 3)
    assert variant.sft == base.sft  # sections not named are the same objects' values
    selector = load_config(SelectorConfig, ROOT / "tune_configs" / "selector.yaml")
    assert derive(selector, ["ppo.iterations=2"]) == _round_trip(selector, {"ppo.iterations": 2})


def test_derive_takes_a_whole_typed_section() -> None:
    base = load_config(TrainConfig)
    other = load_config(TrainConfig, None, ["sft.steps=5"]).sft
    assert derive(base, sft=other).sft is other


@pytest.mark.parametrize(
    ("flat", "message"),
    [
        ({"grpo.stepz": 3}, "unknown config key 'grpo.stepz'; did you mean 'grpo.steps'?"),
        ({"grpo.steps": "ten"}, "config key 'grpo.steps' must be int"),
        ({"grpo.steps": -1}, "grpo.steps must be >= 0"),  # the range checks run as a load's do
        ({"nonsense": 1}, "unknown config key 'nonsense'"),
    ],
)
def test_derive_refuses_what_a_load_refuses(flat: dict[str, object], message: str) -> None:
    base = load_config(TrainConfig)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("?", r"\?")):
        derive(base, flat)
    with pytest.raises(ConfigError):
        _round_trip(base, flat)


def test_derive_leaves_the_original_alone() -> None:
    base = load_config(TrainConfig)
    before = to_dict(base)
    derive(base, {"grpo.steps": 9, "experimental.transfer.tool_families": ["file"]})
    assert to_dict(base) == before
