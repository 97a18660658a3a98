"""An ECMA-262 regex reference for property tests, run in a child process with bounds.

The pattern property test compares both verifier backends with an independent engine. It first used
``regress`` in the pytest process, and a hunt over 45,000 drawn patterns found two faults there:

* unbounded memory: on 11 of them (texts of at most 8 characters) its backtracking stack asked
  for 5 GB and more; inside pytest that was the one OOM kill of a CI run;
* wrong answers: ``regress`` 2026.9.1 finds no match of ``^(?:(?:[^]+){1,2}){2}`` in a
  three-character text, where V8 and both of our backends do.

So the reference is V8 (Node.js) where ``node`` is on the PATH: the engine of record for
ECMA-262. Without it, the reference is ``regress`` under an address-space limit. Either runs in a
child process with a time limit per search. A child that dies or stalls gives :data:`INCONCLUSIVE`
and is restarted, so the test can still demand an answer from our backends.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import subprocess
import sys
import time
from functools import cache
from typing import Final

INCONCLUSIVE: Final = "inconclusive"  # the reference died or ran out of time on this search

_NODE_CHILD = r"""
const rl = require('readline').createInterface({ input: process.stdin });
rl.on('line', (line) => {
  const [pattern, text] = JSON.parse(line);
  let found;
  try { found = new RegExp(pattern, 'u').test(text); }
  catch (e) { if (!(e instanceof SyntaxError)) throw e; found = null; }
  process.stdout.write(JSON.stringify(found) + '\n');
});
"""

_REGRESS_CHILD = r"""
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
import regress
for line in sys.stdin:
    pattern, text = json.loads(line)
    try:
        found = regress.Regex(pattern, "u").find(text) is not None
    except regress.RegressError:
        found = None
    sys.stdout.write(json.dumps(found) + "\n")
    sys.stdout.flush()
"""


class _Stalled(Exception):
    """The child died or gave no answer in time."""


class EcmaReference:
    """``search(pattern, text)``: True or False, None when the pattern is not ECMA-262, or
    :data:`INCONCLUSIVE`."""

    def __init__(self, *, timeout_s: float = 10.0, engine: str | None = None) -> None:
        self.engine = engine or ("v8" if shutil.which("node") else "regress")
        self.timeout_s = timeout_s
        self._child: subprocess.Popen[bytes] | None = None
        self._buffer = b""

    def _command(self) -> list[str]:
        if self.engine == "v8":
            return ["node", "-e", _NODE_CHILD]
        return [sys.executable, "-c", _REGRESS_CHILD]

    def _start(self) -> subprocess.Popen[bytes]:
        if self._child is None or self._child.poll() is not None:
            self._child = subprocess.Popen(
                self._command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0
            )
            self._buffer = b""
        return self._child

    def _readline(self, child: subprocess.Popen[bytes]) -> bytes:
        assert child.stdout is not None
        deadline = time.monotonic() + self.timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([child.stdout], [], [], left)[0]:
                raise _Stalled
            chunk = os.read(child.stdout.fileno(), 65536)
            if not chunk:
                raise _Stalled
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def search(self, pattern: str, text: str) -> bool | str | None:
        child = self._start()
        assert child.stdin is not None
        try:
            child.stdin.write(json.dumps([pattern, text]).encode() + b"\n")
            answer: bool | None = json.loads(self._readline(child))
        except (_Stalled, BrokenPipeError):
            self.close()
            return INCONCLUSIVE
        return answer

    def close(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child.wait()
            self._child = None


@cache
def ecma_reference() -> EcmaReference:
    """One reference child per test process."""
    reference = EcmaReference()
    atexit.register(reference.close)
    return reference
