"""What the lab computed from a backend's records, kept per backend: module trees, graph
layouts, ONNX Runtime's optimized models.

# NOTE: every Inspector, report and notebook view of one backend shares its cache, so a
# graph laid out once is not laid out again by the next Inspector of the same model. The
# caches hang off the backend weakly (they go when the backend goes) and are bounded
# (least recently used entries are dropped beyond :data:`MAX_ENTRIES`); :func:`clear`
# empties them. An entry made from a record remembers that record (weakly): a record
# dropped by the backend, whose ``id`` Python may give to a new one, never hits.
"""

from __future__ import annotations

import collections
import threading
import uuid
import weakref
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

MAX_ENTRIES = 256
"""Entries kept per backend."""

_T = TypeVar("_T")


class LabCache:
    """A bounded cache of values made from one backend's records."""

    def __init__(self, size: int = MAX_ENTRIES) -> None:
        self.size = size
        self.prefix = f"ol{uuid.uuid4().hex[:8]}-"
        """The SVG id prefix of this backend's drawings (shared by its views)."""
        self._entries: collections.OrderedDict[Hashable, tuple[Any, Any]] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()

    def get(self, record: Any, key: Hashable, make: Callable[[], _T]) -> _T:
        """The value of ``key`` about ``record``, made by ``make`` when missing."""
        full = (id(record), key)
        with self._lock:
            entry = self._entries.get(full)
            if entry is not None and entry[0]() is record:
                self._entries.move_to_end(full)
                return entry[1]  # type: ignore[no-any-return]
        value = make()
        self.put(record, key, value)
        return value

    def put(self, record: Any, key: Hashable, value: Any) -> None:
        """Sets the value of ``key`` about ``record``."""
        with self._lock:
            self._entries[(id(record), key)] = (weakref.ref(record), value)
            self._entries.move_to_end((id(record), key))
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        """Drops every entry."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


_CACHES: weakref.WeakKeyDictionary[Any, LabCache] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def of(backend: Any) -> LabCache:
    """The cache of ``backend`` (made on first use)."""
    with _LOCK:
        cache = _CACHES.get(backend)
        if cache is None:
            cache = LabCache()
            _CACHES[backend] = cache
        return cache


def clear(backend: Any = None) -> None:
    """Empties the cache of ``backend``, or of every backend."""
    with _LOCK:
        caches = [_CACHES[backend]] if backend in _CACHES else []
        if backend is None:
            caches = list(_CACHES.values())
    for cache in caches:
        cache.clear()
