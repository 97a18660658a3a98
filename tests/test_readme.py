"""Every `contractrl ...` command shown in README.md and docs/*.md runs and behaves as the page says."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO_ROOT, SHARED_DATA

# check on the example call reports the two corruptions (exit 1); everything else succeeds
EXPECTED_EXIT = {"check": 1}


def _readme_commands() -> list[list[str]]:
    # in reading order: later pages use what earlier ones made (cases before rollouts before reports)
    order = ("contract", "cases", "rollouts", "training", "analysis", "cluster")
    docs = sorted(
        (REPO_ROOT / "docs").glob("*.md"), key=lambda p: (order.index(p.stem) if p.stem in order else len(order), p.stem)
    )
    pages = [REPO_ROOT / "README.md", *docs]
    text = "\n".join(page.read_text() for page in pages)
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL)
    return [shlex.split(line) for block in blocks for line in block.splitlines() if line.startswith("contractrl ")]


@pytest.mark.slow
def test_readme_commands_run_as_documented(tmp_path: Path) -> None:
    commands = _readme_commands()
    expected = {"check", "patch", "demo", "cases", "screen", "rollout", "ledger", "train", "tune", "study", "report", "run"}
    assert {c[1] for c in commands} >= expected, commands
    shutil.copytree(REPO_ROOT / "examples", tmp_path / "examples")
    shutil.copytree(REPO_ROOT / "tune_configs", tmp_path / "tune_configs")
    exe = Path(sys.executable).with_name("contractrl")
    prefix = [str(exe)] if exe.exists() else [sys.executable, "-m", "contractrl"]
    ran, elsewhere, without_data = 0, 0, 0
    for argv in commands:
        args = [a.replace("../shared/data", str(SHARED_DATA)) for a in argv[1:]]
        if argv[1] == "run":
            elsewhere += 1
            continue  # the main job runs end to end in test_pipeline.py (the slowest test; once is enough)
        if any("../shared/data" in a for a in argv) and not SHARED_DATA.is_dir():
            without_data += 1
            continue  # the public data is not part of a user's clone; the rest still runs
        proc = subprocess.run([*prefix, *args], cwd=tmp_path, capture_output=True, text=True)
        assert proc.returncode == EXPECTED_EXIT.get(argv[1], 0), (argv, proc.stdout[-500:], proc.stderr[-2000:])
        ran += 1
        if argv[1] == "check":
            assert [e["code"] for e in json.loads(proc.stdout)["errors"]] == ["wrong_type", "enum_mismatch"]
        if argv[1] == "patch":
            assert json.loads(proc.stdout)["outcome"] == "accepted"
        if argv[1] == "rollout":
            assert len(json.loads(proc.stdout)["ledger_sha256"]) == 64
            assert "hf:tiny" not in argv or (tmp_path / "runs" / "models" / "tiny-h64-l2-s0" / "config.json").is_file()
        if argv[1] == "train" and "--print-config" not in argv:
            result = json.loads(proc.stdout)
            assert Path(result["metrics"]).is_file() and len(result["rollout_digest"]) == 64, result
            assert set(result["eval_semantic_success"]) == {"sft", "grpo"}
        if argv[1] == "train" and "--print-config" in argv:
            assert "kl_coef: 0.02" in proc.stdout
        if argv[1] == "tune":
            assert json.loads(proc.stdout)["trials"] == 4  # the LoRA-rank sweep docs/training.md checks
        if argv[1] == "screen":
            result = json.loads(proc.stdout)
            assert result["cases"] == result["schema_valid"] == result["object_match"] == 64
            assert result["retries"] == 0 and "protocol check" in result["note"]
        if argv[1:3] == ["cases", "generate"] and "--source" in argv:
            hosted = {
                "missing_required", "wrong_type", "constraint_violation", "nested_field", "array_element", "multi_field",
                "ambiguous_pointer", "wrong_pointer", "malformed_feedback", "injected_text", "unrepairable",
            }  # fmt: skip
            asked = set(argv[argv.index("--families") + 1].split(",")) if "--families" in argv else hosted
            assert json.loads(proc.stdout)["counts"].keys() == asked
    assert elsewhere == 1 and ran == len(commands) - elsewhere - without_data
    assert without_data == 0 or not SHARED_DATA.is_dir()
