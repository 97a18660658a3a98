"""Native libraries' stderr, routed through Python logging.

xgrammar's C++ grammar compiler writes a warning line straight to file descriptor 2 for every
schema feature it cannot express (a lookahead in a ``pattern``, a ``pattern`` with ``minLength``),
at every compile: one constrained-decoding evaluation of the main job printed about sixty of them,
most repeats, into the README's first command's output. Gathered here, each distinct message is
logged once per process as a warning (with its count in that call), and repeats go to debug, so
nothing is lost and the console says each thing once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator

log = logging.getLogger(__name__)
_TIMESTAMP = re.compile(r"^\[\d\d:\d\d:\d\d\]\s*")
_logged: set[str] = set()


@contextlib.contextmanager
def native_stderr_to_log(source: str) -> Iterator[None]:
    """Capture what native code writes to fd 2 inside the block, then log it (see the module)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable fd 2: nothing to capture
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            log_native_lines(source, sink.read().decode("utf-8", "replace"))


def log_native_lines(source: str, text: str) -> None:
    """Each distinct line of ``text`` once per process as a warning, later repeats as debug."""
    counts = Counter(_TIMESTAMP.sub("", line).strip() for line in text.splitlines())
    counts.pop("", None)
    for message, count in counts.items():
        times = f" ({count} times)" if count > 1 else ""
        if message in _logged:
            log.debug("%s: %s%s", source, message, times)
        else:
            _logged.add(message)
            log.warning("%s: %s%s", source, message, times)


__all__ = ["log_native_lines", "native_stderr_to_log"]
