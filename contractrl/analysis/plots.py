"""The report's figures (matplotlib, PNG), each drawn from one table so a figure never shows a
number the tables do not hold. A figure whose study was not run says so instead of being left out,
so a report always has the same files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .tables import Table

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PLOTS = ("success_vs_tokens", "budget_frontier", "coverage_risk", "scaling", "horizon_decay")


def _figure(title: str) -> tuple[Figure, Axes]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
    ax.set_title(title, fontsize=11)
    ax.grid(alpha=0.3)
    return fig, ax


def _empty(ax: Axes, why: str) -> None:
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, fontsize=10, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _legend(ax: Axes) -> None:
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=7, loc="best", ncol=1 if len(handles) < 8 else 2)


def _family_lines(ax: Axes, frame: pd.DataFrame, order: str, x: str, y: str) -> None:
    """One line per (system, case family): families are never averaged into one curve."""
    for (system, family), rows in frame.groupby(["system", "case_family"]):
        rows = rows.sort_values(order)
        ax.plot(rows[x], rows[y], marker=".", linewidth=0.8, alpha=0.8, label=f"{system} / {family}")


def success_vs_tokens(tables: dict[str, Table], ax: Axes) -> None:
    frame = tables["same_information"].frame
    if frame.empty:
        return _empty(ax, "no same-information runs")
    for system, rows in frame.groupby("system"):
        ax.scatter(rows["generated_tokens"], rows["semantic_success"], label=str(system), s=18, alpha=0.8)
    ax.set_xlabel("generated tokens per episode (one point per case family)")
    ax.set_ylabel("semantic success")
    ax.set_xlim(left=0)
    _legend(ax)


def budget_frontier(tables: dict[str, Table], ax: Axes) -> None:
    frame = tables["budget"].frame
    if frame.empty:
        return _empty(ax, "no budget study runs")
    per_budget = frame.groupby(["system", "max_attempts", "max_ops"], as_index=False)[["semantic_success", "collateral"]].mean()
    for system, rows in per_budget.groupby("system"):
        ax.plot(rows["collateral"], rows["semantic_success"], marker="o", label=f"{system} (mean of families)")
        for row in rows.itertuples():
            ax.annotate(f"B{row.max_attempts}K{row.max_ops}", (row.collateral, row.semantic_success), fontsize=7)
    ax.set_xlabel("collateral edits per episode")
    ax.set_ylabel("semantic success")
    _legend(ax)


def coverage_risk(tables: dict[str, Table], ax: Axes) -> None:
    frame = tables["calibration"].frame
    if frame.empty:
        return _empty(ax, "no episodes with log-probabilities")
    _family_lines(ax, frame, "threshold", "coverage", "risk")
    ax.set_xlabel("coverage")
    ax.set_ylabel("semantic risk on the covered subset")
    _legend(ax)


def scaling(tables: dict[str, Table], ax: Axes) -> None:
    frame = tables["scaling"].frame
    if frame.empty:
        return _empty(ax, "no runs with a model label")
    per_model = frame.groupby(["model", "stage"], as_index=False)["semantic_success"].mean()
    models = sorted(set(per_model["model"]))
    for stage, rows in per_model.groupby("stage"):
        xs = [models.index(m) for m in rows["model"]]
        ax.plot(xs, rows["semantic_success"], marker="o", label=f"after {stage or '?'} (mean of families)")
    ax.set_xticks(range(len(models)), models, rotation=20, fontsize=7)
    ax.set_ylabel("semantic success")
    _legend(ax)


def horizon_decay(tables: dict[str, Table], ax: Axes) -> None:
    frame = tables["horizon"].frame
    if frame.empty:
        return _empty(ax, "no long-horizon runs")
    _family_lines(ax, frame, "horizon", "horizon", "semantic_success")
    ax.set_xlabel("trajectory length (steps)")
    ax.set_ylabel("trajectory semantic success")
    _legend(ax)


_DRAW: dict[str, tuple[str, Callable[[dict[str, Table], Axes], None]]] = {
    "success_vs_tokens": ("Semantic success against generated tokens, per arm", success_vs_tokens),
    "budget_frontier": ("Budget frontier: success against collateral edits", budget_frontier),
    "coverage_risk": ("Coverage against semantic risk at fixed thresholds", coverage_risk),
    "scaling": ("Semantic success by model", scaling),
    "horizon_decay": ("Trajectory success against horizon", horizon_decay),
}


def write_plots(tables: list[Table], out_dir: str | Path) -> list[Path]:
    """Every figure of :data:`PLOTS` as ``out_dir/<name>.png``."""
    import matplotlib.pyplot as plt

    by_name = {t.name: t for t in tables}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in PLOTS:
        title, draw = _DRAW[name]
        fig, ax = _figure(title)
        draw(by_name, ax)
        fig.tight_layout()
        path = out / f"{name}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


__all__ = ["PLOTS", "write_plots"]
