"""The cluster launch files in cluster/: they parse, and every `contractrl train` line in them runs.

A command line in a comment or a README rots silently; here each one is split like a shell would,
parsed by the real ``contractrl`` argument parser and loaded through the real config tree, so a
renamed key or a missing config file fails this test instead of a cluster job.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from contractrl.configtree import load_config
from contractrl.errors import ConfigError
from contractrl.trainer.config import TrainConfig

REPO_ROOT = Path(__file__).resolve().parent.parent
CLUSTER = REPO_ROOT / "cluster"
RUNTIME_ENV = CLUSTER / "runtime_env.yaml"
CLUSTER_YAML = CLUSTER / "cluster.yaml"
RAYJOB = CLUSTER / "rayjob.yaml"
README = CLUSTER / "README.md"
MARKER = "contractrl train"
# files scanned for command lines containing this
LINE_MARKER = "contractrl train --config"
SCANNED = (RUNTIME_ENV, CLUSTER_YAML, RAYJOB, README)


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def train_args(line: str) -> list[str]:
    """The arguments after ``contractrl train`` on a command line, split like a shell would.

    Inline code in Markdown ends at a backtick, so the command is cut there.
    """
    _, sep, rest = line.partition(MARKER)
    if not sep:
        raise ValueError(f"no {MARKER!r} in {line!r}")
    return shlex.split(rest.split("`", 1)[0])


def split_train_args(args: list[str]) -> tuple[str | None, list[str]]:
    """(``--config`` value, ``key=value`` overrides) of ``contractrl train`` arguments; other options are skipped."""
    config: str | None = None
    overrides: list[str] = []
    it = iter(args)
    for arg in it:
        if arg == "--config":
            config = next(it, None)
            if config is None:
                raise ValueError("--config without a file")
        elif arg.startswith("--config="):
            config = arg.partition("=")[2]
        elif arg.startswith("-"):
            continue  # a flag such as --no-progress; the argument parser judges it
        else:
            overrides.append(arg)
    return config, overrides


def command_lines() -> list[tuple[str, str]]:
    """(id, command line) for every `contractrl train` line in the cluster files, and the RayJob entrypoint."""
    found = [("rayjob.yaml:spec.entrypoint", load_yaml(RAYJOB)["spec"]["entrypoint"])]
    for path in SCANNED:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if LINE_MARKER in line:
                found.append((f"{path.name}:{number}", line))
    return found


COMMANDS = command_lines()


def test_runtime_env() -> None:
    env = load_yaml(RUNTIME_ENV)
    assert env["working_dir"] == "."
    assert ".venv" in env["excludes"]
    assert {".git", "runs", ".pytest_cache", ".ruff_cache", ".hypothesis"} <= set(env["excludes"])
    names = {req.split(">")[0].split("<")[0].split("=")[0].split("[")[0] for req in env["pip"]}
    assert "torch" not in names and "ray" not in names, "the cluster image provides torch and ray"
    assert all(isinstance(v, str) for v in env["env_vars"].values()), "env_vars values must be strings"
    assert env["env_vars"]["WANDB_MODE"] == "offline"


def test_cluster_yaml() -> None:
    cluster = load_yaml(CLUSTER_YAML)
    types = cluster["available_node_types"]
    assert cluster["head_node_type"] in types
    resources = {name: spec["resources"] for name, spec in types.items()}
    assert any(r.get("GPU", 0) > 0 for r in resources.values()), resources
    assert any(set(r) == {"CPU"} and name != cluster["head_node_type"] for name, r in resources.items()), resources
    assert sum(spec["max_workers"] for spec in types.values()) <= cluster["max_workers"]
    assert cluster["provider"]["type"] == "aws"


def test_rayjob() -> None:
    job = load_yaml(RAYJOB)
    assert job["apiVersion"] == "ray.io/v1"
    assert job["kind"] == "RayJob"
    spec = job["spec"]
    assert spec["entrypoint"].startswith("python -m contractrl train")
    runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
    assert runtime_env["working_dir"]
    # the inline runtime env installs at least what cluster/runtime_env.yaml does
    assert set(load_yaml(RUNTIME_ENV)["pip"]) <= set(runtime_env["pip"])
    cluster = spec["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"]["spec"]]
    pods += [group["template"]["spec"] for group in cluster["workerGroupSpecs"]]
    for pod in pods:
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
        for container in pod["containers"]:
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert claims.get(mounts.get("/mnt/runs")) == "contractrl-runs", container["name"]
    gpus = [
        g
        for g in cluster["workerGroupSpecs"]
        if "nvidia.com/gpu" in g["template"]["spec"]["containers"][0]["resources"]["limits"]
    ]
    assert gpus, "a worker group with GPUs hosts the learner ranks"


def test_every_file_has_a_train_command() -> None:
    files = {ident.partition(":")[0] for ident, _ in COMMANDS}
    assert {p.name for p in SCANNED} <= files


def test_train_command_helpers(tmp_path: Path) -> None:
    config_file = tmp_path / "small.yaml"
    config_file.write_text("model:\n  name: tiny\nresources:\n  num_workers: 2\n", encoding="utf-8")
    line = f"#   ray job submit -- python -m contractrl train --config {config_file} out='/mnt/a b' resources.num_learners=2"
    config, overrides = split_train_args(train_args(line))
    assert config == str(config_file)
    assert overrides == ["out=/mnt/a b", "resources.num_learners=2"]
    loaded = load_config(TrainConfig, config, overrides)
    assert loaded.out == "/mnt/a b"
    assert (loaded.resources.num_learners, loaded.resources.num_workers) == (2, 2)
    # Markdown inline code ends at the backtick; --config=FILE works too
    assert split_train_args(train_args("run `contractrl train --no-progress --config=x.yaml seed=3` here")) == (
        "x.yaml",
        ["seed=3"],
    )
    with pytest.raises(ConfigError, match=r"resources\.num_learner"):
        load_config(TrainConfig, config, ["resources.num_learner=2"])
    with pytest.raises(ValueError):
        split_train_args(["--config"])


@pytest.mark.parametrize("line", [line for _, line in COMMANDS], ids=[ident for ident, _ in COMMANDS])
def test_train_command_line(line: str) -> None:
    from contractrl.cli import build_parser

    args = train_args(line)
    config, overrides = split_train_args(args)
    try:
        parsed = build_parser().parse_args(["train", *args])
    except SystemExit as exc:  # argparse reports a usage error by exiting
        pytest.fail(f"`contractrl train {shlex.join(args)}` is rejected by the argument parser (exit {exc.code})")
    assert isinstance(parsed, argparse.Namespace)
    assert parsed.config == config
    assert parsed.overrides == overrides, vars(parsed)
    assert config is not None, "cluster commands name their config file"
    path = REPO_ROOT / config
    assert path.is_file(), f"{config} (named by --config) does not exist under {REPO_ROOT}"
    loaded = load_config(TrainConfig, path, overrides)
    assert Path(loaded.out).is_absolute(), f"out={loaded.out} must be an absolute path on shared storage"


def test_local_head_script_is_valid_sh_and_refuses_what_it_cannot_stop(tmp_path: Path) -> None:
    """cluster/local-head.sh (docs/cluster.md): POSIX sh, usage errors exit 2, and `stop` of a
    directory it did not start touches nothing. Starting a head is tests/test_ray_job.py's."""
    import os
    import subprocess

    script = CLUSTER / "local-head.sh"
    assert os.access(script, os.X_OK)
    assert subprocess.run(["sh", "-n", str(script)], capture_output=True).returncode == 0
    assert subprocess.run([str(script)], capture_output=True).returncode == 2
    assert subprocess.run([str(script), "restart", str(tmp_path)], capture_output=True).returncode == 2
    stop = subprocess.run([str(script), "stop", str(tmp_path)], capture_output=True, text=True)
    assert stop.returncode == 1 and "no head started from" in stop.stderr
