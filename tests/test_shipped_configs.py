"""Every shipped config loads the values it loaded before the experimental section, key by key.

``fixtures/shipped_configs_b896b43.json`` holds each shipped config resolved at commit b896b43
(before issue 51 moved the experiment knobs into ``experimental``): the ``MAIN_JOB`` default and
``--quick``, the training and selector defaults, ``tune_configs/tiny.yaml`` and ``selector.yaml``,
and each sweep's trial base (with and without its ``local:`` section), flattened to dotted keys by
:func:`resolved` below. Here the same configs are resolved with today's code; the frozen keys are
renamed as ``MOVED_KEYS`` says, and a removed key must have held the value that is now fixed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contractrl.configtree import from_dict, load_config, read_yaml, to_dict
from contractrl.errors import ConfigError
from contractrl.pipeline import load_main_job_config
from contractrl.selector.config import SelectorConfig
from contractrl.trainer.config import TrainConfig
from contractrl.trainer.experimental import TRAIN_DISJOINT
from contractrl.trainer.model_cache import MODELS_DIR
from contractrl.trainer.tune import load_sweep, trial_config_class

ROOT = Path(__file__).resolve().parents[1]
FROZEN = json.loads((Path(__file__).parent / "fixtures" / "shipped_configs_b896b43.json").read_text())

# what a removed key's behaviour is now fixed at: every shipped config held exactly this
REMOVED_VALUES: dict[str, Any] = {
    "sft.retry_demos": False,
    "sft.abstain_repeat": 1,
    "sft.contrast_repeat": 1,
    "grpo.credit": "episode",
    "grpo.contrast_baseline": "own",
    "grpo.eps": 1e-4,
    "eval.shield_enumerate": True,
    "wandb.sample_episodes": 8,
    "model.lora.dropout": 0.0,
    "sft.optim.weight_decay": 0.0,
    "grpo.optim.weight_decay": 0.0,
    "deepspeed.offload_optimizer": False,
}
# keys added since (the selector shares the data section), at the default that keeps what every config did before
ADDED_KEYS: dict[str, Any] = {"data.eval_dir": ""}
# ... and to training configs only: held-out decisions defer to the enumerated candidates (issue 47)
TRAIN_ADDED_KEYS: dict[str, Any] = {"eval.defer": True}
# configs made since, and ones redesigned on purpose: the scaling sweep now crosses the real model
# ladder (issue 48) instead of widths of the tiny preset
ADDED_CONFIGS = {"tune_configs/main.yaml"}
REDESIGNED = {"tune_configs/scaling.yaml", "tune_configs/scaling.yaml --local"}
# the selector's data keys that became experimental options of contractrl train: the defaults it uses
SELECTOR_REMOVED: dict[str, Any] = {
    "data.contrast_form": "appended",
    "data.disjoint": list(TRAIN_DISJOINT),
    "data.tool_families": ["file", "calendar", "database", "http", "code"],
    "wandb.sample_episodes": 8,
}


def flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted keys to leaf values; an empty mapping is a leaf (``grpo.family_weights: {}``)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def resolved(root: Path) -> dict[str, dict[str, Any]]:
    """Each shipped config's values, flattened (the model cache's absolute path made portable)."""
    cache = str(MODELS_DIR.resolve())

    def norm(config: Any) -> dict[str, Any]:
        values = flat(to_dict(config))
        if values.get("model.cache_dir") == cache:
            values["model.cache_dir"] = "<resolved runs/models>"
        return values

    out = {
        "MAIN_JOB.train": norm(load_main_job_config().train),
        "MAIN_JOB --quick .train": norm(load_main_job_config(quick=True).train),
        "TrainConfig()": norm(TrainConfig()),
        "SelectorConfig()": norm(SelectorConfig()),
    }
    for path in sorted((root / "tune_configs").glob("*.yaml")):
        data = read_yaml(path)
        name = f"tune_configs/{path.name}"
        if "base" in data and "search" in data:
            for local in (False, True) if "local" in data else (False,):
                sweep, base = load_sweep(path, local=local)
                out[name + (" --local" if local else "")] = norm(from_dict(trial_config_class(sweep.kind), base))
        else:
            out[name] = norm(from_dict(SelectorConfig if "ppo" in data else TrainConfig, data))
    return out


def renamed(frozen: dict[str, Any], selector: bool) -> dict[str, Any]:
    """The frozen values under today's keys; a removed key must hold its fixed value."""
    removed = SELECTOR_REMOVED if selector else REMOVED_VALUES
    out = {}
    for key, value in frozen.items():
        if key in removed:
            assert value == removed[key], (key, value)
            continue
        out[key if selector else TrainConfig.MOVED_KEYS.get(key, key)] = value
    return out


def test_every_shipped_config_loads_the_values_it_loaded_before() -> None:
    now = resolved(ROOT)
    assert set(now) == set(FROZEN) | ADDED_CONFIGS
    for name, frozen in FROZEN.items():
        if name in REDESIGNED:
            continue
        selector = "ppo.iterations" in frozen
        expected = {**renamed(frozen, selector=selector), **ADDED_KEYS, **({} if selector else TRAIN_ADDED_KEYS)}
        assert now[name] == expected, (name, {k: (expected.get(k), now[name].get(k)) for k in set(expected) ^ set(now[name])})


@pytest.mark.parametrize(("old", "new"), sorted(TrainConfig.MOVED_KEYS.items()))
def test_a_moved_key_fails_on_one_line_naming_its_new_key(old: str, new: str, tmp_path: Path) -> None:
    value = json.dumps(flat(to_dict(TrainConfig())).get(new, {}))
    with pytest.raises(ConfigError, match=f"config key '{old}' moved to '{new}'") as raised:
        load_config(TrainConfig, None, [f"{old}={value}"])
    assert "\n" not in str(raised.value)
    section, _, leaf = old.rpartition(".")
    (tmp_path / "old.yaml").write_text(f"{section}:\n  {leaf}: {value}\n")
    with pytest.raises(ConfigError, match=f"'{old}' moved to '{new}'"):
        load_config(TrainConfig, tmp_path / "old.yaml")
    # inside the main job's tree the keys carry its prefix
    with pytest.raises(ConfigError, match=f"'train.{old}' moved to 'train.{new}'"):
        load_main_job_config(overrides=[f"train.{old}={value}"])


@pytest.mark.parametrize("old", sorted(TrainConfig.REMOVED_KEYS))
def test_a_removed_key_fails_on_one_line_saying_why(old: str) -> None:
    value = json.dumps(REMOVED_VALUES[old])
    with pytest.raises(ConfigError, match=f"config key '{old}' was removed: ") as raised:
        load_config(TrainConfig, None, [f"{old}={value}"])
    assert "\n" not in str(raised.value) and len(str(raised.value)) > len(old) + 40


def test_the_selector_refuses_the_data_keys_that_became_experimental() -> None:
    for old in SELECTOR_REMOVED:
        with pytest.raises(ConfigError, match=f"config key '{old}' was removed: "):
            load_config(SelectorConfig, None, [f"{old}={json.dumps(SELECTOR_REMOVED[old])}"])
