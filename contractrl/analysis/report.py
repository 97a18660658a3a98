"""``contractrl report``: frozen runs in, tables, plots and one HTML page out.

Each RUN_DIR argument is a *root*: a single rollout run, a training output directory (its held-out
``eval/after-*`` runs; the per-step GRPO batches under ``rollouts/`` are training data, not
results, and are skipped) or a directory of study runs. Case sets found under a root (and any
``--cases`` given) are the targets its runs are joined to; each root has its own judge, so two
training runs whose case ids collide cannot score each other's episodes.

The calibration thresholds are written to ``report.json`` before anything is scored, with the
job directory (``job_dir``: the common ancestor of the arguments) that the ``run`` column is
relative to. Every parquet file is written through the data dictionary (``dictionary.py``): declared
dtypes and a description per field.
"""

from __future__ import annotations

import html
import json
import math
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import ContractRLError
from ..rollout.ledger import LEDGER_DIR, MANIFEST, read_manifest
from ..trainer.checkpoint import GRPO_BATCHES
from .dictionary import describe, typed, write_parquet
from .join import join_groups, read_episodes
from .plots import Plot, write_plots
from .scaling import scaling, training_costs
from .systems import BUILT_IN, slice_labels, with_system
from .tables import DEFAULT_THRESHOLDS, TABLES, Table, build_tables, p95

EPISODES_FILE = "episodes.parquet"
# every table a report writes: the paper's tables from the episodes, then the scaling table, which
# also reads the evaluated training runs (scaling.py)
TABLE_NAMES: tuple[str, ...] = (*TABLES, "scaling")
OVERVIEW_FILE = "overview.parquet"


@dataclass(frozen=True)
class Report:
    """What ``contractrl report`` wrote, and the overview the terminal prints."""

    out: Path
    episodes: int
    runs: tuple[str, ...]
    tables: tuple[Path, ...]
    plots: tuple[Path, ...]
    index: Path
    summary: tuple[dict[str, Any], ...]  # the overview: one row per slice and system (OVERVIEW_COLUMNS)
    standing: tuple[str, ...] = ()  # per slice, one line: which system leads, by how much, and on which families


def _kind(directory: Path) -> str | None:
    return read_manifest(directory).get("kind")


def discover(root: str | Path) -> tuple[list[Path], list[Path]]:
    """(rollout runs, case sets) under ``root``, in path order; training batches are skipped."""
    base = Path(root)
    if not base.is_dir():
        raise ContractRLError(f"{base} is not a directory")
    runs, case_sets = [], []
    for manifest in sorted(base.rglob(MANIFEST)):
        directory = manifest.parent
        if GRPO_BATCHES in directory.relative_to(base).parts:
            continue
        kind = _kind(directory)
        if kind == "contractrl.rollout" and (directory / LEDGER_DIR).is_dir():
            runs.append(directory)
        elif kind == "contractrl.cases":
            case_sets.append(directory)
    return runs, case_sets


def build_report(
    roots: Sequence[str | Path],
    out: str | Path,
    *,
    cases: Sequence[str | Path] = (),
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    use_ray: bool = True,
    workers: int = 1,
    progress: bool = True,
) -> Report:
    out_dir = Path(out)
    if not roots:
        raise ContractRLError("give at least one run directory")
    if any(not 0.0 <= t <= 1.0 for t in thresholds) or not thresholds:
        raise ContractRLError(f"calibration thresholds must lie in [0, 1], got {list(thresholds)}")
    found = []
    for root in roots:
        runs, case_sets = discover(root)
        if not runs:
            raise ContractRLError(f"no rollout runs under {root}")
        if not case_sets and not cases:
            raise ContractRLError(f"no case set under {root}: pass --cases with the cases its runs were made from")
        found.append((Path(root), runs, [*case_sets, *map(Path, cases)]))
    base = job_directory([(root, runs) for root, runs, _ in found])
    out_dir.mkdir(parents=True, exist_ok=True)
    settings = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "job_dir": str(base),
        "thresholds": list(thresholds),
        "roots": [{"root": str(r), "runs": [str(x) for x in runs], "cases": [str(c) for c in cs]} for r, runs, cs in found],
    }
    (out_dir / "report.json").write_text(json.dumps(settings, indent=2) + "\n")  # fixed before scoring

    joined = out_dir / "joined"
    shutil.rmtree(joined, ignore_errors=True)
    groups = [(runs, case_dirs) for _, runs, case_dirs in found]
    dataset = join_groups(groups, joined, use_ray=use_ray, workers=workers, progress=progress, base=base)
    episodes = read_episodes(dataset)
    write_parquet(episodes, out_dir / EPISODES_FILE)

    # the scaling table also reads what each evaluated training run spent (its metrics and model)
    tables = [*build_tables(episodes, thresholds), scaling(episodes, training_costs([r for _, rs, _ in found for r in rs], base))]
    table_dir = out_dir / "tables"
    shutil.rmtree(table_dir, ignore_errors=True)
    table_dir.mkdir()
    table_paths = []
    for table in tables:
        write_parquet(table.frame, table_dir / f"{table.name}.parquet")
        (table_dir / f"{table.name}.md").write_text(table.to_markdown())
        table_paths.append(table_dir / f"{table.name}.parquet")
    plots = write_plots(tables, out_dir / "plots")
    overview = summary(episodes)
    write_parquet(overview, out_dir / OVERVIEW_FILE)
    index = _write_index(out_dir, episodes, overview, tables, plots, settings)
    run_names = tuple(str(r) for _, runs, _ in found for r in runs)
    rows = tuple(overview.to_dict("records"))
    lead = standing(episodes)
    return Report(out_dir, len(episodes), run_names, tuple(table_paths), tuple(p.path for p in plots), index, rows, lead)


def job_directory(found: Sequence[tuple[Path, Sequence[Path]]]) -> Path:
    """The directory the ``run`` column is relative to: the common ancestor of the roots, where a
    root that is itself a run counts as its parent (so the run keeps its name)."""
    dirs = []
    for root, runs in found:
        resolved = root.resolve()
        dirs.append(resolved.parent if any(run.resolve() == resolved for run in runs) else resolved)
    return Path(os.path.commonpath([str(d) for d in dirs]))


def _systems(episodes: pd.DataFrame) -> pd.DataFrame:
    """The episodes with their ``system`` (read_episodes adds it; a hand-made frame may lack it)."""
    return episodes if "system" in episodes.columns else with_system(episodes)


def slices(episodes: pd.DataFrame) -> pd.Series:
    """The slice of each episode (``systems.slice_labels``): the run's condition, else ``built-in``
    for the main study's cases, else its study."""
    return slice_labels(episodes)


def standing(episodes: pd.DataFrame) -> tuple[str, ...]:
    """Per slice, one line: which system leads on semantic success, its margin over the runner-up,
    and the families that margin comes from (the oracle replay, a mechanism check, is left out)."""
    rows = _systems(episodes)
    rows = rows[rows["policy"] != "replay"].assign(slice=slices(rows[rows["policy"] != "replay"]))
    lines = []
    for name, group in sorted(rows.groupby("slice"), key=lambda kv: (kv[0] != BUILT_IN, kv[0])):
        lines.append(f"{name}: {_lead(group)}")
    return tuple(lines)


def _lead(rows: pd.DataFrame) -> str:
    success = rows.groupby("system")["semantic_success"].mean().sort_values(ascending=False, kind="stable")
    leader = str(success.index[0])
    if len(success) == 1:
        return f"only {leader} ran: {success.iloc[0]:.3f} semantic success."
    top = success.iloc[0]
    tied = [str(system) for system, value in success.items() if math.isclose(value, top, abs_tol=1e-9)]
    if len(tied) > 1:
        return _tie(rows, success, tied)
    runner = str(success.index[1])
    by_family = rows.pivot_table(index="case_family", columns="system", values="semantic_success", aggfunc="mean")
    gaps = (by_family[leader] - by_family[runner]).dropna().sort_values(ascending=False, kind="stable")
    ahead = [f"{family} ({gap:+.2f})" for family, gap in gaps.items() if gap > 0][:3]
    behind = [f"{family} ({gap:+.2f})" for family, gap in gaps.items() if gap < 0][-2:]
    why = f"ahead on {', '.join(ahead)}" if ahead else "on no family ahead"
    if behind:
        why += f", behind on {', '.join(behind)}"
    return (
        f"{leader} leads with {success.iloc[0]:.3f} semantic success, {success.iloc[0] - success.iloc[1]:+.3f} over "
        f"{runner} ({success.iloc[1]:.3f}); by family it is {why}."
    )


def _tie(rows: pd.DataFrame, success: pd.Series, tied: list[str]) -> str:
    """Several systems share the top success: say so, name the next one, and what still tells the
    tied ones apart (the tokens each generates, where the episodes carry them)."""
    names = f"{', '.join(tied[:-1])} and {tied[-1]}"
    line = f"{names} tie at {success.iloc[0]:.3f} semantic success"
    rest = success.drop(index=tied)
    if len(rest):
        line += f"; next is {rest.index[0]} ({rest.iloc[0]:.3f})"
    if "generated_tokens" in rows:
        tokens = rows[rows["system"].isin(tied)].groupby("system")["generated_tokens"].mean().sort_values(kind="stable")
        line += f"; of the tied, {tokens.index[0]} generates the fewest tokens ({tokens.iloc[0]:.1f} per episode)"
    return line + "."


OVERVIEW_COLUMNS = [
    "slice",
    "system",
    "episodes",
    "families",
    "semantic_success_mean",
    "schema_valid_mean",
    "generated_tokens_mean",
    "probes_mean",
    "latency_s_p95",
    "collateral_mean",
    "unsafe_dispatch_total",
]


def summary(episodes: pd.DataFrame) -> pd.DataFrame:
    """The terminal overview: one row per slice and system over every held-out episode it ran (the
    tables keep families apart; this is the at-a-glance view)."""
    rows = _systems(episodes)
    rows = rows.assign(slice=slices(rows))
    out = []
    for (name, system), group in rows.groupby(["slice", "system"], sort=True):
        out.append(
            {
                "slice": name,
                "system": system,
                "episodes": len(group),
                "families": group["case_family"].nunique(),
                "semantic_success_mean": float(group["semantic_success"].mean()),
                "schema_valid_mean": float(group["schema_valid"].mean()),
                "generated_tokens_mean": float(group["generated_tokens"].mean()),
                "probes_mean": float(group["probes"].mean()),
                "latency_s_p95": p95(group["latency_s"]),
                "collateral_mean": float(group["collateral"].mean()),
                "unsafe_dispatch_total": int(group["unsafe_dispatch"].sum()),
            }
        )
    frame = typed(pd.DataFrame(out, columns=OVERVIEW_COLUMNS))
    if frame.empty:
        return frame
    order = frame["slice"].map(lambda name: (name != BUILT_IN, name))
    return frame.iloc[sorted(range(len(frame)), key=lambda i: (order.iloc[i], frame["system"].iloc[i]))].reset_index(drop=True)


def _scroll(table_html: str) -> str:
    """A wide table scrolls sideways inside the page instead of widening it."""
    return f"<div class='scroll'>{table_html}</div>"


def _table_html(frame: pd.DataFrame) -> str:
    """A table whose column headers show their data-dictionary description on hover and wrap at
    underscores, so a table is as wide as its values, not as its longest column names."""
    body = frame.to_html(index=False, float_format=lambda v: f"{v:.4f}", border=0, na_rep="")
    for name in frame.columns:
        cell = f"<th>{html.escape(str(name))}</th>"
        shown = html.escape(str(name)).replace("_", "_<wbr>")  # a long name wraps at its underscores
        titled = f"<th title='{html.escape(describe(str(name)).description)}'>{shown}</th>"
        body = body.replace(cell, titled, 1)
    return _scroll(body)


def _write_index(
    out_dir: Path, episodes: pd.DataFrame, overview: pd.DataFrame, tables: list[Table], plots: list[Plot], settings: dict
) -> Path:
    esc = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>ContractRL report</title>",
        # a table wider or longer than the page scrolls in its own box, whose scroll bars stay in
        # view (a bar below a long table is never seen), under a header that stays put
        "<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;font-size:11px}td,th{border:1px solid #ccc;padding:2px 4px}"
        "th{background:#f3f3f3;vertical-align:bottom;min-width:3em;position:sticky;top:0}td{white-space:nowrap}"
        "img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}.not-run{color:#666}"
        ".scroll{overflow:auto;max-height:32em;margin:0.5em 0 2em;border-right:1px solid #ccc}</style></head><body>",
        "<h1>ContractRL report</h1>",
        f"<p>{len(episodes)} episodes from {sum(len(r['runs']) for r in settings['roots'])} frozen runs; "
        f"created {esc(settings['created'])}. Calibration thresholds, fixed before scoring: "
        f"{esc(', '.join(f'{t:.2f}' for t in settings['thresholds']))}. "
        f"Unsafe dispatches: {int(episodes['unsafe_dispatch'].sum()) if len(episodes) else 0}.</p>",
        "<p>Group by <code>system</code> (arm:policy@stage), not by <code>arm</code>: the heuristic, the oracle "
        "replay and a learned policy share an arm. A column name says how it aggregates (<code>_mean</code>, "
        "<code>_p95</code>, <code>_total</code>, <code>_n</code>); hover a column for its meaning, which the "
        "parquet files carry as field metadata and docs/analysis.md lists.</p>",
        "<h2>Overview</h2>",
        _table_html(overview) if len(episodes) else "<p>No episodes.</p>",
        "<h2>Figures</h2>",
    ]
    for plot in plots:
        if plot.not_run:  # a note instead of an empty figure
            parts.append(f"<p class='not-run'><strong>{esc(plot.title)}</strong>: <code>{esc(plot.not_run)}</code></p>")
        else:
            parts.append(
                f"<figure><img src='plots/{esc(plot.path.name)}' alt='{esc(plot.title)}'>"
                f"<figcaption>{esc(plot.title)}</figcaption></figure>"
            )
    parts.append("<h2>Tables</h2>")
    for table in tables:
        parts.append(f"<h3 id='{esc(table.name)}'>{esc(table.title)} <small>({esc(table.paper)})</small></h3>")
        parts += [f"<p>{esc(note)}</p>" for note in table.notes]
        links = f"<a href='tables/{esc(table.name)}.parquet'>parquet</a> · <a href='tables/{esc(table.name)}.md'>markdown</a>"
        parts.append(f"<p>{links}</p>")
        if table.frame.empty:
            parts.append("<p><em>No episodes of this study were given to the report.</em></p>")
        else:
            parts.append(_table_html(table.frame))
    parts.append("</body></html>")
    path = out_dir / "index.html"
    path.write_text("\n".join(parts))
    return path


__all__ = ["BUILT_IN", "EPISODES_FILE", "TABLE_NAMES", "Report", "build_report", "discover", "slices", "standing", "summary"]
