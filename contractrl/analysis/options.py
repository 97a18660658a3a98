"""The report's options as a typed config section: the main job's ``report`` section and
``contractrl report --print-config`` share one default and one check per option.

No pandas here: the command line reads these before any table is built.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..configtree import check, setting

DEFAULT_THRESHOLDS: tuple[float, ...] = (0.5, 0.6, 0.7, 0.8, 0.9)


@dataclass(frozen=True)
class ReportConfig:
    """How the join scores and what the coverage-risk table cuts at (the main job's ``report``)."""

    workers: int = setting(1, help="Ray Data scoring workers (0 scores in this process)", ge=0)
    thresholds: tuple[float, ...] = setting(
        DEFAULT_THRESHOLDS, help="confidence thresholds of the coverage-risk table", nonempty=True
    )

    def __post_init__(self) -> None:
        check(all(0.0 <= t <= 1.0 for t in self.thresholds), "report.thresholds must lie in [0, 1]")


@dataclass(frozen=True)
class ReportOptions(ReportConfig):
    """``contractrl report``: frozen runs joined to their targets, tables, plots and an HTML report."""

    run_dirs: tuple[str, ...] = setting((), help="rollout runs, training outputs or study directories (required)")
    out: str = setting("", help="the report directory (required)")
    cases: tuple[str, ...] = setting((), help="extra case sets the runs were made from")
    progress: bool = setting(True, help="progress bars on stderr")


__all__ = ["DEFAULT_THRESHOLDS", "ReportConfig", "ReportOptions"]
