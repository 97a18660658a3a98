"""The rollout command's options as a typed config section (``contractrl rollout --print-config``).

The same tree machinery as training's config (:mod:`contractrl.configtree`): every option has one
default, one help text and its range (field metadata), here; the command's flags
(``--max-new-tokens``) and ``key=value`` overrides (``max_new_tokens=64``) both set these fields,
so a flag cannot carry a default of its own. The study command extends :class:`PolicyOptions`
(``experiments/options.py``). Nothing here imports torch: ``--print-config`` and ``--help`` stay
instant.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..configtree import check, setting
from ..errors import ConfigError
from ..tasks.arms import ARMS, DEFAULT_ARM
from .prompts import FEEDBACK, MODES

# An hf policy's generation budget per attempt, wherever a command or the gate does not set one: a
# repair patch or a whole tool call fits it (the trainer's own budgets are training knobs, apart).
DEFAULT_MAX_NEW_TOKENS = 160

POLICY_SPECS = (
    "replay | heuristic | hf:<preset: tiny, smollm2, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b> | hf:<name-or-path> | selector:<dir>"
)


@dataclass(frozen=True)
class PolicyOptions:
    """Which policy acts, on which arm, and how an ``hf:`` policy decodes: what rollout and study share."""

    policy: str = setting("", help=POLICY_SPECS)
    arm: str = setting(DEFAULT_ARM, help=f"the arm: {', '.join(ARMS)}")
    workers: int = setting(2, help="Ray validator workers (0 = in-process, no Ray)", ge=0)
    seed: int = setting(0, help="the episodes' seed (and an hf policy's sampling seed)")
    max_new_tokens: int = setting(DEFAULT_MAX_NEW_TOKENS, help="hf policies: generation budget per attempt", ge=1)
    temperature: float = setting(1.0, help="hf policies: sampling temperature (0 = greedy)", ge=0)
    mode: str = setting("same_information", help=f"hf policies: which public blocks ({', '.join(MODES)})")
    shield_k: int = setting(
        1,
        help="hf policies: shielded decoding with K proposals per decision, probed on the public contract with the "
        "enumerated candidates before one is committed (0 = blind: the decoded answer is sent as it is; rollout/shield.py)",
        ge=0,
        why="(0: blind decoding)",
    )
    enumerate: bool = setting(
        True, help="hf policies, shielded: weigh the enumerated candidates beside the model's own proposals"
    )
    defer: bool = setting(
        True,
        help="hf policies, shielded: weigh the enumerated candidates first and decode proposals only where none of "
        "them settles the decision (the policy abstains, or one is accepted; false: always decode)",
    )
    policy_actors: int = setting(
        0, help="hf policies: generate on N Ray actors, each holding the model (0 = in this process)", ge=0
    )
    gpus_per_actor: float = setting(0.0, help="hf policies: GPUs per policy actor", ge=0)
    threads: int = setting(
        0,
        help="hf policies in this process: torch threads (0 = torch's default, one per core). On cores other jobs "
        "share, 1 is far faster: a thread waiting on a descheduled sibling spins (docs/rollouts.md)",
        ge=0,
    )
    progress: bool = setting(True, help="progress bars on stderr")

    def __post_init__(self) -> None:
        check(self.arm in ARMS, f"arm must be one of {', '.join(ARMS)}, got {self.arm!r}")
        check(self.mode in MODES, f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")

    @property
    def model(self) -> str:
        """The model an ``hf:`` policy names (its runs carry it, so a report says which is which); '' otherwise."""
        return self.policy.removeprefix("hf:") if self.policy.startswith("hf:") else ""


@dataclass(frozen=True)
class RolloutOptions(PolicyOptions):
    """``contractrl rollout``: episodes of one policy over a case set into a frozen, hashed ledger."""

    cases: str = setting("", help="a case set written by `cases generate` (required)")
    out: str = setting("", help="a new run directory (required)")
    group: int = setting(1, help="episodes per case (G)", ge=1)
    feedback: str = setting("full", help=f"hf policies: how much of the typed report ({', '.join(FEEDBACK)})")
    labels: dict[str, str] = setting(factory=dict, help="run labels for the report (labels.condition=slice; --label KEY=VALUE)")
    policy_name: str = setting(
        "",
        help="the policy's name in the run's rows, which names its system (arm:policy@stage) in every table; '' keeps "
        "its own (a preset, the path after hf:, heuristic). E.g. smollm2/lora-r16 with --label stage=grpo pools an "
        "adapter's rollout with the main job's runs of that model",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.feedback in FEEDBACK, f"feedback must be one of {', '.join(FEEDBACK)}, got {self.feedback!r}")


def require(options: object, *names: str) -> None:
    """Refuse, naming the flag and the key, options a command cannot run without (defaults stay
    empty so that ``--print-config`` works without them)."""
    known = {f.name for f in fields(options)}  # type: ignore[arg-type]
    for name in names:
        if name not in known:
            raise ConfigError(f"{type(options).__name__} has no option {name!r}")  # a bug in the command
        if getattr(options, name) in ("", ()):
            flag = "--" + name.replace("_", "-")
            raise ConfigError(f"{flag} is required (or {name}=... as an override)")


__all__ = ["DEFAULT_MAX_NEW_TOKENS", "POLICY_SPECS", "PolicyOptions", "RolloutOptions", "require"]
