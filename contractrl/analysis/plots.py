"""The report's figures (matplotlib, PNG), each drawn from one table so a figure never shows a
number the tables do not hold.

Figures whose curves are per case family (families are never averaged into one curve) get one
panel per system, so a legend names each family once; every legend sits outside the axes. A
figure whose study was not given to the report is not an empty box: it is a one-line note,
"not run: <the command that makes it>", both in the PNG (so a report always has the same files)
and in the HTML page. A panel with nothing to draw (no threshold covered an answer, so risk is
undefined) says so inside the panel instead of showing empty axes. Shares (success, coverage,
risk) are drawn on [0, 1] and counts from 0, so a single point is not blown up to fill the axes;
systems that coincide get distinct markers, and budget labels at one point are joined.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .tables import Table

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PLOTS = ("success_vs_tokens", "budget_frontier", "coverage_risk", "scaling", "horizon_decay")
_PANEL = (4.2, 3.2)  # inches per panel
_SINGLE = (6.5, 4.2)  # inches of a one-panel figure
_MAX_COLUMNS = 3
_SHARE = (-0.03, 1.03)  # axis limits of a share: the whole [0, 1] range, margins for the markers
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


@dataclass(frozen=True)
class Plot:
    """One figure of the report: its PNG, and the note shown instead when its study did not run."""

    name: str
    title: str
    path: Path
    not_run: str | None = None


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _panels(title: str, names: list[str]) -> tuple[Figure, list[Axes]]:
    """One panel per name (at most three to a row), sharing both axes; ``[""]`` is one untitled panel."""
    plt = _pyplot()
    columns = min(_MAX_COLUMNS, max(1, len(names)))
    rows = math.ceil(max(1, len(names)) / columns)
    size = _SINGLE if names == [""] else (_PANEL[0] * columns, _PANEL[1] * rows)
    fig, grid = plt.subplots(rows, columns, figsize=size, dpi=110, sharex=True, sharey=True, squeeze=False)
    axes = list(grid.flat)
    for ax, name in zip(axes, names, strict=False):
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
    for ax in axes[len(names) :]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=11, y=1.0 if names == [""] else 1.04)  # clear of the panel titles
    return fig, axes[: len(names)]


def _legend_outside(fig: Figure, axes: list[Axes]) -> None:
    """One legend for the figure, right of the panels, each label once."""
    seen: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    if seen:
        fig.legend(list(seen.values()), list(seen), fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 0.95), frameon=False)


def _per_system_families(
    title: str, frame: pd.DataFrame, order: str, x: str, y: str, xlabel: str, ylabel: str, empty: str
) -> Figure:
    """A panel per system, a line per case family inside it; a family with no drawable point is
    left out of the legend, and a panel with none says ``empty`` instead of showing bare axes."""
    systems = sorted(str(s) for s in frame["system"].unique())
    families = sorted(str(f) for f in frame["case_family"].unique())
    colours = _pyplot().get_cmap("tab20")  # 13 families: one colour each, the same in every panel
    fig, axes = _panels(title, systems)
    for ax, system in zip(axes, systems, strict=True):
        drawn = 0
        for family, rows in frame[frame["system"] == system].groupby("case_family"):
            rows = rows.sort_values(order)
            rows = rows[rows[x].notna() & rows[y].notna()]
            if rows.empty:
                continue
            colour = colours(families.index(str(family)) % colours.N)
            ax.plot(rows[x], rows[y], marker=".", linewidth=0.9, alpha=0.85, color=colour, label=str(family))
            drawn += 1
        if not drawn:
            ax.text(0.5, 0.5, empty, ha="center", va="center", wrap=True, fontsize=8, color="0.35", transform=ax.transAxes)
    for ax in axes:
        ax.set_xlabel(xlabel, fontsize=8)
    axes[0].set_ylabel(ylabel, fontsize=8)
    _legend_outside(fig, axes)
    return fig


def success_vs_tokens(tables: dict[str, Table]) -> Figure | None:
    frame = tables["same_information"].frame
    if frame.empty:
        return None
    fig, (ax,) = _panels("Semantic success against generated tokens, per system (one point per case family)", [""])
    for index, (system, rows) in enumerate(frame.groupby("system")):
        marker = _MARKERS[index % len(_MARKERS)]  # systems at the same point stay visible: hollow, distinct shapes
        ax.scatter(
            rows["generated_tokens_mean"],
            rows["semantic_success_mean"],
            label=str(system),
            s=26 + 10 * (index % 4),
            marker=marker,
            facecolors="none",
            edgecolors=f"C{index % 10}",
            linewidths=1.1,
        )
    ax.set_xlabel("mean generated tokens per episode", fontsize=8)
    ax.set_ylabel("semantic success rate", fontsize=8)
    ax.set_ylim(*_SHARE)
    ax.set_xlim(left=-0.5)
    _legend_outside(fig, [ax])
    return fig


def budget_frontier(tables: dict[str, Table]) -> Figure | None:
    frame = tables["budget"].frame
    if frame.empty:
        return None
    fig, (ax,) = _panels("Budget frontier: success against collateral edits (mean of families)", [""])
    means = ["semantic_success_mean", "collateral_mean"]
    per_budget = frame.groupby(["system", "max_attempts", "max_ops"], as_index=False)[means].mean()
    for system, rows in per_budget.groupby("system"):
        ax.plot(rows["collateral_mean"], rows["semantic_success_mean"], marker="o", label=str(system))
        at: dict[tuple[float, float], list[str]] = {}  # budgets that land on one point share one label
        for row in rows.itertuples():
            at.setdefault((round(row.collateral_mean, 6), round(row.semantic_success_mean, 6)), []).append(
                f"B{row.max_attempts}K{row.max_ops}"
            )
        for (x, y), names in at.items():
            ax.annotate(", ".join(names), (x, y), xytext=(4, 3), textcoords="offset points", fontsize=7)
    ax.set_xlabel("mean collateral edits per episode", fontsize=8)
    ax.set_ylabel("semantic success rate", fontsize=8)
    ax.set_ylim(*_SHARE)
    ax.set_xlim(left=-0.02, right=max(1.0, float(per_budget["collateral_mean"].max()) * 1.15))
    _legend_outside(fig, [ax])
    return fig


def coverage_risk(tables: dict[str, Table]) -> Figure | None:
    frame = tables["calibration"].frame
    if frame.empty:
        return None
    fig = _per_system_families(
        "Coverage against semantic risk at fixed thresholds",
        frame,
        "threshold",
        "coverage",
        "risk",
        "coverage (share released at the threshold)",
        "risk (share of covered that fail)",
        "no answer reached a threshold:\ncoverage 0, risk undefined",
    )
    for ax in fig.axes[: frame["system"].nunique()]:
        ax.set_xlim(*_SHARE)
        ax.set_ylim(*_SHARE)
    return fig


def scaling(tables: dict[str, Table]) -> Figure | None:
    """Success with its interval against model size, and what each size costs: decision time and
    training time on a log scale (x: stored parameters, or the model's order when unknown)."""
    frame = tables["scaling"].frame
    if frame.empty:
        return None
    plt = _pyplot()  # not _panels: the two panels share x but not y (a rate and seconds)
    fig, (success_ax, cost_ax) = plt.subplots(1, 2, figsize=(_PANEL[0] * 2, _PANEL[1]), dpi=110, sharex=True)
    fig.suptitle("Model size: semantic success and cost", fontsize=11, y=1.04)
    for ax, name in ((success_ax, "semantic success"), (cost_ax, "seconds")):
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
    known = frame["params"].notna().all()
    models = list(frame.sort_values(["params", "model"])["model"].drop_duplicates())
    for (stage, arm), rows in frame.groupby(["stage", "arm"]):
        rows = rows.sort_values(["params", "model"])
        xs = rows["params"].astype(float) if known else rows["model"].map(models.index)
        label = f"{arm} after {stage}" if stage else arm
        low = rows["semantic_success_mean"] - rows["semantic_success_ci_low"]
        high = rows["semantic_success_ci_high"] - rows["semantic_success_mean"]
        success_ax.errorbar(xs, rows["semantic_success_mean"], yerr=[low, high], marker="o", capsize=3, label=label)
        cost_ax.plot(xs, rows["latency_s_p95"], marker="o", label=f"{label}: p95 episode")
        if rows["train_s"].notna().any():
            cost_ax.plot(xs, rows["train_s"], marker="s", linestyle="--", label=f"{label}: training")
    sizes = sorted(set(frame["params"].astype(float))) if known else []
    for ax in (success_ax, cost_ax):
        if known:  # one labelled tick per model size (log-scale minor labels collide)
            ax.set_xscale("log")
            ax.minorticks_off()
            ax.set_xticks(sizes, [_count(n) for n in sizes], fontsize=7)
            ax.set_xlabel("parameters (stored)", fontsize=8)
        else:
            ax.set_xticks(range(len(models)), models, rotation=20, fontsize=7)
            ax.set_xlabel("model", fontsize=8)
    success_ax.set_ylabel("semantic success rate (95% interval)", fontsize=8)
    success_ax.set_ylim(*_SHARE)
    cost_ax.set_yscale("log")
    cost_ax.set_ylabel("seconds", fontsize=8)
    _legend_outside(fig, [success_ax, cost_ax])
    return fig


def _count(n: float) -> str:
    """135M, 1.78B: a parameter count as a tick label."""
    return f"{n / 1e9:.3g}B" if n >= 1e9 else f"{n / 1e6:.3g}M" if n >= 1e6 else f"{n:.3g}"


def horizon_decay(tables: dict[str, Table]) -> Figure | None:
    frame = tables["horizon"].frame
    if frame.empty:
        return None
    fig = _per_system_families(
        "Trajectory success against horizon",
        frame,
        "horizon",
        "horizon",
        "trajectory_success_mean",
        "trajectory length (steps)",
        "trajectory success rate",
        "no trajectory",
    )
    horizons = sorted(int(h) for h in frame["horizon"].dropna().unique())
    for ax in fig.axes[: frame["system"].nunique()]:
        ax.set_ylim(*_SHARE)
        if horizons:
            ax.set_xticks(horizons)
            ax.set_xlim(min(horizons) - 0.5, max(horizons) + 0.5)
    return fig


# name -> (title, the command whose runs the figure needs, draw)
_DRAW: dict[str, tuple[str, str, Callable[[dict[str, Table]], Figure | None]]] = {
    "success_vs_tokens": (
        "Semantic success against generated tokens",
        "contractrl rollout --cases DIR --policy POLICY --out RUN",
        success_vs_tokens,
    ),
    "budget_frontier": (
        "Budget frontier",
        "contractrl study budget --cases DIR --policy POLICY --out STUDY",
        budget_frontier,
    ),
    "coverage_risk": (
        "Coverage against semantic risk",
        "contractrl rollout --cases DIR --policy hf:MODEL --out RUN (a model policy records log-probabilities)",
        coverage_risk,
    ),
    "scaling": (
        "Model size: semantic success and cost",
        "contractrl tune --config tune_configs/scaling.yaml, then contractrl report over its runs/",
        scaling,
    ),
    "horizon_decay": (
        "Trajectory success against horizon",
        "contractrl study horizon --cases DIR --policy POLICY --out STUDY",
        horizon_decay,
    ),
}


def _note(title: str, note: str) -> Figure:
    plt = _pyplot()
    fig = plt.figure(figsize=(8.0, 0.7), dpi=110)
    fig.text(0.01, 0.5, f"{title}: {note}", fontsize=9, color="0.35", va="center")
    return fig


def write_plots(tables: list[Table], out_dir: str | Path) -> list[Plot]:
    """Every figure of :data:`PLOTS` as ``out_dir/<name>.png``."""
    plt = _pyplot()
    by_name = {t.name: t for t in tables}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = []
    for name in PLOTS:
        title, command, draw = _DRAW[name]
        fig = draw(by_name)
        not_run = None if fig is not None else f"not run: {command}"
        if fig is None:
            fig = _note(title, not_run)  # type: ignore[arg-type]
        path = out / f"{name}.png"
        fig.savefig(path, bbox_inches="tight")  # keeps the outside legend in the image
        plt.close(fig)
        plots.append(Plot(name, title, path, not_run))
    return plots


__all__ = ["PLOTS", "Plot", "write_plots"]
