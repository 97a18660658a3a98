"""Case sets on disk: ``public.parquet``, ``offline.parquet`` and ``manifest.json``.

Files are written byte-for-byte reproducibly (fixed column order and types, no timestamps), and the
manifest records each file's SHA-256, so a case set can be pinned by its manifest. Reading the
public half is :func:`read_public`; the offline half is read only by ``contractrl.tasks.offline``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .. import __version__
from ..errors import InputFileError
from ..io import read_bytes
from ..validators.jsonvalue import sha256_json
from ..wheels import file_sha256
from .cases import Case, PublicCase

PUBLIC_FILE = "public.parquet"
OFFLINE_FILE = "offline.parquet"
MANIFEST_FILE = "manifest.json"

PUBLIC_SCHEMA = pa.schema(
    [
        ("case_id", pa.string()),
        ("family", pa.string()),
        ("tool", pa.string()),
        ("tool_family", pa.string()),
        ("schema", pa.string()),
        ("schema_sha256", pa.string()),
        ("schema_version", pa.int32()),
        ("contract", pa.string()),
        ("request", pa.string()),
        ("candidate", pa.string()),
        ("report", pa.string()),
        ("immutable", pa.string()),
        ("budgets", pa.string()),
        ("world_seed", pa.int64()),
    ]
)
OFFLINE_SCHEMA = pa.schema(
    [
        ("case_id", pa.string()),
        ("target", pa.string()),
        ("target_patch", pa.string()),
        ("expected", pa.string()),
        ("cluster", pa.string()),
        ("corruption", pa.string()),
    ]
)


def _write(rows: list[dict[str, Any]], schema: pa.Schema, path: Path) -> None:
    table = pa.Table.from_pylist(rows, schema=schema)
    pq.write_table(table, path, compression="zstd", write_statistics=False, store_schema=True)


def write_case_set(
    cases: list[Case], out: str | Path, config: dict[str, Any], extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Write both halves and the manifest; returns the manifest."""
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    _write([c.public.to_row() for c in cases], PUBLIC_SCHEMA, out_dir / PUBLIC_FILE)
    _write([c.offline.to_row() for c in cases], OFFLINE_SCHEMA, out_dir / OFFLINE_FILE)
    manifest = {
        "kind": "contractrl.cases",
        "contractrl_version": __version__,
        "seed": config.get("seed"),
        "config": config,
        "config_sha256": sha256_json(config),
        "cases": len(cases),
        "counts": dict(sorted(Counter(c.public.family for c in cases).items())),
        "tool_family_counts": dict(sorted(Counter(c.public.tool_family for c in cases).items())),
        "files": {name: file_sha256(out_dir / name) for name in (PUBLIC_FILE, OFFLINE_FILE)},
        **_source_calls(config),
        **(extra or {}),
    }
    (out_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def _source_calls(config: dict[str, Any]) -> dict[str, Any]:
    """For data sources: how many calls the data gave and why the rest were skipped (absent for
    the built-in catalog, so its manifests stay byte-identical to earlier ones)."""
    source = config.get("source")
    if not isinstance(source, str):
        return {}
    from .sources import source_calls  # the source is cached: generating the cases read it already

    report = source_calls(source, str(config.get("request_style", "verbatim")))
    return {"source_calls": report} if report is not None else {}


def read_manifest(case_dir: str | Path) -> dict[str, Any]:
    path = Path(case_dir) / MANIFEST_FILE
    if not path.is_file():
        raise InputFileError(f"not a case set (no {MANIFEST_FILE}): {case_dir}")
    try:
        return json.loads(read_bytes(path, "case manifest"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputFileError(f"{path} is not valid JSON: {exc}") from exc


def verified_path(case_dir: str | Path, name: str) -> Path:
    """The path of one case file after checking its SHA-256 against the manifest."""
    manifest = read_manifest(case_dir)
    path = Path(case_dir) / name
    if not path.is_file():
        raise InputFileError(f"missing case file {path}")
    expected = manifest.get("files", {}).get(name)
    if expected != file_sha256(path):
        raise InputFileError(f"{path} does not match the SHA-256 recorded in its manifest")
    return path


def read_public(case_dir: str | Path) -> list[PublicCase]:
    """The public half of a case set: the only case file rollout code opens."""
    table = pq.read_table(verified_path(case_dir, PUBLIC_FILE))
    return [PublicCase.from_row(row) for row in table.to_pylist()]
