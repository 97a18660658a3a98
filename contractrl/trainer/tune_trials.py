"""The trial table of a sweep: one row per trial that says what it ran, how it ended and where its
outputs are, so any row can be traced back to a run directory and rolled out.

Tune's own ``ResultGrid.get_dataframe()`` reads each trial's last report: a function trainable never
reports ``done=True`` itself, so finished trials showed ``done=False``, and nothing named the
trial's training run or its weights. This table takes the status from how the trial ended and the
paths and config hash from the run's own ``manifest.json``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

FINISHED, ERROR, UNFINISHED = "FINISHED", "ERROR", "UNFINISHED"
# the last report of a trial that ran to its end carries this key (set in tune._trial)
DONE_KEY = "trial_finished"
BEST_LINK = "best"
BEST_FILE = "best.json"


def trial_row(result: Any, runs_dir: Path, metric: str) -> dict[str, Any]:
    """One ``ray.tune.Result`` as a table row."""
    metrics = dict(result.metrics or {})
    trial_id = str(metrics.get("trial_id") or _trial_id_from_path(result.path))
    status = ERROR if result.error is not None else FINISHED if metrics.get(DONE_KEY) else UNFINISHED
    run_dir = runs_dir / trial_id
    manifest = _manifest(run_dir)
    best_stage, best_dir = _best_weights(run_dir, manifest)
    row: dict[str, Any] = {
        "trial_id": trial_id,
        "status": status,
        "error": "" if result.error is None else str(result.error).strip().splitlines()[-1][:500],
        "config_sha256": manifest.get("config_sha256", ""),
        "run_dir": str(run_dir),
        "tune_dir": str(result.path or ""),
        "best_stage": best_stage,
        "best_checkpoint": best_dir,
        "model_dir": str(manifest.get("model_dir") or manifest.get("selector_dir") or _selector_dir(run_dir)),
        metric: _number(metrics.get(metric)),
    }
    row.update({f"config/{k}": _plain(v) for k, v in sorted((result.config or {}).items())})
    for key, value in sorted(metrics.items()):
        if key not in row and key not in (DONE_KEY, "done", "config") and _is_number(value):
            row[key] = value
    return row


def best_row(rows: Iterable[dict[str, Any]], metric: str, mode: str) -> dict[str, Any] | None:
    """The finished trial with the best ``metric`` (NaN never wins)."""
    scored = [r for r in rows if r["status"] == FINISHED and not math.isnan(_number(r.get(metric)))]
    if not scored:
        return None
    return (max if mode == "max" else min)(scored, key=lambda r: r[metric])


def link_best(out: Path, row: dict[str, Any]) -> Path:
    """``out/best`` -> the best trial's run directory, and ``out/best.json`` with its row, so the best
    weights have a path that does not change with the trial id (``hf:out/best/adapter``)."""
    link = out / BEST_LINK
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(Path(row["run_dir"]).resolve(), target_is_directory=True)
    (out / BEST_FILE).write_text(json.dumps(row, indent=2, default=str) + "\n")
    return link


def _best_weights(run_dir: Path, manifest: dict[str, Any]) -> tuple[str, str]:
    """The stage whose held-out evaluation scored best, and its weights (a training run keeps one
    directory per stage); a selector run keeps only its best iteration."""
    evals = manifest.get("evals") or {}
    if manifest.get("kind", "").endswith("train") and evals:
        # on a tie the later stage wins: it is the run's final policy
        stage = max(reversed(list(evals)), key=lambda s: _number(evals[s].get("semantic_success")))
        return stage, str(run_dir / "stages" / stage)
    if (run_dir / "selector").is_dir():
        return "best_iteration", str(_selector_dir(run_dir))
    return "", ""


def _selector_dir(run_dir: Path) -> str:
    return str(run_dir / "selector") if (run_dir / "selector").is_dir() else ""


def _manifest(run_dir: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((run_dir / "manifest.json").read_text()))
    except (OSError, ValueError):
        return {}


def _trial_id_from_path(path: str | None) -> str:
    # a Tune trial directory is named <trainable>_<trial id>_<index>_<params>_<date>
    parts = Path(path or "").name.split("_")
    return "_".join(parts[2:4]) if len(parts) > 3 else ""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value: Any) -> float:
    return float(value) if _is_number(value) else float("nan")


def _plain(value: Any) -> Any:
    """Config values as parquet can hold them: nested values (a grid over a section) as JSON."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list, tuple)) else value


__all__ = ["BEST_FILE", "BEST_LINK", "DONE_KEY", "ERROR", "FINISHED", "UNFINISHED", "best_row", "link_best", "trial_row"]
