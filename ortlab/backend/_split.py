"""Split, don't drop: which nodes of a partition ONNX Runtime refuses, found by bisection,
so that only they run in PyTorch and the rest of the partition in ONNX Runtime.

# NOTE: a partition whose model ONNX Runtime refuses (a translation it cannot type, a
# kernel it lacks) or cannot run on inputs PyTorch runs, used to run in PyTorch whole:
# one grouped-query attention node sent a whole Llama back. Instead its nodes, in a
# topological order that keeps each multi-output node with its ``getitem``s, are tried
# in halves (each half a partition of its own: exported, given a session, run on the
# values the partition computes for it) until the refused nodes stand alone:
#
#   [0 ........................ 500)  refused
#   [0 ..... 250) ok   [250 ........ 500) refused
#                      [250 . 375) ok   [375 ... 500) refused
#                                       ...  node 431 refused alone
#
# A contiguous run of a topological order is convex (no path leaves it and comes back),
# so every half is a valid partition. With k refused nodes among n it takes about
# 2·k·log2(n) trials. When every half runs alone but the whole does not (an interaction),
# or too many nodes are refused for the failure to be theirs, nothing is pinned and the
# caller keeps the old behaviour: the partition runs in PyTorch.
#
# When the whole partition's error names an FX node (the translation's "Error when
# translating node %sub ..." or the type-promotion pass's "While executing %sub ..."),
# that node is tried alone first, then the nodes before it and those after it: three
# trials instead of ~2·log2(n) exports, when it is the one refused node.
"""

from __future__ import annotations

import dataclasses
import operator
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from ortlab import errors
from ortlab.backend import _torch_private

MAX_REFUSED = 64
"""More refused nodes than this: the failure is not the nodes' (give up)."""

MAX_SECONDS = 120.0
"""The search gives up after this long."""

Trial = Callable[[torch.fx.GraphModule, Sequence[Any]], None]
"""Builds and runs a part: export, session, one run on its inputs; raises when ONNX
Runtime refuses it."""


@dataclasses.dataclass(frozen=True)
class Search:
    """What the bisection found."""

    refused: dict[str, str]
    """Node name -> why ONNX Runtime refused it alone (one line); empty when nothing
    could be pinned on single nodes."""
    trials: int
    seconds: float
    note: str = ""
    """Why nothing was pinned, when ``refused`` is empty."""


class _GiveUp(Exception):
    pass


def _units(gm: torch.fx.GraphModule) -> list[list[torch.fx.Node]]:
    """The partition's computing nodes in topological order, each with its ``getitem``
    users right after it (so that no part holds a tuple without its selections)."""
    units = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        getitems = [u for u in node.users if u.target is operator.getitem]
        units.append([node, *getitems])
    return units


def _values(gm: torch.fx.GraphModule, args: Sequence[Any]) -> dict[torch.fx.Node, Any]:
    """Every node's value when the partition runs in PyTorch on ``args``."""
    values: dict[torch.fx.Node, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            result = super().run_node(n)
            values[n] = result
            return result

    with torch.no_grad():
        Recorder(gm).run(*args)
    return values


_NAMED_NODE = re.compile(r"(?:Error when translating node|While executing) %(\w+)")


def named_node(error: BaseException | None) -> str | None:
    """The FX node an export error (or one of its causes) names, if any."""
    seen = 0
    while error is not None and seen < 8:
        match = _NAMED_NODE.search(str(error))
        if match:
            return match.group(1)
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def find_refused(
    gm: torch.fx.GraphModule,
    args: Sequence[Any],
    trial: Trial,
    suspect: str | None = None,
) -> Search:
    """Bisects the partition ``gm`` (called with ``args``, which PyTorch runs) into the
    nodes ONNX Runtime refuses alone; ``suspect``, the node the partition's error names,
    is tried first."""
    start = time.perf_counter()
    values = _values(gm, args)
    units = _units(gm)
    refused: dict[str, str] = {}
    trials = 0

    def attempt(part: list[list[torch.fx.Node]]) -> Exception | None:
        nonlocal trials
        if time.perf_counter() - start > MAX_SECONDS:
            raise _GiveUp(f"the search took over {MAX_SECONDS:.0f} s")
        trials += 1
        nodes = [n for unit in part for n in unit]
        sub, inputs = _torch_private.nodes_as_graph_module(gm, nodes)
        try:
            trial(sub, [values[n] for n in inputs])
        except Exception as e:
            return e
        return None

    def search(part: list[list[torch.fx.Node]], error: Exception | None) -> bool:
        """Pins the refusal of ``part`` (known to fail when ``error`` is given) on
        single nodes; ``False`` when it cannot."""
        if error is None:
            error = attempt(part)
            if error is None:
                return True
        if len(part) == 1:
            refused[part[0][0].name] = errors.describe(error)
            if len(refused) > MAX_REFUSED:
                raise _GiveUp(f"more than {MAX_REFUSED} nodes were refused")
            return True
        middle = len(part) // 2
        left, right = part[:middle], part[middle:]
        left_error = attempt(left)
        right_error = attempt(right)
        if left_error is None and right_error is None:
            return False  # each half runs alone: the refusal is an interaction
        return (left_error is None or search(left, left_error)) and (
            right_error is None or search(right, right_error)
        )

    note = ""
    named = next((i for i, u in enumerate(units) if u[0].name == suspect), None)
    if suspect is not None and named is not None and len(units) > 1:
        # The suspect alone, then the nodes before it and those after it (each part must
        # be convex: the rest in one piece would depend on the suspect both ways).
        error = attempt([units[named]])
        if error is not None and all(
            not part or attempt(part) is None for part in (units[:named], units[named + 1 :])
        ):
            refused[suspect] = errors.describe(error)
            return Search(refused, trials, time.perf_counter() - start)
    try:
        pinned = search(units, None)
        if not pinned:
            refused.clear()
            note = "every part of the partition runs alone, only the whole is refused"
    except _GiveUp as e:
        refused.clear()
        note = str(e)
    return Search(refused, trials, time.perf_counter() - start, note)


def selections_of(gm: torch.fx.GraphModule, names: Sequence[str]) -> dict[str, str]:
    """The ``getitem`` nodes selecting outputs of the nodes ``names``, each with the name
    of its producer (they go where their producer goes)."""
    wanted = set(names)
    return {
        n.name: n.args[0].name  # type: ignore[union-attr]
        for n in gm.graph.nodes
        if n.target is operator.getitem
        and isinstance(n.args[0], torch.fx.Node)
        and n.args[0].name in wanted
    }
