"""What a view is about: turning the objects users pass into backends (and diff reports).

``ortlab.inspect`` and ``ortlab.report`` accept an :class:`~ortlab.OrtBackend`, a compiled
callable, a numerics ``DiffReport`` (its ``.backend`` is shown, plus a Numerics tab), or a
mapping of names to any of those (one section per entry). Tables accept the same, and
also graph, partition and session records.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ortlab.numerics import _report

if TYPE_CHECKING:
    from ortlab.backend import OrtBackend, records

_R = TypeVar("_R")


@dataclasses.dataclass
class Subject:
    """One backend to show, with its name and optional numerics report."""

    name: str
    backend: OrtBackend
    diff: Any = None
    profile: Any = None


def is_diff_report(obj: Any) -> bool:
    """Whether ``obj`` is a numerics :class:`~ortlab.DiffReport`."""
    return isinstance(obj, _report.DiffReport)


def _one(name: str, obj: Any, diff: Any) -> Subject:
    from ortlab.backend import backend_of

    if is_diff_report(obj):
        return Subject(name, obj.backend, diff if diff is not None else obj)
    return Subject(name, backend_of(obj), diff)


def subjects(obj: Any, diff: Any = None) -> list[Subject]:
    """The subjects of a view of ``obj``.

    Args:
        obj: A backend, a compiled callable, a ``DiffReport``, or a mapping of names to any
            of those.
        diff: A ``DiffReport`` to show with a single subject, or a mapping of the same
            names to reports for a mapping ``obj``.

    Raises:
        UnsupportedOptionError: ``obj`` (or an entry) was not compiled with ortlab.
    """
    if isinstance(obj, Mapping):
        diffs = diff if isinstance(diff, Mapping) else {}
        return [_one(str(k), v, diffs.get(k)) for k, v in obj.items()]
    return [_one("model", obj, diff)]


def graphs_of(obj: Any) -> list[records.GraphRecord]:
    """Graph records of a backend-like object, a graph record, or a sequence of them."""
    from ortlab.backend import backend_of, records

    given = _given_records(obj, records.GraphRecord)
    if given is not None:
        return given
    if isinstance(obj, Mapping):
        return [g for v in obj.values() for g in graphs_of(v)]
    if is_diff_report(obj):
        return list(obj.backend.graphs)
    return list(backend_of(obj).graphs)


def partitions_of(obj: Any) -> list[records.PartitionRecord]:
    """Partition records of anything :func:`graphs_of` accepts, or of partition records."""
    from ortlab.backend import records

    given = _given_records(obj, records.PartitionRecord)
    if given is not None:
        return given
    return [p for g in graphs_of(obj) for p in g.partitions]


def sessions_of(obj: Any) -> list[records.SessionRecord]:
    """Session records of anything :func:`partitions_of` accepts, or of session records."""
    from ortlab.backend import records

    given = _given_records(obj, records.SessionRecord)
    if given is not None:
        return given
    return [s for p in partitions_of(obj) for s in p.sessions]


def _given_records(obj: Any, kind: type[_R]) -> list[_R] | None:
    """``obj`` as a list when it is a record of ``kind`` or a list/tuple of them, else
    ``None`` (the caller derives the records from ``obj``)."""
    if isinstance(obj, kind):
        return [obj]
    if isinstance(obj, (list, tuple)) and all(isinstance(r, kind) for r in obj):
        return list(obj)
    return None
