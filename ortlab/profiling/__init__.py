"""Profiling: where the time of a compiled call goes, and what changed between two compiles.

:func:`profile` times a compiled call and its parts (Dynamo's entry, each eager node,
ortlab's glue, each ONNX Runtime node under its profiler) and attributes them to FX
nodes, modules and the user's source lines: a :class:`Profile` (plain data, with
``to_chrome_trace``). :func:`compare` sets two compiles side by side (graphs,
partitions, sessions, fusions, numerics and, from two profiles, time per module and per
node). Advice (``profile(..., advise=True)``) tries options on the model and reports the
gain measured.

Modules: ``_trace`` (ONNX Runtime's profile read back), ``_mapping`` (ONNX Runtime node
-> model node -> FX nodes, and the sharing rule), ``_measure`` (capture and timing),
``_attribute`` (the arithmetic), ``_records`` and ``_chrome`` (the results and their
Chrome trace), ``_profile`` (``profile``), ``_comparison`` (``compare``), ``_advice``.
Views are in :mod:`ortlab.views._profile` and :mod:`ortlab.views._compare`.
"""

from __future__ import annotations

from ortlab.profiling._advice import freeze_trial
from ortlab.profiling._comparison import Change, Comparison, TimeChange, compare
from ortlab.profiling._mapping import model_to_fx, optimized_to_model
from ortlab.profiling._profile import profile
from ortlab.profiling._records import (
    Advice,
    GroupTime,
    NodeTime,
    OrtNodeTime,
    Overhead,
    Profile,
    SessionTime,
)

__all__ = [
    # Entry points
    "profile",
    "compare",
    "freeze_trial",
    # Results
    "Profile",
    "NodeTime",
    "OrtNodeTime",
    "Overhead",
    "SessionTime",
    "GroupTime",
    "Advice",
    "Comparison",
    "Change",
    "TimeChange",
    # ONNX Runtime's nodes -> the model's nodes -> FX nodes (the lab's provenance too)
    "optimized_to_model",
    "model_to_fx",
]
