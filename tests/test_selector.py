"""The candidate-selection policy (issue 17): Gymnasium environment, action mask, RLlib PPO, rollouts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import jsonpatch
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from contractrl.errors import ConfigError
from contractrl.rollout.candidates import enumerate_candidates, stated_values
from contractrl.rollout.runner import EpisodeRunner, LocalPool
from contractrl.selector.env import ENV_ID, SelectorEnv, register
from contractrl.selector.features import CANDIDATE_FEATURES, STATE_FEATURES
from contractrl.selector.observe import contract_for, decide
from contractrl.tasks.cases import ABSTAIN
from contractrl.tasks.generate import GenerateConfig, generate_cases
from contractrl.tasks.offline import read_cases
from contractrl.tasks.store import write_case_set
from contractrl.validators.codes import PATCH_CODES
from contractrl.validators.pointer import parse_pointer

SIZE = 16


def _case_set(root: Path, name: str, seed: int, n: int, style: str = "verbatim") -> Path:
    config = GenerateConfig(seed=seed, n=n, request_style=style)
    out = root / name
    write_case_set(generate_cases(config), out, config.to_dict())
    return out


@pytest.fixture(scope="module")
def case_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("selector-cases")
    return {
        "verbatim": _case_set(root, "verbatim", 3, 52),
        "paraphrase": _case_set(root, "paraphrase", 4, 52, "paraphrase"),
    }


def _walk_states(env: SelectorEnv, index: int, rng: np.random.Generator) -> list[Any]:
    """(case, contract, state, decision) of every state of one random masked episode."""
    obs, _ = env.reset(options={"index": index})
    seen = []
    while True:
        assert env._env is not None and env._decision is not None
        seen.append((env._env.case, env._env.contract, env._env.state, env._decision))
        action = int(rng.choice(np.flatnonzero(obs["action_mask"])))
        obs, _, done, _, _ = env.step(action)
        if done:
            return seen


# --- the environment ------------------------------------------------------------------------------


def test_env_passes_gymnasium_checker(case_dirs: dict[str, Path]) -> None:
    env = SelectorEnv(case_dir=str(case_dirs["verbatim"]))
    check_env(env, skip_render_check=True)
    assert env.observation_space["observations"].shape == (len(STATE_FEATURES),)
    assert env.observation_space["candidates"].shape == (SIZE, len(CANDIDATE_FEATURES))


def test_env_is_registered(case_dirs: dict[str, Path]) -> None:
    register()
    register()  # idempotent
    env = gym.make(ENV_ID, case_dir=str(case_dirs["verbatim"]), candidates=8)
    obs, info = env.reset(seed=1)
    assert obs["action_mask"].shape == (8,) and obs["action_mask"][0] == 1.0
    assert info["case_id"]
    env.close()


@pytest.mark.parametrize("style", ["verbatim", "paraphrase"])
def test_mask_agrees_with_the_contract_and_with_rfc6902(case_dirs: dict[str, Path], style: str) -> None:
    """Every masked candidate is refused by the contract's mask; every unmasked one applies, under the
    reference RFC 6902 implementation too, and touches no immutable path; padding is masked."""
    env = SelectorEnv(case_dir=str(case_dirs[style]), candidates=SIZE)
    rng = np.random.default_rng(0)
    checked = masked = 0
    for index in range(len(env.cases)):
        for case, contract, state, decision in _walk_states(env, index, rng):
            mask = decision.obs["action_mask"]
            assert not mask[len(decision.candidates) :].any()
            immutable = [parse_pointer(p) for p in case.immutable]
            for slot, cand in enumerate(decision.candidates):
                outcome = contract.step(state, cand.text).outcome
                if cand.text == ABSTAIN:
                    assert slot == 0 and mask[slot] == 1.0
                    continue
                checked += 1
                if mask[slot] == 0.0:
                    masked += 1
                    assert outcome in PATCH_CODES, (cand.text, outcome)
                    continue
                assert outcome not in PATCH_CODES, (cand.text, outcome)
                ops = json.loads(cand.text)
                assert len(ops) <= state.ops_left
                jsonpatch.apply_patch(state.candidate, ops)  # raises if not applicable
                for op in ops:
                    tokens = parse_pointer(op["path"])
                    assert tokens and not any(tokens[: len(i)] == i for i in immutable)
    assert checked > 100 and masked > 0  # the walk met both kinds


def test_out_of_list_and_masked_actions_are_refused_by_the_contract(case_dirs: dict[str, Path]) -> None:
    env = SelectorEnv(case_dir=str(case_dirs["verbatim"]))
    for index in range(len(env.cases)):
        obs, _ = env.reset(options={"index": index})
        blocked = np.flatnonzero(obs["action_mask"] == 0)
        if len(blocked):
            _, _, _, _, info = env.step(int(blocked[-1]))
            assert info["masked"] and info["outcome"] in {c.value for c in PATCH_CODES} | {"malformed_json"}
            return
    pytest.fail("no state with a masked slot")


def test_env_is_deterministic_for_a_seed(case_dirs: dict[str, Path]) -> None:
    def episode_trace(seed: int) -> list[Any]:
        env = SelectorEnv(case_dir=str(case_dirs["verbatim"]))
        rng = np.random.default_rng(seed)
        trace = []
        obs, info = env.reset(seed=seed)
        for _ in range(40):
            action = int(rng.choice(np.flatnonzero(obs["action_mask"])))
            obs, reward, done, _, info = env.step(action)
            trace.append((info["case_id"], action, reward, {k: v.tobytes() for k, v in obs.items()}))
            if done:
                obs, info = env.reset()
        return trace

    assert episode_trace(7) == episode_trace(7)
    assert episode_trace(7) != episode_trace(8)


def test_candidates_come_from_the_public_half_only(case_dirs: dict[str, Path]) -> None:
    cases = read_cases(case_dirs["verbatim"])
    for case in cases:
        contract = contract_for(case.public)
        state = contract.initial_state(case.public.candidate)
        texts = [c.text for c in enumerate_candidates(case.public, state, SIZE)]
        assert texts[0] == ABSTAIN and len(texts) == len(set(texts)) <= SIZE
        if case.public.family == "unrepairable":
            withheld = json.dumps(case.offline.corruption["withheld_value"])
            assert not any(withheld in t for t in texts[1:])


def test_paraphrased_values_are_read_back(case_dirs: dict[str, Path]) -> None:
    """Values written in words are candidates too (a verbatim-only reader finds fewer)."""
    from contractrl.rollout.policies import argument_labels, request_values

    found = verbatim_only = 0
    for case in read_cases(case_dirs["paraphrase"]):
        stated = stated_values(case.public)
        found += len(stated)
        verbatim_only += len(request_values(case.public.request, argument_labels(case.public)))
        for key, value in stated.items():
            assert key in case.public.schema["properties"]
            target = case.offline.target
            if isinstance(target, dict) and key in target and case.public.family not in ("injected_text", "stale_schema"):
                assert value == target[key] or isinstance(value, str), (key, value, target[key])
    assert found > verbatim_only


def test_env_settings_are_checked(case_dirs: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown settings"):
        SelectorEnv(case_dir=str(case_dirs["verbatim"]), candidate=4)
    with pytest.raises(ConfigError, match="needs case_dir"):
        SelectorEnv()
    with pytest.raises(ConfigError, match="candidates must be >= 2"):
        SelectorEnv(case_dir=str(case_dirs["verbatim"]), candidates=1)
    with pytest.raises(ConfigError, match=r"reward\.retries"):
        SelectorEnv(case_dir=str(case_dirs["verbatim"]), reward={"retries": 0.1})
    with pytest.raises(ConfigError, match="outside"):
        SelectorEnv(case_dir=str(case_dirs["verbatim"])).reset(options={"index": 10_000})


# --- training, resume and rollouts (RLlib PPO with env runners as Ray actors) ---------------------


def _random_masked_success(case_dir: Path, seeds: int = 3) -> float:
    env = SelectorEnv(case_dir=str(case_dir))
    wins = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        for index in range(len(env.cases)):
            obs, _ = env.reset(options={"index": index})
            done = False
            while not done:
                obs, _, done, _, info = env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
            wins.append(info["success"])
    return float(np.mean(wins))


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from contractrl.configtree import load_config
    from contractrl.selector.config import SelectorConfig
    from contractrl.selector.train import train_selector

    out = tmp_path_factory.mktemp("selector-run") / "run"
    overrides = [
        f"out={out}",
        "data.train_cases=130",
        "data.eval_cases=52",
        "ppo.iterations=4",
        "ppo.train_batch=256",
        "ppo.minibatch=64",
        "eval.every=2",
        "checkpoint.every=2",
        "wandb.mode=disabled",
    ]
    config = load_config(SelectorConfig, None, overrides)
    return config, train_selector(config, progress=False)


@pytest.mark.slow
def test_ppo_beats_a_uniform_random_masked_policy(trained: Any) -> None:
    _, result = trained
    held_out = Path(result.out) / "cases" / "eval"
    random_success = _random_masked_success(held_out)
    assert result.best_success >= random_success + 0.15, (result.best_success, random_success)
    assert (Path(result.selector_dir) / "selector.json").is_file()
    manifest = json.loads((Path(result.out) / "manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["best_success"] == result.best_success


@pytest.mark.slow
def test_resume_continues_from_the_last_checkpoint(trained: Any) -> None:
    import dataclasses

    import pandas as pd

    from contractrl.selector.train import train_selector

    config, result = trained
    longer = dataclasses.replace(config, resume=True, ppo=dataclasses.replace(config.ppo, iterations=6))
    resumed = train_selector(longer, progress=False)
    assert resumed.iterations == 6
    metrics = pd.read_parquet(Path(result.out) / "metrics.parquet")
    assert metrics["step"].tolist() == [1, 2, 3, 4, 5, 6]
    assert set(resumed.evals) == {"iter-00002", "iter-00004", "iter-00006"}
    assert resumed.evals["iter-00004"] == result.evals["iter-00004"]  # kept, not recomputed
    with pytest.raises(ConfigError, match="already holds a selector run"):
        train_selector(dataclasses.replace(config, ppo=dataclasses.replace(config.ppo, iterations=7)), progress=False)
    changed = dataclasses.replace(longer, ppo=dataclasses.replace(longer.ppo, lr=0.5))
    with pytest.raises(ConfigError, match="config differs"):
        train_selector(changed, progress=False)


@pytest.mark.slow
def test_selector_rollouts_are_deterministic_and_judged_like_any_policy(trained: Any, tmp_path: Path) -> None:
    from contractrl.cli import main
    from contractrl.evidence.judge import Judge
    from contractrl.selector.policy import SelectorPolicy

    _, result = trained
    held_out = Path(result.out) / "cases" / "eval"
    policy = SelectorPolicy.load(result.selector_dir)
    cases = [c.public for c in read_cases(held_out)]
    one = EpisodeRunner(policy, LocalPool(1)).run(cases)
    three = EpisodeRunner(policy, LocalPool(3)).run(cases)
    assert [r["attempts"] for r in one] == [r["attempts"] for r in three]
    assert all(step["generated_tokens"] == 0 for row in one for step in row["attempts"])
    # it consults the public contract on every candidate, and the ledger charges it for that
    assert all(step["probes"] >= 1 for row in one for step in row["attempts"])  # ABSTAIN is always listed
    assert any(step["probes"] >= 2 for row in one for step in row["attempts"])
    assert all(row["probes"] == sum(step["probes"] for step in row["attempts"]) for row in one)

    out = tmp_path / "rollout"
    code = main(["rollout", "--cases", str(held_out), "--policy", f"selector:{result.selector_dir}", "--workers", "0",
                 "--out", str(out), "--no-progress"])  # fmt: skip
    assert code == 0
    scored = Judge.from_case_dir(held_out).score_run(out)
    success = sum(v.success for _, v in scored) / len(scored)
    assert success == pytest.approx(result.best_success)


def test_selector_policy_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    from contractrl.selector.policy import SELECTOR_FILE, SelectorPolicy, selector_meta

    with pytest.raises(ConfigError, match="not a selector"):
        SelectorPolicy.load(tmp_path)
    meta = selector_meta(SIZE)
    meta["state_features"] = meta["state_features"][:-1]
    (tmp_path / SELECTOR_FILE).write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="retrain"):
        SelectorPolicy.load(tmp_path)
    with pytest.raises(ConfigError, match="patch arm"):
        SelectorPolicy(module=None, candidates=SIZE, arm="full_regen")


def test_decide_matches_the_environment(case_dirs: dict[str, Path]) -> None:
    """The rollout policy computes the same observation the environment trained on."""
    env = SelectorEnv(case_dir=str(case_dirs["verbatim"]))
    for index in range(10):
        obs, _ = env.reset(options={"index": index})
        assert env._env is not None
        case = env._env.case
        again = decide(case, contract_for(case), env._env.state, SIZE)
        for key, value in obs.items():
            np.testing.assert_array_equal(value, again.obs[key])


def test_the_paired_report_stays_about_the_language_model() -> None:
    import pandas as pd

    from contractrl.analysis.tables import subject_system, with_system

    frame = with_system(
        pd.DataFrame(
            {
                "arm": ["contractrl", "contractrl", "contractrl"],
                "policy": ["selector", "smollm2/lora-r16", "heuristic"],
                "stage": ["ppo", "sft", ""],
            }
        )
    )
    assert subject_system(frame) == "contractrl:smollm2/lora-r16@sft"


def test_disagreements_are_counted_by_json_value(case_dirs: dict[str, Path]) -> None:
    """An argument of 1 where the request states true (or 1.0 where it states 1) disagrees, as the
    `disagree` candidates have it; Python's == would call them equal."""
    from contractrl.selector.features import encode_state

    column = STATE_FEATURES.index("disagreements/4")
    checked = 0
    for case in read_cases(case_dirs["verbatim"]):
        stated = stated_values(case.public)
        confusable = {k: (1 if v is True else float(v)) for k, v in stated.items() if type(v) in (bool, int)}
        if not confusable or not isinstance(case.public.candidate, dict):
            continue
        key, twin = next(iter(confusable.items()))
        contract = contract_for(case.public)
        agreeing = contract.initial_state({**case.public.candidate, key: stated[key]})
        confused = contract.initial_state({**case.public.candidate, key: twin})
        before = encode_state(case.public, agreeing)[column]
        assert encode_state(case.public, confused)[column] == pytest.approx(min(1.0, before + 0.25)), (key, twin)
        checked += 1
    assert checked >= 3
