"""Three ways to handle the same invalid tool calls, measured alike (issue 52, section 4).

What agent frameworks do with a schema-invalid call today is to send the error back to the model
and let it answer again (pydantic-ai's retry, LangGraph's ToolMessage); the alternatives are a
heuristic repair of the arguments and the repair gate. For each case of a case set (a call the
public verifier rejects, with BFCL's possible answers in its offline half) each way is run to its
end, and the call it finally releases is scored by BFCL's acceptance
(:func:`~contractrl.tasks.offline.semantic_outcome`):

- ``reask``: the agent's model sees BFCL's prompt for the function, the question, its own failed
  answer (the rejected call written as a BFCL call list) and the verifier's errors, and answers
  again, up to ``retries`` times. An answer is decoded as BFCL decodes a prompting model's
  (``[f(a=1)]``); every call in it the verifier accepts is *executed* (that is what a framework
  does with a valid call), an invalid or undecodable answer executes nothing and is re-asked. The
  way stops once a call to the case's tool has executed; that call is the one scored.
- ``heuristic``: the schema-guided heuristic policy behind a :class:`~contractrl.gate.RepairGate`
  (no model, no tokens).
- ``gate``: a trained policy behind the same gate (an ``hf:`` adapter, shielded).

Executions are counted per case: a gate executes at most the one call it dispatches; a re-asked
model may execute several (it re-emits calls, or repeats one), and ``executed_more_than_once``
counts the cases where it did. Tokens are the model's prompt and generated tokens over every turn
of the case (a re-ask re-sends the whole conversation). Latency is wall time per case, the model
already loaded. The re-asker is an interface (:class:`ReAsker`), so the logic is tested with a
scripted one and measured with SmolLM2 (:class:`ModelReAsker`).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import ConfigError
from ..gate import Dispatch, GateBudgets, RepairGate
from ..rollout.policies import Generation, Observation, Policy
from ..tasks.bfcl_results import DecodeError, decode_calls
from ..tasks.cases import Case, PublicCase
from ..tasks.offline import semantic_outcome
from ..validators import Verifier, VerifierReport
from .bfcl_harvest import functions_prompt, greedy_replies

WAYS = ("reask", "heuristic", "gate")


@dataclass(frozen=True)
class Reply:
    """One answer of the agent's model and what it cost."""

    text: str
    prompt_tokens: int = 0
    generated_tokens: int = 0


class ReAsker(Protocol):
    """The agent's model: a chat in, one answer out."""

    def answer(self, messages: list[dict[str, str]]) -> Reply: ...


@dataclass(frozen=True)
class Handled:
    """What one way did with one case."""

    way: str
    case_id: str
    success: bool
    reason: str
    dispatched: Any
    executions: int  # calls the executor ran for this case
    turns: int  # model answers (re-ask) or gate decisions (attempts)
    prompt_tokens: int
    generated_tokens: int
    latency_s: float

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.generated_tokens


def bfcl_call_text(name: str, arguments: dict[str, Any]) -> str:
    """A call as a prompting model writes it for BFCL: ``[name(a=1, b='x')]`` (Python literals)."""
    args = ", ".join(f"{key}={value!r}" for key, value in arguments.items())
    return f"[{name}({args})]"


def error_message(name: str, report: VerifierReport) -> str:
    """The error a framework sends back: the tool and each of the verifier's errors on one line."""
    lines = [f"- {e.pointer or '/'}: {e.message}" for e in report.errors]
    return f"The call to {name} was rejected by its schema:\n" + "\n".join(lines) + "\nFix the call and answer again."


def reask_messages(case: PublicCase, turns: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    """BFCL's prompt for the case's function, its question, then each (answer, error) turn."""
    chat = [{"role": "system", "content": functions_prompt([{"name": case.tool, "description": "", "parameters": case.schema}])}]
    chat.append({"role": "user", "content": case.request})
    for answer, error in turns:
        chat += [{"role": "assistant", "content": answer}, {"role": "user", "content": error}]
    return chat


def _same_tool(name: str, tool: str) -> bool:
    return name == tool or name == tool.replace(".", "_")  # function-calling models write a.b as a_b


def reask(case: Case, asker: ReAsker, retries: int, verifier: Verifier | None = None) -> Handled:
    """Re-ask the agent's model with the verifier's errors until a call to the tool executes."""
    if retries < 0:
        raise ConfigError(f"retries must be >= 0, got {retries}")
    public = case.public
    verifier = verifier or Verifier.build(public.schema)
    start = time.perf_counter()
    turns = [(bfcl_call_text(public.tool, public.candidate), error_message(public.tool, verifier.verify(public.candidate)))]
    executions = prompt = generated = asked = 0
    dispatched: Any = None
    while dispatched is None and asked < retries:
        reply = asker.answer(reask_messages(public, turns))
        asked += 1
        prompt, generated = prompt + reply.prompt_tokens, generated + reply.generated_tokens
        try:
            calls = decode_calls(reply.text)
        except DecodeError as exc:
            turns.append((reply.text, f"Your answer could not be read as function calls ({exc}). Answer with the call only."))
            continue
        errors = []
        for name, arguments in calls:
            if not _same_tool(name, public.tool):
                errors.append(f"There is no tool {name!r}; the tool is {public.tool}.")
                continue
            report = verifier.verify(arguments)
            if report.accepted:
                executions += 1  # the framework runs every valid call it is given
                dispatched = arguments if dispatched is None else dispatched
            else:
                errors.append(error_message(name, report))
        if not calls:
            errors.append("Your answer holds no function call. Answer with the call only.")
        if dispatched is None:
            turns.append((reply.text, "\n".join(errors)))
    # no valid call after the last re-ask ends the run with nothing executed: a framework's error,
    # scored as the gate's refusal is (right only where the case's answer is to abstain)
    outcome = semantic_outcome(public, case.offline, dispatched, abstained=dispatched is None)
    reason = outcome.reason if dispatched is not None else f"no valid call after {asked} re-asks: {outcome.reason}"
    elapsed = time.perf_counter() - start
    return Handled("reask", public.case_id, outcome.success, reason, dispatched, executions, asked, prompt, generated, elapsed)


class _Counting:
    """A policy wrapper that sums the tokens of every generation it passes on."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.name = getattr(policy, "name", type(policy).__name__)
        self.prompt_tokens = self.generated_tokens = 0

    def generate(self, observations: Sequence[Observation]) -> list[Generation]:
        out = self.policy.generate(observations)
        self.prompt_tokens += sum(g.prompt_tokens for g in out)
        self.generated_tokens += sum(g.generated_tokens for g in out)
        return out


def through_gate(case: Case, policy: Policy, way: str, ledger: Path) -> Handled:
    """The call through a :class:`RepairGate` guarding the case's tool with the case's budgets."""
    public = case.public
    counting = _Counting(policy)
    gate = RepairGate(
        {public.tool: public.schema},
        counting,
        ledger=ledger,
        budgets=GateBudgets(max_attempts=public.max_attempts, max_ops=public.max_ops),
    )
    try:
        decision = gate.repair({"name": public.tool, "arguments": public.candidate}, public.request)
    finally:
        gate.close()
    dispatched = decision.call.arguments if isinstance(decision, Dispatch) else None
    outcome = semantic_outcome(public, case.offline, dispatched, abstained=dispatched is None)
    reason = outcome.reason if dispatched is not None else f"refused: {decision.code}"  # type: ignore[union-attr]
    return Handled(
        way,
        public.case_id,
        outcome.success,
        reason,
        dispatched,
        int(dispatched is not None),
        decision.attempts,
        counting.prompt_tokens,
        counting.generated_tokens,
        decision.latency_s,
    )


def compare(
    cases: Sequence[Case], *, asker: ReAsker | None, retries: int, heuristic: Policy | None, gate_policy: Policy | None
) -> list[Handled]:
    """Every case through every way given (None: that way is left out), case by case."""
    out = []
    with tempfile.TemporaryDirectory(prefix="gate-compare-") as tmp:
        for index, case in enumerate(cases):
            if asker is not None:
                out.append(reask(case, asker, retries))
            for way, policy in (("heuristic", heuristic), ("gate", gate_policy)):
                if policy is not None:
                    out.append(through_gate(case, policy, way, Path(tmp) / f"{way}-{index}"))
    return out


def summarize(handled: Sequence[Handled]) -> dict[str, dict[str, Any]]:
    """Per way: success, tokens, latency and repeated executions over its cases."""
    out: dict[str, dict[str, Any]] = {}
    for way in WAYS:
        rows = [h for h in handled if h.way == way]
        if not rows:
            continue
        latency = sorted(h.latency_s for h in rows)
        out[way] = {
            "cases": len(rows),
            "success": sum(h.success for h in rows),
            "success_rate": round(sum(h.success for h in rows) / len(rows), 3),
            "dispatched": sum(h.dispatched is not None for h in rows),
            "executions": sum(h.executions for h in rows),
            "executed_more_than_once": sum(h.executions > 1 for h in rows),
            "turns_mean": round(statistics.fmean(h.turns for h in rows), 2),
            "tokens_mean": round(statistics.fmean(h.tokens for h in rows), 1),
            "generated_tokens_mean": round(statistics.fmean(h.generated_tokens for h in rows), 1),
            "latency_s_mean": round(statistics.fmean(latency), 3),
            "latency_s_p50": round(statistics.median(latency), 3),
            "latency_s_max": round(latency[-1], 3),
        }
    return out


def handled_row(h: Handled) -> dict[str, Any]:
    """One case's result as JSON (the dispatched call included, so a reader can check the verdict)."""
    return {**asdict(h), "tokens": h.tokens, "latency_s": round(h.latency_s, 3)}


class ModelReAsker:
    """A Hugging Face chat model as the agent: greedy, at most ``max_new_tokens`` per answer."""

    def __init__(self, model: Any, tokenizer: Any, max_new_tokens: int = 128) -> None:
        self.model, self.tokenizer, self.max_new_tokens = model, tokenizer, max_new_tokens

    def answer(self, messages: list[dict[str, str]]) -> Reply:
        ((text, prompt_tokens, answer_tokens),) = greedy_replies(self.model, self.tokenizer, [messages], self.max_new_tokens)
        return Reply(text, prompt_tokens, answer_tokens)


__all__ = [
    "WAYS",
    "Handled",
    "ModelReAsker",
    "ReAsker",
    "Reply",
    "bfcl_call_text",
    "compare",
    "error_message",
    "handled_row",
    "reask",
    "reask_messages",
    "summarize",
    "through_gate",
]
