"""contractrl.carry: the parts a GPU call carries (benchmarks/gpu_learner.py), split, planned and joined."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from contractrl.carry import MANIFEST_FILE, CarryError, check_part, join, missing_parts, plan_calls, read_manifest, split


def _files(tmp_path: Path) -> list[tuple[Path, str, str]]:
    """Three base files and two of a later stage, of sizes that straddle part boundaries."""
    rng = random.Random(7)
    out = []
    for name, size, stage in (
        ("a.whl", 250, "base"),
        ("b.whl", 40, "base"),
        ("m.whl", 333, "base"),
        ("q1", 500, "big"),
        ("q2", 90, "big"),
    ):
        path = tmp_path / "src" / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(rng.randbytes(size))
        out.append((path, f"stuff/{name}", stage))
    return out


def test_split_cuts_the_stream_into_bounded_parts_that_join_back(tmp_path: Path) -> None:
    files = _files(tmp_path)
    manifest = split(files, tmp_path / "parts", 200, {"python": "3.12"})
    total = sum(p.stat().st_size for p, _, _ in files)
    assert [p.size for p in manifest.parts] == [200] * (total // 200) + [total % 200]
    assert all((tmp_path / "parts" / p.name).stat().st_size == p.size for p in manifest.parts)
    assert read_manifest(tmp_path / "parts" / MANIFEST_FILE) == manifest
    written = join(manifest, tmp_path / "parts", tmp_path / "out", ["base", "big"])
    assert [w.read_bytes() for w in written] == [p.read_bytes() for p, _, _ in files]
    assert written[0] == tmp_path / "out" / "stuff" / "a.whl"


def test_a_stage_joins_from_its_own_parts_alone(tmp_path: Path) -> None:
    files = _files(tmp_path)
    manifest = split(files, tmp_path / "parts", 200)
    base_end = 250 + 40 + 333  # the base stage ends inside the fourth part (600..799)
    assert [p.name for p in manifest.parts_for("base")] == ["part000", "part001", "part002", "part003"]
    assert manifest.parts_for("big")[0].offset <= base_end < manifest.parts_for("big")[0].offset + 200
    for later in manifest.parts[4:]:
        (tmp_path / "parts" / later.name).unlink()
    join(manifest, tmp_path / "parts", tmp_path / "out", ["base"])
    assert (tmp_path / "out" / "stuff" / "m.whl").read_bytes() == files[2][0].read_bytes()
    assert missing_parts(manifest, tmp_path / "parts", ["big"]) == ["part004", "part005", "part006"]
    with pytest.raises(CarryError, match="part004, part005, part006"):
        join(manifest, tmp_path / "parts", tmp_path / "out", ["big"])


def test_the_plan_carries_one_part_a_call_and_names_the_stages_each_completes(tmp_path: Path) -> None:
    manifest = split(_files(tmp_path), tmp_path / "parts", 200)
    calls = plan_calls(manifest)
    assert [c.part for c in calls] == [p.name for p in manifest.parts]
    assert [c.index for c in calls] == list(range(1, len(calls) + 1))
    assert [c.ready for c in calls] == [(), (), (), ("base",), (), (), ("big",)]
    assert max(c.size for c in calls) <= 200


def test_a_wrong_part_is_refused_by_name(tmp_path: Path) -> None:
    manifest = split(_files(tmp_path), tmp_path / "parts", 200)
    victim = tmp_path / "parts" / "part001"
    data = bytearray(victim.read_bytes())
    data[17] ^= 1
    victim.write_bytes(bytes(data))
    with pytest.raises(CarryError, match=r"part001.*sha256"):
        check_part(victim, manifest.parts[1])
    with pytest.raises(CarryError, match="part001"):
        join(manifest, tmp_path / "parts", tmp_path / "out", ["base"])
    assert not (tmp_path / "out" / "stuff" / "a.whl").exists()  # refused before anything is written
    victim.write_bytes(bytes(data[:-3]))
    with pytest.raises(CarryError, match="truncated"):
        check_part(victim, manifest.parts[1])


def test_a_joined_file_kept_from_an_earlier_call_is_not_rewritten(tmp_path: Path) -> None:
    manifest = split(_files(tmp_path), tmp_path / "parts", 200)
    first = join(manifest, tmp_path / "parts", tmp_path / "out", ["base"])
    stamp = first[0].stat().st_mtime_ns
    join(manifest, tmp_path / "parts", tmp_path / "out", ["base", "big"])
    assert first[0].stat().st_mtime_ns == stamp


def test_stages_must_be_contiguous(tmp_path: Path) -> None:
    files = _files(tmp_path)
    with pytest.raises(CarryError, match=r"'base'.*not contiguous"):
        split([*files, files[0]], tmp_path / "parts", 200)


def test_a_manifest_that_writes_outside_its_folder_or_is_not_one_is_refused(tmp_path: Path) -> None:
    split(_files(tmp_path), tmp_path / "parts", 200)
    path = tmp_path / "parts" / MANIFEST_FILE
    raw = json.loads(path.read_text())
    raw["files"][0]["path"] = "../../etc/evil"
    path.write_text(json.dumps(raw))
    with pytest.raises(CarryError, match="outside the target folder"):
        read_manifest(path)
    path.write_text('{"files": 3}')
    with pytest.raises(CarryError, match="not a carry manifest"):
        read_manifest(path)
    with pytest.raises(CarryError, match="cannot read"):
        read_manifest(tmp_path / "nowhere.json")


def test_peak_gpu_memory_is_a_column_only_where_the_learner_ran_on_a_gpu() -> None:
    from contractrl.trainer.stages import peak_gpu

    assert peak_gpu({"peak_rss_bytes": 3e9, "peak_gpu_bytes": 2.5e9}) == {"peak_gpu_gb": 2.5}
    assert peak_gpu({"peak_rss_bytes": 3e9}) == {}
