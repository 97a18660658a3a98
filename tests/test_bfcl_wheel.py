"""BFCL v4 from its PyPI wheel, on a small wheel built here: the hash check, the extraction, the
held-out live categories, and the errors a user meets."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from contractrl.errors import ConfigError
from contractrl.tasks import bfcl_wheel
from contractrl.tasks.bfcl_wheel import BfclDataError, category_dir, check_trainable
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.tasks.sources import BfclSource
from contractrl.wheels import PinnedWheel, file_sha256


def _entry(n: int, kind: str) -> tuple[dict, dict]:
    question = {
        "id": f"{kind}_{n}",
        "question": [[{"role": "user", "content": f"Book {n + 2} seats on flight LX{300 + n} in economy class."}]],
        "function": [
            {
                "name": "book_seats",
                "description": "Book seats on a flight.",
                "parameters": {
                    "type": "dict",
                    "properties": {
                        "flight": {"type": "string", "description": "Flight number."},
                        "seats": {"type": "integer", "description": "How many seats."},
                        "cabin": {"type": "string", "enum": ["economy", "business"], "description": "Cabin class."},
                    },
                    "required": ["flight", "seats"],
                },
            }
        ],
    }
    answer = {
        "id": f"{kind}_{n}",
        "ground_truth": [{"book_seats": {"flight": [f"LX{300 + n}"], "seats": [n + 2], "cabin": ["economy", ""]}}],
    }
    return question, answer


def _wheel(path: Path, categories: dict[str, str]) -> Path:
    """A wheel with the layout of bfcl-eval's: questions and possible answers under bfcl_eval/data/."""
    with zipfile.ZipFile(path, "w") as archive:
        for kind, filename in categories.items():
            pairs = [_entry(n, kind) for n in range(12)]
            archive.writestr(f"bfcl_eval/data/{filename}", "\n".join(json.dumps(q) for q, _ in pairs) + "\n")
            archive.writestr(f"bfcl_eval/data/possible_answer/{filename}", "\n".join(json.dumps(a) for _, a in pairs) + "\n")
        archive.writestr("bfcl_eval/__init__.py", "raise SystemExit('never imported')\n")
    return path


@pytest.fixture
def placed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local wheel holding ``simple`` and ``live_simple``, pinned by its own digest and placed in the cache."""
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    wheel = _wheel(
        cache / "wheels" / bfcl_wheel.PIN.filename,
        {"simple": "BFCL_v4_simple_python.json", "live_simple": "BFCL_v4_live_simple.json"},
    )
    pin = PinnedWheel(
        bfcl_wheel.PIN.requirement, bfcl_wheel.PIN.filename, file_sha256(wheel), "CONTRACTRL_TEST_BFCL_WHEEL", "test data"
    )
    monkeypatch.setattr(bfcl_wheel, "PIN", pin)
    monkeypatch.setenv(bfcl_wheel.CACHE_ENV, str(cache))
    return cache


def test_a_category_is_extracted_once_and_read_as_a_bfcl_directory(placed: Path) -> None:
    folder = category_dir("live_simple", download=False)
    assert folder == placed.resolve() / "bfcl-v4-2026.3.23" / "live_simple"
    assert sorted(p.name for p in folder.rglob("*.json")) == ["BFCL_v4_live_simple.json", "BFCL_v4_live_simple.json"]
    assert category_dir("live_simple", download=False) == folder  # cached: the wheel is not opened again
    source = BfclSource(folder, name="bfcl:live_simple")
    assert len(source.calls) == 12 and source.name == "bfcl:live_simple"
    families = ("missing_required", "wrong_type", "constraint_violation")
    cases = generate_cases(GenerateConfig(seed=3, n=6, source="bfcl:live_simple", families=families))
    assert len(cases) == 6 and all("flight" in c.public.request for c in cases)


def test_a_wheel_with_other_bytes_is_refused(placed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pin = PinnedWheel(bfcl_wheel.PIN.requirement, bfcl_wheel.PIN.filename, "0" * 64, "CONTRACTRL_TEST_BFCL_WHEEL", "test data")
    monkeypatch.setattr(bfcl_wheel, "PIN", pin)
    with pytest.raises(BfclDataError, match=r"expected 0{64}"):
        category_dir("simple", download=False)
    assert not (placed / "bfcl-v4-2026.3.23" / "simple").exists()  # nothing extracted from it


def test_a_category_the_wheel_lacks_is_named(placed: Path) -> None:
    with pytest.raises(BfclDataError, match=re.escape("no bfcl_eval/data/BFCL_v4_parallel.json")):
        category_dir("parallel", download=False)
    assert not any(p.name.startswith(".parallel") for p in (placed / "bfcl-v4-2026.3.23").iterdir())  # no scratch left


def test_an_unknown_category_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown BFCL category 'simpel'; choose from simple, "):
        category_dir("simpel", download=False)


def test_without_the_wheel_the_error_names_the_file_and_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(bfcl_wheel.PIN.env, raising=False)
    with pytest.raises(BfclDataError) as raised:
        category_dir("simple", tmp_path / "empty", download=False)
    message = str(raised.value)
    assert bfcl_wheel.PIN.filename in message and str((tmp_path / "empty").resolve() / "wheels") in message
    assert "pip download --no-deps bfcl-eval==2026.3.23" in message


def test_live_categories_never_enter_a_training_split() -> None:
    """The live categories are held out: a training config naming one stops before any data is read,
    while generating its cases for an evaluation is allowed."""
    from contractrl.configtree import from_dict
    from contractrl.trainer.config import TrainConfig

    for category in bfcl_wheel.HELD_OUT:
        with pytest.raises(ConfigError, match=f"data.source: bfcl:{category} is held out"):
            from_dict(TrainConfig, {"data": {"source": f"bfcl:{category}"}})
        with pytest.raises(ConfigError, match=f"data.mix: bfcl:{category} is held out"):
            from_dict(TrainConfig, {"data": {"mix": [f"bfcl:{category}=8"]}})
        with pytest.raises(ConfigError, match="held out"):
            check_trainable(f"bfcl:{category}")
    assert {c for c in bfcl_wheel.CATEGORIES if c.startswith("live_")} == bfcl_wheel.HELD_OUT and len(bfcl_wheel.HELD_OUT) == 4
    for category in set(bfcl_wheel.CATEGORIES) - bfcl_wheel.HELD_OUT:
        check_trainable(f"bfcl:{category}")
    check_trainable("bfcl:some/dir/live_simple")  # a directory is the user's own data, named as they like
    # a model's BFCL run: its live result files are held out the same way (tests/test_natural.py splits one)
    with pytest.raises(ConfigError, match=r"data\.source: bfcl-results-live:runs/m is held out"):
        from_dict(TrainConfig, {"data": {"source": "bfcl-results-live:runs/m"}})
    check_trainable("bfcl-results:runs/m")  # reads the non-live result files only


def test_mixed_in_cases_join_the_training_split_only(placed: Path, tmp_path: Path) -> None:
    """``data.mix`` adds another source's cases to training; the held-out cases stay those of
    ``data.source``, disjoint from every training case, and the same config makes the same cases."""
    from contractrl.configtree import from_dict
    from contractrl.tasks.store import read_manifest
    from contractrl.trainer.config import TrainConfig
    from contractrl.trainer.entry import prepare_cases

    data = from_dict(
        TrainConfig,
        {"data": {"train_cases": 8, "eval_cases": 6, "mix": ["bfcl:simple=5"], "families": ["wrong_type", "missing_required"]}},
    ).data
    train, held_out = prepare_cases(data, tmp_path / "a")
    bfcl = [c for c in train if "flight" in c.public.request]
    assert len(train) == 13 and len(bfcl) == 5 and {c.public.family for c in bfcl} <= {"wrong_type", "missing_required"}
    assert len(held_out) == 6 and not any("flight" in c.public.request for c in held_out)
    assert not {c.public.case_id for c in train} & {c.public.case_id for c in held_out}
    manifest = read_manifest(tmp_path / "a" / "cases" / "train")
    assert [m["source"] for m in manifest["mix"]] == ["bfcl:simple"] and manifest["mix"][0]["n"] == 5
    again, _ = prepare_cases(data, tmp_path / "b")
    assert [c.public.case_id for c in again] == [c.public.case_id for c in train]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("bfcl:simple", "write SOURCE=N"),
        ("bfcl:simple=0", "write SOURCE=N"),
        ("bfcl:simple=x", "write SOURCE=N"),
        ("=4", "write SOURCE=N"),
        ("nowhere=4", "unknown case source 'nowhere'"),
    ],
)
def test_a_bad_mix_entry_is_one_line_naming_the_key(entry: str, message: str) -> None:
    from contractrl.configtree import from_dict
    from contractrl.trainer.config import TrainConfig

    with pytest.raises(ConfigError, match=f"data.mix: .*{re.escape(message)}") as raised:
        from_dict(TrainConfig, {"data": {"mix": [entry]}})
    assert "\n" not in str(raised.value)
