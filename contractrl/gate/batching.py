"""Concurrent decisions of one gate, decoded by a language model as one batch.

A gate runs each call as its own episode in its own thread; an ``hf:`` policy is fastest when it
decodes many prompts at once. :class:`BatchingPolicy` sits between the two: the threads' concurrent
``generate`` calls queue up, and whichever thread holds the model gathers what is queued (up to
``max_batch_size``, waiting at most ``wait_s`` for more after the first) into one
``generate`` of the wrapped policy, then hands each caller its own answers. It declares itself
``thread_safe``, so the gate does not serialise calls into it (the wrapped model is still called
by one thread at a time). The serving deployment pairs it with ``@serve.batch``, which delivers
requests to the gate in groups, so their first attempts arrive at the model together.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import ConfigError
from ..rollout.policies import Generation, Observation, Policy


@dataclass
class _Waiting:
    """One caller's observations and, once its batch ran, its answers or the batch's exception."""

    observations: list[Observation]
    done: threading.Event = field(default_factory=threading.Event)
    answers: list[Generation] | None = None
    error: BaseException | None = None


class BatchingPolicy:
    """``inner`` behind a queue: concurrent callers share model batches, each gets its own answers."""

    thread_safe = True  # the gate calls it without its policy lock (gate/gate.py)

    def __init__(self, inner: Policy, *, max_batch_size: int, wait_s: float, name: str | None = None) -> None:
        if max_batch_size < 1:
            raise ConfigError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if wait_s < 0:
            raise ConfigError(f"the batch wait must be >= 0 seconds, got {wait_s}")
        self.inner = inner
        self.max_batch_size = max_batch_size
        self.wait_s = wait_s
        self.name = name or inner.name
        self.batches: list[int] = []  # observations per model call, for the benchmark and the tests
        self._queue: list[_Waiting] = []
        self._arrived = threading.Condition()
        self._model = threading.Lock()

    def generate(self, observations: Sequence[Observation]) -> list[Generation]:
        mine = _Waiting(list(observations))
        with self._arrived:
            self._queue.append(mine)
            self._arrived.notify_all()
        while not mine.done.is_set():
            with self._model:  # the thread holding the model runs the next batch, whoever's it is
                if not mine.done.is_set():
                    self._run(self._gather())
        if mine.error is not None:
            raise mine.error
        assert mine.answers is not None
        return mine.answers

    def _gather(self) -> list[_Waiting]:
        """The queue's head, up to ``max_batch_size`` observations once it is full or the wait is over."""
        deadline = time.monotonic() + self.wait_s
        with self._arrived:
            while sum(len(w.observations) for w in self._queue) < self.max_batch_size:
                left = deadline - time.monotonic()
                if left <= 0 or not self._arrived.wait(left):
                    break
            batch, size = [], 0
            while self._queue and (not batch or size + len(self._queue[0].observations) <= self.max_batch_size):
                waiting = self._queue.pop(0)
                batch.append(waiting)
                size += len(waiting.observations)
            return batch

    def _run(self, batch: list[_Waiting]) -> None:
        flat = [obs for waiting in batch for obs in waiting.observations]
        try:
            answers = list(self.inner.generate(flat)) if flat else []
            if len(answers) != len(flat):
                raise RuntimeError(f"the policy answered {len(answers)} of {len(flat)} observations")
            self.batches.append(len(flat))
            start = 0
            for waiting in batch:
                waiting.answers = answers[start : start + len(waiting.observations)]
                start += len(waiting.observations)
        except BaseException as exc:  # every caller of the batch sees it; the gate refuses (policy_error)
            for waiting in batch:
                waiting.error = exc
        finally:
            for waiting in batch:
                waiting.done.set()


__all__ = ["BatchingPolicy"]
