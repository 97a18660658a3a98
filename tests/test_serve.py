"""``contractrl serve`` (issue 52, section 2): the gate's HTTP JSON API.

Everything a request means (routing, the body's shape, the decision's mapping, every error) lives
in a plain class, :class:`GateService`, and is tested here without Ray; the batcher that lets an
``hf:`` policy decode concurrent calls together is tested with a recording policy. One slow test
deploys the real thing on a local Ray instance of its own and checks, over HTTP, that every
decision has its ledger row once Serve shuts the replica down.
"""

from __future__ import annotations

import asyncio
import json
import os
import runpy
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from contractrl.cli import main
from contractrl.configtree import from_dict
from contractrl.errors import ConfigError, InputFileError
from contractrl.gate import RepairGate, builtin_tool
from contractrl.gate.batching import BatchingPolicy
from contractrl.gate.options import AutoscalingOptions, ServeOptions
from contractrl.gate.serve import absolute_paths, check_options, deployment_options, read_body
from contractrl.gate.service import (
    GateService,
    RequestError,
    build_gate,
    load_tools,
    parse_repair_body,
    read_shards,
    shard_dir,
)
from contractrl.rollout.ledger import read_ledger
from contractrl.rollout.policies import Generation, Observation
from contractrl.tasks.cases import ABSTAIN
from contractrl.validators import Verifier, load_contract

EVENT = builtin_tool("create_event")
# the quickstart's calls (examples/gate_quickstart.py): one valid, one the heuristic repairs
QUICKSTART = runpy.run_path(str(Path(__file__).resolve().parents[1] / "examples" / "gate_quickstart.py"))
VALID, REPAIRABLE = QUICKSTART["VALID"], QUICKSTART["BROKEN"]
UNREPAIRABLE = {k: v for k, v in VALID.items() if k != "calendar_id"}  # which calendar? nothing public says
REQUEST = "Book the design review; remind me 15 minutes before by popup."


def _body(call: Any, request: str | None = None) -> bytes:
    return json.dumps({"call": call, **({"request": request} if request is not None else {})}).encode()


def _service(tmp_path: Path, **options: Any) -> GateService:
    return GateService.from_options(ServeOptions(ledger=str(tmp_path / "ledger"), flush_every_s=0, **options), "r0")


def _event_verifier() -> Verifier:
    return Verifier.build(EVENT["definition"]["function"]["parameters"], load_contract(EVENT["contract"]), backend="python")


# -- the body ---------------------------------------------------------------------------------------


def test_a_body_holds_a_call_and_an_optional_request() -> None:
    call = {"name": "create_event", "arguments": VALID}
    assert parse_repair_body(_body(call)) == (call, None)
    assert parse_repair_body(_body(call, REQUEST)) == (call, REQUEST)
    text_call = {"id": "c1", "type": "function", "function": {"name": "create_event", "arguments": json.dumps(VALID)}}
    assert parse_repair_body(_body(text_call)) == (text_call, None)


@pytest.mark.parametrize(
    ("body", "code", "status"),
    [
        (b"{not json", "malformed_json", 400),
        (b"", "malformed_json", 400),
        (b'{"call": {"name": "a"}, "call": {"name": "b"}}', "duplicate_key", 400),  # which one would run?
        (b'{"call": {"name": "a", "arguments": {"x": NaN}}}', "non_finite_number", 400),
        (b'{"call": {"name": "a"}} trailing', "malformed_json", 400),
        (b"\xff\xfe", "malformed_json", 400),
        (b"[1, 2]", "bad_request", 400),
        (b'"a string"', "bad_request", 400),
        (b"{}", "bad_request", 400),
        (b'{"call": {"name": "a"}, "tool": "x"}', "bad_request", 400),
        (b'{"call": {"name": "a"}, "request": 3}', "bad_request", 400),
        (b'{"call": {"name": "a"}, "request": "' + b"x" * 200 + b'"}', "too_large", 413),
    ],
)
def test_a_body_the_api_cannot_read_is_a_typed_error(body: bytes, code: str, status: int) -> None:
    with pytest.raises(RequestError) as caught:
        parse_repair_body(body, max_bytes=100)
    reply = caught.value.reply()
    assert (reply.status, reply.body["error"]["code"]) == (status, code)
    assert "\n" not in reply.body["error"]["reason"] and reply.body["error"]["reason"]


# -- one replica, without Ray -----------------------------------------------------------------------


def test_decisions_map_to_dispatch_or_refusal_and_each_has_its_row(tmp_path: Path) -> None:
    service = _service(tmp_path)
    valid = service.repair(_body({"id": "call_1", "name": "create_event", "arguments": VALID}))
    assert valid.status == 200 and valid.body["dispatch"] == {"name": "create_event", "arguments": VALID, "id": "call_1"}
    assert valid.body["repaired"] is False and valid.body["attempts"] == 0

    openai = {"type": "function", "function": {"name": "create_event", "arguments": json.dumps(REPAIRABLE)}}
    repaired = service.repair(_body(openai, REQUEST))
    assert repaired.status == 200 and repaired.body["repaired"] is True and repaired.body["attempts"] >= 1
    sent = repaired.body["dispatch"]["arguments"]
    assert sent != REPAIRABLE and _event_verifier().verify(sent).accepted  # an independent backend agrees

    unknown = service.repair(_body({"name": "drop_database", "arguments": {}}))
    assert unknown.status == 200 and unknown.body["refusal"]["code"] == "unknown_tool" and "dispatch" not in unknown.body
    not_json = service.repair(_body({"name": "create_event", "arguments": '{"title": x}'}))
    assert not_json.body["refusal"]["code"] == "malformed_json"
    abstained = service.repair(_body({"name": "create_event", "arguments": UNREPAIRABLE}))
    assert abstained.body["refusal"] == {"code": "abstain", "reason": "abstain"} and abstained.body["attempts"] == 1

    decided = [valid, repaired, unknown, not_json, abstained]
    assert service.health().body["decisions"] == len(decided)
    digest = service.close()
    rows = read_ledger(tmp_path / "ledger" / "replica-r0")  # frozen: files, chain and digest verified
    assert digest and len(rows) == len(decided)
    assert [r["row_hash"] for r in rows] == [reply.body["row_hash"] for reply in decided]
    assert [r["decision"] for r in rows] == ["dispatch", "dispatch", "refusal", "refusal", "refusal"]
    assert rows[0]["call_id"] == "call_1" and rows[1]["request"] == REQUEST


def test_requests_that_reach_no_decision_are_typed_errors_and_record_nothing(tmp_path: Path) -> None:
    service = _service(tmp_path)
    replies = {
        "not json": service.repair(b"{nope}"),
        "no name": service.repair(_body({"arguments": VALID})),
        "bad id": service.repair(_body({"name": "create_event", "arguments": VALID, "id": 7})),
        "call not an object": service.repair(_body(["create_event"])),
        "too large": GateService(service.gate, replica="r0", flush_every_s=0, max_body_bytes=50).repair(
            _body({"name": "create_event", "arguments": VALID})
        ),
    }
    codes = {name: (reply.status, reply.body["error"]["code"]) for name, reply in replies.items()}
    assert codes == {
        "not json": (400, "malformed_json"),
        "no name": (400, "bad_call"),
        "bad id": (400, "bad_call"),
        "call not an object": (400, "bad_call"),
        "too large": (413, "too_large"),
    }
    assert all("Traceback" not in r.body["error"]["reason"] and "\n" not in r.body["error"]["reason"] for r in replies.values())
    assert service.gate.decisions == 0


def test_routes_health_and_wrong_methods(tmp_path: Path) -> None:
    service = _service(tmp_path)
    health = asyncio.run(service.handle("GET", "/healthz", b""))
    assert health.status == 200 and health.body["status"] == "ok" and health.body["policy"] == "heuristic"
    assert "create_event" in health.body["tools"] and health.body["ledger"].endswith("replica-r0")
    assert asyncio.run(service.handle("GET", "/repair", b"")).body["error"]["code"] == "method_not_allowed"
    assert asyncio.run(service.handle("POST", "/healthz", b"")).status == 405
    missing = asyncio.run(service.handle("POST", "/execute", b"{}"))
    assert (missing.status, missing.body["error"]["code"]) == (404, "not_found")
    ok = asyncio.run(service.handle("POST", "/repair/", _body({"name": "create_event", "arguments": VALID})))
    assert ok.status == 200 and "dispatch" in ok.body


def test_an_unexpected_failure_is_a_one_line_500_not_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    service = _service(tmp_path)

    def broken(call: Any, request: str | None = None) -> Any:
        raise KeyError("secret internals\n  File 'gate.py', line 1")

    monkeypatch.setattr(service.gate, "repair", broken)
    reply = service.repair(_body({"name": "create_event", "arguments": VALID}))
    assert (reply.status, reply.body["error"]["code"]) == (500, "internal_error")
    assert "\n" not in reply.body["error"]["reason"] and "File" not in reply.body["error"]["reason"]


def test_shutdown_drains_then_freezes_and_refuses_later_calls(tmp_path: Path) -> None:
    service = _service(tmp_path)
    bodies = [_body({"name": "create_event", "arguments": REPAIRABLE if i % 2 else VALID}, REQUEST) for i in range(24)]

    async def burst() -> list[Any]:
        return await service.handle_many([("POST", "/repair", body) for body in bodies])

    replies = asyncio.run(burst())
    assert all(r.status == 200 and "dispatch" in r.body for r in replies)
    assert service.close() is not None and service.close() is None  # a second close is a no-op
    late = service.repair(bodies[0])
    assert (late.status, late.body["error"]["code"]) == (503, "shutting_down")
    assert service.health().status == 503
    rows = read_shards(tmp_path / "ledger")
    assert len(rows) == len(bodies) and {r["replica"] for r in rows} == {"r0"}
    assert sorted(r["row_hash"] for r in rows) == sorted(r.body["row_hash"] for r in replies)


def test_the_flush_timer_writes_rows_while_serving(tmp_path: Path) -> None:
    service = GateService.from_options(ServeOptions(ledger=str(tmp_path / "ledger"), flush_every_s=0.05), "r0")
    service.repair(_body({"name": "create_event", "arguments": VALID}))
    deadline = time.monotonic() + 10
    # a flush writes the shard, then its timing file: the timing file says the flush has finished
    while time.monotonic() < deadline and not list((tmp_path / "ledger" / "replica-r0").glob("ledger-timing/*.parquet")):
        time.sleep(0.05)
    assert len(read_ledger(tmp_path / "ledger" / "replica-r0", require_frozen=False)) == 1  # on disk before shutdown
    service.close()


def test_replica_shards_are_read_and_verified_together(tmp_path: Path) -> None:
    calls = {"a": 3, "b": 2}
    for replica, n in calls.items():
        gate = build_gate(ServeOptions(ledger=str(tmp_path)), shard_dir(tmp_path, replica))
        for _ in range(n):
            gate.repair({"name": "create_event", "arguments": VALID})
        gate.close(freeze=True)
    rows = read_shards(tmp_path)
    assert [(r["replica"], r["sample"]) for r in rows] == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]
    with pytest.raises(ConfigError):
        shard_dir(tmp_path, "../escape")
    with pytest.raises(ConfigError):
        read_shards(tmp_path / "nothing-here")


# -- batching concurrent calls into one model call ---------------------------------------------------


class Recording:
    """A policy that records its batch sizes and answers each observation with a patch of its own
    call's value, so a caller handed another caller's answer would be caught."""

    name = "recording"

    def __init__(self, delay_s: float = 0.05, fail: bool = False) -> None:
        self.batches: list[int] = []
        self.delay_s = delay_s
        self.fail = fail

    def generate(self, observations: Sequence[Observation]) -> list[Generation]:
        self.batches.append(len(observations))
        time.sleep(self.delay_s)  # a model call takes time: later callers queue meanwhile
        if self.fail:
            raise RuntimeError("the model is gone")
        out = []
        for obs in observations:
            days = obs.case.candidate["days"]
            out.append(Generation(json.dumps([{"op": "replace", "path": "/days", "value": int(days)}])))
        return out


FORECAST = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city", "days"],
    "additionalProperties": False,
}


def _threads(n: int, work: Any) -> list[Any]:
    results: list[Any] = [None] * n
    start = threading.Barrier(n)

    def run(i: int) -> None:
        start.wait()
        results[i] = work(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_concurrent_calls_share_model_batches_and_each_gets_its_own_repair(tmp_path: Path) -> None:
    inner = Recording()
    policy = BatchingPolicy(inner, max_batch_size=8, wait_s=0.2, name="hf:recording")
    gate = RepairGate({"forecast": FORECAST}, policy, ledger=tmp_path / "ledger")
    n = 16
    decisions = _threads(n, lambda i: gate.repair({"name": "forecast", "arguments": {"city": "Oslo", "days": str(i + 1)}}))
    assert [d.call.arguments["days"] for d in decisions] == [i + 1 for i in range(n)]  # each its own answer
    assert sum(inner.batches) == n and max(inner.batches) > 1 and max(inner.batches) <= 8
    assert policy.batches == inner.batches
    health = GateService(gate, replica="r0", flush_every_s=0).health().body  # what /healthz says of it
    assert health["model_calls"] == len(inner.batches) and health["observations_per_model_call"] == round(
        n / len(inner.batches), 2
    )
    gate.close(freeze=True)
    rows = read_ledger(tmp_path / "ledger")
    assert len(rows) == n and {r["policy"] for r in rows} == {"hf:recording"}


def test_a_failing_batch_refuses_every_call_in_it(tmp_path: Path) -> None:
    policy = BatchingPolicy(Recording(fail=True), max_batch_size=4, wait_s=0.1)
    gate = RepairGate({"forecast": FORECAST}, policy, ledger=tmp_path / "ledger")
    decisions = _threads(6, lambda i: gate.repair({"name": "forecast", "arguments": {"city": "Oslo", "days": "2"}}))
    assert {d.code for d in decisions} == {"policy_error"}
    gate.close()


def test_an_unbatched_policy_keeps_the_gates_lock(tmp_path: Path) -> None:
    """The heuristic is called one decision at a time, as before; a policy answering ABSTAIN is
    refused, so the lock path still decides."""

    class Abstains:
        name = "abstains"

        def __init__(self) -> None:
            self.inside = 0
            self.most = 0

        def generate(self, observations: Sequence[Observation]) -> list[Generation]:
            self.inside += 1
            self.most = max(self.most, self.inside)
            time.sleep(0.01)
            self.inside -= 1
            return [Generation(ABSTAIN) for _ in observations]

    policy = Abstains()
    gate = RepairGate({"forecast": FORECAST}, policy, ledger=tmp_path / "ledger")
    decisions = _threads(6, lambda i: gate.repair({"name": "forecast", "arguments": {"city": "Oslo", "days": "2"}}))
    assert {d.code for d in decisions} == {"abstain"} and policy.most == 1
    gate.close()


def test_an_hf_policy_is_built_with_the_serve_options_and_batched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from contractrl.gate import service as service_module

    seen: dict[str, Any] = {}

    def load(spec: str, *, arm: str, hf: Any) -> Recording:
        seen.update(spec=spec, arm=arm, hf=hf)
        return Recording()

    monkeypatch.setattr(service_module, "policy_from_spec", load)
    options = ServeOptions(policy="hf:some/adapter", shield_k=3, temperature=0.5, max_new_tokens=64, seed=7, max_batch_size=4)
    gate = build_gate(options, tmp_path / "ledger")
    assert isinstance(gate.policy, BatchingPolicy) and gate.policy.max_batch_size == 4 and gate.policy.name == "hf:some/adapter"
    hf = seen["hf"]
    assert (hf.shield_k, hf.temperature, hf.max_new_tokens, hf.seed, hf.feedback) == (3, 0.5, 64, 7, "full")
    assert gate.config["hf"]["shield_k"] == 3 and gate.config["policy"] == "hf:some/adapter"  # in the shard's manifest
    gate.close()
    assert not isinstance(build_gate(ServeOptions(), tmp_path / "heuristic").policy, BatchingPolicy)


def test_batching_options_are_checked() -> None:
    with pytest.raises(ConfigError):
        BatchingPolicy(Recording(), max_batch_size=0, wait_s=0.0)
    with pytest.raises(ConfigError):
        BatchingPolicy(Recording(), max_batch_size=2, wait_s=-1.0)


# -- options, tools and the command -----------------------------------------------------------------


def test_replicas_or_autoscaling_reach_ray_serve() -> None:
    fixed = deployment_options(ServeOptions(num_replicas=3, replica_cpus=0.5, max_ongoing_requests=16))
    assert fixed["num_replicas"] == 3 and "autoscaling_config" not in fixed
    assert fixed["ray_actor_options"] == {"num_cpus": 0.5, "num_gpus": 0.0} and fixed["max_ongoing_requests"] == 16
    scaled = deployment_options(
        from_dict(
            ServeOptions, {"autoscaling": {"enabled": True, "min_replicas": 0, "max_replicas": 4, "target_ongoing_requests": 3}}
        )
    )
    assert "num_replicas" not in scaled
    assert scaled["autoscaling_config"] == {"min_replicas": 0, "max_replicas": 4, "target_ongoing_requests": 3.0}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"port": 0}, "port must be in [1, 65535]"),
        ({"num_replicas": 0}, "num_replicas must be >= 1"),
        ({"autoscaling": {"min_replicas": 3, "max_replicas": 2}}, "min_replicas (3) must be <= autoscaling.max_replicas"),
        ({"max_batch_size": 0}, "max_batch_size must be >= 1"),
        ({"policy": ""}, "policy must not be empty"),
        ({"arm": "nope"}, "arm must be one of"),
        ({"prot": 8000}, "did you mean 'port'"),
    ],
)
def test_bad_serve_options_are_one_line_errors(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        from_dict(ServeOptions, data)


def test_tools_come_from_a_file_in_three_forms_or_the_catalog(tmp_path: Path) -> None:
    definition = EVENT["definition"]
    forms = {
        "list.json": [definition],
        "mapping.json": {"create_event": definition["function"]["parameters"]},
        "object.json": {"tools": [definition], "contracts": {"create_event": EVENT["contract"]}, "immutable": {}},
    }
    for name, document in forms.items():
        (tmp_path / name).write_text(json.dumps(document))
        gate = build_gate(ServeOptions(tools=str(tmp_path / name)), tmp_path / name.replace(".json", ""))
        assert sorted(gate.tools) == ["create_event"]
        gate.close()
    definitions, contracts, immutable = load_tools("")
    assert len(definitions) == len(contracts) == len(immutable) >= 30
    (tmp_path / "bad.json").write_text('{"tools": [], "contracts": []}')
    with pytest.raises(ConfigError):
        load_tools(str(tmp_path / "bad.json"))
    (tmp_path / "dup.json").write_text('[{"name": "a", "inputSchema": {}}, {"name": "a", "inputSchema": {}}]')
    with pytest.raises(ConfigError):
        check_options(ServeOptions(tools=str(tmp_path / "dup.json")))
    with pytest.raises(InputFileError):
        check_options(ServeOptions(tools=str(tmp_path / "missing.json")))
    with pytest.raises(ConfigError, match="selector directory not found"):
        check_options(ServeOptions(policy=f"selector:{tmp_path / 'none'}"))


def test_paths_are_made_absolute_for_the_replicas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sel").mkdir()
    options = absolute_paths(ServeOptions(ledger="led", tools="t.json", policy="selector:sel"))
    assert options.ledger == str(tmp_path / "led") and options.tools == str(tmp_path / "t.json")
    assert options.policy == f"selector:{tmp_path / 'sel'}"
    assert absolute_paths(ServeOptions(policy="hf:smollm2")).policy == "hf:smollm2"  # a preset, not a path


def test_the_command_prints_its_config_with_flags_and_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--port", "8123", "--policy", "selector:x", "autoscaling.enabled=true", "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert from_dict(ServeOptions, printed) == ServeOptions(
        port=8123, policy="selector:x", autoscaling=from_dict(AutoscalingOptions, {"enabled": True})
    )
    assert printed["host"] == "127.0.0.1"  # loopback unless asked
    assert main(["serve", "port=99999", "--print-config"]) == 2
    assert "port must be in [1, 65535]" in capsys.readouterr().err


def test_the_body_is_read_no_further_than_one_byte_past_the_limit() -> None:
    class Streaming:
        def __init__(self) -> None:
            self.chunks_read = 0

        async def stream(self) -> Any:
            for _ in range(1000):
                self.chunks_read += 1
                yield b"x" * 10

    request = Streaming()
    body = asyncio.run(read_body(request, 25))
    assert len(body) == 30 and request.chunks_read == 3  # the service then answers too_large
    with pytest.raises(RequestError) as caught:
        parse_repair_body(body, max_bytes=25)
    assert caught.value.code == "too_large"


# -- end to end on Ray ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http(url: str, body: bytes | None = None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.slow
def test_serve_end_to_end_on_a_local_ray_instance() -> None:
    """A Ray instance of the test's own (its own temp dir, never a running head), Serve on a free
    loopback port, the heuristic gate; valid, repairable, unrepairable and malformed requests;
    then a graceful shutdown, after which the frozen shard holds exactly one row per decision."""
    import ray

    from contractrl.gate import serve

    if ray.is_initialized():  # an earlier test's instance in this process (a rollout, a join): never reuse it
        ray.shutdown()
    scratch = Path(tempfile.mkdtemp(prefix="crl-serve-", dir="/tmp"))  # short: Ray's socket paths are bounded
    ray.init(address="local", num_cpus=2, include_dashboard=False, _temp_dir=str(scratch / "ray"), log_to_driver=False)
    try:
        port = _free_port()
        options = ServeOptions(ledger=str(scratch / "ledger"), port=port, replica_cpus=0.5, flush_every_s=1.0)
        info = serve.start(options)
        url = info["url"]
        assert url == f"http://127.0.0.1:{port}"
        status, health = _http(url + "/healthz")
        assert status == 200 and health["status"] == "ok"
        sent = {
            "valid": _body({"id": "c1", "name": "create_event", "arguments": VALID}),
            "repairable": _body(
                {"type": "function", "function": {"name": "create_event", "arguments": json.dumps(REPAIRABLE)}}, REQUEST
            ),
            "unrepairable": _body({"name": "create_event", "arguments": UNREPAIRABLE}),
            "unknown tool": _body({"name": "drop_database", "arguments": {"really": True}}),
            "not strict": _body({"name": "create_event", "arguments": '{"title": 1, "title": 2}'}),
        }
        replies = {name: _http(url + "/repair", body) for name, body in sent.items()}
        malformed = {
            "not json": _http(url + "/repair", b"{nope}"),
            "no call": _http(url + "/repair", b'{"request": "x"}'),
            "no name": _http(url + "/repair", _body({"arguments": {}})),
        }
        assert replies["valid"] == (200, replies["valid"][1]) and replies["valid"][1]["dispatch"]["arguments"] == VALID
        assert replies["repairable"][1]["repaired"] is True
        assert _event_verifier().verify(replies["repairable"][1]["dispatch"]["arguments"]).accepted
        assert replies["unrepairable"][1]["refusal"]["code"] == "abstain"
        assert replies["unknown tool"][1]["refusal"]["code"] == "unknown_tool"
        assert replies["not strict"][1]["refusal"]["code"] == "duplicate_key"
        assert {name: (s, b["error"]["code"]) for name, (s, b) in malformed.items()} == {
            "not json": (400, "malformed_json"),
            "no call": (400, "bad_request"),
            "no name": (400, "bad_call"),
        }
        assert _http(url + "/nowhere")[0] == 404
        burst = _threads(16, lambda i: _http(url + "/repair", sent["repairable" if i % 2 else "valid"]))
        assert all(status == 200 and "dispatch" in body for status, body in burst)
        shards = serve.stop(options.ledger)
    finally:
        ray.shutdown()
    try:
        decided = len(sent) + len(burst)
        assert len(shards) == 1 and shards[0]["ledger_sha256"] and shards[0]["rows"] == decided
        rows = read_shards(scratch / "ledger")  # frozen: every file digest, the chain and the head verified
        assert len(rows) == decided
        assert [r["row_hash"] for r in rows[: len(sent)]] == [body["row_hash"] for _, body in replies.values()]
        assert [r["code"] for r in rows[: len(sent)]] == ["accepted", "accepted", "abstain", "unknown_tool", "duplicate_key"]
        assert sorted(r["row_hash"] for r in rows[len(sent) :]) == sorted(body["row_hash"] for _, body in burst)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.slow
def test_the_command_stops_on_sigterm_and_freezes_its_shard() -> None:
    """``contractrl serve`` as a user runs it, in a process of its own with a Ray instance of its
    own (its own temp dir): two calls, SIGTERM to the process, exit 0, and the shard report it
    prints names one frozen shard holding both rows."""
    scratch = Path(tempfile.mkdtemp(prefix="crl-cli-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=str(scratch), PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    port, ledger = _free_port(), scratch / "ledger"
    command = [sys.executable, "-m", "contractrl", "serve", "--port", str(port), "--ledger", str(ledger), "replica_cpus=0.5"]
    err = scratch / "stderr"
    with err.open("w") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, env=env, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while "Ctrl-C stops it" not in err.read_text() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert process.poll() is None, err.read_text()[-2000:]
        replies = [
            _http(f"http://127.0.0.1:{port}/repair", _body({"name": "create_event", "arguments": VALID})) for _ in range(2)
        ]
        assert all(status == 200 and "dispatch" in body for status, body in replies)
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=300)
        assert process.returncode == 0, err.read_text()[-2000:]
        (shard,) = json.loads(out)["shards"]
        assert shard["rows"] == 2 and shard["ledger_sha256"]
        assert [r["row_hash"] for r in read_shards(ledger)] == [body["row_hash"] for _, body in replies]
    finally:
        if process.poll() is None:  # only the process this test started
            process.kill()
            process.wait()
        shutil.rmtree(scratch, ignore_errors=True)
