"""Case sources: BFCL data and JSON Schema corpora as repair cases (deterministic, leak-free,
splittable, and scored by the source's own oracle: BFCL acceptance, or the corpus's valid instance)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import jsonpatch
import pytest

from contractrl.cli import main
from contractrl.errors import ConfigError, InputFileError
from contractrl.evidence.judge import Judge
from contractrl.rollout.policies import ReplayPolicy
from contractrl.rollout.run import write_run
from contractrl.rollout.runner import EpisodeRunner, LocalPool
from contractrl.tasks.audit import audit
from contractrl.tasks.bfcl import bfcl_accepts
from contractrl.tasks.cases import ABSTAIN, Case
from contractrl.tasks.contrast import contrast_case
from contractrl.tasks.demonstrations import gold_answer
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.tasks.offline import read_cases, semantic_outcome
from contractrl.tasks.sources import IMPORTED_FAMILIES, BfclSource, JsonSchemaSource, redact, source_families
from contractrl.validators import Verifier

from .conftest import FIXTURES, assert_nothing_offline_in_public, shared_path

pytestmark = pytest.mark.shared_data


SOURCES = ("bfcl", "jsonschema")


def _source(kind: str = "bfcl") -> str:
    if kind == "bfcl":
        return f"bfcl:{shared_path('bfcl')}"
    return f"jsonschema:{shared_path('jsonschemabench', 'maskbench')}"


@cache
def _cases(kind: str = "bfcl", seed: int = 3, n: int = 220) -> tuple[Case, ...]:
    source = _source(kind)
    return tuple(generate_cases(GenerateConfig(seed=seed, n=n, families=source_families(source), source=source)))


@pytest.mark.parametrize("kind", SOURCES)
def test_generation_is_deterministic_and_records_its_source(tmp_path: Path, kind: str) -> None:
    source = _source(kind)
    for name in ("one", "two"):
        args = ["cases", "generate", "--seed", "5", "--n", "33", "--source", source, "--out", str(tmp_path / name)]
        assert main(args) == 0
    for name in ("public.parquet", "offline.parquet", "manifest.json"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name
    manifest = json.loads((tmp_path / "one" / "manifest.json").read_text())
    assert manifest["config"]["source"] == source
    assert set(manifest["counts"]) == set(source_families(source))


@pytest.mark.parametrize("kind", SOURCES)
def test_every_family_the_data_can_host_is_built(kind: str) -> None:
    hosted = source_families(_source(kind))
    # both corpora have flat, nested and array arguments, so every imported family is hosted
    assert hosted == IMPORTED_FAMILIES
    assert {c.public.family for c in _cases(kind)} == set(hosted)
    assert {c.public.tool_family for c in _cases(kind)} == {kind}


def test_corpus_sources_skip_what_they_cannot_use_and_say_so() -> None:
    source = JsonSchemaSource(shared_path("jsonschemabench", "maskbench"))
    assert len(source.calls) > 1000
    assert set(source.skipped) <= {"schema does not compile strictly", "not an object call", "target refused by its schema"}
    # exactly the valid instances of the schemas strict mode refuses (tests/fixtures/maskbench_conformance.json)
    refused = json.loads((FIXTURES / "maskbench_conformance.json").read_text())["strict_compile_refusals"]
    instances = 0
    for subset, files in refused.items():
        for name in files:
            doc = json.loads(shared_path("jsonschemabench", "maskbench", subset, name).read_text())
            instances += sum(1 for t in doc["tests"] if t["valid"] is True)
    assert source.skipped["schema does not compile strictly"] == instances


@pytest.mark.parametrize("kind", SOURCES)
def test_gold_patches_repair_to_the_target_the_oracle_accepts(kind: str) -> None:
    for case in _cases(kind):
        pub, off = case.public, case.offline
        verifier = Verifier.build(pub.schema)
        assert not verifier.verify(pub.candidate).accepted, pub.case_id
        if off.should_abstain:
            assert pub.family == "unrepairable"
            continue
        repaired = jsonpatch.apply_patch(pub.candidate, off.target_patch)  # the reference RFC 6902 implementation
        assert verifier.verify(repaired).accepted, pub.case_id
        assert repaired == off.target
        if kind == "bfcl":  # and BFCL's own checker takes it
            accepted, why = bfcl_accepts(repaired, off.expected["bfcl_possible"], pub.schema)
            assert accepted, (pub.case_id, why)


@pytest.mark.parametrize("kind", SOURCES)
def test_oracle_replay_through_the_real_episode_loop_scores_every_case(tmp_path: Path, kind: str) -> None:
    cases = _cases(kind)
    replay = ReplayPolicy({c.public.case_id: [gold_answer(c, "contractrl")] for c in cases})
    runner = EpisodeRunner(replay, LocalPool(1), arm="contractrl")
    run_dir = tmp_path / "replay"
    write_run(run_dir, {"policy": "replay"}, runner, [c.public for c in cases], group=1, seed=0)
    verdicts = Judge(cases).score_run(run_dir)
    assert len(verdicts) == len(cases)
    failed = [(row["case_family"], v.reason) for row, v in verdicts if not v.success]
    assert not failed


def test_a_wrong_value_fails_bfcl_acceptance() -> None:
    """The oracle is BFCL's rule, not schema validity: a valid call with another value fails."""
    judge = Judge(_cases())
    case = next(c for c in _cases() if c.public.family == "missing_required" and isinstance(c.offline.target_patch, list))
    op = case.offline.target_patch[0]
    value = op["value"]
    wrong = value + 1 if isinstance(value, int) and not isinstance(value, bool) else "zzz-not-this-value"
    call = {**case.public.candidate, op["path"].lstrip("/"): wrong}
    if Verifier.build(case.public.schema).verify(call).accepted:
        row = {"case_id": case.public.case_id, "episode_id": "e", "accepted": True, "dispatched": call, "abstained": False}
        assert not judge.verdict(row).success


@pytest.mark.parametrize("kind", SOURCES)
def test_no_offline_value_leaks_into_the_public_half(kind: str) -> None:
    for case in _cases(kind, seed=11, n=440):
        assert_nothing_offline_in_public(case, ignore_case=kind == "bfcl")


@pytest.mark.parametrize("kind", SOURCES)
def test_split_is_disjoint_by_audit(tmp_path: Path, kind: str) -> None:
    source = _source(kind)
    train, held = tmp_path / "train", tmp_path / "held"
    assert main(["cases", "generate", "--seed", "1", "--n", "66", "--source", source, "--out", str(train)]) == 0
    args = ["cases", "generate", "--seed", "2", "--n", "33", "--source", source, "--exclude", str(train), "--out", str(held)]
    assert main(args) == 0
    rows = audit(read_cases(train), read_cases(held))
    assert all(r.ok for r in rows)


def test_repairable_requests_are_the_users_own_question() -> None:
    for case in _cases():
        if case.public.family != "unrepairable":
            assert "[not given]" not in case.public.request
        assert case.public.request.strip(), case.public.case_id


def test_an_unrepairable_bfcl_case_is_its_question_with_the_value_taken_out_and_its_twin_the_question() -> None:
    """A withheld value no spelling of which was found in the question ("New York" for
    America/New_York) may still be stated in the person's words, so that call is not an
    unrepairable case; every one that is has a minimal contrast, the question as written, which
    the redaction turns back into the case's request and whose repair BFCL accepts."""
    cases = _cases(n=440)
    unrepairable = [c for c in cases if c.public.family == "unrepairable"]
    assert len(unrepairable) >= 20
    for case in unrepairable:
        stated = case.offline.corruption["stated"]
        key, value = case.offline.corruption["withheld"], case.offline.corruption["withheld_value"]
        assert "[not given]" in case.public.request and "[not given]" not in stated["request"]
        assert redact(stated["request"], value) == case.public.request
        twin = contrast_case(case)
        assert twin is not None and twin.public.request == stated["request"]
        assert twin.public.family == "missing_required" and twin.public.report == case.public.report
        assert twin.offline.target == {**case.public.candidate, key: value}
        assert twin.offline.expected == stated["expected"] and stated["expected"]["abstain"] is False
        assert semantic_outcome(twin.public, twin.offline, twin.offline.target, abstained=False).success
        assert not semantic_outcome(twin.public, twin.offline, None, abstained=True).success
    assert all("stated" not in c.offline.corruption for c in cases if c.public.family != "unrepairable")
    assert all(contrast_case(c) is None for c in _cases("jsonschema"))


def _write_parallel_entry(folder: Path) -> None:
    """A BFCL entry with two calls (the parallel categories' shape)."""
    (folder / "possible_answer").mkdir(parents=True)
    function = {
        "name": "get_weather",
        "description": "Weather for a city.",
        "parameters": {
            "type": "dict",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}},
            "required": ["city", "unit"],
        },
    }
    question = {"id": "parallel_0", "question": [[{"role": "user", "content": "Weather in Oslo and in Lima, in C."}]]}
    answer = {
        "id": "parallel_0",
        "ground_truth": [{"get_weather": {"city": ["Oslo"], "unit": ["C"]}}, {"get_weather": {"city": ["Lima"], "unit": ["C"]}}],
    }
    (folder / "BFCL_v4_parallel.json").write_text(json.dumps({**question, "function": [function]}) + "\n")
    (folder / "possible_answer" / "BFCL_v4_parallel.json").write_text(json.dumps(answer) + "\n")


def test_an_entry_with_several_calls_gives_one_case_per_call(tmp_path: Path) -> None:
    _write_parallel_entry(tmp_path)
    source = BfclSource(tmp_path)
    assert [c.args for c in source.calls] == [{"city": "Oslo", "unit": "C"}, {"city": "Lima", "unit": "C"}]
    assert [c.question.splitlines()[-1] for c in source.calls] == [
        "(Repair call 1 of 2: get_weather.)",
        "(Repair call 2 of 2: get_weather.)",
    ]
    cases = generate_cases(GenerateConfig(seed=0, n=8, families=("missing_required",), source=f"bfcl:{tmp_path}"))
    for case in cases:
        assert jsonpatch.apply_patch(case.public.candidate, case.offline.target_patch) == case.offline.target
        city = case.offline.target["city"]
        assert f"call {1 if city == 'Oslo' else 2} of 2" in case.public.request


def test_families_a_source_cannot_host_are_refused_up_front() -> None:
    with pytest.raises(ConfigError, match="cannot host families \\['immutable_field', 'stale_schema'\\]"):
        GenerateConfig(seed=0, n=4, families=("stale_schema", "immutable_field"), source=_source())
    with pytest.raises(ConfigError, match="unknown case source"):
        GenerateConfig(seed=0, n=4, source="openapi:x")


def test_a_missing_or_wrong_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="possible_answer"):
        BfclSource(tmp_path)
    with pytest.raises(InputFileError, match="no JSON Schema corpus files"):
        JsonSchemaSource(tmp_path)
    (tmp_path / "bad.json").write_text('{"schema": {}}')
    with pytest.raises(InputFileError, match="needs 'schema' and a 'tests' list"):
        JsonSchemaSource(tmp_path)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InputFileError):
        JsonSchemaSource(tmp_path)


def test_redaction_removes_every_spelling_of_a_value() -> None:
    assert redact("Book it in New York, new york or NEW YORK", "New York") == "Book it in [not given], [not given] or [not given]"
    assert redact("a budget of 300000 or 300,000", 300000) == "a budget of [not given] or [not given]"
    assert ABSTAIN not in redact("no value here", "x" * 8)
