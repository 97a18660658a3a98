"""A least-recently-used cache bounded by what its entries cost, not only by how many there are.

A compiled schema or pattern can weigh a hundred bytes or a hundred megabytes: ``a{99000}`` is
7 MB as a ``regex`` program and 2 MB inside jsonschema-rs. A cache bounded by count alone
(``functools.lru_cache(4096)``) let 4,000 distinct hostile patterns grow a process past 2 GiB, and
an abort in native code followed. Each entry here carries a cost (bytes, or a proxy that tracks
them), and the cache evicts the least recently used until both bounds hold.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedLRU(Generic[K, V]):
    """Thread-safe; an entry costlier than the whole budget is not kept at all."""

    def __init__(self, max_items: int, max_cost: int) -> None:
        self.max_items = max_items
        self.max_cost = max_cost
        self.cost = 0
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K) -> V | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            return hit[0]

    def put(self, key: K, value: V, cost: int) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.cost -= old[1]
            if cost > self.max_cost:
                return
            self._items[key] = (value, cost)
            self.cost += cost
            while len(self._items) > self.max_items or self.cost > self.max_cost:
                _, (_, evicted) = self._items.popitem(last=False)
                self.cost -= evicted

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.cost = 0
