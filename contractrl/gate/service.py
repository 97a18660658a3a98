"""The gate's HTTP JSON API as plain Python: a request's method, path and body in, a status and a
JSON body out. The Ray Serve deployment (gate/serve.py) only wraps it, so every mapping and every
error below is tested without Ray.

``POST /repair`` with ``{"call": <OpenAI or MCP call>, "request": <text, optional>}`` answers
``{"dispatch": <call>, ...}`` or ``{"refusal": {"code", "reason"}, ...}`` (both with ``repaired``
or not, ``attempts``, ``latency_s`` and the ledger ``row_hash``); ``GET /healthz`` says the replica
is up. A body the API cannot read is a typed ``{"error": {"code", "reason"}}`` with a 4xx status,
never a traceback: a client's mistake must not look like the gate's failure, and the gate's
failure (500 ``internal_error``) must not leak its internals.

Each replica chains its decisions into its own ledger directory under one root
(``replica-<id>/``), so concurrent replicas never interleave rows; :func:`read_shards` joins them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ContractRLError
from ..io import read_json_file
from ..rollout.ledger import LedgerFrozenError, read_ledger, read_manifest
from ..validators import ParseLimits, parse_json_text
from .batching import BatchingPolicy
from .decision import Decision, Dispatch
from .gate import GateBudgets, RepairGate
from .options import ServeOptions
from .policy import HFOptions, policy_from_spec
from .tools import builtin_tools

_LOG = logging.getLogger(__name__)
REPAIR_PATH, HEALTH_PATH = "/repair", "/healthz"
SHARD_PREFIX = "replica-"
BODY_KEYS = frozenset({"call", "request"})
_SHARD_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")

# the API's own error codes (a 4xx or 5xx status), beside the strict parser's for a body that is not
# JSON (malformed_json, duplicate_key, too_large, too_deep, non_finite_number, ...)
BAD_REQUEST = "bad_request"  # JSON, but not {"call": ..., "request": ...}
BAD_CALL = "bad_call"  # the call has no tool name or a bad id: there is no decision to make
NOT_FOUND = "not_found"
METHOD_NOT_ALLOWED = "method_not_allowed"
SHUTTING_DOWN = "shutting_down"  # the replica is closing its ledger: retry on another
INTERNAL_ERROR = "internal_error"
API_CODES = (BAD_REQUEST, BAD_CALL, NOT_FOUND, METHOD_NOT_ALLOWED, SHUTTING_DOWN, INTERNAL_ERROR)


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: its status and its JSON body."""

    status: int
    body: dict[str, Any]


class RequestError(ContractRLError):
    """A request the API cannot read, as the typed error body it is answered with."""

    def __init__(self, code: str, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.code, self.reason, self.status = code, reason, status

    def reply(self) -> Reply:
        return error_reply(self.code, self.reason, self.status)


def error_reply(code: str, reason: str, status: int) -> Reply:
    return Reply(status, {"error": {"code": code, "reason": reason}})


def parse_repair_body(body: bytes | str, max_bytes: int = ParseLimits().max_bytes) -> tuple[Any, str | None]:
    """``(call, request)`` from a ``POST /repair`` body, read by the project's strict parser (no
    duplicate keys, no NaN, bounded size and depth: an MCP call's arguments are judged exactly as
    sent); anything else raises a :class:`RequestError`. The call itself is read by the gate."""
    parsed = parse_json_text(body, ParseLimits(max_bytes=max_bytes))
    if not parsed.is_value:
        status = 413 if parsed.code.value == "too_large" else 400
        raise RequestError(parsed.code.value, f"the body is not strict JSON: {parsed.message}", status)
    document = parsed.value
    if not isinstance(document, dict):
        raise RequestError(BAD_REQUEST, f'the body must be an object {{"call": ..., "request": ...}}, got {_kind(document)}')
    unknown = sorted(set(document) - BODY_KEYS)
    if unknown:
        raise RequestError(BAD_REQUEST, f'unknown body keys {unknown}; a body holds "call" and optionally "request"')
    if "call" not in document:
        raise RequestError(BAD_REQUEST, 'the body has no "call" (an OpenAI or MCP tool call)')
    request = document.get("request")
    if request is not None and not isinstance(request, str):
        raise RequestError(BAD_REQUEST, f'"request" must be a string (the user\'s request), got {_kind(request)}')
    return document["call"], request


def decision_reply(decision: Decision) -> Reply:
    """A decision as the API answers it: the call to execute, or the typed refusal; 200 either way
    (a refusal is the gate working, not an HTTP error)."""
    audit = {"attempts": decision.attempts, "latency_s": decision.latency_s, "row_hash": decision.row_hash}
    if isinstance(decision, Dispatch):
        return Reply(200, {"dispatch": decision.call.to_dict(), "repaired": decision.repaired, **audit})
    return Reply(200, {"refusal": {"code": decision.code, "reason": decision.reason}, **audit})


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


# -- what a gate is built from ----------------------------------------------------------------------


def load_tools(path: str) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """``(definitions, contracts, immutable)`` from a tools file, or the built-in catalog for "".

    The file holds a list of OpenAI/MCP definitions, a ``{name: JSON Schema}`` mapping, or
    ``{"tools": [...], "contracts": {...}, "immutable": {...}}`` (gate/tools.py reads each)."""
    if not path:
        return builtin_tools()
    document = read_json_file(path, "tools")
    if (
        isinstance(document, dict)
        and isinstance(document.get("tools"), list)
        and set(document) <= {"tools", "contracts", "immutable"}
    ):
        contracts, immutable = document.get("contracts", {}), document.get("immutable", {})
        if not isinstance(contracts, dict) or not isinstance(immutable, dict):
            raise ConfigError(f'tools file {path}: "contracts" and "immutable" must be objects keyed by tool name')
        return document["tools"], contracts, immutable
    return document, {}, {}


def build_gate(options: ServeOptions, ledger: str | Path) -> RepairGate:
    """The gate one replica serves, chaining into ``ledger``; an ``hf:`` policy is wrapped to batch
    concurrent calls (gate/batching.py), the others are called one at a time (they are cheap)."""
    definitions, contracts, immutable = load_tools(options.tools)
    # the serve options' hf keys are HFOptions' fields of the same names (feedback keeps its default)
    hf = HFOptions(**{f.name: getattr(options, f.name) for f in dataclasses.fields(HFOptions) if hasattr(options, f.name)})
    policy: Any = options.policy
    if options.batched:
        loaded = policy_from_spec(options.policy, arm=options.arm, hf=hf)
        policy = BatchingPolicy(
            loaded, max_batch_size=options.max_batch_size, wait_s=options.batch_wait_timeout_s, name=options.policy
        )
    return RepairGate(
        definitions,
        policy,
        ledger=ledger,
        contracts=contracts,
        immutable=immutable,
        budgets=GateBudgets(options.max_attempts, options.max_ops, options.max_tokens or None),
        arm=options.arm,
        seed=options.seed,
        hf=hf,
        shard_rows=options.shard_rows,
    )


def shard_dir(root: str | Path, replica: str) -> Path:
    """The ledger directory of one replica under the ledger root."""
    if not _SHARD_NAME.fullmatch(replica):
        raise ConfigError(f"a replica name must be 1-64 letters, digits, '.', '_' or '-', got {replica!r}")
    return Path(root) / f"{SHARD_PREFIX}{replica}"


def read_shards(root: str | Path, *, require_frozen: bool = True) -> list[dict[str, Any]]:
    """Every row of every replica's ledger under ``root``, each shard verified on its own (chain,
    files, and its frozen digest), in (replica, sequence) order, with ``replica`` added to each row.
    ``require_frozen`` False also reads a shard whose replica did not shut down gracefully."""
    dirs = sorted(p for p in Path(root).glob(f"{SHARD_PREFIX}*") if p.is_dir() and read_manifest(p))
    if not dirs:
        raise ConfigError(f"no replica ledgers ({SHARD_PREFIX}*/) under {root}")
    rows = []
    for directory in dirs:
        replica = directory.name.removeprefix(SHARD_PREFIX)
        rows.extend({**row, "replica": replica} for row in read_ledger(directory, require_frozen=require_frozen))
    return rows


# -- one replica ------------------------------------------------------------------------------------


class GateService:
    """One replica's API over one gate: routes, maps decisions and errors, flushes the ledger on a
    timer and freezes it at :meth:`close`. Decisions run in a pool of worker threads, so the event
    loop that receives requests is never blocked by a policy."""

    def __init__(
        self, gate: RepairGate, *, replica: str, flush_every_s: float = 5.0, workers: int = 8, max_body_bytes: int = 1_000_000
    ) -> None:
        if workers < 1:
            raise ConfigError(f"workers must be >= 1, got {workers}")
        self.gate = gate
        self.replica = replica
        self.max_body_bytes = max_body_bytes
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"gate-{replica}")
        self._closing = threading.Event()
        self._flusher: threading.Thread | None = None
        if flush_every_s > 0:
            self._flusher = threading.Thread(target=self._flush_loop, args=(flush_every_s,), daemon=True, name=f"flush-{replica}")
            self._flusher.start()
        self.digest: str | None = None

    @classmethod
    def from_options(cls, options: ServeOptions, replica: str) -> GateService:
        gate = build_gate(options, shard_dir(options.ledger, replica))
        workers = max(options.max_ongoing_requests, options.max_batch_size)
        return cls(
            gate, replica=replica, flush_every_s=options.flush_every_s, workers=workers, max_body_bytes=options.max_body_bytes
        )

    def _flush_loop(self, every_s: float) -> None:
        while not self._closing.wait(every_s):
            try:
                self.gate.flush()
            except ContractRLError:  # closed under us: the close flushes
                return

    # -- requests -----------------------------------------------------------------------------------

    def route(self, method: str, path: str) -> Reply | None:
        """The reply for a request that never reaches the gate (health, a wrong path or method), or
        None for ``POST /repair``."""
        path = "/" + path.strip("/")
        if path == HEALTH_PATH:
            if method not in ("GET", "HEAD"):
                return error_reply(METHOD_NOT_ALLOWED, f"{HEALTH_PATH} answers GET", 405)
            return self.health()
        if path == REPAIR_PATH:
            if method != "POST":
                return error_reply(METHOD_NOT_ALLOWED, f"{REPAIR_PATH} answers POST with a JSON body", 405)
            return None
        return error_reply(NOT_FOUND, f"no endpoint {path}; use POST {REPAIR_PATH} or GET {HEALTH_PATH}", 404)

    def health(self) -> Reply:
        if self._closing.is_set():
            return Reply(503, {"status": "closing", "replica": self.replica})
        gate = self.gate
        return Reply(
            200,
            {
                "status": "ok",
                "replica": self.replica,
                "policy": gate.policy_name,
                "tools": sorted(gate.tools),
                "decisions": gate.decisions,
                "ledger": str(gate.ledger_dir),
                **self._batching(),
            },
        )

    def _batching(self) -> dict[str, Any]:
        """How an ``hf:`` policy's calls were batched so far: model calls and observations per call."""
        policy = self.gate.policy
        if not isinstance(policy, BatchingPolicy):
            return {}
        sizes = list(policy.batches)
        return {"model_calls": len(sizes), "observations_per_model_call": round(sum(sizes) / len(sizes), 2) if sizes else None}

    def repair(self, body: bytes | str) -> Reply:
        """``POST /repair``, in the calling thread."""
        if self._closing.is_set():
            return error_reply(SHUTTING_DOWN, f"replica {self.replica} is shutting down; send the call again", 503)
        try:
            call, request = parse_repair_body(body, self.max_body_bytes)
            return decision_reply(self.gate.repair(call, request))
        except RequestError as exc:
            return exc.reply()
        except LedgerFrozenError:
            return error_reply(SHUTTING_DOWN, f"replica {self.replica} is shutting down; send the call again", 503)
        except ContractRLError as exc:  # parse_call: no tool name, a bad id
            return error_reply(BAD_CALL, str(exc).strip().splitlines()[0][:300], 400)
        except Exception as exc:  # the gate refuses its own failures: this is the last line, and says no internals
            _LOG.exception("replica %s: an unexpected error answering POST %s", self.replica, REPAIR_PATH)
            reason = f"{type(exc).__name__} in replica {self.replica}; its log holds the details (no decision was recorded)"
            return error_reply(INTERNAL_ERROR, reason, 500)

    async def handle(self, method: str, path: str, body: bytes | str) -> Reply:
        """Any request, answered without blocking the event loop."""
        routed = self.route(method, path)
        if routed is not None:
            return routed
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, self.repair, body)
        except RuntimeError:  # the pool was shut down between the route and the submit
            return error_reply(SHUTTING_DOWN, f"replica {self.replica} is shutting down; send the call again", 503)

    async def handle_many(self, requests: list[tuple[str, str, bytes]]) -> list[Reply]:
        """A batch of requests (``@serve.batch``), decided concurrently: an ``hf:`` policy's
        batcher then decodes their attempts together."""
        return list(await asyncio.gather(*(self.handle(*request) for request in requests)))

    # -- shutdown -------------------------------------------------------------------------------------

    def close(self) -> str | None:
        """Refuse new calls, let the decisions in flight finish, then write and freeze this
        replica's ledger; returns its ``ledger_sha256`` (None when already closed)."""
        if self._closing.is_set():
            return None
        self._closing.set()
        if self._flusher is not None:
            self._flusher.join()
        self._pool.shutdown(wait=True)
        self.digest = self.gate.close(freeze=True)
        return self.digest


def summary(options: ServeOptions) -> Mapping[str, Any]:
    """What the serve command prints when it is up: where to send calls and where rows go."""
    return {
        "url": f"http://{options.host}:{options.port}",
        "repair": f"POST http://{options.host}:{options.port}{REPAIR_PATH}",
        "health": f"GET http://{options.host}:{options.port}{HEALTH_PATH}",
        "policy": options.policy,
        "ledger": str(Path(options.ledger)),
        "replicas": "autoscaling" if options.autoscaling.enabled else options.num_replicas,
    }


__all__ = [
    "API_CODES",
    "GateService",
    "Reply",
    "RequestError",
    "build_gate",
    "decision_reply",
    "error_reply",
    "load_tools",
    "parse_repair_body",
    "read_shards",
    "shard_dir",
    "summary",
]
