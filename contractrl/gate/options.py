"""The serve command's options as one typed config section (``contractrl serve --print-config``).

The same tree machinery as the rollout command's (:mod:`contractrl.configtree`): each option has one
default and one help text, here; ``--port 8000`` and ``port=8000`` set the same field. What the
gate is built from (tools, policy, budgets, ledger) sits beside how Ray Serve runs it (replicas,
autoscaling, batching), so one printed config says everything a deployment was started with.
Nothing here imports Ray or torch: ``--print-config`` and ``--help`` stay instant.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..configtree import check, setting
from ..rollout.options import DEFAULT_MAX_NEW_TOKENS
from ..rollout.prompts import MODES
from ..tasks.arms import ARMS, DEFAULT_ARM
from ..validators.transition import DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_OPS

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class AutoscalingOptions:
    """Ray Serve's autoscaling of the gate's replicas (its ``autoscaling_config``), off by default:
    a replica of an ``hf:`` policy holds a model, so more of them is a decision, not a default."""

    enabled: bool = setting(
        False, help="scale replicas with load between min_replicas and max_replicas (num_replicas is then unused)"
    )
    min_replicas: int = setting(1, help="autoscaling: replicas kept when idle", ge=0)
    max_replicas: int = setting(2, help="autoscaling: replicas at most", ge=1)
    target_ongoing_requests: float = setting(2.0, help="autoscaling: requests in flight per replica it aims for", gt=0)

    def __post_init__(self) -> None:
        check(
            self.min_replicas <= self.max_replicas,
            f"autoscaling.min_replicas ({self.min_replicas}) must be <= autoscaling.max_replicas ({self.max_replicas})",
        )


@dataclass(frozen=True)
class ServeOptions:
    """``contractrl serve``: a :class:`~contractrl.gate.RepairGate` behind an HTTP JSON API on Ray Serve."""

    tools: str = setting(
        "",
        help="a JSON file of OpenAI/MCP tool definitions (a list, a {name: schema} mapping, or {tools, contracts, "
        "immutable}); empty: the built-in tool catalog with its contracts",
    )
    policy: str = setting("heuristic", help="heuristic | selector:<dir> | hf:<preset, name or adapter path>", nonempty=True)
    arm: str = setting(DEFAULT_ARM, help=f"the arm the policy acts on: {', '.join(ARMS)}")
    seed: int = setting(0, help="the gate's seed (recorded in each ledger shard's manifest)")
    max_attempts: int = setting(DEFAULT_MAX_ATTEMPTS, help="budget: policy decisions per call", ge=1)
    max_ops: int = setting(DEFAULT_MAX_OPS, help="budget: patch operations per decision", ge=1)
    max_tokens: int = setting(0, help="budget: generated tokens over all attempts of one call (0 = no token budget)", ge=0)
    ledger: str = setting(
        "runs/serve-ledger",
        help="the ledger root: each replica chains its decisions into its own shard directory replica-<id>/ under it",
        nonempty=True,
    )
    shard_rows: int = setting(100, help="ledger rows per parquet shard", ge=1)
    flush_every_s: float = setting(
        5.0, help="write buffered ledger rows at least this often (0 = only at full shards and shutdown)", ge=0
    )
    host: str = setting(
        LOOPBACK, help="the HTTP address Ray Serve's proxy binds (0.0.0.0 exposes it to the network)", nonempty=True
    )
    port: int = setting(8000, help="the HTTP port", ge=1, le=65535)
    ray_address: str = setting(
        "", help="join this running Ray cluster (else RAY_ADDRESS; with neither, serve starts a local Ray instance of its own)"
    )
    graceful_shutdown_timeout_s: float = setting(
        30.0, help="how long a replica may take to finish its calls and freeze its ledger at shutdown", gt=0
    )
    num_replicas: int = setting(1, help="gate replicas (each loads the policy once)", ge=1)
    replica_cpus: float = setting(1.0, help="CPUs Ray reserves per replica", ge=0)
    replica_gpus: float = setting(0.0, help="GPUs Ray reserves per replica (hf policies on a GPU)", ge=0)
    max_ongoing_requests: int = setting(64, help="requests one replica accepts at once; more wait in the proxy", ge=1)
    autoscaling: AutoscalingOptions = setting(factory=AutoscalingOptions, help="Ray Serve autoscaling of the replicas")
    max_batch_size: int = setting(
        8, help="hf policies: concurrent requests decoded together in one model batch (@serve.batch)", ge=1
    )
    batch_wait_timeout_s: float = setting(0.01, help="hf policies: how long a batch waits to fill after its first request", ge=0)
    max_new_tokens: int = setting(DEFAULT_MAX_NEW_TOKENS, help="hf policies: generation budget per attempt", ge=1)
    temperature: float = setting(
        0.0, help="hf policies: sampling temperature (0 = greedy: the same call gets the same repair)", ge=0
    )
    mode: str = setting("same_information", help=f"hf policies: which public blocks ({', '.join(MODES)})")
    shield_k: int = setting(
        1, help="hf policies: shielded decoding with K proposals per decision (0 = blind decoding; rollout/shield.py)", ge=0
    )
    enumerate: bool = setting(True, help="hf policies, shielded: weigh the enumerated candidates beside the model's proposals")
    defer: bool = setting(
        True, help="hf policies, shielded: decode proposals only where the enumerated candidates settle nothing"
    )
    max_body_bytes: int = setting(1_000_000, help="the largest request body accepted (larger: a typed too_large error)", ge=1)

    def __post_init__(self) -> None:
        check(self.arm in ARMS, f"arm must be one of {', '.join(ARMS)}, got {self.arm!r}")
        check(self.mode in MODES, f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")

    @property
    def batched(self) -> bool:
        """Whether requests are gathered into model batches: only a language model gains from it."""
        return self.policy.startswith("hf:")


__all__ = ["LOOPBACK", "AutoscalingOptions", "ServeOptions"]
