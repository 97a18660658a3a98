"""Natural failures from BFCL result and score files, on handmade files over a small local wheel:
each error type becomes a case scored by BFCL's acceptance, calls the verifier accepts are skipped
and counted, bad files are refused in one line, and live results never reach a training split."""

from __future__ import annotations

import json
import os
import re
import zipfile
from pathlib import Path
from typing import Any

import pytest

from contractrl.errors import ConfigError, InputFileError
from contractrl.tasks import bfcl_wheel
from contractrl.tasks.bfcl_results import decode_calls
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.tasks.natural import ACCEPTED, NaturalSource, natural_failures
from contractrl.tasks.offline import semantic_outcome
from contractrl.tasks.sources import check_source, source_calls, source_families
from contractrl.validators import Budgets, RepairContract, Verifier
from contractrl.wheels import PinnedWheel, file_sha256

from .conftest import assert_nothing_offline_in_public

FUNCTION = {
    "name": "book_flight",
    "description": "Book seats on a flight.",
    "parameters": {
        "type": "dict",
        "properties": {
            "_from": {"type": "string", "description": "Departure airport."},
            "to": {"type": "string", "description": "Arrival airport."},
            "seats": {"type": "integer", "description": "How many seats."},
            "cabin": {"type": "string", "enum": ["economy", "business"], "description": "Cabin class."},
        },
        "required": ["_from", "to", "seats"],
    },
}


def _data(prefix: str, n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    entry_id = f"{prefix}_{n}"
    question = {
        "id": entry_id,
        "question": [[{"role": "user", "content": f"Book {n + 2} seats from ZRH to C{n}, economy if you can."}]],
        "function": [FUNCTION],
    }
    answer = {
        "id": entry_id,
        "ground_truth": [{"book_flight": {"_from": ["ZRH"], "to": [f"C{n}"], "seats": [n + 2], "cabin": ["economy", ""]}}],
    }
    return question, answer


@pytest.fixture
def wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A wheel with bfcl-eval's layout holding simple_python and live_simple, pinned and cached."""
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    path = cache / "wheels" / bfcl_wheel.PIN.filename
    with zipfile.ZipFile(path, "w") as archive:
        for prefix, filename in (("simple_python", "BFCL_v4_simple_python.json"), ("live_simple", "BFCL_v4_live_simple.json")):
            pairs = [_data(prefix, n) for n in range(10)]
            archive.writestr(f"bfcl_eval/data/{filename}", "\n".join(json.dumps(q) for q, _ in pairs) + "\n")
            archive.writestr(f"bfcl_eval/data/possible_answer/{filename}", "\n".join(json.dumps(a) for _, a in pairs) + "\n")
    pin = PinnedWheel(
        bfcl_wheel.PIN.requirement, bfcl_wheel.PIN.filename, file_sha256(path), "CONTRACTRL_TEST_BFCL_WHEEL", "test"
    )
    monkeypatch.setattr(bfcl_wheel, "PIN", pin)
    monkeypatch.setenv(bfcl_wheel.CACHE_ENV, str(cache))
    return cache


# one model's answers to simple_python_0..7, as `bfcl generate` writes them, and BFCL's verdicts
ANSWERS: list[tuple[Any, str]] = [
    ("[book_flight(_from='ZRH', to='C0', seats='2')]", "type_error:simple"),  # wrong type
    ("[book_flight(_from='ZRH', seats=3)]", "simple_function_checker:missing_required"),  # missing required
    ("[book_flight(_from='ZRH', to='C2', seats=4, cabin='first')]", "value_error:string"),  # enum violation
    ([{"book_flight": json.dumps({"from": "ZRH", "to": "C3", "seats": 5})}], "simple_function_checker:unexpected_param"),
    ("[book_flight(_from='ZRH', to='C4', seats=6)]", ""),  # right: BFCL and the verifier accept it
    ("[book_flight(_from='ZRH', to='C5', seats=99)]", "value_error:others"),  # schema-valid, wrong value
    ("[book_flight(_from=__import__('os').getcwd(), to='C6', seats=8)]", "ast_decoder:decoder_failed"),
    ("[book_flight(_from='ZRH', to='C7', seats=4+5)]", "value_error:others"),  # BFCL evaluates 4+5; we do not
]


def _run(folder: Path, prefix: str = "simple_python", group: str = "non_live", score: bool = True) -> Path:
    """A model's run laid out as `bfcl generate` and `bfcl evaluate` write it."""
    results = folder / "result" / "model" / group
    results.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"{prefix}_{n}", "result": result, "latency": 0.1} for n, (result, _) in enumerate(ANSWERS)]
    (results / f"BFCL_v4_{prefix}_result.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if score:
        scores = folder / "score" / "model" / group
        scores.mkdir(parents=True, exist_ok=True)
        refused = [(n, kind) for n, (_, kind) in enumerate(ANSWERS) if kind]
        header = {
            "accuracy": 1 - len(refused) / len(ANSWERS),
            "correct_count": len(ANSWERS) - len(refused),
            "total_count": len(ANSWERS),
        }
        lines = [header] + [{"id": f"{prefix}_{n}", "valid": False, "error": ["..."], "error_type": kind} for n, kind in refused]
        (scores / f"BFCL_v4_{prefix}_score.json").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return folder


@pytest.mark.parametrize("score", [True, False], ids=["with-score-file", "verdicts-recomputed"])
def test_each_error_type_becomes_a_case_and_accepted_calls_are_counted(wheel: Path, tmp_path: Path, score: bool) -> None:
    failures, counts = natural_failures(_run(tmp_path / "run", score=score))
    by_id = {f.entry_id: f for f in failures}
    assert sorted(by_id) == ["simple_python_0", "simple_python_1", "simple_python_2", "simple_python_3"]
    assert by_id["simple_python_0"].family == "wrong_type" and by_id["simple_python_0"].codes == ("wrong_type",)
    assert by_id["simple_python_1"].family == "missing_required" and by_id["simple_python_1"].codes == ("missing_required",)
    assert by_id["simple_python_2"].family == "constraint_violation" and by_id["simple_python_2"].codes == ("enum_mismatch",)
    renamed = by_id["simple_python_3"]  # `from` for `_from`: an unknown key and a missing one
    assert renamed.family == "multi_field" and set(renamed.codes) == {"additional_property", "missing_required"}
    assert renamed.target == {"_from": "ZRH", "to": "C3", "seats": 5}
    # the verifier accepts 4 (right) and 5 (a wrong value it cannot see); 6 and 7 are not literal calls
    assert counts.skipped == {ACCEPTED: 2, "answer not decodable as calls": 2}
    assert counts.to_dict() == {"answers": 8, "bfcl_failed": 7, "verifier_visible": 4, "visible_share": 4 / 7}
    if score:
        assert by_id["simple_python_0"].bfcl_error == "type_error:simple"


def test_cases_are_scored_by_bfcl_acceptance(wheel: Path, tmp_path: Path) -> None:
    spec = f"bfcl-results:{_run(tmp_path / 'run')}"
    families = source_families(spec)
    assert families == ("missing_required", "wrong_type", "constraint_violation", "multi_field")
    cases = generate_cases(GenerateConfig(seed=5, n=4, source=spec, families=families))
    assert generate_cases(GenerateConfig(seed=5, n=4, source=spec, families=families)) == cases  # same seed, same cases
    assert {c.offline.corruption["bfcl_id"] for c in cases} == {f"simple_python_{n}" for n in range(4)}
    for case in cases:
        assert_nothing_offline_in_public(case)
        public, offline = case.public, case.offline
        assert offline.corruption["natural"] is True and public.tool_family == "bfcl"
        verifier = Verifier.build(public.schema)
        assert verifier.verify(public.candidate).to_dict() == public.report
        contract = RepairContract(verifier, Budgets(max_attempts=public.max_attempts, max_ops=public.max_ops))
        step = contract.step(contract.initial_state(public.candidate), json.dumps(offline.target_patch))
        assert step.accepted_object == offline.target
        assert semantic_outcome(public, offline, step.accepted_object, False).success
        assert not semantic_outcome(public, offline, public.candidate, False).success  # the model's own call
    renamed = next(c for c in cases if c.public.family == "multi_field")
    assert renamed.offline.target_patch == [{"op": "add", "path": "/_from", "value": "ZRH"}, {"op": "remove", "path": "/from"}]
    wrong = next(c for c in cases if c.public.family == "wrong_type")
    public, offline = wrong.public, wrong.offline
    # BFCL's acceptance, not object equality: its strings compare loosely, an omittable argument may be given
    assert semantic_outcome(public, offline, {"_from": "zrh", "to": "C0", "seats": 2, "cabin": "economy"}, False).success
    assert not semantic_outcome(public, offline, {"_from": "ZRH", "to": "C0", "seats": 3}, False).success
    report = source_calls(spec)
    assert report is not None and report["used"] == 4 and report["skipped"][ACCEPTED] == 2
    assert report["bfcl"]["verifier_visible"] == 4 and report["bfcl"]["bfcl_failed"] == 7
    with pytest.raises(ConfigError, match=r"has 4 natural failures .*; 5 cases were asked for"):
        generate_cases(GenerateConfig(seed=5, n=5, source=spec, families=families))


def test_answers_are_decoded_without_evaluating_anything() -> None:
    assert decode_calls("```\n[a.b(x=1, y=-2.5, z=[True, None], w={'k': 'v'}), c(n=name)]\n```") == [
        ("a.b", {"x": 1, "y": -2.5, "z": [True, None], "w": {"k": "v"}}),
        ("c", {"n": "name"}),
    ]
    assert decode_calls([{"f": '{"x": 1}'}, {"g": {"y": 2}}]) == [("f", {"x": 1}), ("g", {"y": 2})]
    for bad in (
        "[f(x=__import__('os').system('false'))]",
        "[f(x=2**100000)]",
        "[f(1)]",
        "hello there",
        "[f(**k)]",
        [{"f": "{bad"}],
        3,
    ):
        with pytest.raises(ValueError):
            decode_calls(bad)


def test_malformed_or_missing_files_get_a_one_line_error(wheel: Path, tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="BFCL results directory not found"):
        natural_failures(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputFileError, match=r"no BFCL result files \(BFCL_v4_<category>_result.json\)"):
        natural_failures(tmp_path / "empty")
    run = _run(tmp_path / "run")
    result = run / "result" / "model" / "non_live" / "BFCL_v4_simple_python_result.json"
    score = run / "score" / "model" / "non_live" / "BFCL_v4_simple_python_score.json"
    good_score = score.read_text()
    score.write_text('{"id": "simple_python_0", "valid": false}\n')
    with pytest.raises(InputFileError, match=re.escape(f"{score}:1: a BFCL score file starts with accuracy")):
        natural_failures(run)
    score.write_text(good_score + '{"id": "simple_python_99", "valid": false, "error_type": "x"}\n')
    with pytest.raises(InputFileError, match=r"scores ids its result file .* lacks: not the same run"):
        natural_failures(run)
    score.write_text(good_score)
    result.write_text(result.read_text() + '{"result": "[f()]"}\n')
    with pytest.raises(InputFileError, match=re.escape(f"{result}:9: a BFCL result line needs a string 'id'")):
        natural_failures(run)
    result.write_text("[not json\n")
    with pytest.raises(InputFileError, match=re.escape(f"{result}:1: not a JSON object")):
        natural_failures(run)
    result.unlink()
    result.mkdir()  # a directory with a result file's name is not a file
    with pytest.raises(InputFileError, match="is a directory"):
        natural_failures(run)
    with pytest.raises(ConfigError, match="unknown case source"):
        check_source("bfcl-results:")
    with pytest.raises(ConfigError, match="request_style applies to builtin"):
        check_source(f"bfcl-results:{run}", "paraphrase")


def test_live_results_never_enter_a_training_split(wheel: Path, tmp_path: Path) -> None:
    """A run holding live and non-live results: ``bfcl-results:`` reads the non-live ones only and
    counts the live ones as held out; ``bfcl-results-live:`` reads the live ones and is refused for
    training; a training run's train and eval splits hold no live case."""
    from contractrl.configtree import from_dict
    from contractrl.trainer.config import TrainConfig
    from contractrl.trainer.entry import prepare_cases

    run = _run(_run(tmp_path / "run"), prefix="live_simple", group="live")
    source = NaturalSource(run)
    assert {f.category for f in source.failures} == {"simple"}
    assert source.skipped["held out: live category (read with bfcl-results-live:DIR)"] == len(ANSWERS)
    live = NaturalSource(run, live=True)
    assert {f.category for f in live.failures} == {"live_simple"} and len(live.failures) == 4
    with pytest.raises(ConfigError, match=f"data.source: bfcl-results-live:{re.escape(str(run))} is held out"):
        from_dict(TrainConfig, {"data": {"source": f"bfcl-results-live:{run}"}})
    config = from_dict(TrainConfig, {"data": {"source": f"bfcl-results:{run}", "train_cases": 2, "eval_cases": 2}})
    train, held_out = prepare_cases(config.data, tmp_path / "out")
    assert len(train) == 2 and len(held_out) == 2
    ids = [c.offline.corruption["bfcl_id"] for c in train + held_out]
    assert len(set(ids)) == 4 and not any(i.startswith("live_") for i in ids)


def test_a_harvest_writes_bfcl_result_files_the_source_reads_back(wheel: Path, tmp_path: Path) -> None:
    """The tiny preset answers two questions zero-shot (nonsense: it is untrained): the file is in
    BFCL's layout and format, the same model writes the same bytes, and the source reads it back."""
    from contractrl.experiments.bfcl_harvest import HarvestConfig, harvest, messages
    from contractrl.trainer.presets import build_tiny

    model = build_tiny(tmp_path / "tiny-model", corpus=["hello world [f(a=1)]", '{"x": 2}', "ABSTAIN"] * 20)
    config = HarvestConfig(
        model=str(model), categories=("simple",), limit=2, max_new_tokens=6, batch_size=2, out=str(tmp_path / "h")
    )
    written = harvest(config)
    path = tmp_path / "h" / "result" / "tiny-model" / "non_live" / "BFCL_v4_simple_python_result.json"
    assert written["files"] == {"simple": {"path": str(path), "answers": 2}}
    assert written["source"] == f"bfcl-results:{tmp_path / 'h'}"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["simple_python_0", "simple_python_1"]
    for row in rows:
        assert set(row) == {"id", "result", "input_token_count", "output_token_count"} and isinstance(row["result"], str)
        assert 0 < row["output_token_count"] <= 6 and row["input_token_count"] > 100  # the functions are in the prompt
    first = path.read_bytes()
    harvest(config)
    assert path.read_bytes() == first  # greedy: the same model writes the same answers
    failures, counts = natural_failures(tmp_path / "h")
    assert counts.answers == 2 and counts.bfcl_failed == 2 and len(failures) + sum(counts.skipped.values()) >= 2
    prompt = messages(_bfcl_entry())
    assert prompt[0]["role"] == "system" and '"name": "book_flight"' in prompt[0]["content"] and prompt[1]["role"] == "user"
    with pytest.raises(ConfigError, match="cannot harvest categories"):
        HarvestConfig(categories=("simple_java",))


def _bfcl_entry() -> Any:
    from contractrl.tasks.bfcl import BfclEntry, BfclFunction

    question, _ = _data("simple_python", 0)
    return BfclEntry(question["id"], tuple(question["question"]), (BfclFunction(**FUNCTION),))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
def test_a_fifo_result_file_is_refused_without_blocking(wheel: Path, tmp_path: Path) -> None:
    from .test_hostile_files import _outcome, _typed_one_line

    folder = tmp_path / "run" / "result" / "model" / "non_live"
    folder.mkdir(parents=True)
    fifo = folder / "BFCL_v4_simple_python_result.json"
    os.mkfifo(fifo)
    _typed_one_line(_outcome(lambda: natural_failures(tmp_path / "run"), unblock=fifo), str(fifo), "FIFO")
