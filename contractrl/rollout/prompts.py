"""Prompts per arm, rendered from the public half only.

Four arms share the same cases, budgets and validator; what differs is what they are shown and
what they must output. In *same-information* mode every arm gets the identical public block
(request, schema, candidate, typed code and pointer, history); in *case-matched* mode each arm gets
its own block, as in the paper's comparator contract (Table 7): full regeneration and constrained
decoding see no typed verifier block, Patch-SFT sees the typed errors, ContractRL sees the full
block plus budgets, immutable paths and its history.

The renderers take a :class:`PublicCase` and a :class:`PublicState` and nothing else, so an offline
field cannot be rendered.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..errors import ConfigError
from ..tasks.cases import PublicCase
from ..validators import PublicState
from ..validators.jsonvalue import canonical_json
from ..validators.report import VerifierError

ARMS: tuple[str, ...] = ("full_regen", "constrained", "patch_sft", "contractrl")
MODES: tuple[str, ...] = ("same_information", "case_matched")
# how much of the typed verifier report the errors block shows (the feedback ablation, Table 27):
# the full typed block, the pointer alone, the code alone, the free-text message alone, or nothing
# but the context (request, schema, candidate, history)
FEEDBACK: tuple[str, ...] = ("full", "pointer_only", "code_only", "text", "context_only")
WHOLE_OBJECT_ARMS = frozenset({"full_regen", "constrained"})

_SYSTEM = {
    "full_regen": "You fix tool calls. Reply with the complete corrected arguments as one JSON object and nothing else.",
    "constrained": "You fix tool calls. Reply with the complete corrected arguments as one JSON object and nothing else.",
    "patch_sft": "You repair tool calls with RFC 6902 JSON Patch. Reply with one JSON array of operations and nothing else.",
    "contractrl": (
        "You repair tool calls with a small RFC 6902 JSON Patch. Reply with one JSON array of operations, or with "
        "ABSTAIN if the request does not contain what the repair needs. Never change immutable paths."
    ),
}
# which public blocks each arm sees in case-matched mode (Table 7)
_CASE_MATCHED = {
    "full_regen": ("request", "schema", "candidate"),
    "constrained": ("request", "schema", "candidate"),
    "patch_sft": ("request", "schema", "candidate", "errors"),
    "contractrl": ("request", "schema", "candidate", "errors", "immutable", "budget", "history"),
}
_SAME_INFORMATION = ("request", "schema", "candidate", "errors", "history")


class ChatTokenizer(Protocol):
    chat_template: str | None

    def apply_chat_template(self, conversation: list[dict[str, str]], **kwargs: Any) -> Any: ...


def _check(arm: str, mode: str, feedback: str = "full") -> None:
    if arm not in ARMS:
        raise ConfigError(f"unknown arm {arm!r}; choose from {', '.join(ARMS)}")
    if mode not in MODES:
        raise ConfigError(f"unknown prompt mode {mode!r}; choose from {', '.join(MODES)}")
    if feedback not in FEEDBACK:
        raise ConfigError(f"unknown feedback variant {feedback!r}; choose from {', '.join(FEEDBACK)}")


def _error_line(e: VerifierError, feedback: str) -> str:
    if feedback == "pointer_only":
        return f"- error at {e.pointer or '(no pointer)'}"
    if feedback == "code_only":
        return f"- {e.code.value}"
    if feedback == "text":
        return f"- {e.message}"
    return f"- {e.code.value} at {e.pointer or '(no pointer)'}: expected {e.expected or '?'}, got {e.actual or '?'}"


def _errors(state: PublicState, feedback: str = "full") -> str:
    return "\n".join(_error_line(e, feedback) for e in state.report.errors) or "- (none reported)"


def _history(state: PublicState) -> str:
    if not state.history:
        return "(no earlier attempts)"
    return "\n".join(
        f"- attempt {h.attempt}: {h.outcome.value}{' at ' + h.pointer if h.pointer else ''}; ops {canonical_json(list(h.ops))}"
        for h in state.history
    )


def render_blocks(
    case: PublicCase, state: PublicState, arm: str, mode: str = "same_information", feedback: str = "full"
) -> dict[str, str]:
    """The named public blocks an arm sees, in order."""
    _check(arm, mode, feedback)
    wanted = _SAME_INFORMATION if mode == "same_information" else _CASE_MATCHED[arm]
    if feedback == "context_only":
        wanted = tuple(name for name in wanted if name != "errors")
    available = {
        "request": case.request,
        "schema": canonical_json(case.schema),
        "candidate": canonical_json(state.candidate),
        "errors": _errors(state, feedback),
        "immutable": ", ".join(case.immutable) or "(none)",
        "budget": f"{state.attempts_left} attempts and {state.ops_left} operations left",
        "history": _history(state),
    }
    return {name: available[name] for name in wanted}


_TITLES = {
    "request": "User request",
    "schema": "Tool schema",
    "candidate": "Failed call arguments",
    "errors": "Verifier errors",
    "immutable": "Immutable paths",
    "budget": "Budget",
    "history": "Earlier attempts",
}


def render_messages(
    case: PublicCase, state: PublicState, arm: str, mode: str = "same_information", feedback: str = "full"
) -> list[dict[str, str]]:
    """System and user messages for one decision."""
    blocks = render_blocks(case, state, arm, mode, feedback)
    body = f"Tool: {case.tool}\n\n" + "\n\n".join(f"{_TITLES[name]}:\n{text}" for name, text in blocks.items())
    return [{"role": "system", "content": _SYSTEM[arm]}, {"role": "user", "content": body}]


def render_prompt(messages: list[dict[str, str]], tokenizer: ChatTokenizer | None = None) -> str:
    """The text fed to a model: the tokenizer's chat template when it has one, else a plain layout."""
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    return "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages) + "<|assistant|>\n"
