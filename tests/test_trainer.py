"""The trainer end to end on the tiny preset: SFT and GRPO with real peft LoRA, a real DeepSpeed
engine on CPU, real Ray actors, checkpoints that resume exactly, W&B offline files, the judge's
hard failure on unsafe dispatch, and the evidence boundary of the trainer's imports."""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("deepspeed")

from contractrl.configtree import load_config  # noqa: E402
from contractrl.errors import ConfigError  # noqa: E402
from contractrl.evidence.judge import Judge, UnsafeDispatchError  # noqa: E402
from contractrl.rollout.cpu import cpu_bf16_native  # noqa: E402
from contractrl.rollout.ledger import read_ledger  # noqa: E402
from contractrl.tasks.contrast import CONTRAST_SUFFIX, contrast_case  # noqa: E402
from contractrl.tasks.generate import GenerateConfig, generate_cases  # noqa: E402
from contractrl.trainer.config import TrainConfig  # noqa: E402
from contractrl.trainer.entry import grpo_contrasts, sft_demonstrations, train  # noqa: E402
from contractrl.trainer.loop import advantage_spans, grpo_cases, with_contrasts  # noqa: E402

PACKAGE = Path(__file__).resolve().parents[1] / "contractrl"
TINY_YAML = PACKAGE.parent / "tune_configs" / "tiny.yaml"
# one small run: 3 SFT steps, 3 GRPO steps of 2 cases x 2 samples, 4 held-out cases
SMALL = [
    "data.train_cases=12",
    "data.eval_cases=4",
    "sft.steps=3",
    "sft.batch_size=8",
    "grpo.steps=3",
    "grpo.cases_per_step=2",
    "grpo.group_size=2",
    "grpo.max_new_tokens=20",
    "eval.max_new_tokens=20",
    "checkpoint.every=1",
    "checkpoint.keep=10",
    "model.lora.enabled=true",
]
IN_PROCESS = ["resources.ray=false", "resources.num_workers=0"]


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("models"))


# Every test that takes ``warm_model`` is marked slow: it trains with a DeepSpeed engine, and the
# first of them to run also pays for the warm-up (~150 s on 2 cores; the resume test took ~287 s,
# the in-process SFT+GRPO one ~249 s). Leaving one unmarked would move that warm-up into the fast
# subset, not remove it.
@pytest.fixture(scope="module")
def warm_model(tmp_path_factory: pytest.TempPathFactory, model_cache: str) -> str:
    """The tiny preset after 40 full fine-tuning SFT steps on 12 cases. A freshly initialised model
    never ends an answer, so every sample of a group costs the same and GRPO has nothing to learn
    from; this one ends its answers at different lengths, so groups have reward variance."""
    out = tmp_path_factory.mktemp("warm")
    extra = ["stages=[sft]", "sft.steps=40", "model.lora.enabled=false", "eval.enabled=false", "wandb.mode=disabled"]
    result = train(_config(Path(out), model_cache, *IN_PROCESS, *extra))
    losses = [r["loss"] for r in _metrics(out)]
    assert losses[-1] < losses[0] / 2, "SFT did not lower the loss"
    return result.model_dir


def _config(out: Path, model_cache: str, *extra: str) -> TrainConfig:
    return load_config(TrainConfig, TINY_YAML, [*SMALL, f"out={out}", f"model.cache_dir={model_cache}", *extra])


def _metrics(out: Path) -> list[dict[str, Any]]:
    return pq.read_table(out / "metrics.parquet").to_pylist()


@pytest.mark.slow
def test_in_process_sft_and_grpo_with_lora_and_deepspeed(tmp_path: Path, model_cache: str, warm_model: str) -> None:
    out = tmp_path / "run"
    # kl_coef > 0: the reference log-probs come from the same model with the LoRA adapter switched off.
    # First decisions only: three steps of the same kind of demonstration, so the loss can fall
    # (contrast pairs and later decisions have their own tests below)
    overrides = [
        *IN_PROCESS,
        "wandb.mode=offline",
        f"model.name={warm_model}",
        "grpo.kl_coef=0.05",
        "experimental.contrast.sft=false",
        "experimental.noisy_retries.enabled=false",
    ]
    result = train(_config(out, model_cache, *overrides), progress=False)
    rows = _metrics(out)
    assert [r["stage"] for r in rows] == ["sft"] * 3 + ["grpo"] * 3
    assert [r["step"] for r in rows] == list(range(1, 7))
    assert set(rows[0]) >= {"step", "stage", "loss", "reward_mean", "semantic_success", "grad_norm", "lr"}
    sft = [r["loss"] for r in rows if r["stage"] == "sft"]
    assert sft[-1] < sft[0]  # the loss goes down
    grpo = [r for r in rows if r["stage"] == "grpo"]
    assert all(r["reward_mean"] is not None and 0.0 <= r["semantic_success"] <= 1.0 for r in grpo)
    # token costs differ between samples, so groups have variance and updates happen (the loop then
    # asserts that the rollout weights changed)
    assert any(r["updated"] for r in grpo)
    # SFT already moved the adapter, so the policy differs from its adapter-off reference
    assert all(r["kl"] > 0.0 for r in grpo if r["updated"])
    # one frozen, verifiable ledger per GRPO step, and the held-out ledgers after each stage
    assert sorted(p.name for p in (out / "rollouts").iterdir()) == ["step-000004", "step-000005", "step-000006"]
    assert len(read_ledger(out / "rollouts" / "step-000004")) == 4
    # a GRPO batch's manifest holds what every rollout run's does (one writer: RolloutRun)
    batch = json.loads((out / "rollouts" / "step-000004" / "manifest.json").read_text())
    assert {"kind", "contractrl_version", "config", "config_sha256", "seed", "source_revision", "packages", "labels"} <= set(
        batch
    )
    assert batch["stage"] == "grpo" and batch["config"]["seed"] == batch["seed"]
    assert set(result.evals) == {"sft", "grpo"} and result.evals["grpo"]["episodes"] == 4
    # what model.cpu_bf16 (on by default) became on this CPU: the run's figures depend on it
    assert result.evals["grpo"]["product_dtype"] == ("bfloat16" if cpu_bf16_native() else "float32")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["rollout_digest"] == result.rollout_digest
    assert {"deepspeed", "peft", "torch"} <= set(manifest["packages"])
    # the adapter is a peft adapter, loadable with PeftModel.from_pretrained on the base it names
    # (here a model directory, named relative to the adapter)
    from peft import PeftModel, get_peft_model_state_dict
    from transformers import AutoModelForCausalLM

    adapter = Path(result.model_dir)
    base_path = adapter / json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base_path.resolve() == Path(warm_model).resolve()
    loaded = get_peft_model_state_dict(PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path), adapter))
    final = torch.load(sorted((out / "checkpoints").glob("step-*"))[-1] / "trainable.pt")
    assert set(loaded) == set(final) and all(torch.equal(loaded[k], final[k]) for k in final)
    # W&B offline run files exist
    assert list((out / "wandb").rglob("run-*.wandb")), "no offline W&B run file"


@pytest.mark.slow
def test_a_given_held_out_set_is_what_every_stage_evaluates(tmp_path: Path, model_cache: str, warm_model: str) -> None:
    """``data.eval_dir``: the stages evaluate exactly that case set, labelled with its source, and
    each step records the learners' peak memory (the scaling table reads both)."""
    from contractrl.tasks.generate import GenerateConfig, generate_cases
    from contractrl.tasks.store import write_case_set

    held = GenerateConfig(seed=41, n=3, families=("wrong_type",))
    write_case_set(generate_cases(held), tmp_path / "slice", held.to_dict())
    out = tmp_path / "run"
    extra = [f"model.name={warm_model}", "stages=[sft]", "sft.steps=2", f"data.eval_dir={tmp_path / 'slice'}"]
    extra.append("wandb.mode=disabled")
    result = train(_config(out, model_cache, *IN_PROCESS, *extra), progress=False)
    run = out / "eval" / "after-sft"
    labels = json.loads((run / "manifest.json").read_text())["labels"]
    assert labels["condition"] == "builtin" and labels["study"] == "main"
    expected = {c.public.case_id for c in generate_cases(held)}
    assert {row["case_id"] for row in read_ledger(run)} == expected and result.evals["sft"]["episodes"] == 3
    assert all(row["peak_rss_gb"] > 0.05 for row in _metrics(out))


@pytest.mark.slow
def test_resume_continues_exactly_like_an_uninterrupted_run(tmp_path: Path, model_cache: str, warm_model: str) -> None:
    common = [*IN_PROCESS, "wandb.mode=disabled", f"model.name={warm_model}"]
    straight = train(_config(tmp_path / "a", model_cache, *common), progress=False)

    class Crash(Exception):
        pass

    def crash_at_step_5(row: dict[str, Any]) -> None:
        if row["step"] == 5:
            raise Crash

    crashed = _config(tmp_path / "b", model_cache, *common)
    with pytest.raises(Crash):
        train(crashed, report=crash_at_step_5, progress=False)
    with pytest.raises(ConfigError, match="resume=true"):
        train(crashed, progress=False)
    resumed = train(_config(tmp_path / "b", model_cache, *common, "resume=true"), progress=False)

    keys = ("step", "stage", "loss", "reward_mean", "semantic_success", "grad_norm", "samples", "generated_tokens_mean")
    a = [{k: r.get(k) for k in keys} for r in _metrics(tmp_path / "a")]
    b = [{k: r.get(k) for k in keys} for r in _metrics(tmp_path / "b")]
    assert a == b
    assert straight.rollout_digest == resumed.rollout_digest
    assert straight.evals == resumed.evals
    # resuming a finished run returns its result without training or evaluating again
    again = train(_config(tmp_path / "b", model_cache, *common, "resume=true"), progress=False)
    assert (again.global_step, again.rollout_digest, again.evals) == (resumed.global_step, resumed.rollout_digest, resumed.evals)
    with pytest.raises(ConfigError, match=r"config differs in grpo\.steps"):
        train(_config(tmp_path / "b", model_cache, *common, "resume=true", "grpo.steps=4"))


@pytest.mark.slow
def test_grpo_draws_its_cases_from_grpo_families_only(tmp_path: Path, model_cache: str, warm_model: str) -> None:
    """SFT sees every family; GRPO's rollouts come only from ``experimental.grpo_families.families`` (here two of the twelve
    training cases, so drawing from all twelve would almost surely show another family)."""
    out = tmp_path / "run"
    extra = [
        "stages=[grpo]",
        "eval.enabled=false",
        "wandb.mode=disabled",
        "experimental.grpo_families.families=[wrong_type,missing_required]",
    ]
    train(_config(out, model_cache, *IN_PROCESS, f"model.name={warm_model}", *extra), progress=False)
    families = [row["case_family"] for step in sorted((out / "rollouts").iterdir()) for row in read_ledger(step)]
    assert len(families) == 12 and set(families) == {"wrong_type", "missing_required"}
    none = [*IN_PROCESS, f"model.name={warm_model}", *extra[:-1], "experimental.grpo_families.families=[unrepairable]"]
    with pytest.raises(ConfigError, match="none of the 12 training cases"):  # the 12 hold no unrepairable case
        train(_config(tmp_path / "none", model_cache, *none))


@pytest.mark.slow
def test_grpo_family_weights_tilt_every_batch(tmp_path: Path, model_cache: str, warm_model: str) -> None:
    """A family weighted 1000 to 1 is in each step's batch of 2 (of 12 cases). Unweighted, the
    seeded epochs show a case at most once in the first 6 draws, so in at most one of the 3 steps."""
    out = tmp_path / "run"
    extra = ["stages=[grpo]", "eval.enabled=false", "wandb.mode=disabled", "experimental.grpo_families.weights.wrong_type=1000"]
    train(_config(out, model_cache, *IN_PROCESS, f"model.name={warm_model}", *extra), progress=False)
    steps = [{row["case_family"] for row in read_ledger(step)} for step in sorted((out / "rollouts").iterdir())]
    assert len(steps) == 3 and all("wrong_type" in families for families in steps)


@pytest.mark.slow
def test_grpo_contrast_groups_roll_out_beside_their_unrepairable_case(tmp_path: Path, model_cache: str, warm_model: str) -> None:
    """``experimental.contrast.grpo``: of 13 training cases one is unrepairable; GRPO draws from it
    and a wrong_type case, so every step holds it, its contrast's group right after its own (a group
    of its own), and the judge scores the contrast (it holds its offline half). Without an
    unrepairable case the option is refused before any model loads."""
    out = tmp_path / "run"
    extra = [
        "stages=[grpo]",
        "eval.enabled=false",
        "wandb.mode=disabled",
        "data.train_cases=13",
        "experimental.grpo_families.families=[unrepairable,wrong_type]",
        "experimental.contrast.grpo=true",
    ]
    train(_config(out, model_cache, *IN_PROCESS, f"model.name={warm_model}", *extra), progress=False)
    for step in sorted((out / "rollouts").iterdir()):
        rows = read_ledger(step)
        groups = [rows[i]["case_id"] for i in range(0, len(rows), 2)]  # grpo.group_size=2
        assert len(rows) == 6 and [rows[i]["case_id"] for i in range(1, len(rows), 2)] == groups
        (unrepairable,) = {row["case_id"] for row in rows if row["case_family"] == "unrepairable"}
        assert groups.index(unrepairable + CONTRAST_SUFFIX) == groups.index(unrepairable) + 1
        assert {row["case_family"] for row in rows} == {"unrepairable", "missing_required", "wrong_type"}
    assert [row["cases"] for row in _metrics(out)] == [3, 3, 3]
    assert [row["advantage_groups"] for row in _metrics(out)] == [3, 3, 3]  # each case, a contrast too, is a group
    with pytest.raises(ConfigError, match="none of the 12 training cases is an unrepairable case"):
        train(_config(tmp_path / "none", model_cache, *IN_PROCESS, f"model.name={warm_model}", *extra[:3], extra[-1]))


@pytest.mark.parametrize("form", ["appended", "clause"])
def test_contrast_form_builds_both_stages_contrasts(tmp_path: Path, form: str) -> None:
    """``experimental.contrast.form`` reaches SFT's contrast demonstrations and GRPO's contrast groups alike."""
    cases = generate_cases(GenerateConfig(seed=5, n=26))
    overrides = [*SMALL, f"out={tmp_path}", f"experimental.contrast.form={form}", "experimental.contrast.grpo=true"]
    config = load_config(TrainConfig, TINY_YAML, overrides)
    expected = [contrast_case(c, form) for c in cases if c.public.family == "unrepairable"]
    assert len(expected) == 2 and grpo_contrasts(cases, config) == expected
    demos = sft_demonstrations(cases, config)
    assert [d.case for d in demos if d.case.case_id.endswith(CONTRAST_SUFFIX)] == [t.public for t in expected]
    with pytest.raises(ConfigError, match=r"experimental\.contrast\.form"):
        load_config(TrainConfig, TINY_YAML, [*SMALL, f"out={tmp_path}", "experimental.contrast.form=inline"])


def test_with_contrasts_puts_each_contrast_right_after_its_case() -> None:
    cases = [c.public for c in generate_cases(GenerateConfig(seed=0, n=26))]
    twin = replace(cases[12], case_id="twin")
    assert with_contrasts(cases[:3], {}) == cases[:3]
    drawn = [cases[12], cases[0], cases[12]]
    assert with_contrasts(drawn, {cases[12].case_id: twin}) == [cases[12], twin, cases[0], cases[12], twin]


def test_each_case_and_each_contrast_is_its_own_advantage_group() -> None:
    cases = [c.public for c in generate_cases(GenerateConfig(seed=0, n=26))]
    twin = replace(cases[12], case_id=cases[12].case_id + CONTRAST_SUFFIX)
    step = with_contrasts([cases[12], cases[0], cases[12]], {cases[12].case_id: twin})
    assert advantage_spans(step, 4) == [(0, 4), (4, 8), (8, 12), (12, 16), (16, 20)]
    assert advantage_spans([], 4) == []


def test_grpo_cases_keep_the_training_order_and_default_to_all() -> None:
    cases = [c.public for c in generate_cases(GenerateConfig(seed=0, n=26))]
    assert grpo_cases(cases, TrainConfig().experimental.grpo_families.families) == cases  # the default changes no batch
    kept = grpo_cases(cases, ["unrepairable", "wrong_type"])
    assert kept == [c for c in cases if c.family in {"unrepairable", "wrong_type"}] and len(kept) == 4


@pytest.mark.slow
def test_ray_data_parallel_learners_with_a_separate_generator(tmp_path: Path, model_cache: str, warm_model: str) -> None:
    """Two DeepSpeed ZeRO-2 ranks (gloo) train data-parallel in Ray actors; a separate generator actor
    receives the LoRA adapter tensors after every update; transitions run on a worker actor."""
    out = tmp_path / "ray"
    config = _config(
        out,
        model_cache,
        f"model.name={warm_model}",
        "resources.num_learners=2",
        "deepspeed.zero_stage=2",
        "resources.learner_cpus=0.5",
        "resources.placement=separate",
        "resources.generator_cpus=0.5",
        "resources.num_workers=1",
        "resources.worker_cpus=0.5",
        "wandb.mode=disabled",
        "stages=[grpo]",
        "grpo.steps=2",
        "eval.enabled=false",
    )
    train(config, progress=False)
    rows = _metrics(out)
    assert [r["stage"] for r in rows] == ["grpo", "grpo"]
    assert any(r["updated"] for r in rows)  # the loop checked: generator == rank 0 == rank 1, all changed
    assert all(len(read_ledger(p)) == 4 for p in (out / "rollouts").iterdir())


def test_demonstrations_per_arm() -> None:
    from contractrl.tasks.demonstrations import demonstrations

    cases = generate_cases(GenerateConfig(seed=9, n=26))
    for arm in ("contractrl", "patch_sft", "full_regen"):
        for case, demo in zip(cases, demonstrations(cases, arm), strict=True):
            assert demo.case is case.public
            if case.offline.should_abstain:
                assert demo.answer == "ABSTAIN"
            elif arm == "full_regen":
                assert json.loads(demo.answer) == case.offline.target
            else:
                assert json.loads(demo.answer) == case.offline.target_patch
    with pytest.raises(ConfigError, match="no demonstrations for arm"):
        demonstrations(cases, "oracle")


@pytest.mark.parametrize("weight", [1.0, 8.0])
def test_decision_weight_scales_the_first_answer_token_of_the_sft_loss(tmp_path: Path, model_cache: str, weight: float) -> None:
    """``experimental.contrast.decision_weight``: the loss counts each answer's first token (ABSTAIN or a patch)
    ``weight`` times and every other answer token once, over answers of different lengths in one
    micro-batch; the loop's denominator counts the same way."""
    import torch

    from contractrl.trainer.learner import Learner
    from contractrl.trainer.loop import sft_token_weight

    config = _config(
        tmp_path, model_cache, *IN_PROCESS, "deepspeed.enabled=false", f"experimental.contrast.decision_weight={weight}"
    )
    learner = Learner(config)
    learner.start_stage("sft", 1)
    tok = learner.tokenizer

    def ids(text: str) -> list[int]:
        return tok(text, add_special_tokens=False)["input_ids"]

    pairs = [
        (ids("a prompt"), [*ids("ABSTAIN"), tok.eos_token_id]),
        (ids("another, longer prompt"), [*ids('[{"op":"add","path":"/a","value":1}]'), tok.eos_token_id]),
    ]
    with torch.no_grad():
        logprobs, mask = learner._batch_logprobs(pairs, 1.0)
    first = [float(logprobs[row, mask.shape[1] - len(answer)]) for row, (_, answer) in enumerate(pairs)]
    expected = -float((logprobs * mask).sum()) - (weight - 1.0) * sum(first)
    denominator = sum(sft_token_weight(answer, weight) for _, answer in pairs)
    assert denominator == sum(len(a) for _, a in pairs) + 2 * (weight - 1.0)
    stats = learner.sft_step(pairs, denominator)
    assert stats["loss_sum"] == pytest.approx(expected, rel=1e-4)
    assert stats["tokens"] == sum(len(a) for _, a in pairs)
    with pytest.raises(ConfigError, match="decision_weight must be > 0"):
        _config(tmp_path, model_cache, "experimental.contrast.decision_weight=0")


def test_noisy_report_retries_demonstrate_the_decision_that_shows_the_real_report() -> None:
    """``noisy_retries``: only cases whose first report is a rewrite gain a later decision, every one
    of them is reached, and its state shows the verifier's true report, not the noisy one again."""
    from contractrl.tasks.demonstrations import demonstrations, has_noisy_report, rejected_attempt
    from contractrl.trainer.loop import replay_state

    cases = generate_cases(GenerateConfig(seed=9, n=39))
    noisy = {c.public.case_id: c for c in cases if has_noisy_report(c)}
    assert {c.public.family for c in noisy.values()} == {"ambiguous_pointer", "wrong_pointer", "malformed_feedback"}
    for arm in ("patch_sft", "full_regen"):
        demos = demonstrations(cases, arm, noisy_retries=True)
        later = [d for d in demos if d.earlier]
        assert len(demos) == len(cases) + len(later)
        assert sorted(d.case.case_id for d in later) == sorted(noisy)
        for demo in later:
            case = noisy[demo.case.case_id]
            state = replay_state(demo, arm)
            assert state is not None and not state.done
            assert state.report.to_dict() == case.offline.corruption["true_report"] != case.public.report
            assert demo.answer == demonstrations([case], arm)[0].answer
    # the pointer-less garbled report still gets a rejected attempt: the first member put back
    garbled = next(c for c in noisy.values() if c.public.family == "malformed_feedback")
    assert rejected_attempt(garbled, "patch_sft") is None
    (op,) = json.loads(rejected_attempt(garbled, "patch_sft", root_fallback=True) or "[]")
    first = min(garbled.public.candidate)
    assert op == {"op": "replace", "path": f"/{first}", "value": garbled.public.candidate[first]}
    # with one attempt, the earlier attempt ends the episode: no later decision to demonstrate
    one = [replace(c, public=replace(c.public, max_attempts=1)) for c in noisy.values()]
    later = [d for d in demonstrations(one, "patch_sft", noisy_retries=True) if d.earlier]
    assert later and all(replay_state(d, "patch_sft") is None for d in later)


def test_contrast_demonstrations_state_the_withheld_value_and_repair_with_it() -> None:
    """``contrast``: each unrepairable case gains its minimal pair. The pair keeps the call and the
    report, its request states the withheld value where the heuristic's reader finds it, and its
    answer, replayed through the real environment, is accepted and dispatches the original call."""
    from contractrl.rollout.env import RepairEnv
    from contractrl.rollout.policies import argument_labels, request_values
    from contractrl.tasks.demonstrations import demonstrations

    cases = generate_cases(GenerateConfig(seed=9, n=52))
    unrepairable = [c for c in cases if c.public.family == "unrepairable"]
    for arm in ("patch_sft", "full_regen"):
        demos = demonstrations(cases, arm, contrast=True)
        pairs = [d for d in demos if d.case.request not in {c.public.request for c in cases}]
        assert len(demos) == len(cases) + len(unrepairable) == len(cases) + len(pairs)
        for case, pair in zip(unrepairable, pairs, strict=True):
            key, value = case.offline.corruption["withheld"], case.offline.corruption["withheld_value"]
            assert pair.case.case_id == case.public.case_id + CONTRAST_SUFFIX and pair.case.report == case.public.report
            assert pair.case.request.startswith(case.public.request)
            assert request_values(pair.case.request, argument_labels(pair.case))[key] == value
            env = RepairEnv(pair.case, arm=arm)
            env.reset()
            _, record = env.step(pair.answer)
            assert record.outcome == "accepted" and env.log.dispatched == {**case.public.candidate, key: value}
    assert demonstrations(cases, "patch_sft") == demonstrations(cases, "patch_sft", contrast=False)


def test_unsafe_dispatch_stops_the_run() -> None:
    case = generate_cases(GenerateConfig(seed=5, n=1))[0]
    judge = Judge([case])
    row = {
        "episode_id": "x",
        "case_id": case.public.case_id,
        "accepted": True,
        "abstained": False,
        "dispatched": json.dumps(case.public.candidate),  # the corrupted candidate: invalid
    }
    with pytest.raises(UnsafeDispatchError, match="dispatched an object its contract rejects"):
        judge.verdict(row)


_FORBIDDEN_MODULES = ("contractrl.tasks.offline", "contractrl.evidence", "contractrl.analysis", "contractrl.experiments")
_FORBIDDEN_NAMES = {
    "OfflineCase",
    "Case",
    "read_offline",
    "read_cases",
    "semantic_outcome",
    "Judge",
    "demonstrations",
    "contrast_case",  # builds an offline half
    "contrast_cases",
}


def _imports(path: Path) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text())
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.extend((base, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.extend((alias.name, "") for alias in node.names)
    return found


def test_rollout_and_trainer_never_import_the_offline_half() -> None:
    """Only the train entry point wires the judge and the demonstrations; nothing else in rollout
    or trainer imports offline data or the code that reads it."""
    checked = 0
    for sub in ("rollout", "trainer"):
        for path in sorted((PACKAGE / sub).glob("*.py")):
            if path.name == "entry.py":
                continue
            checked += 1
            for module, name in _imports(path):
                assert not module.startswith(_FORBIDDEN_MODULES), f"{path.name} imports {module}"
                assert name not in _FORBIDDEN_NAMES, f"{path.name} imports {name} from {module}"
    assert checked >= 15


def test_ranking_negatives_are_accepted_answers_that_make_another_object() -> None:
    """Every negative is an enumerated answer the public contract accepts whose object differs from
    the gold answer's; ABSTAIN demonstrations rank every accepted candidate below ABSTAIN."""
    from contractrl.rollout.env import contract_for
    from contractrl.tasks.demonstrations import demonstrations
    from contractrl.trainer.loop import replay_state
    from contractrl.trainer.ranking import ranking_negatives

    cases = generate_cases(GenerateConfig(seed=3, n=130, request_style="paraphrase"))
    found = 0
    for demo in demonstrations(cases, "patch_sft"):
        state = replay_state(demo, "patch_sft")
        if state is None:
            continue
        negatives = ranking_negatives(demo, state, "patch_sft", 3)
        assert len(negatives) <= 3
        assert ranking_negatives(demo, state, "patch_sft", 0) == ()
        contract = contract_for(demo.case)
        gold = None if demo.answer == "ABSTAIN" else contract.step(state, demo.answer).accepted_object
        for text in negatives:
            made = contract.step(state, text).accepted_object
            assert made is not None and made != gold and text != demo.answer
        found += bool(negatives)
    assert found >= 3  # the stated alternatives the shield could commit (4 of 130 demonstrations when written)


def test_the_ranking_term_raises_the_gold_answer_above_its_negative(tmp_path: Path, model_cache: str) -> None:
    """With a negative, the loss adds softplus(margin - (log p(gold) - log p(negative))) over the
    batch's pairs, and SFT steps on it widen the gap the shield ranks by."""
    import torch

    from contractrl.trainer.learner import Learner
    from contractrl.trainer.ranking import SftExample

    config = _config(
        tmp_path,
        model_cache,
        *IN_PROCESS,
        "deepspeed.enabled=false",
        "experimental.ranking.negatives=1",
        "experimental.ranking.margin=2",
    )
    learner = Learner(config)
    learner.start_stage("sft", 8)
    tok = learner.tokenizer

    def ids(text: str) -> tuple[int, ...]:
        return (*tok(text, add_special_tokens=False)["input_ids"], tok.eos_token_id)

    prompt = tuple(tok("the request says rescheduled", add_special_tokens=False)["input_ids"])
    gold, wrong = (
        ids('[{"op":"replace","path":"/s","value":"rescheduled"}]'),
        ids('[{"op":"replace","path":"/s","value":"cancelled"}]'),
    )
    example = SftExample(prompt, gold, (wrong,))

    def gap() -> float:
        with torch.no_grad():
            logprobs, mask = learner._batch_logprobs([(prompt, gold), (prompt, wrong)], 1.0)
        sums = (logprobs * mask).sum(dim=1)
        return float(sums[0] - sums[1])

    before = gap()
    with torch.no_grad():
        logprobs, mask = learner._batch_logprobs([(prompt, gold)], 1.0)
    cross_entropy = -float((logprobs * mask).sum())
    stats = learner.sft_step([example], float(len(gold)), 1.0)
    assert stats["loss_sum"] == pytest.approx(cross_entropy, rel=1e-4)  # the cross-entropy part is unchanged
    assert stats["rank_loss_sum"] == pytest.approx(float(torch.nn.functional.softplus(torch.tensor(2.0 - before))), rel=1e-3)
    for _ in range(5):
        learner.sft_step([example], float(len(gold)), 1.0)
    assert gap() > before
    with pytest.raises(ConfigError, match=r"experimental\.ranking\.negatives must be >= 0"):
        _config(tmp_path, model_cache, "experimental.ranking.negatives=-1")


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_packed_answers_score_as_separate_rows(tmp_path: Path, model_cache: str, implementation: str) -> None:
    """SFT packs a prompt's gold answer and negatives after one copy of the prompt
    (:mod:`contractrl.trainer.packing`): each answer token gets the log-probability it has on a row
    of its own, across examples of different prompt and answer lengths (left padding, answers
    of one token), under both attention paths the packing supports."""
    from contractrl.rollout.decode import custom_mask
    from contractrl.trainer.learner import Learner
    from contractrl.trainer.packing import pack_answers, row_layout
    from contractrl.trainer.ranking import SftExample

    learner = Learner(_config(tmp_path, model_cache, *IN_PROCESS, "deepspeed.enabled=false"))
    learner.model.config._attn_implementation = implementation
    learner.model.eval()
    examples = [
        SftExample((5, 9, 13, 2, 7, 30), (11, 12, 1), ((40, 41), (8,))),
        SftExample((3, 4), (6,), ()),
        SftExample((17, 18, 19, 20), (21, 22, 23, 24, 1), ((25, 26, 27),)),
        SftExample((31, 32, 33, 34, 35, 36, 37), (38,), ((39,), (42,))),
    ]
    # no row grows past the longest prompt-plus-one-answer (9 tokens): answers that would overflow
    # start a row of their own, after the prompt again
    assert row_layout(examples) == [(0, [0]), (0, [1, 2]), (1, [0]), (2, [0]), (2, [1]), (3, [0, 1]), (3, [2])]
    packed = pack_answers(examples, learner.tokenizer.pad_token_id)
    assert packed.input_ids.shape == (7, 9)
    answers = [(e.prompt_ids, e.answer_ids) for e in examples] + [(e.prompt_ids, n) for e in examples for n in e.negatives]
    with torch.no_grad():
        got = learner._packed_logprobs(packed)
        for answer, (prompt, tokens) in enumerate(answers):
            logprobs, mask = learner._batch_logprobs([(prompt, tokens)], 1.0)
            want = logprobs[0, mask.shape[1] - len(tokens) :]
            mine = got[packed.token_answer == answer]
            assert mine.shape == want.shape
            assert torch.allclose(mine, want, atol=1e-4), (answer, mine, want)
    assert int(packed.token_first.sum()) == len(examples)
    assert int(packed.token_gold.sum()) == sum(len(e.answer_ids) for e in examples)
    assert packed.negative_owner.tolist() == [0, 0, 2, 3, 3]
    # each example's answers by number: its gold, then its negatives after every gold answer
    assert packed.answer_index == ((0, 4, 5), (1,), (2, 6), (3, 7, 8))
    for example, numbers in enumerate(packed.answer_index):
        for nth, number in enumerate(numbers):
            tokens = (examples[example].answer_ids, *examples[example].negatives)[nth]
            assert packed.token_target[packed.token_answer == number].tolist() == list(tokens)
    with pytest.raises(ValueError, match="SDPA or eager"):
        custom_mask(packed.allowed, "flash_attention_2", torch.float32)


def test_a_grpo_micro_batch_packs_the_completions_of_one_prompt(tmp_path: Path, model_cache: str) -> None:
    """A GRPO group's first turns share their prompt: the update packs their completions after one
    copy of it and gets, row for row, the log-probabilities and mask of separate rows (at the
    update's temperature), an empty completion included."""
    from contractrl.trainer.grpo import PolicySample
    from contractrl.trainer.learner import Learner

    learner = Learner(_config(tmp_path, model_cache, *IN_PROCESS, "deepspeed.enabled=false"))
    learner.model.eval()
    shared, other = (5, 9, 13, 2, 7, 30), (3, 4)
    completions = [(shared, (11, 12, 1)), (other, (6, 8)), (shared, (40,)), (shared, ()), (shared, (11, 14, 15, 16, 1))]
    samples = [PolicySample(prompt, completion, (), 1.0) for prompt, completion in completions]
    with torch.no_grad():
        packed, packed_mask = learner._group_logprobs(samples, 0.7)
        rows, rows_mask = learner._batch_logprobs([(p, c) for p, c in completions], 0.7)
    assert torch.equal(packed_mask, rows_mask)
    assert torch.allclose(packed * packed_mask, rows * rows_mask, atol=1e-4)


def _logits(model: Any, tokenizer: Any) -> Any:
    ids = torch.tensor([tokenizer.encode('[{"op": "replace", "path": "/a", "value": 1}]')])
    with torch.no_grad():
        return model(ids).logits


@pytest.mark.slow
def test_saved_adapters_name_their_preset_and_load_after_the_run_moves(
    tmp_path: Path, model_cache: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An adapter names its base by preset, source and hash (``base_model.json``), never by this
    machine's cache path; moved with its run directory (GRPO on an SFT adapter included) or given
    another model cache, it loads through ``load_model`` and with plain peft on the named base."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from contractrl.trainer.adapter_base import BASE_FILE, read_base
    from contractrl.trainer.presets import load_model, model_path

    job = tmp_path / "job"
    quick = [*IN_PROCESS, "deepspeed.enabled=false", "eval.enabled=false", "wandb.mode=disabled", "sft.steps=2", "grpo.steps=1"]
    first = train(_config(job / "sft", model_cache, *quick, "stages=[sft]"), progress=False)
    adapter = Path(first.model_dir)
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "tiny"
    record = read_base(adapter)
    assert record is not None and (record.kind, record.name, record.tiny["hidden_size"]) == ("preset", "tiny", 64)
    base_dir = model_path("tiny", cache_dir=model_cache)
    assert len(record.weights_sha256) == 64 and record.path == str(base_dir)
    for saved in (job / "sft" / "stages" / "sft", adapter):
        assert json.loads((saved / BASE_FILE).read_text()) == json.loads((adapter / BASE_FILE).read_text())
    # GRPO from the SFT adapter: its base is that adapter, named relative to it
    second = train(_config(job / "grpo", model_cache, *quick, "stages=[grpo]", f"model.name={adapter}"), progress=False)
    chained = read_base(Path(second.model_dir))
    assert chained is not None and (chained.kind, chained.name) == ("adapter", "../../sft/adapter")

    moved = tmp_path / "elsewhere" / "job"
    moved.parent.mkdir()
    job.rename(moved)
    plain = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), moved / "sft" / "adapter")
    plain = plain.merge_and_unload().eval()
    loaded, tokenizer = load_model(str(moved / "sft" / "adapter"), cache_dir=model_cache, device="cpu")
    assert torch.allclose(_logits(loaded, tokenizer), _logits(plain, tokenizer), atol=1e-5)
    both = PeftModel.from_pretrained(plain, moved / "grpo" / "adapter").merge_and_unload().eval()
    loaded, _ = load_model(str(moved / "grpo" / "adapter"), cache_dir=model_cache, device="cpu")
    assert torch.allclose(_logits(loaded, tokenizer), _logits(both, tokenizer), atol=1e-5)

    # on another machine the recorded cache path is gone and the model cache empty: built there
    fresh = tmp_path / "fresh"
    record_file = moved / "sft" / "adapter" / BASE_FILE
    saved_record = json.loads(record_file.read_text())
    record_file.write_text(json.dumps({**saved_record, "path": "/gone/runs/models/tiny-h64-l2-s0"}))
    loaded, _ = load_model(str(moved / "sft" / "adapter"), cache_dir=fresh, device="cpu")
    assert torch.allclose(_logits(loaded, tokenizer), _logits(plain, tokenizer), atol=1e-5)
    assert (fresh / base_dir.name / "config.json").is_file()
    # a base whose weights differ from the ones trained on loads, with a warning that says so
    record_file.write_text(json.dumps({**saved_record, "weights_sha256": "0" * 64}))
    with caplog.at_level("WARNING"):
        load_model(str(moved / "sft" / "adapter"), cache_dir=model_cache, device="cpu")
    assert "differs from the one the adapter" in caplog.text

    # an adapter saved before base_model.json: its absolute base path loads while it exists, and a
    # preset cache directory that is gone is rebuilt from its name in this machine's cache
    legacy = moved / "sft" / "stages" / "sft"
    (legacy / BASE_FILE).unlink()
    config_file = legacy / "adapter_config.json"
    for base_name, cache in ((str(base_dir), model_cache), ("/gone/runs/models/tiny-h64-l2-s0", str(fresh))):
        config_file.write_text(json.dumps({**config, "base_model_name_or_path": base_name}))
        loaded, _ = load_model(str(legacy), cache_dir=cache, device="cpu")
        assert torch.allclose(_logits(loaded, tokenizer), _logits(plain, tokenizer), atol=1e-5)


def test_a_malformed_base_model_record_is_a_config_error(tmp_path: Path) -> None:
    from contractrl.trainer.adapter_base import BASE_FILE
    from contractrl.trainer.presets import base_spec

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    for text, match in [
        ("{", "not a base model record"),
        ('{"kind": "preset", "name": "tiny"}', "expected the keys"),
        ('{"kind": "pickle", "name": "x", "path": ""}', "kind must be one of"),
        ('{"kind": "preset", "name": "huge", "path": ""}', "unknown preset 'huge'"),
        ('{"kind": "preset", "name": "tiny", "path": "", "tiny": {"hidden_size": "64"}}', "map sizes to integers"),
        ('{"kind": "adapter", "name": "../nowhere", "path": "/nowhere"}', "at neither"),
    ]:
        (adapter / BASE_FILE).write_text(text)
        with pytest.raises(ConfigError, match=match):
            base_spec(adapter, tmp_path / "cache")
