"""Case generation: every family flags the intended code, gold patches repair exactly, the oracle
accepts targets and rejects near misses, files are reproducible, and nothing offline leaks."""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contractrl.cli import main
from contractrl.errors import ConfigError
from contractrl.rollout.policies import argument_labels, request_values
from contractrl.tasks.audit import OverlapIndex, audit, fingerprints
from contractrl.tasks.cases import Case, PublicCase, cluster_key
from contractrl.tasks.catalog import TOOL_FAMILIES, all_tools, get_tool, make_sandbox
from contractrl.tasks.contrast import CONTRAST_FORMS, CONTRAST_SUFFIX, contrast_case, contrast_cases
from contractrl.tasks.corruptions import ABSTAIN_FAMILIES, CORRUPTION_FAMILIES
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.tasks.offline import read_cases, semantic_outcome
from contractrl.tasks.requests import add_clause, paraphrase_value, parse_request, read_value, render_request
from contractrl.validators import Budgets, Code, RepairContract, Verifier, load_contract
from contractrl.validators.jsonvalue import canonical_json

from .conftest import assert_nothing_offline_in_public


@cache
def _cases(seed: int = 11, n: int = 390) -> tuple[Case, ...]:
    return tuple(generate_cases(GenerateConfig(seed=seed, n=n)))


def _env(case: Case) -> RepairContract:
    pub = case.public
    verifier = Verifier.build(pub.schema, load_contract(pub.contract))
    return RepairContract(verifier, Budgets(max_attempts=pub.max_attempts, max_ops=pub.max_ops), pub.immutable)


def test_catalog_uses_the_schema_features_the_paper_needs() -> None:
    text = canonical_json([t.schema for t in all_tools()])
    for feature in ('"oneOf"', '"const"', '"enum"', '"pattern"', '"format"', '"maxLength"', '"minimum"', '"items"'):
        assert feature in text, feature
    kinds = {rule["kind"] for t in all_tools() for rule in t.contract["rules"]}
    assert {"compare", "unique"} <= kinds


def test_every_family_is_generated_in_equal_share() -> None:
    counts = Counter(c.public.family for c in _cases())
    assert counts == {family: 30 for family in CORRUPTION_FAMILIES}
    assert {c.public.tool_family for c in _cases()} == set(TOOL_FAMILIES)


def test_every_case_is_flagged_with_the_intended_code_and_pointer() -> None:
    for case in _cases():
        pub = case.public
        report = _env(case).initial_state(pub.candidate).report
        assert not report.accepted, pub.case_id
        found = {(e.code.value, e.pointer) for e in report.errors}
        for code, pointer in case.offline.corruption["expect"]:
            assert (code, pointer) in found, (pub.family, pub.tool, code, pointer, found)


def test_public_report_is_true_except_for_feedback_families() -> None:
    for case in _cases():
        pub = case.public
        true_report = _env(case).initial_state(pub.candidate).report.to_dict()
        if pub.family in ("ambiguous_pointer", "wrong_pointer", "malformed_feedback"):
            assert pub.report != true_report
            assert case.offline.corruption["true_report"] == true_report
        else:
            assert pub.report == true_report, pub.family


def test_gold_patches_repair_to_exactly_the_target_and_pass_the_oracle() -> None:
    for case in _cases():
        pub, off = case.public, case.offline
        env = _env(case)
        state = env.initial_state(pub.candidate)
        if off.should_abstain:
            assert pub.family in ABSTAIN_FAMILIES
            result = env.step(state, "ABSTAIN")
            assert semantic_outcome(pub, off, None, abstained=True).success
            assert not semantic_outcome(pub, off, pub.candidate, abstained=False).success
            continue
        result = env.step(state, json.dumps(off.target_patch))
        assert result.outcome is Code.ACCEPTED, (pub.family, pub.tool, result.record.message)
        assert canonical_json(result.accepted_object) == canonical_json(off.target)
        assert result.state.attempts_used == 1
        assert semantic_outcome(pub, off, result.accepted_object, abstained=False).success
        assert not semantic_outcome(pub, off, None, abstained=True).success


def _inserted(original: str, longer: str) -> str:
    """The one contiguous piece ``longer`` adds to ``original`` (asserted to be all it adds)."""
    start = next((i for i, (a, b) in enumerate(zip(original, longer, strict=False)) if a != b), len(original))
    end = len(longer) - (len(original) - start)
    assert longer[:start] + longer[end:] == original, (original, longer)
    return longer[start:end]


@pytest.mark.parametrize("form", CONTRAST_FORMS)
def test_the_contrast_of_an_unrepairable_case_differs_from_it_in_the_request_alone(form: str) -> None:
    """Same call, report, schema, budgets and sandbox world; the request states the withheld value;
    the gold patch repairs to the original call and the oracle accepts it, where abstaining, the
    right answer of the unrepairable case, now fails. No other family has a contrast."""
    cases = _cases()
    unrepairable = [c for c in cases if c.public.family == "unrepairable"]
    twins = contrast_cases(cases, form)
    assert len(twins) == len(unrepairable) == 30
    kept = {f.name for f in dataclasses.fields(PublicCase)} - {"case_id", "family", "request"}
    for case, twin in zip(unrepairable, twins, strict=True):
        pub, off = twin.public, twin.offline
        key, value = case.offline.corruption["withheld"], case.offline.corruption["withheld_value"]
        assert pub.case_id == off.case_id == case.public.case_id + CONTRAST_SUFFIX
        assert pub.family == off.corruption["family"] == "missing_required"
        assert off.corruption["contrast_of"] == case.public.case_id
        assert {name: getattr(pub, name) for name in kept} == {name: getattr(case.public, name) for name in kept}
        stated = _inserted(case.public.request, pub.request)
        assert canonical_json(value) in stated
        if form == "appended":
            assert pub.request.startswith(case.public.request)
        assert request_values(pub.request, argument_labels(pub))[key] == value  # where the heuristic reads it
        env = _env(twin)
        result = env.step(env.initial_state(pub.candidate), json.dumps(off.target_patch))
        assert result.outcome is Code.ACCEPTED and result.state.attempts_used == 1
        repaired = canonical_json({**case.public.candidate, key: value})
        assert canonical_json(result.accepted_object) == canonical_json(off.target) == repaired
        assert semantic_outcome(pub, off, result.accepted_object, abstained=False).success
        assert not semantic_outcome(pub, off, None, abstained=True).success
        assert semantic_outcome(case.public, case.offline, None, abstained=True).success
        # keyed as case generation keys a case of its tool that ends where it ends
        assert off.cluster == cluster_key(pub.tool, off.target, pub.candidate) != case.offline.cluster
    assert all(contrast_case(c, form) is None for c in cases if c.public.family != "unrepairable")
    # an imported tool's request is a person's words: no catalog clause to append, no sandbox; its
    # contrast is the request as the person wrote it, kept by the source (tests/test_sources.py)
    imported = dataclasses.replace(unrepairable[0], public=dataclasses.replace(unrepairable[0].public, tool="bfcl_lookup"))
    assert contrast_case(imported, form) is None
    with pytest.raises(ConfigError, match="unknown contrast form 'inline'"):
        contrast_case(unrepairable[0], "inline")


@pytest.mark.parametrize("style", ["verbatim", "paraphrase"])
def test_a_clause_contrast_reads_like_any_request_the_renderer_writes(style: str) -> None:
    """The stated value is one more clause in the renderer's own forms and joiner: the contrast's
    request parses as a request for the repaired call, with the unrepairable request's clauses in
    their order and one clause more, at a place seeded by the case id that is not always the last
    (an appended value was a cue a policy learned in place of the value)."""
    cases = generate_cases(GenerateConfig(seed=12, n=390, request_style=style))
    unrepairable = [c for c in cases if c.public.family == "unrepairable"]
    places: Counter[str] = Counter()
    for case in unrepairable:
        twin = contrast_case(case, "clause")
        assert twin is not None and twin == contrast_case(case, "clause")  # seeded by the case id alone
        spec = get_tool(case.public.tool)
        key, value = case.offline.corruption["withheld"], case.offline.corruption["withheld_value"]
        before = parse_request(case.public.request, spec, case.public.candidate, style=style)
        after = parse_request(twin.public.request, spec, {**case.public.candidate, key: value}, style=style)
        assert before is not None and after is not None, (case.public.request, twin.public.request)
        assert (after.intro, after.lead, after.joiner, after.tail) == (before.intro, before.lead, before.joiner, before.tail)
        added = [c for c in after.clauses if c not in before.clauses]
        assert len(added) == 1 and [c for c in after.clauses if c != added[0]] == list(before.clauses)
        assert spec.label(key) in added[0] and _inserted(case.public.request, twin.public.request)
        at = after.clauses.index(added[0])
        places["first" if at == 0 else "last" if at == len(before.clauses) else "between"] += 1
        full = {**case.public.candidate, key: value}
        for index, place in ((0, 0), (-1, len(before.clauses))):
            moved = contrast_case(case, "clause", index=index)
            assert moved is not None
            parts = parse_request(moved.public.request, spec, full, style=style)
            assert parts is not None and spec.label(key) in parts.clauses[place]
        with pytest.raises(ValueError, match="outside the request"):
            contrast_case(case, "clause", index=len(before.clauses) + 1)
    assert len(unrepairable) == 30 and set(places) == {"first", "last", "between"}, places
    # a request edited on disk is no longer one the renderer wrote: no minimal contrast to build
    edited = dataclasses.replace(unrepairable[0].public, request=unrepairable[0].public.request + " Thanks!")
    assert contrast_case(dataclasses.replace(unrepairable[0], public=edited), "clause") is None


# separators, the lead, clause words and labels: what could split or shift a clause if a parser trusted them
_HOSTILE_TEXT = st.lists(
    st.sampled_from([*'ab ;.-=:\n"', "; ", ". ", "\n- ", "the table", "use ", " as the ", " should be "]), max_size=6
).map("".join)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**31 - 1), style=st.sampled_from(["verbatim", "paraphrase"]))
def test_add_clause_is_one_insertion_whatever_the_values_hold(data: st.DataObject, seed: int, style: str) -> None:
    """Values holding the joiners, the lead, labels and clause words cannot split or shift a
    clause: the request with a clause added is the request as written plus that clause, and it
    parses back as a request for every argument."""
    spec = data.draw(st.sampled_from(all_tools()))
    args = spec.sample(random.Random(seed), make_sandbox(spec.family, seed))
    args = {k: data.draw(_HOSTILE_TEXT) if isinstance(v, str) else v for k, v in args.items()}
    key = data.draw(st.sampled_from(sorted(args)))
    rng = random.Random(seed)
    request = render_request(spec, args, rng, omit=(key,), style=style)
    stated = {k: v for k, v in args.items() if k != key}
    longer = add_clause(request, spec, stated, key, args[key], rng, style=style)
    assert longer is not None, request
    _inserted(request, longer)
    parts = parse_request(longer, spec, args, style=style)
    assert parts is not None and len(parts.clauses) == len(args)


def test_oracle_rejects_near_misses() -> None:
    """One wrong value, or an extra side effect, is a semantic failure even if the schema passes."""
    checked = 0
    for case in _cases():
        pub, off = case.public, case.offline
        if off.should_abstain or off.expected.get("ok") is not True:
            continue
        target = off.target
        verifier = Verifier.build(pub.schema, load_contract(pub.contract))
        for key, value in target.items():
            if isinstance(value, bool) and f"/{key}" not in pub.immutable:
                near = {**target, key: not value}
                if verifier.verify(near).accepted:
                    outcome = semantic_outcome(pub, off, near, abstained=False)
                    observed = make_sandbox(pub.tool_family, pub.world_seed).execute(pub.tool, near)
                    if observed.to_dict() != {k: off.expected[k] for k in ("ok", "result", "effects", "error")}:
                        assert not outcome.success
                        checked += 1
                break
    assert checked >= 10


def test_same_seed_gives_identical_cases_and_files(tmp_path: Path) -> None:
    a = [c.public.to_row() for c in generate_cases(GenerateConfig(seed=5, n=60))]
    b = [c.public.to_row() for c in generate_cases(GenerateConfig(seed=5, n=60))]
    assert a == b
    c = [c.public.to_row() for c in generate_cases(GenerateConfig(seed=6, n=60))]
    assert a != c
    for out in ("one", "two"):
        assert main(["cases", "generate", "--seed", "5", "--n", "40", "--out", str(tmp_path / out)]) == 0
    for name in ("public.parquet", "offline.parquet", "manifest.json"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name
    manifest = json.loads((tmp_path / "one" / "manifest.json").read_text())
    assert manifest["seed"] == 5 and sum(manifest["counts"].values()) == 40


def test_case_index_does_not_depend_on_other_cases() -> None:
    """Case i is a function of (seed, i): generating a prefix gives the same first cases."""
    short = generate_cases(GenerateConfig(seed=9, n=13))
    long = generate_cases(GenerateConfig(seed=9, n=26))
    assert [c.public.case_id for c in short] == [c.public.case_id for c in long[:13]]


def test_no_offline_value_leaks_into_the_public_half() -> None:
    for case in generate_cases(GenerateConfig(seed=23, n=2600)):
        assert_nothing_offline_in_public(case)
    for case in _paraphrased():
        assert_nothing_offline_in_public(case)


def test_requests_carry_every_argument_value_of_repairable_cases() -> None:
    for case in _cases():
        if case.offline.target is None:
            continue
        for value in case.offline.target.values():
            assert canonical_json(value) in case.public.request


def test_split_generation_refuses_overlap_and_audit_reports_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train, held = tmp_path / "train", tmp_path / "held"
    assert main(["cases", "generate", "--seed", "1", "--n", "60", "--out", str(train)]) == 0
    assert main(["cases", "generate", "--seed", "2", "--n", "60", "--exclude", str(train), "--out", str(held)]) == 0
    capsys.readouterr()
    assert main(["cases", "audit", str(train), str(held), "--json"]) == 0
    rows = {r["unit"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["case_id"]["overlap"] == 0 and rows["tool_name"]["overlap"] > 0
    # the same set against itself overlaps everywhere: exit 1
    assert main(["cases", "audit", str(train), str(train)]) == 1
    assert "OVERLAP" in capsys.readouterr().out
    # --exclude once per set: the new split is disjoint from each
    other, both = tmp_path / "other", tmp_path / "both"
    assert main(["cases", "generate", "--seed", "5", "--n", "60", "--out", str(other)]) == 0
    args = ["cases", "generate", "--seed", "2", "--n", "60", "--exclude", str(train), "--exclude", str(other)]
    assert main([*args, "--out", str(both)]) == 0
    for excluded in (train, other):
        assert all(row.ok for row in audit(read_cases(excluded), read_cases(both)))
    assert json.loads((both / "manifest.json").read_text())["split"]["disjoint_from"] == [str(train), str(other)]
    assert json.loads((held / "manifest.json").read_text())["split"]["disjoint_from"] == str(train)
    assert main(["cases", "audit", str(other), str(held)]) == 1  # one exclude pins nothing else


def test_abstain_cases_have_no_target_to_overlap_so_a_held_out_split_keeps_their_tools() -> None:
    """An ABSTAIN case has no target object and no operation sequence: its absence is not a
    fingerprint (``[tool, None]`` made every ABSTAIN case of a tool collide with all others, and the
    held-out ABSTAIN families shrank to the two tools training happened to miss)."""
    abstaining = ("unrepairable", "immutable_field")
    train = generate_cases(GenerateConfig(seed=1, n=80, families=abstaining))
    assert len({c.public.tool for c in train}) >= 20
    for case in train:
        prints = fingerprints(case)
        assert prints["target_fingerprint"] == frozenset() and prints["operation_sequence"] == frozenset()
        assert prints["candidate_fingerprint"] and prints["semantic_cluster"]
    held = generate_cases(GenerateConfig(seed=2, n=40, families=abstaining), reject=OverlapIndex(train).collides)
    assert len({c.public.tool for c in held}) >= 10
    assert all(row.ok for row in audit(train, held))
    # a case is still refused where it can leak: the same call under another id, or (repairable)
    # the same target
    renamed = dataclasses.replace(train[0], public=dataclasses.replace(train[0].public, case_id="another-id"))
    assert OverlapIndex(train[:1], ("candidate_fingerprint",)).collides(renamed)
    repairable = generate_cases(GenerateConfig(seed=3, n=26))
    answered = [c for c in repairable if not c.offline.should_abstain]
    index = OverlapIndex(answered[:1], ("target_fingerprint",))
    assert index.collides(answered[0]) and not any(index.collides(c) for c in train)


def test_a_family_used_up_by_the_excluded_split_says_so() -> None:
    config = GenerateConfig(seed=1, n=1, families=("stale_schema",))
    with pytest.raises(ConfigError, match=r"refused as overlapping the excluded case set.*--families"):
        generate_cases(config, reject=lambda case: True)


def test_transfer_split_by_tool_family_is_disjoint_on_tools_and_schemas() -> None:
    train = generate_cases(GenerateConfig(seed=3, n=52, tool_families=("file", "calendar", "database", "http")))
    held = generate_cases(GenerateConfig(seed=4, n=26, tool_families=("code",)))
    rows = {r.unit: r for r in audit(train, held, ("tool_name", "schema_hash", "schema_shape", "case_id"))}
    assert all(rows[u].ok for u in ("tool_name", "schema_hash", "case_id"))
    index = OverlapIndex(train, ("tool_name",))
    assert not any(index.collides(c) for c in held)


def test_read_back_round_trips(tmp_path: Path) -> None:
    assert main(["cases", "generate", "--seed", "8", "--n", "26", "--out", str(tmp_path)]) == 0
    back = read_cases(tmp_path)
    fresh = generate_cases(GenerateConfig(seed=8, n=26))
    assert [c.public for c in back] == [c.public for c in fresh]
    assert [c.offline for c in back] == [c.offline for c in fresh]


def test_tampered_case_file_is_refused(tmp_path: Path) -> None:
    assert main(["cases", "generate", "--seed", "8", "--n", "13", "--out", str(tmp_path)]) == 0
    path = tmp_path / "public.parquet"
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(Exception, match="SHA-256"):
        read_cases(tmp_path)


@pytest.mark.parametrize(
    "kwargs",
    [{"n": 0}, {"families": ("made_up",)}, {"tool_families": ("kitchen",)}, {"families": ()}],
)
def test_bad_generation_config_is_a_clear_error(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        GenerateConfig(seed=1, **{"n": 5, **kwargs})


def test_oracle_rejects_one_extra_side_effect() -> None:
    """A call whose run leaves one side effect more than the target's is not the intended call."""
    from dataclasses import replace

    checked = 0
    for case in _cases():
        pub, off = case.public, case.offline
        if off.should_abstain or len(off.expected["effects"]) < 1:
            continue
        fewer = {**off.expected, "effects": off.expected["effects"][:-1]}
        assert semantic_outcome(pub, off, off.target, abstained=False).success
        assert not semantic_outcome(pub, replace(off, expected=fewer), off.target, abstained=False).success
        checked += 1
    assert checked >= 100


# --- paraphrased requests ------------------------------------------------------------------------


@cache
def _paraphrased() -> tuple[Case, ...]:
    return tuple(generate_cases(GenerateConfig(seed=31, n=520, request_style="paraphrase")))


def test_paraphrased_requests_carry_every_value_a_repair_needs() -> None:
    """An oracle reads every target value back from the request's words."""
    rewritten = 0
    for case in _paraphrased():
        assert case.offline.corruption["request_style"] == "paraphrase"
        if case.offline.target is None:
            continue
        properties = case.public.schema.get("properties", {})
        for key, value in case.offline.target.items():
            phrase = paraphrase_value(value, properties.get(key, {}))
            assert phrase in case.public.request, (case.public.case_id, key, phrase)
            read = read_value(phrase, properties.get(key, {}))
            assert read == value and type(read) is type(value)
            rewritten += phrase != canonical_json(value)
    assert rewritten > 300  # numbers, booleans, dates and enum members, not only JSON


def test_paraphrase_changes_only_the_request_and_the_record_of_its_style() -> None:
    plain = generate_cases(GenerateConfig(seed=31, n=26))
    worded = _paraphrased()[:26]
    for a, b in zip(plain, worded, strict=True):
        assert (a.public.candidate, a.offline.target, a.offline.target_patch) == (
            b.public.candidate,
            b.offline.target,
            b.offline.target_patch,
        )
    assert any(a.public.request != b.public.request for a, b in zip(plain, worded, strict=True))
    assert GenerateConfig(seed=31, n=26).to_dict() == {**GenerateConfig(seed=31, n=26, request_style="verbatim").to_dict()}
    assert "request_style" not in GenerateConfig(seed=31, n=26).to_dict()  # earlier case sets keep their bytes


@settings(max_examples=400, deadline=None)
@given(
    value=st.one_of(
        st.booleans(),
        st.integers(min_value=-(10**9), max_value=10**9),
        st.dates().map(lambda d: d.isoformat()),
        st.datetimes().map(lambda t: t.strftime("%Y-%m-%dT%H:%M:%SZ")),
        st.from_regex(r"\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}:\d{2}Z)?", fullmatch=True),  # not all are dates
        st.sampled_from(["read_only", "dry_run", "plain"]),
    )
)
def test_every_paraphrase_reads_back_to_its_value(value: object) -> None:
    schema = {"enum": ["read_only", "dry_run", "plain"]} if value in ("read_only", "dry_run", "plain") else {}
    phrase = paraphrase_value(value, schema)
    read = read_value(phrase, schema)
    assert read == value and type(read) is type(value)


def test_request_styles_are_checked() -> None:
    with pytest.raises(ConfigError, match="unknown request style"):
        GenerateConfig(seed=0, n=1, request_style="poetic")
    with pytest.raises(ConfigError, match="users' own questions"):
        GenerateConfig(seed=0, n=1, request_style="paraphrase", source="bfcl:/nowhere")


def test_a_training_run_takes_its_held_out_cases_from_a_case_directory(tmp_path: Path) -> None:
    """``data.eval_dir``: a fixed held-out set (a headline slice) for every trial; the training cases
    are drawn around it, so the split audit finds no overlap even where the same seed would collide."""
    from contractrl.configtree import from_dict
    from contractrl.errors import InputFileError
    from contractrl.tasks.store import read_manifest, write_case_set
    from contractrl.trainer.config import TrainConfig
    from contractrl.trainer.entry import prepare_cases
    from contractrl.trainer.experimental import TRAIN_DISJOINT

    families = ["wrong_type", "nested_field"]
    held_config = GenerateConfig(seed=0, n=6, families=tuple(families))
    write_case_set(generate_cases(held_config), tmp_path / "slice", held_config.to_dict())
    plain = from_dict(TrainConfig, {"data": {"train_cases": 8, "eval_cases": 0, "families": families}}).data
    unconstrained, _ = prepare_cases(plain, tmp_path / "plain")
    given = read_cases(tmp_path / "slice")
    assert any(OverlapIndex(given, TRAIN_DISJOINT).collides(c) for c in unconstrained)  # the same seed draws the same cases

    data = dataclasses.replace(plain, eval_dir=str(tmp_path / "slice"))
    train, held_out = prepare_cases(data, tmp_path / "run")
    assert [c.public.case_id for c in held_out] == [c.public.case_id for c in given]
    assert len(train) == 8 and not any(OverlapIndex(given, TRAIN_DISJOINT).collides(c) for c in train)
    manifest = read_manifest(tmp_path / "run" / "cases" / "eval")
    assert manifest["config"]["from_dir"] == str((tmp_path / "slice").resolve()) and manifest["config"]["seed"] == 0
    assert all(row["overlap"] == 0 for row in manifest["audit"] if row["disjoint"])
    assert [c.public.case_id for c in prepare_cases(data, tmp_path / "again")[0]] == [c.public.case_id for c in train]
    with pytest.raises(InputFileError, match="not a case set"):
        prepare_cases(dataclasses.replace(data, eval_dir=str(tmp_path / "absent")), tmp_path / "third")
