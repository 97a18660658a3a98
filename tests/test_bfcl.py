"""BFCL: the loader (several functions and calls per entry), BFCL's acceptance rule and the screen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contractrl.errors import InputFileError
from contractrl.tasks.bfcl import bfcl_accepts, ground_truth_call, load_bfcl
from contractrl.tasks.screen import SCREEN_NOTE, run_screen

from .conftest import shared_path

SCHEMA = {
    "type": "dict",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "ratio": {"type": "float"},
        "flags": {"type": "dict", "properties": {"metric": {"type": "boolean"}, "lang": {"type": "string"}}},
        "unit": {"type": "string"},
    },
    "required": ["city", "days"],
}
POSSIBLE = {
    "city": ["New York", "NYC"],
    "days": [3],
    "ratio": [0.5, ""],
    "flags": [{"metric": [True], "lang": ["en", ""]}, ""],
    "unit": ["", "C"],
}


@pytest.mark.parametrize(
    ("call", "ok"),
    [
        ({"city": "new york", "days": 3}, True),  # loose string comparison, omittable arguments omitted
        ({"city": "N.Y.C", "days": 3, "unit": "c"}, True),
        ({"city": "NYC", "days": 3, "ratio": 1}, False),
        ({"city": "NYC", "days": 3, "ratio": 0.5}, True),
        ({"city": "NYC", "days": 3.0}, False),  # a float is not accepted for an integer
        ({"city": "NYC", "days": True}, False),
        ({"city": "NYC", "days": 3, "flags": {"metric": True}}, True),  # nested alternatives, "" omits
        ({"city": "NYC", "days": 3, "flags": {"metric": False}}, False),
        ({"city": "NYC", "days": 3, "verbose": True}, False),  # arguments outside the ground truth
        ({"city": "Boston", "days": 3}, False),
        ({"days": 3}, False),
    ],
)
def test_bfcl_acceptance_rules(call: dict, ok: bool) -> None:
    assert bfcl_accepts(call, POSSIBLE, SCHEMA)[0] is ok


def test_int_is_accepted_for_float() -> None:
    assert bfcl_accepts({"city": "NYC", "days": 3, "ratio": 1}, {**POSSIBLE, "ratio": [1.0]}, SCHEMA)[0]


def test_loader_handles_several_functions_and_calls(tmp_path: Path) -> None:
    question = {
        "id": "parallel_multiple_0",
        "question": [[{"role": "user", "content": "Weather in NYC for 3 days and convert 5 USD to EUR."}]],
        "function": [
            {"name": "weather.get", "description": "", "parameters": SCHEMA},
            {
                "name": "fx.convert",
                "description": "",
                "parameters": {"type": "dict", "properties": {"amount": {"type": "float"}}, "required": ["amount"]},
            },
        ],
    }
    answer = {"id": "parallel_multiple_0", "ground_truth": [{"weather.get": POSSIBLE}, {"fx.convert": {"amount": [5.0]}}]}
    (tmp_path / "q.json").write_text(json.dumps(question) + "\n\n")
    (tmp_path / "a.json").write_text(json.dumps(answer) + "\n")
    (entry,) = load_bfcl(tmp_path / "q.json", tmp_path / "a.json")
    assert [f.name for f in entry.functions] == ["weather.get", "fx.convert"]
    assert ground_truth_call(entry, 0) == (
        "weather.get",
        {"city": "New York", "days": 3, "ratio": 0.5, "flags": {"metric": True, "lang": "en"}},
    )
    assert ground_truth_call(entry, 1) == ("fx.convert", {"amount": 5.0})
    assert entry.user_text.startswith("Weather in NYC")


def test_loader_errors_name_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"id": "x", "function": []}\n{not json}\n')
    with pytest.raises(InputFileError, match=r"bad\.json:1"):
        load_bfcl(bad)
    bad.write_text('{"id": "x", "function": [{"name": "f", "parameters": {}}]}\n{not json}\n')
    with pytest.raises(InputFileError, match=r"bad\.json:2"):
        load_bfcl(bad)
    with pytest.raises(InputFileError, match="not found"):
        load_bfcl(tmp_path / "missing.json")


@pytest.mark.shared_data
def test_mechanism_screen_on_real_bfcl() -> None:
    result = run_screen(shared_path("bfcl"), seed=13)
    assert result["cases"] == 64 and result["missing_required"] == 32 and result["wrong_type"] == 32
    assert result["schema_valid"] == result["object_match"] == result["bfcl_accepted"] == 64
    assert result["attempts"] == 64 and result["retries"] == 0 and result["unsafe_dispatches"] == 0
    assert result["note"] == SCREEN_NOTE and "not a learned" in SCREEN_NOTE
    assert run_screen(shared_path("bfcl"), seed=13) == result  # deterministic


def test_screen_refuses_a_folder_without_answers(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="possible_answer"):
        run_screen(tmp_path)
