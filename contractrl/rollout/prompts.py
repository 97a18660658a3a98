"""Prompts per arm, rendered from the public half only.

Four arms share the same cases, budgets and validator; what differs is what they are shown and
what they must output. In *same-information* mode every arm gets the identical public block
(request, schema, candidate, typed code and pointer, history); in *case-matched* mode each arm gets
its own block, as in the paper's comparator contract (Table 7): full regeneration and constrained
decoding see no typed verifier block, Patch-SFT sees the typed errors, ContractRL sees the full
block plus budgets, immutable paths and its history.

The schema block is an excerpt (:mod:`contractrl.rollout.schema_excerpt`): the subschemas at and
above the reported pointers, with the ``required`` lists and immutable paths on the way. It is
derived from the pointers, so it is shown only where the prompt shows the pointers anyway; the
whole-object arms in case-matched mode and the feedback variants that hide the pointer
(``code_only``, ``text``, ``context_only``) get the full schema instead, so the excerpt never leaks a
location a variant withholds.

The renderers take a :class:`PublicCase` and a :class:`PublicState` and nothing else, so an offline
field cannot be rendered.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..errors import ConfigError
from ..tasks.arms import arm_spec
from ..tasks.cases import PublicCase
from ..validators import PublicState
from ..validators.codes import Code
from ..validators.jsonvalue import canonical_json
from ..validators.report import VerifierError
from .schema_excerpt import schema_excerpt

MODES: tuple[str, ...] = ("same_information", "case_matched")
# how much of the typed verifier report the errors block shows (the feedback ablation, Table 27):
# the full typed block, the pointer alone, the code alone, the free-text message alone, or nothing
# but the context (request, schema, candidate, history)
FEEDBACK: tuple[str, ...] = ("full", "pointer_only", "code_only", "text", "context_only")
# feedback variants whose errors block shows the pointers (the schema excerpt may follow them)
_POINTER_FEEDBACK = frozenset({"full", "pointer_only"})

# Strings longer than this are shown cut in the failed call and the history. No target value of the
# built-in catalog is longer than 226 characters, while a length violation can be 20,000 (5,000
# tokens, which alone would fill a CPU's memory in training): the repair replaces such a value, it
# does not need to read it.
LONG_STRING_CHARS = 400
_KEPT_CHARS = 120
# an error's expected constraint is in the schema block and its offending value in the failed call;
# the errors block recalls only their start
_REPORT_CHARS = 48

# every arm's blocks in same-information mode (an arm's own, for case-matched mode, are in its ArmSpec)
_SAME_INFORMATION = ("request", "schema", "candidate", "errors", "history")


class ChatTokenizer(Protocol):
    chat_template: str | None

    def apply_chat_template(self, conversation: list[dict[str, str]], **kwargs: Any) -> Any: ...


def _check(mode: str, feedback: str = "full") -> None:
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
    return f"- {e.code.value} at {e.pointer or '(no pointer)'}: expected {_cut(e.expected) or '?'}, got {_cut(e.actual) or '?'}"


def _cut(text: str) -> str:
    return text if len(text) <= _REPORT_CHARS else text[:_REPORT_CHARS] + "…"


def _errors(state: PublicState, feedback: str = "full") -> str:
    return "\n".join(_error_line(e, feedback) for e in state.report.errors) or "- (none reported)"


def shorten_strings(value: Any, limit: int = LONG_STRING_CHARS) -> Any:
    """``value`` with every string longer than ``limit`` cut to its start and a length mark."""
    if isinstance(value, str):
        return value if len(value) <= limit else f"{value[:_KEPT_CHARS]}…(+{len(value) - _KEPT_CHARS} chars)"
    if isinstance(value, list):
        return [shorten_strings(item, limit) for item in value]
    if isinstance(value, dict):
        return {key: shorten_strings(item, limit) for key, item in value.items()}
    return value


def render_value(value: Any) -> str:
    """Canonical JSON for a prompt, long strings cut (see ``LONG_STRING_CHARS``)."""
    return canonical_json(shorten_strings(value))


def _history(state: PublicState) -> str:
    return "\n".join(
        f"- attempt {h.attempt}: {h.outcome.value}{' at ' + h.pointer if h.pointer else ''}; ops {render_value(list(h.ops))}"
        for h in state.history
    )


def _schema_block(case: PublicCase, state: PublicState, full: bool) -> str:
    if full:
        return canonical_json(case.schema)
    errors = state.report.errors
    return schema_excerpt(
        case.schema,
        [e.pointer for e in errors],
        case.immutable,
        unexpected=[e.pointer for e in errors if e.code is Code.ADDITIONAL_PROPERTY],
        instance=state.candidate,
    )


def render_blocks(
    case: PublicCase, state: PublicState, arm: str, mode: str = "same_information", feedback: str = "full"
) -> dict[str, str]:
    """The named public blocks an arm sees, in order."""
    spec = arm_spec(arm)
    _check(mode, feedback)
    wanted = _SAME_INFORMATION if mode == "same_information" else spec.blocks
    if feedback == "context_only":
        wanted = tuple(name for name in wanted if name != "errors")
    if not state.history:  # the first decision: no history block (the same absence for every arm)
        wanted = tuple(name for name in wanted if name != "history")
    # the excerpt follows the reported pointers: only where the prompt shows them anyway
    full_schema = "errors" not in wanted or feedback not in _POINTER_FEEDBACK
    available = {
        "request": case.request,
        "schema": _schema_block(case, state, full_schema),
        "candidate": render_value(state.candidate),
        "errors": _errors(state, feedback),
        "immutable": ", ".join(case.immutable) or "(none)",
        "budget": f"{state.attempts_left} attempts and {state.ops_left} operations left",
        "history": _history(state) if state.history else "",
    }
    return {name: available[name] for name in wanted}


_TITLES = {
    "request": "Request",
    "schema": "Schema",
    "candidate": "Failed call",
    "errors": "Errors",
    "immutable": "Immutable paths",
    "budget": "Budget",
    "history": "Earlier attempts",
}


def render_messages(
    case: PublicCase, state: PublicState, arm: str, mode: str = "same_information", feedback: str = "full"
) -> list[dict[str, str]]:
    """System and user messages for one decision."""
    blocks = render_blocks(case, state, arm, mode, feedback)
    body = f"Tool: {case.tool}\n" + "\n".join(f"{_TITLES[name]}:\n{text}" for name, text in blocks.items())
    return [{"role": "system", "content": arm_spec(arm).system}, {"role": "user", "content": body}]


def render_prompt(messages: list[dict[str, str]], tokenizer: ChatTokenizer | None = None) -> str:
    """The text fed to a model: the tokenizer's chat template when it has one, else a plain layout."""
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    return "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages) + "<|assistant|>\n"
