"""BFCL v4 data from its PyPI wheel: a category name is a case source a user has without ../shared.

The wheel ``bfcl-eval==2026.3.23`` (Apache-2.0) ships every BFCL v4 question file with its possible
answers. Its dependency list is heavy and its checker imports every model handler, so it is used
as a data carrier only (:mod:`contractrl.wheels`): fetched with ``pip download --no-deps``,
checked against its pinned SHA-256, and the two files of a category (questions and possible
answers) are copied out of the zip into ``<cache>/bfcl-v4-2026.3.23/<category>/``, once and
race-safe. That folder is an ordinary BFCL data directory, read by :class:`~.sources.BfclSource`.

The ``live_*`` categories are users' real questions collected after the non-live ones were
written. They are held out: a training config that names one is refused (:func:`check_trainable`),
so they are only ever evaluated on, as transfer.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from ..errors import ConfigError
from ..wheels import PinnedWheel, WheelUnavailableError, find_wheel

PIN = PinnedWheel(
    "bfcl-eval==2026.3.23",
    "bfcl_eval-2026.3.23-py3-none-any.whl",
    "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a",
    "CONTRACTRL_BFCL_WHEEL",
    "the BFCL v4 data",
)
# where the wheel and the extracted categories are cached, unless $CONTRACTRL_DATA_CACHE says otherwise
DEFAULT_CACHE = "runs/data"
CACHE_ENV = "CONTRACTRL_DATA_CACHE"
_DATA = "bfcl_eval/data/"
# category name -> question file (the possible answers have the same name under possible_answer/)
CATEGORIES: dict[str, str] = {
    "simple": "BFCL_v4_simple_python.json",
    "simple_java": "BFCL_v4_simple_java.json",
    "simple_javascript": "BFCL_v4_simple_javascript.json",
    "multiple": "BFCL_v4_multiple.json",
    "parallel": "BFCL_v4_parallel.json",
    "parallel_multiple": "BFCL_v4_parallel_multiple.json",
    "live_simple": "BFCL_v4_live_simple.json",
    "live_multiple": "BFCL_v4_live_multiple.json",
    "live_parallel": "BFCL_v4_live_parallel.json",
    "live_parallel_multiple": "BFCL_v4_live_parallel_multiple.json",
}
HELD_OUT: frozenset[str] = frozenset(name for name in CATEGORIES if name.startswith("live_"))
_VERSION_DIR = "bfcl-v4-2026.3.23"


class BfclDataError(WheelUnavailableError):
    """The BFCL wheel cannot be had or does not hold the category asked for."""


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE).resolve()


def is_category(name: str) -> bool:
    return name in CATEGORIES


def check_trainable(spec: str) -> None:
    """Refuse a source spec that names held-out data for training: a live category
    (``bfcl:live_*``) or a model's live results (``bfcl-results-live:DIR``; ``bfcl-results:DIR``
    reads only the non-live result files, :mod:`.natural`)."""
    kind, _, name = spec.partition(":")
    if (kind == "bfcl" and name in HELD_OUT) or kind == "bfcl-results-live":
        raise ConfigError(
            f"{spec} is held out: the live categories are never trained, tuned or selected on; generate its "
            "cases with `contractrl cases generate --source " + spec + "` and evaluate on them"
        )


def category_dir(category: str, cache: str | Path | None = None, *, download: bool = True) -> Path:
    """The BFCL data directory of one category, extracted from the verified wheel on first use."""
    if category not in CATEGORIES:
        raise ConfigError(f"unknown BFCL category {category!r}; choose from {', '.join(CATEGORIES)}")
    root = Path(cache).resolve() if cache is not None else cache_dir()
    target = root / _VERSION_DIR / category
    question = CATEGORIES[category]
    if (target / "possible_answer" / question).is_file():
        return target
    wheel = find_wheel(PIN, root, download=download, error=BfclDataError)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{category}-", dir=target.parent))
    try:
        (scratch / "possible_answer").mkdir()
        with zipfile.ZipFile(wheel) as archive:
            for member, into in (
                (question, scratch / question),
                (f"possible_answer/{question}", scratch / "possible_answer" / question),
            ):
                try:
                    with archive.open(_DATA + member) as src, into.open("wb") as dst:
                        shutil.copyfileobj(src, dst)
                except KeyError as exc:
                    raise BfclDataError(f"{wheel} has no {_DATA}{member}: not the {PIN.requirement} wheel") from exc
        try:
            os.rename(scratch, target)
        except OSError:  # another process extracted it first; the files are the same
            if not (target / "possible_answer" / question).is_file():
                raise
    except zipfile.BadZipFile as exc:
        raise BfclDataError(f"{wheel} is not a zip archive ({exc})") from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


__all__ = ["CATEGORIES", "HELD_OUT", "PIN", "BfclDataError", "cache_dir", "category_dir", "check_trainable", "is_category"]
