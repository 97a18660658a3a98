"""`ray job submit` as docs/cluster.md says: a local head node started from the project's own
install, a job submitted with the shipped runtime env (cluster/runtime_env.yaml) and Ray's token
authentication, and the job's outputs checked. The job generates cases, then rolls out the
heuristic on a Ray worker actor of that head node."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import REPO_ROOT

pytestmark = pytest.mark.slow
RAY = Path(sys.executable).with_name("ray")
HEAD_OUTPUT = "head.out"  # in the head's temp dir: what `ray start --block` printed
_PORT_OPTIONS = (
    "port",
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "metrics-export-port",
    "runtime-env-agent-port",
    "ray-client-server-port",
    "node-manager-port",
    "object-manager-port",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Head:
    """A running head node: its job-submission address and its temp dir (which holds its logs)."""

    address: str
    temp: str

    def logs(self, chars: int = 3000) -> str:
        """The ends of the head's output and logs: where a head that stopped answering says why."""
        out = []
        for name in (HEAD_OUTPUT, "session_*/logs/dashboard.log", "session_*/logs/dashboard.err", "session_*/logs/raylet.err"):
            for path in sorted(Path(self.temp).glob(name)):
                text = path.read_text(errors="replace")[-chars:]
                if text.strip():
                    out.append(f"--- {path.name} ---\n{text}")
        return "\n".join(out) or "(no head logs)"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_AUTH_MODE"] = "token"  # the head makes a token; the client must ask to send it
    return env


@pytest.fixture(scope="module")
def head() -> Iterator[Head]:
    """A local head node with the dashboard (which serves job submission)."""
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay short
    dashboard = _free_port()
    argv = [str(RAY), "start", "--head", "--block", f"--dashboard-port={dashboard}", f"--temp-dir={temp}"]
    argv += ["--dashboard-host=127.0.0.1", "--include-dashboard=true", "--num-cpus=2"]
    # every port of its own: a Ray instance an earlier test started in this process still holds the
    # defaults (the job agent's 52365 among them), and a head whose agent cannot bind takes no jobs
    for option in _PORT_OPTIONS:
        argv.append(f"--{option}={_free_port()}")
    # its output goes to a file: a pipe nobody reads fills up, and a head blocked writing to it stops answering
    output = Path(temp) / HEAD_OUTPUT
    with output.open("w") as sink:
        proc = subprocess.Popen(argv, env=_env(), stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{dashboard}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                # ray is installed with the project: a head that cannot start is a failure, not a missing resource
                pytest.fail(f"the Ray head node exited while starting: {output.read_text(errors='replace')[-800:]}")
            probe = subprocess.run([str(RAY), "job", "list", "--address", address], env=_env(), capture_output=True, text=True)
            if probe.returncode == 0:
                break
            time.sleep(2)
        else:  # the head started: not answering is a failure, not a missing resource
            pytest.fail("the Ray head node did not answer job requests within 120 s")
        yield Head(address, temp)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # --block: the head's processes stop with it
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


def test_a_submitted_job_runs_contractrl_with_the_shipped_runtime_env(head: Head, tmp_path: Path) -> None:
    cases, run = tmp_path / "cases", tmp_path / "rollout"
    entrypoint = (
        f"python -m contractrl cases generate --seed 1 --n 13 --out {cases} && "
        f"python -m contractrl rollout --cases {cases} --policy heuristic --workers 1 --no-progress --out {run}"
    )
    # `ray job submit -- ARGS` quotes each argument; the two commands go to one shell
    argv = [
        str(RAY),
        "job",
        "submit",
        "--address",
        head.address,
        "--runtime-env",
        "cluster/runtime_env.yaml",
        "--",
        "sh",
        "-c",
        entrypoint,
    ]
    deadline = time.monotonic() + 120
    while True:  # the head may answer before its job agent is up: "No available agent"
        proc = subprocess.run(argv, cwd=REPO_ROOT, env=_env(), capture_output=True, text=True, timeout=900)
        if proc.returncode == 0 or "No available agent" not in proc.stderr or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + head.logs()
    assert "succeeded" in proc.stdout.lower(), proc.stdout[-2000:]
    manifest = json.loads((run / "manifest.json").read_text())
    assert len(manifest["ledger_sha256"]) == 64 and manifest["labels"]["mode"] == "same_information"
    from contractrl.rollout.ledger import read_ledger

    assert len(read_ledger(run)) == 13  # one episode per case, read back through the verified reader


def test_without_the_token_mode_the_client_is_refused(head: Head) -> None:
    """The step docs/cluster.md documents: a client that does not send the token is turned away."""
    env = _env()
    env.pop("RAY_AUTH_MODE")
    proc = subprocess.run(
        [str(RAY), "job", "list", "--address", head.address], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0 and "auth" in (proc.stdout + proc.stderr).lower(), proc.stderr[-2000:] + head.logs()


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for a parent to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_the_project_head_starts_beside_another_and_stops_alone(head: Head, tmp_path: Path) -> None:
    """cluster/local-head.sh (docs/cluster.md): free ports and a temp dir of its own, so it starts
    while another head runs; `contractrl run` joins it only when asked; its stop ends it alone."""
    script = REPO_ROOT / "cluster" / "local-head.sh"
    directory = Path(tempfile.mkdtemp(prefix="crl", dir="/tmp"))  # Ray's socket paths must stay short
    env = {**_env(), "RAY_BIN": str(RAY), "PYTHONPATH": str(REPO_ROOT)}
    try:
        start = subprocess.run([str(script), "start", str(directory), "1"], env=env, capture_output=True, text=True, timeout=300)
        assert start.returncode == 0, start.stderr[-2000:]
        assert start.stdout.strip() == (directory / "address").read_text().strip() != head.address
        gcs = (directory / "gcs_address").read_text().strip()
        probe = (
            "import sys; from contractrl.pipeline import attach_ray; import ray; "
            "print(attach_ray(sys.argv[1] or None)); print(ray.get_runtime_context().gcs_address.rsplit(':', 1)[1])"
        )
        plain = subprocess.run([sys.executable, "-c", probe, ""], env=env, capture_output=True, text=True, timeout=300)
        assert plain.returncode == 0, plain.stderr[-2000:]
        said, port = plain.stdout.strip().splitlines()[-2:]
        assert said.startswith("Ray: a local instance of its own") and port != gcs.rsplit(":", 1)[1]
        joined = subprocess.run([sys.executable, "-c", probe, gcs], env=env, capture_output=True, text=True, timeout=300)
        assert joined.returncode == 0, joined.stderr[-2000:]
        said, port = joined.stdout.strip().splitlines()[-2:]
        assert said.startswith(f"Ray: attached to the cluster at {gcs}") and port == gcs.rsplit(":", 1)[1]
        pid = int((directory / "pid").read_text())
    finally:
        stop = subprocess.run([str(script), "stop", str(directory)], env=env, capture_output=True, text=True, timeout=120)
    assert stop.returncode == 0, stop.stderr
    assert not _alive(pid), "the head's `ray start --block` still runs"
    # the other head still takes requests
    listed = subprocess.run([str(RAY), "job", "list", "--address", head.address], env=_env(), capture_output=True, timeout=120)
    assert listed.returncode == 0, listed.stderr[-2000:]
    shutil.rmtree(directory, ignore_errors=True)


def test_a_job_submitted_to_the_project_head_succeeds_while_another_ray_instance_runs(head: Head, tmp_path: Path) -> None:
    """Issue 50: with another Ray instance on the machine (``head``: its own temp dir and ports),
    a head started the documented way (cluster/local-head.sh, then ``ray job submit`` with
    ``RAY_AUTH_MODE=token``, right after ``start`` returns) takes the job and runs it; it failed
    with "No available agent" when the second head took Ray's default ports. The job runs on the
    project's head, not the other one, and ``stop`` ends only the head this test started."""
    script = REPO_ROOT / "cluster" / "local-head.sh"
    directory = Path(tempfile.mkdtemp(prefix="crl", dir="/tmp"))  # Ray's socket paths must stay short
    env = {**_env(), "RAY_BIN": str(RAY)}
    cases = tmp_path / "cases"
    try:
        start = subprocess.run([str(script), "start", str(directory), "1"], env=env, capture_output=True, text=True, timeout=300)
        assert start.returncode == 0, start.stderr[-2000:]
        address = start.stdout.strip()
        assert address == (directory / "address").read_text().strip() != head.address
        submit = [str(RAY), "job", "submit", "--address", address, "--runtime-env", "cluster/runtime_env.yaml"]
        submit += ["--", "python", "-m", "contractrl", "cases", "generate", "--seed", "5", "--n", "7", "--out", str(cases)]
        job = subprocess.run(submit, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
        head_log = "".join(p.read_text(errors="replace")[-2000:] for p in sorted(directory.glob("session_*/logs/dashboard*.log")))
        assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:] + head_log
        assert "succeeded" in job.stdout.lower(), job.stdout[-2000:]
        found = re.search(r"raysubmit_\w+", job.stdout)
        assert found is not None, job.stdout[-2000:]
        submission = found.group()
        mine = subprocess.run(
            [str(RAY), "job", "list", "--address", address], env=env, capture_output=True, text=True, timeout=120
        )
        other = subprocess.run(
            [str(RAY), "job", "list", "--address", head.address], env=env, capture_output=True, text=True, timeout=120
        )
        assert submission in mine.stdout and submission not in other.stdout, (mine.stdout[-1000:], other.stdout[-1000:])
        pid = int((directory / "pid").read_text())
    finally:
        stop = subprocess.run([str(script), "stop", str(directory)], env=env, capture_output=True, text=True, timeout=120)
    assert stop.returncode == 0, stop.stderr
    assert not _alive(pid), "the project head's `ray start --block` still runs"
    from contractrl.tasks.store import read_public

    assert len(read_public(cases)) == 7  # the job's output, read back through the verified reader
    listed = subprocess.run([str(RAY), "job", "list", "--address", head.address], env=_env(), capture_output=True, timeout=120)
    assert listed.returncode == 0, listed.stderr[-2000:]  # the other instance still takes requests
    shutil.rmtree(directory, ignore_errors=True)
