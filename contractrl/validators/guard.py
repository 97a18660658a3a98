"""Compile untrusted schemas first where a blow-up cannot hurt: a child process under rlimits.

jsonschema-rs compiles in native code. A pattern or schema that makes it allocate gigabytes
cannot be interrupted from Python, and when an allocation fails under a memory cap Rust aborts the
whole process: no exception, no typed error, the run is gone. The static bounds of :mod:`.budget`
refuse every blow-up this project knows how to describe; this guard is the backstop for the
ones it does not. Before a schema (or a pattern) is compiled in this process, a long-lived child
compiles it and uses it once, under ``RLIMIT_AS`` and a CPU-time limit. If the child dies or runs
out of time, the schema is refused with a typed :class:`SchemaCompileError` and a fresh child
serves the next request; if it survives, the same compile here is known to be bounded.

The child runs ``python -I`` with its program inline: it imports only the standard library and
jsonschema_rs, never this project, so it starts in ~0.1 s and trusts nothing from its parent but
the JSON it is sent. Answers are cached by the schema's canonical text, so each distinct schema
crosses the pipe once per process.
"""

from __future__ import annotations

import os
import select
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SchemaCompileError
from .jsonvalue import canonical_json
from .lru import BoundedLRU

_CHILD = r"""
import json, resource, struct, sys
memory = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
import jsonschema_rs
read, write = sys.stdin.buffer.read, sys.stdout.buffer
PROBES = (None, True, 0, 0.5, "", "a", [], {}, [None], {"": None})
while True:
    head = read(8)
    if len(head) < 8:
        break
    cpu_s, size = struct.unpack("<II", head)
    schema = json.loads(read(size))
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = used.ru_utime + used.ru_stime
    resource.setrlimit(resource.RLIMIT_CPU, (int(spent) + cpu_s + 1, resource.RLIM_INFINITY))
    try:
        validator = jsonschema_rs.validator_for(schema, validate_formats=True, ignore_unknown_formats=False)
        for probe in PROBES:
            validator.is_valid(probe)
        answer = b"compiled\n"
    except Exception as exc:  # the parent compiles it again and reports the backend's own error
        answer = b"refused\n"
    del schema
    write.write(answer)
    write.flush()
"""


@dataclass(frozen=True, slots=True)
class GuardLimits:
    """What one compile in the guard child may use (docs/contract.md, "Budgets")."""

    memory_bytes: int = 1 << 30
    cpu_s: int = 5
    wall_s: float = 60.0  # a backstop for a child that stops reading; CPU time is the real bound


class CompileGuard:
    """A long-lived child process that compiles schemas under resource limits, restarted on death."""

    def __init__(self, limits: GuardLimits = GuardLimits(), cache_size: int = 8192) -> None:
        self.limits = limits
        self._child: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._known: BoundedLRU[str, bool] = BoundedLRU(max_items=cache_size, max_cost=64 << 20)
        self.started = 0  # children started so far (a death restarts one)

    def compiles(self, schema: Any) -> bool:
        """Whether jsonschema-rs compiles ``schema``; a compile over the limits raises SchemaCompileError."""
        text = canonical_json(schema)
        known = self._known.get(text)
        if known is not None:
            return known
        with self._lock:
            verdict = self._ask(text)
        self._known.put(text, verdict, 2 * len(text))  # the key is what an entry costs
        return verdict

    def _ask(self, text: str) -> bool:
        payload = text.encode("utf-8")
        child = self._ensure_child()
        try:
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write(struct.pack("<II", self.limits.cpu_s, len(payload)) + payload)
            child.stdin.flush()
            ready, _, _ = select.select([child.stdout], [], [], self.limits.wall_s)
            answer = child.stdout.readline() if ready else b""
        except (BrokenPipeError, OSError):
            answer = b""
        if answer in (b"compiled\n", b"refused\n"):
            return answer == b"compiled\n"
        self._stop()
        raise SchemaCompileError(
            f"schema refused: compiling it took more than the guard allows "
            f"({self.limits.memory_bytes >> 20} MiB, {self.limits.cpu_s} s of CPU)"
        )

    def _ensure_child(self) -> subprocess.Popen[bytes]:
        if self._child is not None and self._child.poll() is None:
            return self._child
        try:
            self._child = subprocess.Popen(
                [sys.executable, "-I", "-c", _CHILD, str(self.limits.memory_bytes)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                env={"PATH": os.environ.get("PATH", "")},
            )
        except OSError as exc:
            raise SchemaCompileError(f"schema refused: the compile guard could not start ({exc})") from exc
        self.started += 1
        return self._child

    def _stop(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child.wait()
            self._child = None

    def child_peak_rss_mib(self) -> int:
        """The running child's peak resident memory (Linux; 0 when none runs or it cannot be read)."""
        child = self._child
        if child is None or child.poll() is not None:
            return 0
        try:
            status = Path(f"/proc/{child.pid}/status").read_text(encoding="ascii")
        except OSError:
            return 0
        line = next((row for row in status.splitlines() if row.startswith("VmHWM:")), "VmHWM: 0 kB")
        return int(line.split()[1]) // 1024

    def close(self) -> None:
        with self._lock:
            self._stop()


_GUARDS: dict[int, CompileGuard] = {}  # by process id: a forked child must not share its parent's pipe
_GUARDS_LOCK = threading.Lock()


def guard() -> CompileGuard:
    """This process's guard, started on first use (each Ray worker has its own)."""
    pid = os.getpid()
    with _GUARDS_LOCK:
        if pid not in _GUARDS:
            _GUARDS.clear()
            _GUARDS[pid] = CompileGuard()
        return _GUARDS[pid]
