"""Split integrity: the overlap audit between a training and a held-out case set.

Every unit of the paper's contamination audit is a fingerprint per case. A unit the split marks
*disjoint* must not share a single fingerprint between the two sets; the others are reported so a
reader can judge how close the sets are (same tools, same paths). Generation uses the same index
to refuse cases that would overlap, so a written split is disjoint by construction and the audit
confirms it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..validators.jsonvalue import sha256_json
from .cases import Case

UNITS: tuple[str, ...] = (
    "case_id",
    "candidate_fingerprint",
    "target_fingerprint",
    "schema_hash",
    "target_path",
    "operation_sequence",
    "error_template",
    "semantic_cluster",
    "schema_shape",
    "tool_name",
    "candidate_pool",
)
DEFAULT_DISJOINT: tuple[str, ...] = (
    "case_id",
    "candidate_fingerprint",
    "target_fingerprint",
    "operation_sequence",
    "semantic_cluster",
)
TRANSFER_DISJOINT: tuple[str, ...] = (*DEFAULT_DISJOINT, "schema_hash", "schema_shape", "tool_name", "candidate_pool")
_ANNOTATIONS = frozenset({"title", "description", "examples", "default", "$comment", "enum", "const", "pattern", "format"})


def check_units(units: Iterable[str]) -> tuple[str, ...]:
    out = tuple(units)
    unknown = set(out) - set(UNITS)
    if unknown:
        raise ConfigError(f"unknown audit units {sorted(unknown)}; choose from {', '.join(UNITS)}")
    return out


def schema_shape(schema: Any) -> Any:
    """The schema with annotations and literal values removed: two tools share a shape when only
    their names, descriptions and allowed values differ."""
    if isinstance(schema, dict):
        return {k: schema_shape(v) for k, v in sorted(schema.items()) if k not in _ANNOTATIONS}
    if isinstance(schema, list):
        return [schema_shape(v) for v in schema]
    return schema


def fingerprints(case: Case) -> dict[str, frozenset[str]]:
    """Each audit unit's fingerprints for one case (most units have exactly one).

    A case whose answer is ABSTAIN has no target object and no operation sequence, so it has no
    fingerprint in those two units. Fingerprinting the absence (``[tool, None]``) made every
    ABSTAIN case of a tool collide with every other: a held-out split could then hold ABSTAIN cases
    only of tools on which training had none, which left two tools for the two ABSTAIN families.
    What such a case could leak, its call and its cluster, the candidate and cluster units still pin.
    """
    pub, off = case.public, case.offline
    patch = off.target_patch if isinstance(off.target_patch, list) else []
    primary = pub.report["errors"][0] if pub.report.get("errors") else {"code": "", "pointer": ""}
    return {
        "case_id": frozenset({pub.case_id}),
        "candidate_fingerprint": frozenset({sha256_json([pub.tool, pub.candidate])}),
        "target_fingerprint": frozenset() if off.should_abstain else frozenset({sha256_json([pub.tool, off.target])}),
        "schema_hash": frozenset({pub.schema_sha256}),
        "target_path": frozenset(f"{pub.tool}:{op['path']}" for op in patch),
        "operation_sequence": frozenset() if off.should_abstain else frozenset({sha256_json([pub.tool, off.target_patch])}),
        "error_template": frozenset({f"{pub.tool}|{primary['code']}|{primary['pointer']}"}),
        "semantic_cluster": frozenset({off.cluster}),
        "schema_shape": frozenset({sha256_json(schema_shape(pub.schema))}),
        "tool_name": frozenset({pub.tool}),
        "candidate_pool": frozenset({f"{pub.tool_family}:{pub.world_seed}"}),
    }


class OverlapIndex:
    """Fingerprints of one case set, to test new cases against it."""

    def __init__(self, cases: Iterable[Case], disjoint: Iterable[str] = DEFAULT_DISJOINT) -> None:
        self.disjoint = check_units(disjoint)
        self.keys: dict[str, set[str]] = {u: set() for u in UNITS}
        for case in cases:
            self.add(case)

    def add(self, case: Case) -> None:
        for unit, keys in fingerprints(case).items():
            self.keys[unit] |= keys

    def collides(self, case: Case) -> bool:
        """Whether ``case`` shares a fingerprint with the index on any disjoint unit."""
        prints = fingerprints(case)
        return any(prints[u] & self.keys[u] for u in self.disjoint)


@dataclass(frozen=True)
class AuditRow:
    unit: str
    train: int
    heldout: int
    overlap: int
    disjoint: bool

    @property
    def ok(self) -> bool:
        return not (self.disjoint and self.overlap)

    def to_dict(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "train": self.train,
            "heldout": self.heldout,
            "overlap": self.overlap,
            "disjoint": self.disjoint,
            "ok": self.ok,
        }


def audit(train: Iterable[Case], heldout: Iterable[Case], disjoint: Iterable[str] = DEFAULT_DISJOINT) -> list[AuditRow]:
    """One row per unit: distinct fingerprints on each side and how many they share."""
    required = set(check_units(disjoint))
    left, right = OverlapIndex(train, ()), OverlapIndex(heldout, ())
    return [AuditRow(u, len(left.keys[u]), len(right.keys[u]), len(left.keys[u] & right.keys[u]), u in required) for u in UNITS]


def format_audit(rows: list[AuditRow]) -> str:
    header = f"{'unit':<22} {'train':>7} {'heldout':>7} {'overlap':>7}  disjoint  status"
    lines = [header, "-" * len(header)]
    for r in rows:
        status = "ok" if r.ok else "OVERLAP"
        lines.append(f"{r.unit:<22} {r.train:>7} {r.heldout:>7} {r.overlap:>7}  {'yes' if r.disjoint else 'no':<8}  {status}")
    return "\n".join(lines)
