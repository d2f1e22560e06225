"""The first call in a new process (``ortlab bench --real-size first-call``, part of
``make bench``): what a kernel restart costs with the compile cache and with
:func:`ortlab.precompile`.

Fresh Python processes, one after the other, share one compile cache (a new, empty one
per round); each builds BERT-base (:mod:`ortlab.bench._realsize`'s ``bert-base``, seeded,
so every process has the same weights) and times its first call from the compile line to
the output:

=================  ======================================================================
``cold``           ``ortlab.compile``, the cache empty
``cached``         ``ortlab.compile``, every partition in the cache
``precompile``     ``ortlab.precompile``, partitions cached, nothing captured yet: it
                   traces and saves the capture
``read back``      ``ortlab.precompile``, the capture read back from the cache
=================  ======================================================================

Each process checks its output against eager's in the same process. The target: a read-back
first call at most :data:`TARGET` of the cold one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ortlab.bench import _format, _machine

STEPS = ("cold", "cached", "precompile", "read back")
"""The processes of a round, in order."""

TARGET = 0.30
"""A read-back first call's most, as a fraction of the cold one."""

MODEL = "bert-base"
"""The real-size model timed (:data:`ortlab.bench._realsize.REALSIZE_MODELS`)."""

_SOURCE = {"cold": None, "cached": None, "precompile": "traced", "read back": "file"}
"""The ``Precompiled.source`` each step expects (another one is shown beside its time)."""


def _child(step: str, tiny: bool, threads: int) -> dict[str, Any]:
    """One process's first call (run as ``python -m ortlab.bench._first_call``)."""
    import torch

    import ortlab
    from ortlab.bench import _realsize

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, inputs = _realsize.get(MODEL).build(tiny)
    with torch.no_grad():
        expected = model(*inputs)
        start = time.perf_counter()
        if step in ("precompile", "read back"):
            compiled: Any = ortlab.precompile(model, inputs, intra_op_threads=threads)
        else:
            compiled = ortlab.compile(model, intra_op_threads=threads)
        out = compiled(*inputs)
        seconds = time.perf_counter() - start
    return {
        "step": step,
        "first_call_s": seconds,
        "source": getattr(compiled, "source", None),
        "note": getattr(compiled, "note", None),
        "max_abs_diff": float((out - expected).abs().max()),
    }


def _run_step(step: str, cache: str, *, tiny: bool, threads: int) -> dict[str, Any]:
    env = {**os.environ, "ORTLAB_CACHE_DIR": cache, "OMP_NUM_THREADS": str(threads)}
    command = [sys.executable, "-m", "ortlab.bench._first_call", step, str(int(tiny))]
    done = subprocess.run(
        [*command, str(threads)], env=env, capture_output=True, text=True, check=False
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"step": step, "error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    row: dict[str, Any] = json.loads(lines[-1])
    return row


def first_call_markdown(
    rounds: Sequence[Sequence[dict[str, Any]]], *, machine: dict[str, Any], fast: bool
) -> str:
    """The table: a row per step, the seconds of each round and the ratios to the round's
    cold call; then the target."""
    title = "tiny BERT (smoke run)" if fast else "BERT-base 1×128"
    lines = [
        f"# First call in a new process: {title}",
        "",
        "Fresh processes one after the other, one compile cache per round (empty at its "
        "start); seconds from the compile line to the first output.",
        "",
    ]
    headers = ["process", *[f"round {i + 1} (s)" for i in range(len(rounds))], "/ cold"]
    ratios: dict[str, list[float]] = {}
    rows = []
    for step in STEPS:
        cells, step_ratios = [], []
        for round_ in rounds:
            by_step = {r["step"]: r for r in round_}
            row, cold = by_step.get(step, {}), by_step.get("cold", {})
            if "first_call_s" not in row:
                cells.append(f"error: {row.get('error', 'not run')}")
                continue
            note = "" if row.get("source") in (None, _SOURCE[step]) else f" ({row['source']})"
            cells.append(f"{row['first_call_s']:.2f}{note}")
            if "first_call_s" in cold:
                step_ratios.append(row["first_call_s"] / cold["first_call_s"])
        ratios[step] = step_ratios
        low, high = (
            (f"{min(step_ratios):.2f}", f"{max(step_ratios):.2f}")
            if step_ratios
            else ("n/a",) * 2
        )
        span = low if low == high else f"{low}–{high}"
        rows.append([step, *cells, span])
    lines += [_format.markdown_table(headers, rows), ""]
    worst = max(ratios.get("read back") or [float("nan")])
    cell = _format.target_cell(worst, TARGET, f"read back ≤ {TARGET:.2f}× cold:")
    diffs = [r["max_abs_diff"] for round_ in rounds for r in round_ if "max_abs_diff" in r]
    largest = max(diffs) if diffs else float("nan")
    lines += [
        f"Target: {cell} (worst round {_format.fmt(worst, '{:.2f}')}).",
        "",
        f"Largest difference from eager's output: {_format.fmt(largest, '{:.1e}')}.",
        "",
    ]
    notes = [
        f"- {r['step']}: {r['note']}" for round_ in rounds for r in round_ if r.get("note")
    ]
    if notes:
        lines += ["Notes:", "", *notes, ""]
    lines += _format.machine_section(machine)
    return "\n".join(lines)


def run_first_call(
    out_dir: str | os.PathLike[str], *, fast: bool = False, rounds: int = 2, threads: int = 2
) -> str:
    """Times the first call of new processes; writes ``first_call.md`` and ``.json``.

    Args:
        out_dir: Folder for the results (created if missing).
        fast: A tiny BERT (a smoke run).
        rounds: Rounds of the four processes, each with a new, empty cache.
        threads: torch and ONNX Runtime intra-op threads of each process.

    Returns:
        The markdown written to ``first_call.md``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    machine = _machine.machine_facts()
    machine["torch_threads"] = threads
    results = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="ortlab-first-call-") as cache:
            results.append(
                [_run_step(step, cache, tiny=fast, threads=threads) for step in STEPS]
            )
    if hasattr(os, "getloadavg"):
        machine["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    markdown = first_call_markdown(results, machine=machine, fast=fast)
    (out / "first_call.md").write_text(markdown, encoding="utf-8")
    payload = {"machine": machine, "fast": fast, "target": TARGET, "rounds": results}
    (out / "first_call.json").write_text(
        json.dumps(payload, indent=2) + "\n", encoding="utf-8"
    )
    return markdown


if __name__ == "__main__":  # one step of a round, in its own process
    print(json.dumps(_child(sys.argv[1], bool(int(sys.argv[2])), int(sys.argv[3]))))
