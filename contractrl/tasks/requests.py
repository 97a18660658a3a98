"""Natural-language requests from which every argument of a call can be recovered.

A request is an intro sentence plus one clause per argument, in seeded random order and phrasing.
Values are written as JSON (strings quoted), so they can be read back exactly: a missing or broken
argument is recoverable from the request, unless the case deliberately omits it (the unrepairable
family), in which case the value appears nowhere in the request.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from ..validators.jsonvalue import canonical_json
from .spec import ToolSpec

_CLAUSES = (
    "{label}: {value}",
    "set the {label} to {value}",
    "the {label} should be {value}",
    "use {value} as the {label}",
    "{label} = {value}",
)
_JOINERS = ("; ", ". ", "\n- ")


def render_request(
    spec: ToolSpec,
    args: dict[str, Any],
    rng: random.Random,
    *,
    omit: Iterable[str] = (),
    tool_output: str | None = None,
) -> str:
    """The user's request for ``args`` with the keys in ``omit`` left out entirely."""
    skipped = set(omit)
    keys = [k for k in args if k not in skipped]
    rng.shuffle(keys)
    clauses = [rng.choice(_CLAUSES).format(label=spec.label(k), value=canonical_json(args[k])) for k in keys]
    joiner = rng.choice(_JOINERS)
    body = joiner.join(clauses)
    lead = "\n- " if joiner == "\n- " else " "
    text = f"{rng.choice(spec.intros)}{lead}{body}."
    if tool_output is not None:
        text += f"\n\nOutput of the previous tool call:\n{tool_output}"
    return text
