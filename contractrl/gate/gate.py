"""The runtime repair gate: a tool call in, ``Dispatch`` or ``Refusal`` out, nothing else.

Every call runs as one episode of the project's own environment (:class:`RepairEnv`), so the
gate applies exactly the parse -> mask -> apply -> verify rules, budgets and immutable paths the
policy was trained and evaluated under. Around the episode the gate adds what serving needs:

- fail-closed: the object about to leave is re-verified by the tool's public verifier, on a copy
  the caller cannot alias; anything that raises inside the policy, the environment or the
  verifier becomes a typed :class:`Refusal`, never a dispatch;
- a ledger: each decision is one hash-chained row in the rollout ledger format
  (rollout/ledger.py), its latency in the unchained timing file;
- threads: the policy is called under one lock (a model is not re-entrant) unless it declares
  itself ``thread_safe`` (gate/batching.py, which batches concurrent calls), and rows are chained
  under another; everything else is per call;
- a token budget beside the attempt and operation budgets: no decision is generated once the
  policy has spent ``max_tokens`` on this call.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..rollout.env import EpisodeLog, RepairEnv
from ..rollout.ledger import LedgerFrozenError, LedgerWriter, read_manifest
from ..rollout.policies import Observation, Policy
from ..rollout.run import new_manifest, write_manifest
from ..tasks.arms import DEFAULT_ARM, arm_spec
from ..tasks.cases import PublicCase
from ..validators import Budgets, Code, VerifierReport, parse_json_text
from ..validators.jsonvalue import canonical_json, sha256_json
from ..validators.transition import DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_OPS
from .calls import ToolCall, parse_call
from .decision import INTERNAL_ERROR, POLICY_ERROR, TOKEN_BUDGET, UNKNOWN_TOOL, UNVERIFIED, Decision, Dispatch, Refusal
from .policy import HFOptions, policy_from_spec, policy_name
from .rows import GATE_KIND, decision_row, received_text
from .tools import GateTool, parse_tools

GATE_FAMILY = "gate"  # the case family and tool family of gate episodes (a recording sandbox)


@dataclass(frozen=True)
class GateBudgets:
    """Per call: decisions the policy may make (attempts), patch operations, and generated tokens
    over all attempts (None: no token budget). The first two are the episodes' :class:`Budgets`."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    max_ops: int = DEFAULT_MAX_OPS
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        Budgets(max_attempts=self.max_attempts, max_ops=self.max_ops)  # the same checks as an episode's
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1 or None, got {self.max_tokens}")


@dataclass
class _Outcome:
    """What one decision came to, before it is timed and recorded."""

    case: PublicCase
    log: EpisodeLog
    code: str
    reason: str
    dispatched: Any = None
    repaired: bool = False


class RepairGate:
    """A trained (or heuristic) repair policy in front of a tool executor.

    ``tools``: OpenAI/MCP function definitions or ``{name: JSON Schema}`` (gate/tools.py);
    ``policy``: a spec (``heuristic``, ``selector:DIR``, ``hf:MODEL``) or a policy object;
    ``ledger``: the run directory the decisions are chained into (created, or resumed when it
    holds an unfrozen gate ledger of the same configuration).
    """

    def __init__(
        self,
        tools: Any,
        policy: str | Policy,
        *,
        ledger: str | Path,
        contracts: Mapping[str, Any] | None = None,
        immutable: Mapping[str, Any] | None = None,
        budgets: GateBudgets = GateBudgets(),
        arm: str = DEFAULT_ARM,
        seed: int = 0,
        hf: HFOptions = HFOptions(),
        shard_rows: int = 100,
    ) -> None:
        arm_spec(arm)  # an unknown arm is a ConfigError before anything loads
        if shard_rows < 1:
            raise ConfigError(f"shard_rows must be >= 1, got {shard_rows}")
        self.tools: dict[str, GateTool] = parse_tools(tools, contracts, immutable)
        self.budgets = budgets
        self.arm = arm
        self.seed = seed
        self.policy: Policy = policy_from_spec(policy, arm=arm, hf=hf) if isinstance(policy, str) else policy
        self.policy_name = policy if isinstance(policy, str) else policy_name(self.policy)
        self.config = {
            "tools": {name: tool.digest for name, tool in sorted(self.tools.items())},
            "policy": self.policy_name,
            "arm": arm,
            "budgets": asdict(budgets),
            "hf": hf.config() if self.policy_name.startswith("hf:") else None,
        }
        self.ledger_dir = Path(ledger)
        self._open_ledger(shard_rows)
        self._sequence = itertools.count(self._writer.count)
        thread_safe = getattr(self.policy, "thread_safe", False) is True
        self._policy_lock: contextlib.AbstractContextManager[Any] = contextlib.nullcontext() if thread_safe else threading.Lock()
        self._ledger_lock = threading.Lock()
        self._closed = False

    def _open_ledger(self, shard_rows: int) -> None:
        manifest = read_manifest(self.ledger_dir)
        wanted = new_manifest(GATE_KIND, self.config, self.seed)
        if not manifest:
            self.ledger_dir.mkdir(parents=True, exist_ok=True)
            write_manifest(self.ledger_dir, wanted)
        elif manifest.get("kind") != GATE_KIND or manifest.get("config_sha256") != wanted["config_sha256"]:
            raise ConfigError(
                f"{self.ledger_dir} holds a ledger of another gate configuration or run kind; choose a new ledger directory"
            )
        self._writer = LedgerWriter(self.ledger_dir, shard_rows)

    # -- the decision -------------------------------------------------------------------------

    def repair(self, call: Any, request: str | None = None) -> Decision:
        """Dispatch ``call`` (valid, or repaired until the verifier accepts it) or refuse it.

        A call without a tool name, or a request that is not a string, raises a typed
        :class:`ConfigError` and records nothing: there is no decision to make about it. After
        :meth:`close` every call raises :class:`LedgerFrozenError` (no decision goes unrecorded)."""
        start = time.perf_counter()
        if self._closed:
            raise LedgerFrozenError(f"the gate's ledger {self.ledger_dir} is closed; build a new gate to go on")
        parsed = parse_call(call)
        if request is not None and not isinstance(request, str):
            raise ConfigError(f"a request must be a string, got {type(request).__name__}")
        sequence = next(self._sequence)
        try:
            outcome = self._decide(parsed, request or "", sequence)
        except Exception as exc:  # an escape of the environment or the verifier: refuse, never dispatch
            outcome = _Outcome(self._case(parsed, request or "", None, None), EpisodeLog(), INTERNAL_ERROR, _one_line(exc))
        return self._record(parsed, outcome, sequence, start)

    async def arepair(self, call: Any, request: str | None = None) -> Decision:
        """:meth:`repair` in a worker thread, so an event loop is never blocked by a policy."""
        return await asyncio.to_thread(self.repair, call, request)

    def _case(
        self, call: ToolCall, request: str, tool: GateTool | None, arguments: Any, report: VerifierReport | None = None
    ) -> PublicCase:
        """The call as a public case: what a policy may see and the environment steps."""
        budgets = self.budgets
        if tool is None:
            schema: Any = {}
            key = sha256_json(["unknown tool", call.name])
        else:
            schema = tool.schema
            key = sha256_json([tool.digest, budgets.max_attempts, budgets.max_ops])
        return PublicCase(
            # one id per tool contract and budgets: policies cache their contract by case id
            case_id=f"gate-{key[:16]}",
            family=GATE_FAMILY,
            tool=call.name,
            tool_family=GATE_FAMILY,
            schema=schema if isinstance(schema, dict) else {"not": {}} if schema is False else {},
            schema_sha256=tool.verifier.schema.sha256 if tool is not None else "",
            schema_version=1,
            contract=tool.contract if tool is not None else {"rules": []},
            request=request,
            candidate=arguments,
            report=(report or VerifierReport.accept()).to_dict(),
            immutable=tool.immutable if tool is not None else (),
            max_attempts=budgets.max_attempts,
            max_ops=budgets.max_ops,
            world_seed=0,
        )

    def _decide(self, call: ToolCall, request: str, sequence: int) -> _Outcome:
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self.tools))
            return _Outcome(
                self._case(call, request, None, None),
                EpisodeLog(),
                UNKNOWN_TOOL,
                f"no tool {call.name!r}; the gate guards {known}",
            )
        arguments = {} if call.arguments is None else call.arguments
        if isinstance(arguments, (str, bytes)):
            text = parse_json_text(arguments, tool.verifier.limits)
            if not text.is_value:
                case = self._case(call, request, tool, None, VerifierReport.single(text.code, text.message))
                return _Outcome(case, EpisodeLog(), text.code.value, f"the arguments are not strict JSON: {text.message}")
            arguments = text.value
        else:
            try:
                canonical_json(arguments)
            except (TypeError, ValueError, RecursionError) as exc:  # a set, NaN, a cycle: nothing a policy should see
                case = self._case(call, request, tool, None, VerifierReport.single(Code.MALFORMED_JSON, str(exc)))
                return _Outcome(
                    case, EpisodeLog(), Code.MALFORMED_JSON.value, f"the arguments are not a JSON value: {_one_line(exc)}"
                )
        case = self._case(call, request, tool, arguments, tool.verifier.verify(arguments))
        env = RepairEnv(case, arm=self.arm)
        state = env.reset()
        spent = 0
        while not env.done:
            if self.budgets.max_tokens is not None and spent >= self.budgets.max_tokens:
                return _Outcome(case, env.log, TOKEN_BUDGET, f"{spent} tokens spent of a budget of {self.budgets.max_tokens}")
            try:
                with self._policy_lock:
                    (generation,) = self.policy.generate([Observation(case, state, sequence, self.arm)])
                text = generation.text
                if not isinstance(text, str):
                    raise TypeError(f"the policy answered {type(text).__name__}, not text")
            except Exception as exc:  # nothing a failing policy produced is trusted
                return _Outcome(case, env.log, POLICY_ERROR, _one_line(exc))
            state, _ = env.commit(generation)
            spent += generation.generated_tokens
        repaired = bool(env.log.steps)
        final = env.log.dispatched if repaired else (arguments if state.outcome is Code.ACCEPTED else None)
        if final is None:
            last = env.log.steps[-1] if env.log.steps else None
            code = env.log.final_outcome or (state.outcome.value if state.outcome else Code.ATTEMPTS_EXHAUSTED.value)
            reason = f"{code}: {last.message}" if last is not None and last.message else code
            return _Outcome(case, env.log, code, reason)
        return self._verified(case, env.log, tool, final, repaired)

    @staticmethod
    def _verified(case: PublicCase, log: EpisodeLog, tool: GateTool, final: Any, repaired: bool) -> _Outcome:
        """Fail-closed exit: the exact object that leaves (a copy, so no caller can alias what was
        checked) must pass the tool's verifier again, whatever the episode concluded."""
        leaving = json.loads(canonical_json(final))
        report = tool.verifier.verify(leaving)
        if not report.accepted:
            primary = report.primary
            where = f" at {primary.pointer or '/'}: {primary.message}" if primary else ""
            return _Outcome(case, log, UNVERIFIED, f"the final object failed re-verification{where}")
        return _Outcome(case, log, Code.ACCEPTED.value, "accepted", dispatched=leaving, repaired=repaired)

    def _record(self, call: ToolCall, outcome: _Outcome, sequence: int, start: float) -> Decision:
        attempts = len(outcome.log.steps)
        latency = time.perf_counter() - start
        row = decision_row(
            outcome.case,
            outcome.log,
            arm=self.arm,
            policy=self.policy_name,
            seed=self.seed,
            sequence=sequence,
            call_id=call.id,
            received=received_text(call.arguments),
            dispatched=outcome.dispatched,
            code=outcome.code,
            reason=outcome.reason,
            latency_s=latency,
        )
        with self._ledger_lock:
            row_hash = self._writer.append(row)
        if outcome.dispatched is not None:
            return Dispatch(ToolCall(call.name, outcome.dispatched, call.id), outcome.repaired, attempts, latency, row_hash)
        return Refusal(outcome.code, outcome.reason, attempts, latency, row_hash)

    # -- the ledger's life ----------------------------------------------------------------------

    @property
    def decisions(self) -> int:
        """Rows chained so far (including those of the ledger this gate resumed)."""
        with self._ledger_lock:
            return self._writer.count

    def flush(self) -> None:
        """Write the buffered rows as a shard now (a server does this on a timer and at shutdown)."""
        with self._ledger_lock:
            self._writer.flush()

    def close(self, *, freeze: bool = False) -> str | None:
        """Flush and release the ledger; with ``freeze`` also seal it and return ``ledger_sha256``.
        Later calls to :meth:`repair` raise (the writer refuses rows once closed)."""
        with self._ledger_lock:
            if self._closed:
                return None
            self._closed = True
            if freeze:
                return self._writer.freeze()
            try:
                self._writer.flush()
            finally:
                self._writer.close()
            return None

    def __enter__(self) -> RepairGate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


__all__ = ["GATE_FAMILY", "GateBudgets", "RepairGate"]
