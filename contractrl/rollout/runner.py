"""The episode runner: G samples per case for N cases, on local or Ray workers, fault tolerant.

Generation happens on the driver (where the policy is), transitions on the workers. The runner
keeps each episode's transcript, so when a worker dies its episodes are rebuilt on a fresh worker
by replaying the same texts: the ledger gets neither duplicate nor missing rows. Rows are returned
in (case, sample) order, whatever the number of workers, so the ledger digest is too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from ..tasks.arms import DEFAULT_ARM
from ..tasks.cases import PublicCase
from ..validators import PublicState
from .policies import Generation, Observation, Policy
from .worker import EpisodeKey, EpisodeWorker, StepOutcome


@dataclass(frozen=True)
class Episode:
    """A finished episode: its ledger row and the generation of each decision, in order."""

    key: EpisodeKey
    row: dict[str, Any]
    generations: tuple[Generation, ...]


class WorkerPool(Protocol):
    """Where transitions run: ``size`` workers addressed by slot number."""

    size: int

    def call(self, method: str, batches: dict[int, list[Any]]) -> dict[int, list[StepOutcome] | Exception]: ...

    def restart(self, slot: int) -> None: ...


class LocalPool:
    """In-process workers: the same protocol as the Ray pool, for tests and single-core runs."""

    def __init__(self, size: int = 1) -> None:
        self.size = size
        self._workers = [EpisodeWorker() for _ in range(size)]

    def call(self, method: str, batches: dict[int, list[Any]]) -> dict[int, list[StepOutcome] | Exception]:
        return {slot: getattr(self._workers[slot], method)(batch) for slot, batch in batches.items()}

    def restart(self, slot: int) -> None:
        self._workers[slot] = EpisodeWorker()


# seconds between two progress lines while a policy generates (a CPU round can take minutes)
HEARTBEAT_S = 15.0


@contextmanager
def heartbeat(progress: Any, what: str, every: float = HEARTBEAT_S) -> Iterator[None]:
    """Refresh ``progress`` (a tqdm bar, or None) every ``every`` seconds with ``what`` and the time
    spent, so a long generation round still shows it is alive."""
    if progress is None:
        yield
        return
    stop = threading.Event()
    start = time.perf_counter()

    def beat() -> None:
        while not stop.wait(every):
            progress.set_postfix_str(f"{what} ({time.perf_counter() - start:.0f}s)", refresh=True)

    progress.set_postfix_str(what, refresh=True)
    thread = threading.Thread(target=beat, name="progress-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class EpisodeRunner:
    """Runs episodes in chunks of ``max_inflight`` (back-pressure on memory and on the policy).

    ``policy_name`` is the name the rows give the policy (their ``policy`` column, which names the
    system in every table) instead of its own: a rollout of a trained adapter, named by its path,
    can carry the name the main job gives the same model (``smollm2/lora-r16``). Only that column
    changes; episode ids and sampling do not depend on it."""

    def __init__(
        self,
        policy: Policy,
        pool: WorkerPool,
        *,
        arm: str = DEFAULT_ARM,
        max_inflight: int = 256,
        max_restarts: int = 3,
        after_round: Callable[[int, WorkerPool], None] | None = None,
        policy_name: str = "",
    ) -> None:
        self.policy = policy
        self.policy_name = policy_name
        self.pool = pool
        self.arm = arm
        self.max_inflight = max_inflight
        self.max_restarts = max_restarts
        self.after_round = after_round  # a hook for fault-injection tests
        self.restarts = 0

    def run(self, cases: Sequence[PublicCase], *, group: int = 1, seed: int = 0, progress: Any = None) -> list[dict[str, Any]]:
        """Ledger rows in (case, sample) order."""
        return [episode.row for episode in self.run_episodes(cases, group=group, seed=seed, progress=progress)]

    def run_episodes(self, cases: Sequence[PublicCase], *, group: int = 1, seed: int = 0, progress: Any = None) -> list[Episode]:
        """Rows with the generations that produced them (what a policy-gradient update needs)."""
        name = self.policy_name or self.policy.name
        keys = [EpisodeKey(i, g, self.arm, name, seed) for i in range(len(cases)) for g in range(group)]
        episodes: dict[EpisodeKey, Episode] = {}
        for start in range(0, len(keys), self.max_inflight):
            chunk = keys[start : start + self.max_inflight]
            episodes.update(self._run_chunk(chunk, cases, progress))
        return [episodes[k] for k in keys]

    def _slot(self, key: EpisodeKey) -> int:
        return (key.index * 7919 + key.sample) % self.pool.size

    def _run_chunk(self, keys: list[EpisodeKey], cases: Sequence[PublicCase], progress: Any = None) -> dict[EpisodeKey, Episode]:
        transcripts: dict[EpisodeKey, list[Generation]] = {k: [] for k in keys}
        states: dict[EpisodeKey, PublicState] = {}
        rows: dict[EpisodeKey, dict[str, Any]] = {}
        self._dispatch("reset", {k: (k, cases[k.index]) for k in keys}, transcripts, cases, states, rows)
        round_no = 0
        finished = len(rows)
        if progress is not None and finished:
            progress.update(finished)
        while len(rows) < len(keys):
            active = [k for k in keys if k not in rows]
            with heartbeat(progress, f"decision {round_no + 1}: {len(active)} episodes generating"):
                generations = self.policy.generate([Observation(cases[k.index], states[k], k.sample, k.arm) for k in active])
            for key, gen in zip(active, generations, strict=True):
                transcripts[key].append(gen)
            self._dispatch("step", {k: (k, transcripts[k][-1]) for k in active}, transcripts, cases, states, rows)
            if progress is not None:
                progress.update(len(rows) - finished)
                finished = len(rows)
            round_no += 1
            if self.after_round is not None:
                self.after_round(round_no, self.pool)
        return {k: Episode(k, rows[k], tuple(transcripts[k])) for k in keys}

    def _dispatch(
        self,
        method: str,
        items: dict[EpisodeKey, Any],
        transcripts: dict[EpisodeKey, list[Generation]],
        cases: Sequence[PublicCase],
        states: dict[EpisodeKey, PublicState],
        rows: dict[EpisodeKey, dict[str, Any]],
    ) -> None:
        batches: dict[int, list[Any]] = {}
        for key, item in items.items():
            batches.setdefault(self._slot(key), []).append(item)
        results = self.pool.call(method, batches)
        for slot, result in results.items():
            if isinstance(result, Exception):
                live = {k: t for k, t in transcripts.items() if k not in rows}
                result = self._recover(slot, live, cases, result)
            for outcome in result:
                states[outcome.key] = outcome.state
                if outcome.row is not None:
                    rows[outcome.key] = outcome.row

    def _recover(
        self, slot: int, transcripts: dict[EpisodeKey, list[Generation]], cases: Sequence[PublicCase], error: Exception
    ) -> list[StepOutcome]:
        """Restart a dead worker and rebuild its live episodes from their transcripts (finished
        episodes already gave their rows and are not run again)."""
        while True:
            self.restarts += 1
            if self.restarts > self.max_restarts:
                raise RuntimeError(f"worker {slot} failed {self.restarts} times; last error: {error}") from error
            self.pool.restart(slot)
            batch = [(k, cases[k.index], list(t)) for k, t in transcripts.items() if self._slot(k) == slot]
            result = self.pool.call("replay", {slot: batch})[slot]
            if not isinstance(result, Exception):
                return result
            error = result
