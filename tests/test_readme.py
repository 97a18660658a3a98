"""Every `contractrl ...` command shown in README.md runs and behaves as the README says."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from .conftest import REPO_ROOT

# check on the example call reports the two corruptions (exit 1); the patch repairs them (exit 0)
EXPECTED_EXIT = {"check": 1, "patch": 0, "demo": 0}


def _readme_commands() -> list[list[str]]:
    text = (REPO_ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL)
    return [shlex.split(line) for block in blocks for line in block.splitlines() if line.startswith("contractrl ")]


def test_readme_commands_run_as_documented() -> None:
    commands = _readme_commands()
    assert {c[1] for c in commands} == set(EXPECTED_EXIT), commands
    exe = Path(sys.executable).with_name("contractrl")
    prefix = [str(exe)] if exe.exists() else [sys.executable, "-m", "contractrl"]
    for argv in commands:
        proc = subprocess.run([*prefix, *argv[1:]], cwd=REPO_ROOT, capture_output=True, text=True)
        assert proc.returncode == EXPECTED_EXIT[argv[1]], (argv, proc.stderr)
        if argv[1] == "check":
            assert [e["code"] for e in json.loads(proc.stdout)["errors"]] == ["wrong_type", "enum_mismatch"]
        if argv[1] == "patch":
            assert json.loads(proc.stdout)["outcome"] == "accepted"
