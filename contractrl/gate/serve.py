"""Ray at the edges: the gate's HTTP API (gate/service.py) as a Ray Serve deployment.

Everything a request means is decided by :class:`~contractrl.gate.service.GateService`, which
this module only wraps: it reads the body (bounded, before it is parsed), routes ``POST /repair``
of an ``hf:`` policy through ``@serve.batch`` so concurrent requests reach the model as one batch,
and turns the service's :class:`Reply` into an HTTP response. Each replica names its own ledger
directory after its Serve replica id and freezes it when Serve shuts the replica down gracefully
(``__del__``), so no row is lost and no two replicas write one chain.

``start`` / ``stop`` run it from a program or a test; ``serve_until_stopped`` is the command.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..configtree import derive, from_dict, to_dict
from ..errors import ConfigError
from ..rollout.ledger import read_manifest
from .options import ServeOptions
from .service import SHARD_PREFIX, GateService, load_tools, summary
from .tools import parse_tools

APP_NAME = "contractrl-gate"
DEPLOYMENT_NAME = "RepairGate"
CONCURRENT_BATCHES = 8  # request batches one replica decides at once (Ray Serve fixes it when the class is built)


def absolute_paths(options: ServeOptions) -> ServeOptions:
    """The options with their paths made absolute: a replica is a Ray worker, which may not start
    in this directory (or on this machine)."""
    changes: dict[str, Any] = {"ledger": str(Path(options.ledger).resolve())}
    if options.tools:
        changes["tools"] = str(Path(options.tools).resolve())
    if options.policy.startswith("selector:"):
        changes["policy"] = "selector:" + str(Path(options.policy.removeprefix("selector:")).resolve())
    elif options.policy.startswith("hf:") and Path(options.policy.removeprefix("hf:")).exists():
        changes["policy"] = "hf:" + str(Path(options.policy.removeprefix("hf:")).resolve())
    return derive(options, changes)


def deployment_options(options: ServeOptions) -> dict[str, Any]:
    """Ray Serve's settings of the gate deployment, from the serve options."""
    scaling = options.autoscaling
    replicas: dict[str, Any] = (
        {
            "autoscaling_config": {
                "min_replicas": scaling.min_replicas,
                "max_replicas": scaling.max_replicas,
                "target_ongoing_requests": scaling.target_ongoing_requests,
            }
        }
        if scaling.enabled
        else {"num_replicas": options.num_replicas}
    )
    return {
        **replicas,
        "max_ongoing_requests": options.max_ongoing_requests,
        "graceful_shutdown_timeout_s": options.graceful_shutdown_timeout_s,
        "ray_actor_options": {"num_cpus": options.replica_cpus, "num_gpus": options.replica_gpus},
    }


async def read_body(request: Any, limit: int) -> bytes:
    """The body, read no further than one byte past ``limit`` (the service answers too_large)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            break
    return b"".join(chunks)


def _deployment() -> Any:
    """The deployment class, built on first use so that importing this module needs no Ray."""
    from ray import serve
    from starlette.responses import JSONResponse

    @serve.deployment(name=DEPLOYMENT_NAME)
    class RepairGateDeployment:
        def __init__(self, config: dict[str, Any]) -> None:
            options = from_dict(ServeOptions, config)
            replica = serve.get_replica_context().replica_id.unique_id
            self.service = GateService.from_options(options, replica)
            self.batched = options.batched
            self.limit = options.max_body_bytes
            self._batch.set_max_batch_size(options.max_batch_size)
            self._batch.set_batch_wait_timeout_s(options.batch_wait_timeout_s)

        async def __call__(self, request: Any) -> Any:
            method, path = request.method, request.url.path
            routed = self.service.route(method, path)
            if routed is not None:
                reply = routed
            else:
                body = await read_body(request, self.limit)
                reply = await (self._batch((method, path, body)) if self.batched else self.service.handle(method, path, body))
            return JSONResponse(reply.body, status_code=reply.status)

        # several batches in flight: a batch whose slowest call is on its second attempt must not
        # hold the next requests back; their model calls still meet in the policy's batcher
        @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.01, max_concurrent_batches=CONCURRENT_BATCHES)
        async def _batch(self, requests: list[tuple[str, str, bytes]]) -> list[Any]:
            return await self.service.handle_many(requests)

        def __del__(self) -> None:
            # Serve calls this at a graceful shutdown, after the replica's requests finished
            service = getattr(self, "service", None)
            if service is not None:
                service.close()

    return RepairGateDeployment


def start(options: ServeOptions) -> dict[str, Any]:
    """Deploy the gate on Ray Serve (joining or starting Ray as :func:`attach` says) and return
    once its replicas answer; what :func:`~contractrl.gate.service.summary` prints."""
    from ray import serve

    options = absolute_paths(check_options(options))
    attach(options)
    serve.start(http_options={"host": options.host, "port": options.port})
    app = _deployment().options(**deployment_options(options)).bind(to_dict(options))
    serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
    return dict(summary(options))


def attach(options: ServeOptions) -> None:
    """Start or join Ray: a running cluster only when asked (``ray_address`` or ``RAY_ADDRESS``),
    else a local instance of this process's own, never someone else's head by accident."""
    import ray

    from ..rollout.pool import init_ray

    if not ray.is_initialized():
        init_ray(options.ray_address or os.environ.get("RAY_ADDRESS") or "local")


def stop(ledger: str | Path) -> list[dict[str, Any]]:
    """Delete the application (Serve drains each replica, which then freezes its ledger), shut
    Serve down, and say what each replica's shard holds."""
    from ray import serve

    serve.delete(APP_NAME, _blocking=True)
    serve.shutdown()
    return shard_report(ledger)


def shard_report(ledger: str | Path) -> list[dict[str, Any]]:
    """Each replica shard under the ledger root: its directory, rows and frozen digest (None when
    its replica did not close it: ``contractrl ledger repair`` then ``read_shards(require_frozen=False)``)."""
    out = []
    for directory in sorted(Path(ledger).glob(f"{SHARD_PREFIX}*")):
        manifest = read_manifest(directory)
        if manifest:
            out.append(
                {"dir": str(directory), "rows": manifest.get("ledger_rows"), "ledger_sha256": manifest.get("ledger_sha256")}
            )
    return out


def serve_until_stopped(options: ServeOptions, on_ready: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    """The command: deploy, report, wait for Ctrl-C or SIGTERM, shut down gracefully, and return
    the shard report. Ray is shut down too when this process started it."""
    import ray

    started_ray = not ray.is_initialized() and not (options.ray_address or os.environ.get("RAY_ADDRESS"))
    done = threading.Event()
    check_options(options)  # before Ray starts
    try:
        attach(options)
        # after Ray starts: ray.init installs a SIGTERM handler of its own that ends the process at once
        previous = signal.signal(signal.SIGTERM, lambda *_: done.set())
        try:
            on_ready(start(options))
            while not done.wait(1.0):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
        return stop(absolute_paths(options).ledger)
    finally:
        if started_ray and ray.is_initialized():
            ray.shutdown()


def check_options(options: ServeOptions) -> ServeOptions:
    """``options``, once what would otherwise fail only inside a replica (after Ray started) holds
    here: the tool definitions compile, a selector directory exists."""
    definitions, contracts, immutable = load_tools(options.tools)
    parse_tools(definitions, contracts, immutable)
    selector = options.policy.removeprefix("selector:")
    if selector != options.policy and not Path(selector).is_dir():
        raise ConfigError(f"selector directory not found: {selector}")
    return options


__all__ = [
    "APP_NAME",
    "absolute_paths",
    "attach",
    "check_options",
    "deployment_options",
    "read_body",
    "serve_until_stopped",
    "shard_report",
    "start",
    "stop",
]
