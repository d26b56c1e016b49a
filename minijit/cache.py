"""Bounded caches and per-call scratch pools, safe from many threads (docs/decisions.md,
"Plans are immutable and shareable").

`LRUCache` is what every module-level cache of minijit is: a mapping bounded to ``maxsize``
entries, least recently used out first, whose lookups and insertions hold one lock (values are
built outside it, so a slow build blocks no other key). Caches created with a ``name`` are
registered: `cache_info` reports them all (hits, misses, size, maxsize per name) and
`cache_clear` empties them all (values in use elsewhere stay alive with their users).

`ScratchPool` hands out buffers that belong to one call at a time: a plan keeps a few sets of
scratch buffers, a call takes one (or makes a new one when all are in use) and gives it back.
Both operations are one list ``pop`` / ``append`` (atomic in CPython), so a call from a single
thread pays no lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["LRUCache", "ScratchPool", "cache_clear", "cache_info"]

_MISSING = object()
_REGISTRY: dict[str, LRUCache] = {}
_REGISTRY_LOCK = threading.Lock()


class LRUCache:
    """A thread-safe mapping of at most ``maxsize`` entries, least recently used evicted first.

    ``maxsize``: an int, or a callable returning one (read at each insertion, so a module constant
    can be patched). ``name``: register the cache for `cache_info` / `cache_clear` (a second cache
    under the same name replaces the first there). ``hits`` count lookups that found a value,
    ``misses`` values built and inserted by `get_or_create` or `put` (counts, not synchronized with
    the lookups: threads racing on `get` may lose an increment).
    """

    def __init__(self, maxsize: int | Callable[[], int], name: str | None = None) -> None:
        self._limit = maxsize if callable(maxsize) else (lambda: maxsize)
        self.maxsize  # noqa: B018 - validates now
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        self.name = name
        if name is not None:
            with _REGISTRY_LOCK:
                _REGISTRY[name] = self

    @property
    def maxsize(self) -> int:
        n = self._limit()
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"LRUCache maxsize must be a positive int, got {n!r}")
        return n

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data

    def values(self) -> list[Any]:
        """The values, least recently used first (a snapshot)."""
        with self._lock:
            return list(self._data.values())

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value under ``key`` (now the most recently used), else ``default``. Takes no lock
        (the hot path of a cached call): the lookup and the reordering are single operations on
        the mapping; a key evicted between the two is simply not reordered."""
        value = self._data.get(key, _MISSING)
        if value is _MISSING:
            return default
        try:
            self._data.move_to_end(key)
        except KeyError:
            pass
        self._hits += 1  # (a count: threads racing here may lose an increment)
        return value

    def put(self, key: Hashable, value: Any) -> Any:
        """Insert ``value`` unless ``key`` is there already; returns the value the cache holds."""
        limit = self.maxsize
        with self._lock:
            held = self._data.get(key, _MISSING)
            if held is not _MISSING:
                self._data.move_to_end(key)
                return held
            self._misses += 1
            self._data[key] = value
            while len(self._data) > limit:
                self._data.popitem(last=False)
            return value

    def get_or_create(
        self, key: Hashable, create: Callable[[], Any], admit: Callable[[Any], bool] | None = None
    ) -> Any:
        """The value under ``key``, else ``create()`` inserted (when ``admit(value)`` allows) and
        returned. ``create`` runs without the lock; when two threads build one key at once, both
        get the value inserted first. Exceptions from ``create`` propagate; nothing is cached."""
        with self._lock:
            value = self._data.get(key, _MISSING)
            if value is not _MISSING:
                self._data.move_to_end(key)
                self._hits += 1
                return value
        value = create()
        if admit is not None and not admit(value):
            return value
        return self.put(key, value)

    def clear(self) -> None:
        """Drop every entry and reset the counts."""
        with self._lock:
            self._data.clear()
            self._hits = self._misses = 0

    def info(self) -> dict[str, int]:
        """``{"hits", "misses", "size", "maxsize"}``."""
        with self._lock:
            return {"hits": self._hits, "misses": self._misses, "size": len(self._data), "maxsize": self.maxsize}

    def __repr__(self) -> str:
        return f"LRUCache({self.name or ''!s} {self.info()})"


def cache_info() -> dict[str, dict[str, int]]:
    """Hits, misses, size and maxsize of every named minijit cache, by name."""
    with _REGISTRY_LOCK:
        caches = dict(_REGISTRY)
    return {name: caches[name].info() for name in sorted(caches)}


def cache_clear() -> None:
    """Empty every named minijit cache (plans, operations and kernels in use stay alive)."""
    with _REGISTRY_LOCK:
        caches = list(_REGISTRY.values())
    for cache in caches:
        cache.clear()


#: scratch sets a pool keeps for reuse (more are made while more calls run at once, and dropped
#: when they end)
SCRATCH_POOL_SIZE = 8


class ScratchPool:
    """Scratch items (buffer sets) for calls: `acquire` returns a free one or ``create()``s one,
    `release` gives it back; at most ``maxsize`` free items are kept. An item is used by one call
    at a time, whatever the number of threads."""

    __slots__ = ("_create", "_free", "maxsize")

    def __init__(self, create: Callable[[], Any], maxsize: int = SCRATCH_POOL_SIZE, items: tuple = ()) -> None:
        if not isinstance(maxsize, int) or maxsize < 1:
            raise ValueError(f"ScratchPool maxsize must be a positive int, got {maxsize!r}")
        self._create = create
        self.maxsize = maxsize
        self._free: list[Any] = list(items)[:maxsize]

    def acquire(self) -> Any:
        """A scratch item that no other call holds until it is released."""
        try:
            return self._free.pop()
        except IndexError:
            return self._create()

    def release(self, item: Any) -> None:
        """Give ``item`` back (kept for the next call unless ``maxsize`` items are free)."""
        if len(self._free) < self.maxsize:
            self._free.append(item)

    def __len__(self) -> int:
        return len(self._free)
