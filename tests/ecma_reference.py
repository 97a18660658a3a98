"""Third-party references for property tests, each run in a bounded child process.

A reference decides what the right answer is; it must never be what kills the test run. The pattern
property test compares both verifier backends with an independent ECMA-262 engine. It first used
``regress`` in the pytest process, and a hunt over 45,000 drawn patterns found two faults there:

* unbounded memory: on 11 of them (texts of at most 8 characters) its backtracking stack asked
  for 5 GB, then 10 GB, doubling; inside pytest that was the 24 GB OOM kill of a CI run;
* wrong answers: ``regress`` 2026.9.1 finds no match of ``^(?:(?:[^]+){1,2}){2}`` in a
  three-character text, where V8 and both of our backends do.

So the pattern reference is V8 (Node.js) where ``node`` is on the PATH, the engine of record for
ECMA-262, else ``regress`` (``CONTRACTRL_ECMA_REFERENCE=regress`` or ``=v8`` picks one). The fuzz
harness's references (python-jsonschema with ``regress`` patterns, the contract reading) run the
same way (``tests/fuzzing.py``).

:class:`BoundedChild` is how: one persistent child per reference, reused across calls (a process per
call would cost more than most searches), with ``RLIMIT_AS`` and ``RLIMIT_CPU`` set inside it
before it runs the engine. A child that dies (the kernel's SIGXCPU or SIGKILL, an allocation
refused at the address-space limit), breaks the protocol, or stalls past a generous wall-clock
backstop gives :data:`INCONCLUSIVE` ("the reference could not decide") and is restarted on the
next call, so the test can still demand an answer from our backends.

CPU, not wall time, bounds a search, so a loaded machine does not turn answers into
``INCONCLUSIVE``: the child's ``RLIMIT_CPU`` covers its whole life, so it reports its CPU time with
each answer and is replaced before less than one call's budget is left. Every call therefore gets
at least ``cpu_s`` and at most ``2 * cpu_s`` seconds of CPU.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from functools import cache
from typing import Any, Final

INCONCLUSIVE: Final = "inconclusive"  # the reference died, broke the protocol or stalled on this call

MEMORY_BYTES: Final = 1 << 29  # address space of a Python reference child; regress asked for 5 GB and more
NODE_MEMORY_BYTES: Final = 1 << 30  # node reserves more address space than it uses, and will not start in 512 MiB
CPU_S: Final = 5.0  # CPU seconds every call may use at least (and twice that at most)
WALL_S: Final = 120.0  # backstop for a child that stalls without spending CPU (blocked, or starved)

# Sets the limits in the child itself, then becomes the engine (exec keeps them): one way for a
# Python child and for node alike. A core dump of a child killed at its limit is not wanted.
# A limit the parent already has lower (a CI ulimit) is kept: a hard limit can only go down.
_LIMITS_SHIM = r"""
import os, resource, sys
def lower(kind, soft, hard):
    _, now = resource.getrlimit(kind)
    if now != resource.RLIM_INFINITY:
        soft, hard = min(soft, now), min(hard, now)
    resource.setrlimit(kind, (soft, hard))
memory, cpu = int(sys.argv[1]), int(sys.argv[2])
lower(resource.RLIMIT_CORE, 0, 0)
lower(resource.RLIMIT_AS, memory, memory)
lower(resource.RLIMIT_CPU, cpu, cpu + 1)  # SIGXCPU at the soft limit, SIGKILL a second later
os.execvp(sys.argv[3], sys.argv[3:])
"""

_NODE_CHILD = r"""
const rl = require('readline').createInterface({ input: process.stdin });
rl.on('line', (line) => {
  const [pattern, text] = JSON.parse(line);
  let found;
  try { found = new RegExp(pattern, 'u').test(text); }
  catch (e) { if (!(e instanceof SyntaxError)) throw e; found = null; }
  const used = process.cpuUsage();
  process.stdout.write(JSON.stringify([found, (used.user + used.system) / 1e6]) + '\n');
});
"""

_REGRESS_CHILD = r"""
import json, resource, sys
import regress
for line in sys.stdin:
    pattern, text = json.loads(line)
    try:
        found = regress.Regex(pattern, "u").find(text) is not None
    except regress.RegressError:
        found = None
    used = resource.getrusage(resource.RUSAGE_SELF)
    sys.stdout.write(json.dumps([found, used.ru_utime + used.ru_stime]) + "\n")
    sys.stdout.flush()
"""


class _Stalled(Exception):
    """The child died, broke the protocol, or gave no answer before the wall-clock backstop."""


class BoundedChild:
    """A persistent child process that answers one JSON line per JSON request line, under rlimits.

    The child's ``command`` must answer each request with ``[answer, cpu_seconds_used_so_far]``.
    :meth:`call` returns the answer, or :data:`INCONCLUSIVE` when the child could not give one.
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        memory_bytes: int = MEMORY_BYTES,
        cpu_s: float = CPU_S,
        timeout_s: float = WALL_S,
        cwd: str | None = None,
    ) -> None:
        self.command = list(command)
        self.memory_bytes = memory_bytes
        self.cpu_s = cpu_s
        self.timeout_s = timeout_s
        self.cwd = cwd
        self.cpu_limit_s = max(1, math.ceil(2 * cpu_s))  # RLIMIT_CPU counts whole seconds
        self.starts = 0  # children started so far (a test checks that calls reuse one)
        self._child: subprocess.Popen[bytes] | None = None
        self._buffer = b""

    @property
    def pid(self) -> int | None:
        """The running child's process id, None before the first call or after a death."""
        return self._child.pid if self._child is not None and self._child.poll() is None else None

    def _start(self) -> subprocess.Popen[bytes]:
        if self._child is None or self._child.poll() is not None:
            self.close()
            shim = [sys.executable, "-c", _LIMITS_SHIM, str(self.memory_bytes), str(self.cpu_limit_s)]
            self._child = subprocess.Popen(
                [*shim, *self.command],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                bufsize=0,
                cwd=self.cwd,
            )
            self._buffer = b""
            self.starts += 1
        return self._child

    def _readline(self, child: subprocess.Popen[bytes]) -> bytes:
        assert child.stdout is not None
        deadline = time.monotonic() + self.timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([child.stdout], [], [], left)[0]:
                raise _Stalled
            chunk = os.read(child.stdout.fileno(), 65536)
            if not chunk:  # the child exited: killed at a limit, or crashed
                raise _Stalled
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def call(self, request: Any) -> Any:
        """The child's answer to ``request`` (JSON), or :data:`INCONCLUSIVE`."""
        payload = json.dumps(request).encode() + b"\n"  # a request that is no JSON is the caller's bug: it raises
        child = self._start()
        assert child.stdin is not None
        try:
            child.stdin.write(payload)
            answer, used_s = json.loads(self._readline(child))
        except (_Stalled, OSError, ValueError, TypeError):  # died, stalled, or answered garbage
            self.close()
            return INCONCLUSIVE
        except BaseException:  # an interrupt (a watchdog's alarm, ^C): the pending answer would
            self.close()  # be read as the next call's, so this child cannot be reused
            raise
        if used_s > self.cpu_limit_s - self.cpu_s:  # too little CPU left for a full call: replace it
            self.close()
        return answer

    def close(self) -> None:
        if self._child is not None:
            if self._child.poll() is None:
                self._child.kill()
            self._child.wait()
            for stream in (self._child.stdin, self._child.stdout):
                if stream is not None:
                    stream.close()
            self._child = None
        self._buffer = b""


def _default_engine() -> str:
    chosen = os.environ.get("CONTRACTRL_ECMA_REFERENCE", "")
    if chosen in ("v8", "regress"):
        return chosen
    return "v8" if shutil.which("node") else "regress"


class EcmaReference:
    """``search(pattern, text)``: True or False, None when the pattern is not ECMA-262, or
    :data:`INCONCLUSIVE`."""

    def __init__(self, *, timeout_s: float = WALL_S, cpu_s: float = CPU_S, engine: str | None = None) -> None:
        self.engine = engine or _default_engine()
        if self.engine == "v8":
            command, memory = ["node", "-e", _NODE_CHILD], NODE_MEMORY_BYTES
        else:
            command, memory = [sys.executable, "-c", _REGRESS_CHILD], MEMORY_BYTES
        self.child = BoundedChild(command, memory_bytes=memory, cpu_s=cpu_s, timeout_s=timeout_s)

    @property
    def timeout_s(self) -> float:
        return self.child.timeout_s

    @timeout_s.setter
    def timeout_s(self, value: float) -> None:
        self.child.timeout_s = value

    def search(self, pattern: str, text: str) -> bool | str | None:
        answer: bool | str | None = self.child.call([pattern, text])
        return answer

    def close(self) -> None:
        self.child.close()


@cache
def ecma_reference() -> EcmaReference:
    """One reference child per test process."""
    reference = EcmaReference()
    atexit.register(reference.close)
    return reference
