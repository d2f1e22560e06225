"""The generation benchmark: ``model.generate()`` with a compiled forward, greedy, with the
dynamic and the static key/value caches of ``transformers`` (``ortlab bench --real-size
generation``, part of ``make bench``).

Per cache and backend, a fresh copy of a small Llama-family model with grouped-query
attention (:data:`ortlab.bench._realsize.LLAMA_GQA`) gets its forward compiled the way
users compile it for generation::

    model.forward = torch.compile(model.forward, backend="ortlab")

and generates :data:`NEW_TOKENS` tokens greedily after a prompt of :data:`PROMPT` tokens.
The first ``generate()`` compiles (its seconds are recorded); then every backend's
``generate()`` is timed by the one timer (interleaved), and the tokens are compared with
eager's. ortlab's records give the graphs it compiled and why each one after the first
was compiled (:attr:`~ortlab.backend.GraphRecord.recompile_reason`); a graph compiled
while timing would be a recompile per token.

It also checks what ``torch.compile(model).generate()`` compiles: ``generate`` is not
``forward``, so the compiled module's ``generate`` runs the original module's forward
and nothing reaches the backend (:func:`compiled_module_generate_graphs`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

import ortlab.backend
from ortlab import _harness, errors
from ortlab.bench import _engine, _format, _machine, _realsize, _training
from ortlab.zoo import _model

GENERATION_BACKENDS = ("eager", "inductor", "ortlab")
"""Backends of the generation table (``fast``: without inductor)."""

CACHES = ("dynamic", "static")
"""``transformers``' key/value caches measured: ``DynamicCache`` (the default; grows by
concatenation) and ``StaticCache`` (``cache_implementation="static"``: preallocated to
the maximum length, written in place)."""

PROMPT = 32
"""Tokens of the prompt."""
NEW_TOKENS = 64
"""Tokens generated (``min_new_tokens`` = ``max_new_tokens``: no early end)."""

TIMING: dict[str, Any] = dict(warmup=1, min_time=2.0, min_iters=3, max_iters=20)
_FAST_TIMING: dict[str, Any] = dict(warmup=0, min_time=0.0, min_iters=1, max_iters=2)


@dataclasses.dataclass
class GenerationRow(_training.TimedRow):
    """One backend's ``generate()`` with one cache."""

    cache: str
    backend: str
    first_generate_s: float = math.nan
    """The first ``generate()``: compiles included."""
    tokens_per_s: float = math.nan
    """:data:`NEW_TOKENS` over the median ``generate()`` (prefill included)."""
    same_tokens: bool | None = None
    """The generated tokens are eager's, every one."""
    graphs: int | None = None
    """ortlab: graphs compiled by the first ``generate()``."""
    graphs_while_timed: int | None = None
    """ortlab: graphs compiled after the first ``generate()`` (recompiles per token)."""
    recompile_reasons: list[str] = dataclasses.field(default_factory=list)
    """ortlab: why each graph after the first was compiled (Dynamo's failed guard)."""
    nodes: tuple[int, int] | None = None
    """ortlab: ``(nodes in ONNX Runtime, nodes)`` over its graphs."""


def compiled_forward(
    model: nn.Module, backend: str, *, options: Mapping[str, Any] | None = None
) -> ortlab.backend.OrtBackend | None:
    """Replaces ``model.forward`` by ``torch.compile(model.forward, backend=...)`` (for
    ``"ortlab"`` with an :class:`~ortlab.OrtBackend` of its own, which it returns).

    The compiled function calls the forward through a function whose code object is new
    (its name numbered), so that Dynamo's caches and its record of the sizes a frame has
    seen are this copy's, not shared with another backend's copy of the same class; it
    keeps the forward's signature (``generate`` inspects it).
    """
    entry = _harness.fresh_forward(model, name=f"generate_forward_{backend.replace('-', '_')}")
    if backend == "ortlab":
        compiled = ortlab.backend.compile(entry, **{"compile_cache": False, **(options or {})})
        model.forward = compiled  # type: ignore[method-assign]
        return ortlab.backend.backend_of(compiled)
    model.forward = torch.compile(entry, backend=backend)  # type: ignore[method-assign]
    return None


def generate_kwargs(cache: str, new_tokens: int) -> dict[str, Any]:
    """Greedy ``generate()`` keywords for ``new_tokens`` tokens with ``cache``."""
    kwargs: dict[str, Any] = dict(
        do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens
    )
    if cache == "static":
        kwargs["cache_implementation"] = "static"
    return kwargs


def compiled_module_generate_graphs(model: Any, prompt: torch.Tensor) -> int:
    """Graphs an ortlab backend compiles for ``torch.compile(model).generate(...)``:
    ``0`` where ``generate`` runs the module's own forward, bypassing the compiled one."""
    copied = copy.deepcopy(model)
    compiled: Any = ortlab.backend.compile(copied, compile_cache=False)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # it says so: backend.notes
        compiled.generate(prompt, **generate_kwargs("dynamic", 2))
    backend = ortlab.backend.backend_of(compiled)
    return len(backend.graphs) if backend is not None else 0


def _prompt(vocab: int, length: int) -> torch.Tensor:
    return torch.randint(4, vocab, (1, length), generator=_model.generator(700))


def bench_cache(
    lm: Any,
    prompt: torch.Tensor,
    cache: str,
    backends: Sequence[str],
    *,
    new_tokens: int,
    **timing: Any,
) -> list[GenerationRow]:
    """Every backend's ``generate()`` with ``cache``: a row each (a failure is a row)."""
    kwargs = generate_kwargs(cache, new_tokens)
    rows = {b: GenerationRow(cache, b) for b in backends}
    steps: dict[str, _engine.Step] = {}
    tokens: dict[str, torch.Tensor] = {}
    backends_of: dict[str, ortlab.backend.OrtBackend] = {}
    load = _machine.machine_facts().get("load_avg_1m")
    for backend, row in rows.items():
        row.load_avg_1m = load
        try:
            model = copy.deepcopy(lm).eval()
            if backend != "eager":
                ours = compiled_forward(model, backend)
                if ours is not None:
                    backends_of[backend] = ours

            def step(model: Any = model) -> torch.Tensor:
                return model.generate(prompt, **kwargs)

            start = time.perf_counter()
            with torch.no_grad():
                tokens[backend] = step()
            row.first_generate_s = time.perf_counter() - start
            if backend in backends_of:
                row.graphs = len(backends_of[backend].graphs)
            steps[backend] = step
        except Exception as e:  # a backend's failure is a row, never a crash
            row.error = errors.describe(e)
    with torch.no_grad():
        measured = _engine.measure(steps, _engine.Timing(**timing))
    reference = tokens.get("eager")
    for backend, m in measured.items():
        row = rows[backend]
        if not row.record(m):
            continue
        row.tokens_per_s = new_tokens / (m.median_ms / 1e3)
        if reference is not None:
            row.same_tokens = bool(torch.equal(tokens[backend], reference))
        ours = backends_of.get(backend)
        if ours is not None and row.graphs is not None:
            row.graphs_while_timed = len(ours.graphs) - row.graphs
            row.recompile_reasons = [
                g.recompile_reason or "" for g in ours.graphs[1:] if g.recompile_reason
            ]
            summary = ours.summary()
            row.nodes = (summary["nodes_in_ort"], summary["nodes"])
    return list(rows.values())


def _short(reason: str) -> str:
    """A recompile reason's first line, without the user's source after the guard."""
    return reason.splitlines()[0].split("  #")[0].strip() if reason else ""


def generation_markdown(
    rows: Sequence[GenerationRow],
    *,
    machine: Mapping[str, Any],
    compiled_module_graphs: int | None,
    description: str,
    prompt: int = PROMPT,
    new_tokens: int = NEW_TOKENS,
    fast: bool = False,
) -> str:
    """The generation report: a row per cache and backend, ortlab's graphs and why,
    what ``torch.compile(model).generate()`` compiled, the machine."""
    speeds: dict[tuple[str, str], float] = {(r.cache, r.backend): r.tokens_per_s for r in rows}
    table = []
    for r in rows:
        eager = speeds.get((r.cache, "eager"), math.nan)
        inductor = speeds.get((r.cache, "inductor"), math.nan)
        table.append(
            [
                r.cache,
                r.backend,
                "error" if r.error else _format.fmt(r.tokens_per_s, "{:.1f}"),
                _format.fmt_ratio(r.tokens_per_s / eager),
                _format.fmt_ratio(r.tokens_per_s / inductor),
                _format.fmt_ms(r.median_ms),
                {True: "yes", False: "NO", None: ""}[r.same_tokens],
                "" if r.graphs is None else str(r.graphs),
                "" if r.graphs_while_timed is None else str(r.graphs_while_timed),
                "" if r.nodes is None else f"{r.nodes[0]}/{r.nodes[1]}",
                _format.fmt(r.first_generate_s, "{:.1f}"),
                _format.fmt(r.load_avg_1m or math.nan, "{:.2f}"),
            ]
        )
    reasons = [
        [r.cache, i + 2, _short(reason)]
        for r in rows
        for i, reason in enumerate(r.recompile_reasons)
    ]
    lines = ["# ortlab generation", ""]
    if fast:
        lines += ["> **Fast mode**: a tiny model, a smoke run, not a measurement.", ""]
    lines += [
        f"`model.generate()` on {description}, greedy, a prompt of {prompt} tokens and "
        f"{new_tokens} new tokens, batch 1, {machine.get('torch_threads')} threads. The "
        "compiled backends run `model.forward = torch.compile(model.forward, backend=...)`"
        "; eager runs the model as it is. Tokens/s is new tokens over the median "
        "`generate()` (prompt included), every backend of a cache timed in one run, "
        "interleaved. `graphs` are those ortlab's first `generate()` compiled; `later` "
        "those compiled afterwards (0: no recompile per token).",
        "",
        _format.markdown_table(
            [
                "cache",
                "backend",
                "tokens/s",
                "× eager",
                "× inductor",
                "generate ms",
                "tokens = eager's",
                "graphs",
                "later",
                "in ORT",
                "first generate (s)",
                "load",
            ],
            table,
        ),
        "",
    ]
    if reasons:
        lines += [
            "Why ortlab compiled each graph after the first (Dynamo's failed guard):",
            "",
            _format.markdown_table(["cache", "graph", "guard that failed"], reasons),
            "",
        ]
    if compiled_module_graphs is not None:
        lines += [
            f'`torch.compile(model, backend="ortlab").generate(...)` compiled '
            f"{compiled_module_graphs} graphs: `generate` is not `forward`, so the "
            "compiled module's `generate` runs the module's own forward. Compile "
            "`model.forward` instead (as above).",
            "",
        ]
    errs = [[r.cache, r.backend, r.error] for r in rows if r.error]
    if errs:
        lines += ["## Errors", "", _format.markdown_table(["cache", "backend", "error"], errs)]
        lines.append("")
    lines += _format.machine_section(machine)
    return "\n".join(lines)


def run_generation(
    out_dir: str | os.PathLike[str],
    *,
    fast: bool = False,
    backends: Sequence[str] | None = None,
    caches: Sequence[str] = CACHES,
    threads: int = 2,
) -> str:
    """Times ``generate()`` per cache and backend; writes ``generation.md`` / ``.json``.

    Args:
        out_dir: Folder for the results (created if missing).
        fast: A tiny model, few tokens and calls (a smoke run); without ``backends``,
            also without inductor.
        backends: Backend names (``"eager"`` first: the tokens are compared with its);
            ``None``: :data:`GENERATION_BACKENDS`.
        caches: Of :data:`CACHES`.
        threads: torch and ONNX Runtime intra-op threads.

    Returns:
        The markdown written to ``generation.md``.

    Raises:
        UnsupportedOptionError: an unknown cache (before anything runs).
    """
    for cache in caches:
        if cache not in CACHES:
            raise errors.UnsupportedOptionError(f"no cache {cache!r}; choose from {CACHES}")
    if backends is None:
        backends = tuple(b for b in GENERATION_BACKENDS if not (fast and b == "inductor"))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        machine = _machine.machine_facts()
        if "ortlab" in backends:
            machine["exporter_warm_up_s"] = round(ortlab.backend.warm_up(), 2)
        lm = _realsize.llama_gqa(fast)
        prompt = _prompt(lm.config.vocab_size, 8 if fast else PROMPT)
        new_tokens = 4 if fast else NEW_TOKENS
        timing = _FAST_TIMING if fast else TIMING
        rows = []
        with _engine.settled_heap() as settle:
            for cache in caches:
                settle()
                rows += bench_cache(
                    lm, prompt, cache, backends, new_tokens=new_tokens, **timing
                )
        graphs = compiled_module_generate_graphs(lm, prompt)
    finally:
        torch.set_num_threads(old_threads)
    machine["transformers"] = _machine.version_of("transformers")
    if hasattr(os, "getloadavg"):
        machine["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    description = (
        "a tiny Llama" if fast else "a Llama-family model (6 layers, hidden 512, GQA 8/2)"
    )
    markdown = generation_markdown(
        rows,
        machine=machine,
        compiled_module_graphs=graphs,
        description=description,
        prompt=prompt.shape[1],
        new_tokens=new_tokens,
        fast=fast,
    )
    (out / "generation.md").write_text(markdown, encoding="utf-8")
    payload = {
        "machine": machine,
        "fast": fast,
        "compiled_module_generate_graphs": graphs,
        "rows": [
            {k: _format.json_value(v) for k, v in dataclasses.asdict(r).items()} for r in rows
        ],
    }
    (out / "generation.json").write_text(
        json.dumps(payload, indent=2) + "\n", encoding="utf-8"
    )
    return markdown
