"""The command-line contract: JSON on stdout, exit 0 accepted / 1 rejected / 2 usage or input error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from contractrl.cli import main

SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "n": {"type": "integer"}, "when": {"type": "string", "format": "date"}},
    "required": ["id", "n"],
    "additionalProperties": False,
}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {
        "schema": tmp_path / "schema.json",
        "good": tmp_path / "good.json",
        "bad": tmp_path / "bad.json",
        "dup": tmp_path / "dup.json",
        "nan": tmp_path / "nan.json",
        "trunc": tmp_path / "trunc.json",
        "patch": tmp_path / "patch.json",
        "contract": tmp_path / "contract.json",
    }
    paths["schema"].write_text(json.dumps(SCHEMA))
    paths["good"].write_text('{"id": "a", "n": 1}')
    paths["bad"].write_text('{"id": "a", "n": "1", "x": 0}')
    paths["dup"].write_text('{"id": "a", "n": 1, "n": 2}')
    paths["nan"].write_text('{"id": "a", "n": NaN}')
    paths["trunc"].write_text('{"id": "a", "n": ')
    paths["patch"].write_text('[{"op": "replace", "path": "/n", "value": 1}, {"op": "remove", "path": "/x"}]')
    paths["contract"].write_text(json.dumps({"rules": [{"kind": "compare", "left": "/n", "op": ">", "value": 5}]}))
    return paths


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


@pytest.mark.parametrize("backend", ["rs", "python"])
def test_check_accepts_and_rejects(files: dict[str, Path], capsys: pytest.CaptureFixture[str], backend: str) -> None:
    code, out = _run(capsys, "check", "--schema", str(files["schema"]), "--call", str(files["good"]), "--backend", backend)
    assert code == 0 and out == {"status": "accepted", "errors": []}
    code, out = _run(capsys, "check", "--schema", str(files["schema"]), "--call", str(files["bad"]), "--backend", backend)
    assert code == 1 and out["status"] == "rejected"
    assert [(e["code"], e["pointer"]) for e in out["errors"]] == [("wrong_type", "/n"), ("additional_property", "/x")]
    assert set(out["errors"][0]) == {"code", "pointer", "expected", "actual", "message"}


@pytest.mark.parametrize(("name", "code"), [("dup", "duplicate_key"), ("nan", "non_finite_number"), ("trunc", "truncated")])
def test_check_reads_call_as_raw_text(files: dict[str, Path], capsys: pytest.CaptureFixture[str], name: str, code: str) -> None:
    status, out = _run(capsys, "check", "--schema", str(files["schema"]), "--call", str(files[name]))
    assert status == 1 and out["errors"][0]["code"] == code


def test_check_with_contract(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    status, out = _run(
        capsys, "check", "--schema", str(files["schema"]), "--call", str(files["good"]), "--contract", str(files["contract"])
    )
    assert status == 1 and out["errors"][0]["code"] == "cross_field"


def test_patch_repairs_and_reports_collateral(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    status, out = _run(
        capsys, "patch", "--schema", str(files["schema"]), "--call", str(files["bad"]), "--patch", str(files["patch"])
    )
    assert status == 0
    assert out == {
        "outcome": "accepted",
        "object": {"id": "a", "n": 1},
        "report": {"status": "accepted", "errors": []},
        "collateral": [],
    }


def test_patch_mask_and_budget(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    args = ["patch", "--schema", str(files["schema"]), "--call", str(files["bad"]), "--patch", str(files["patch"])]
    status, out = _run(capsys, *args, "--immutable", "/x")
    assert status == 1 and out["outcome"] == "path_immutable" and out["object"] is None
    assert out["report"]["errors"][0]["pointer"] == "/x"
    status, out = _run(capsys, *args, "--max-ops", "1")
    assert status == 1 and out["outcome"] == "op_budget_exceeded"
    status, out = _run(capsys, *args, "--allow-ops", "add,replace")
    assert status == 1 and out["outcome"] == "op_not_allowed"


def test_patch_applied_but_still_invalid_returns_object_and_report(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files["patch"].write_text('[{"op": "replace", "path": "/n", "value": 1}]')
    status, out = _run(
        capsys, "patch", "--schema", str(files["schema"]), "--call", str(files["bad"]), "--patch", str(files["patch"])
    )
    assert status == 1
    assert out["outcome"] == "additional_property"
    assert out["object"] == {"id": "a", "n": 1, "x": 0}
    assert out["report"]["errors"][0]["pointer"] == "/x"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check", "--schema", "MISSING.json", "--call", "CALL"], "schema file not found"),
        (["check", "--schema", "SCHEMA_DIR", "--call", "GOOD"], "is a directory"),
        (["check", "--schema", "DUP", "--call", "GOOD"], "not strict JSON"),
        (["check", "--schema", "SCHEMA", "--call", "GOOD", "--contract", "SCHEMA"], "unknown contract fields"),
        (["patch", "--schema", "SCHEMA", "--call", "TRUNC", "--patch", "PATCH"], "call file"),
    ],
)
def test_input_errors_exit_2_with_clear_message(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str
) -> None:
    (tmp_path / "schema_dir").mkdir()
    names = {
        "SCHEMA": files["schema"],
        "GOOD": files["good"],
        "DUP": files["dup"],
        "TRUNC": files["trunc"],
        "PATCH": files["patch"],
    }
    names["SCHEMA_DIR"] = tmp_path / "schema_dir"
    resolved = [str(names[a]) if a in names else a for a in argv]
    assert main(resolved) == 2
    assert message in capsys.readouterr().err


def test_unknown_schema_keyword_is_exit_2_unless_lenient(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    files["schema"].write_text(json.dumps({**SCHEMA, "nullable": True}))
    assert main(["check", "--schema", str(files["schema"]), "--call", str(files["good"])]) == 2
    assert "unknown keyword 'nullable'" in capsys.readouterr().err
    assert main(["check", "--schema", str(files["schema"]), "--call", str(files["good"]), "--lenient"]) == 0


def test_usage_errors_exit_2() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["check", "--schema", "s.json"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["patch", "--schema", "s", "--call", "c", "--patch", "p", "--allow-ops", "merge"])
    assert exc.value.code == 2


def test_console_script_and_demo_run_end_to_end(files: dict[str, Path]) -> None:
    exe = Path(sys.executable).with_name("contractrl")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "contractrl"]
    proc = subprocess.run(
        [*cmd, "check", "--schema", str(files["schema"]), "--call", str(files["bad"])], capture_output=True, text=True
    )
    assert proc.returncode == 1 and json.loads(proc.stdout)["status"] == "rejected"
    demo = subprocess.run([*cmd, "demo"], capture_output=True, text=True)
    assert demo.returncode == 0, demo.stderr
    assert "0 unsafe dispatches" in demo.stdout
    for code in (
        "accepted",
        "path_immutable",
        "path_unavailable",
        "truncated",
        "malformed_json",
        "op_budget_exceeded",
        "cross_field",
    ):
        assert code in demo.stdout


def test_patch_on_an_already_valid_call_is_still_checked(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    files["patch"].write_text('[{"op": "replace", "path": "/n", "value": "x"}]')
    args = ["patch", "--schema", str(files["schema"]), "--call", str(files["good"]), "--patch", str(files["patch"])]
    status, out = _run(capsys, *args)
    assert status == 1 and out["outcome"] == "wrong_type"


@pytest.mark.parametrize(
    ("text", "outcome"),
    [
        ("ABSTAIN", "abstain"),
        ("ABSTAIN: the request does not say", "abstain"),
        ("I'm sorry, I cannot change this call.", "refusal"),
        ('[{"op": "replace", "path": "/n/' + "9" * 5000 + '", "value": 1}]', "path_unavailable"),
        ('[{"op": "add", "path": "/' + "1" * 4400 + '", "value": 1}]', "accepted"),
        ('[{"op": "replace", "path": "/n", "value": 1e-400}]', "non_finite_number"),
    ],
)
def test_patch_file_answers_are_read_like_model_text(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], text: str, outcome: str
) -> None:
    """A patch file is bytes: ABSTAIN and refusals are recognised, hostile pointers are typed outcomes."""
    files["patch"].write_bytes(text.encode())
    schema = files["schema"]
    if outcome == "accepted":  # a digit-named key is an object key, not an index: allowed by an open schema
        schema = files["schema"].with_name("open.json")
        schema.write_text('{"type": "object"}')
    code, out = _run(capsys, "patch", "--schema", str(schema), "--call", str(files["good"]), "--patch", str(files["patch"]))
    assert out["outcome"] == outcome
    assert code == (0 if outcome == "accepted" else 1)


def test_check_refuses_an_end_before_start_in_lower_case_rfc3339(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The reported instance, on the shipped example: lower-case separators no longer skip the rule."""
    example = Path(__file__).resolve().parents[1] / "examples" / "calendar"
    call = json.loads((example / "call.json").read_text())
    call.update(start="2026-12-01t10:00:00z", end="2026-11-30t09:00:00z", reminder_minutes=15, visibility="busy")
    path = tmp_path / "call.json"
    path.write_text(json.dumps(call))
    code, out = _run(
        capsys,
        "check",
        "--schema",
        str(example / "schema.json"),
        "--call",
        str(path),
        "--contract",
        str(example / "contract.json"),
    )
    assert code == 1 and [e["code"] for e in out["errors"]] == ["cross_field"]


def test_run_names_the_train_prefix_a_key_lacks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "sft.steps=3", "--print-config"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "contractrl run: error: unknown config key 'sft.steps'; did you mean 'train.sft.steps'? "
        "(the main job's training keys are under train.)"
    )
    assert main(["run", "train.sft.steps=3", "--print-config"]) == 0


def test_run_reads_a_config_file_before_the_overrides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    (tmp_path / "job.yaml").write_text(
        "train:\n  sft: {steps: 7, optim: {lr: 1.0e-3}}\n  data: {families: [wrong_type, missing_required]}\n"
        "report: {workers: 0}\nbfcl: {category: ''}\n"
    )
    assert main(["run", "--config", str(tmp_path / "job.yaml"), "train.sft.steps=9", "--print-config"]) == 0
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["train"]["sft"]["steps"] == 9  # the command line wins
    assert config["train"]["sft"]["optim"]["lr"] == 1.0e-3 and config["train"]["sft"]["optim"]["schedule"] == "cosine"
    assert config["train"]["data"]["families"] == ["wrong_type", "missing_required"]
    assert config["report"]["workers"] == 0 and config["bfcl"]["category"] == ""
    (tmp_path / "bad.yaml").write_text("sft: {steps: 7}\n")
    assert main(["run", "--config", str(tmp_path / "bad.yaml"), "--print-config"]) == 2
    assert "did you mean 'train.sft.steps'" in capsys.readouterr().err


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("contractrl.pipeline.run_main_job", interrupted)
    assert main(["run", "--quick", "--out", "/nonexistent/never-written"]) == 130
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == "contractrl run: interrupted; run the same command again to resume (finished steps are kept)"
    assert "Traceback" not in captured.err


@pytest.mark.parametrize("address", ["", "127.0.0.1:6399"])
def test_a_ray_start_timeout_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], address: str
) -> None:
    """On a loaded machine the raylet can miss Ray's start-up deadline; Ray raises a bare Exception
    with a traceback. The command says in one line what failed and what to try."""
    ray = pytest.importorskip("ray")

    def timed_out(*args: object, **kwargs: object) -> None:
        raise Exception(
            "The current node timed out during startup. This could happen because some of the raylet failed "
            "to startup or the GCS has become overloaded.\nmore detail"
        )

    monkeypatch.setattr(ray, "init", timed_out)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    if address:
        monkeypatch.setenv("RAY_ADDRESS", address)
    else:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cases = tmp_path / "cases"
    assert main(["cases", "generate", "--seed", "1", "--n", "3", "--out", str(cases)]) == 0
    capsys.readouterr()
    argv = ["rollout", "--cases", str(cases), "--policy", "heuristic", "--workers", "1", "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("contractrl rollout: error: could not ")
    assert "The current node timed out during startup" in err and "more detail" not in err
    if address:
        assert f"join the Ray cluster at {address}" in err and "check the address" in err
    else:
        assert "start Ray" in err and "overloaded" in err
