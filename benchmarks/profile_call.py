"""Where the time of one steady-state ortlab call goes, per zoo model.

Usage (from the repository root)::

    .venv/bin/python benchmarks/profile_call.py [--models mlp,cnn] [--calls 300]
        [--threads 2] [--frozen] [--out benchmarks/profile.md]

For each model it compiles with the ortlab backend, warms up, then

1. times N calls without any profiler (median per call), for eager and for ortlab;
2. runs N calls under cProfile and sums each function's *own* time (tottime) into
   layers: Dynamo (frame evaluation, guards), AOTAutograd's runtime wrappers, the FX
   graph's generated code, nn.Module dispatch, ortlab's partition glue, the torch <-> ORT
   hand-off (OrtValue / DLPack), the ORT run itself, PyTorch ops run eagerly, model code;
3. times the bare ONNX Runtime sessions on the inputs their partitions received, made and
   fed the backend's way (``ortlab.backend.create_session``: same providers and session
   options, zero-copy torch <-> OrtValue hand-off);
4. times two reference points: **Dynamo's entry alone** (the model under ``torch.compile``
   as ``ortlab.compile`` compiles it, torch.compile's default shapes with floats
   specialized (``ortlab.bench._floor.dynamo_entry``), and a
   backend that runs nothing, each graph returning
   the outputs of its first run: frame entry, guards and the bytecode around the graphs,
   the least any ``torch.compile`` backend costs), the same **right after ONNX Runtime
   ran** (floor then entry, minus the floor: a real call's guards find the CPU caches
   full of the model's data, measured 60 -> 170 µs on GPT-2), and **the floor** (the whole
   model exported once and run by one bare session, as ``ortlab bench``'s ``ort`` row).

``ortlab − (entry after ORT + bare sessions)`` is what the call costs beyond Dynamo and
ONNX Runtime themselves: ortlab's glue, the hand-off, eager ops, the runtimes sharing the
cores;
``bare sessions − floor`` is what ONNX Runtime loses on ortlab's partition against the
whole-model export (weights passed as inputs instead of initializers, unless frozen).

Eager, ortlab, the bare sessions and the reference points are timed interleaved by
``ortlab.bench``'s engine.

cProfile adds a roughly constant cost to every Python call, so layers made of many small
Python calls look bigger under the profiler than they are; the "est. µs" column scales
the profiled shares to the unprofiled median and is an estimate, the other two columns
are measurements. Writes markdown (default ``benchmarks/profile.md``) and prints it.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

import ortlab
from ortlab import _harness, zoo
from ortlab.backend import _torch_private
from ortlab.bench import _engine, _floor, _format, _zoo

MODELS = ("mlp", "gelu_mlp", "cnn", "transformer_layer", "tiny_llama")

# (layer, predicate on (filename, function name)); the first match wins.
LAYERS: tuple[tuple[str, Callable[[str, str], bool]], ...] = (
    ("ORT run", lambda f, n: "onnxruntime" in n and "run" in n and "ortvalue" in n.lower()),
    (
        "torch ↔ ORT hand-off",
        lambda f, n: "onnxruntime" in n or "onnxruntime" in f or "dlpack" in (f + n),
    ),
    ("ortlab partition glue", lambda f, n: "/ortlab/backend/" in f),
    (
        "Dynamo (frame eval, guards)",
        lambda f, n: (
            "torch/_dynamo/" in f
            or "torch._C._dynamo" in n
            or (f == "<string>" and "guard" in n)
            or "torch/_compile.py" in f
            or "torch/utils/_config_module.py" in f
        ),
    ),
    (
        "AOTAutograd runtime wrappers",
        lambda f, n: "torch/_functorch/" in f or "runtime_wrapper" in (f + n),
    ),
    ("FX graph code", lambda f, n: "<eval_with_key>" in f or "torch/fx/" in f),
    ("nn.Module dispatch", lambda f, n: "torch/nn/modules/module.py" in f),
    (
        "PyTorch ops (eager)",
        lambda f, n: (
            "torch._C" in n
            or "TensorBase" in n
            or "torch/_ops.py" in f
            or "torch/_tensor.py" in f
            or "torch/nn/functional.py" in f
            or "built-in method torch" in n
        ),
    ),
    ("model code", lambda f, n: "site-packages/torch/" not in f and f not in ("~", "")),
)


def _layer(filename: str, name: str) -> str:
    for layer, matches in LAYERS:
        if matches(filename, name):
            return layer
    return "other (Python builtins)"


def _bare_sessions(backend: ortlab.OrtBackend, call: Callable[[], Any]) -> Callable[[], None]:
    """A callable running every partition's session once, bare, on its captured inputs."""
    captured: list[tuple[Any, Any, tuple[Any, ...]]] = []

    def observe(event: Any) -> None:
        captured.append((event.partition, event.session, event.inputs))

    remove = backend.add_observer(observe)
    try:
        call()
    finally:
        remove()
    runs = []
    for partition, record, inputs in captured:
        # Frozen parameters are initializers of the model, not inputs: skip them.
        fed = [
            v
            for name, v in zip(partition.input_names, inputs)
            if name not in record.frozen_inputs
        ]
        options = backend.options
        if options.ort_session_options is None and record.threads is not None:
            options = options.replace(intra_op_threads=record.threads)  # as the partition's
        session = ortlab.backend.create_session(
            record.model, like=fed, options=options, providers=record.providers
        )
        runs.append((session, fed))

    def run_all() -> None:
        for session, fed in runs:
            session.run(fed)

    return run_all


def _median_us_interleaved(calls: dict[str, Callable[[], Any]], n: int) -> dict[str, float]:
    """Median µs per call of each callable, timed in interleaved blocks (as ``bench``
    does), so that load changes on a shared machine reach them alike."""
    timing = _engine.Timing(warmup=0, iters=n, min_time=0.0, min_iters=1, max_iters=n)
    measured = _engine.measure(calls, timing)
    for m in measured.values():
        if m.error:
            raise RuntimeError(f"{m.name}: {m.error}")
    return {name: m.median_ms * 1e3 for name, m in measured.items()}


def profile_model(name: str, *, calls: int, frozen: bool) -> dict[str, Any]:
    entry = zoo.get(name)
    model, inputs = entry.build(), entry.example_inputs(_zoo.ZOO_BATCH.get(name))
    # A fresh entry function, as ortlab.bench compiles it (and _floor.dynamo_entry).
    compiled = ortlab.compile(
        _harness.fresh_entry(model, name="profile_ortlab"), freeze_parameters=frozen
    )
    backend = compiled.ortlab_backend
    with torch.no_grad(), _torch_private.dynamo_config_patch(dict(entry.dynamo_config)):

        def ortlab_call() -> Any:
            return compiled(*inputs)

        def eager_call() -> Any:
            return model(*inputs)

        entry_only = _floor.dynamo_entry(model)
        floor = _floor.OrtFloor(model, tuple(inputs), options=backend.options)

        def entry_call() -> Any:
            return entry_only(*inputs)

        def floor_call() -> Any:
            return floor(*inputs)

        def floor_then_entry() -> Any:
            floor(*inputs)
            return entry_only(*inputs)

        for _ in range(10):
            ortlab_call()
            eager_call()
            entry_call()
        bare_call = _bare_sessions(backend, ortlab_call)
        medians = _median_us_interleaved(
            {
                "eager": eager_call,
                "ortlab": ortlab_call,
                "bare": bare_call,
                "entry": entry_call,
                "floor": floor_call,
                "floor_then_entry": floor_then_entry,
            },
            calls,
        )
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(calls):
            ortlab_call()
        profiler.disable()
    eager_us, ortlab_us, bare_us = medians["eager"], medians["ortlab"], medians["bare"]
    stats = pstats.Stats(profiler)
    layers: dict[str, float] = {}
    functions = []
    for (filename, _line, func), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():
        layer = _layer(filename, func)
        layers[layer] = layers.get(layer, 0.0) + tottime
        functions.append((tottime, layer, f"{Path(filename).name}:{func}"))
    total = sum(layers.values()) or 1.0
    summary = backend.summary()
    return {
        "name": name,
        "eager_us": eager_us,
        "ortlab_us": ortlab_us,
        "bare_ort_us": bare_us,
        "dynamo_entry_us": medians["entry"],
        # Dynamo's entry right after ONNX Runtime ran (caches holding the model's data).
        "dynamo_entry_after_ort_us": medians["floor_then_entry"] - medians["floor"],
        "floor_us": medians["floor"],
        "profiled_us": total / calls * 1e6,
        "layers": {k: v / calls * 1e6 for k, v in layers.items()},
        "share": {k: v / total for k, v in layers.items()},
        "top": sorted(functions, reverse=True)[:12],
        "calls": calls,
        "summary": summary,
    }


def _rest_us(r: dict[str, Any]) -> float:
    """What a call costs beyond Dynamo's entry (after ORT ran) and the bare sessions."""
    return float(r["ortlab_us"] - r["dynamo_entry_after_ort_us"] - r["bare_ort_us"])


def to_markdown(results: Sequence[dict[str, Any]], *, threads: int, frozen: bool) -> str:
    md = _format.markdown_table
    lines = [
        "# Where one steady-state ortlab call spends its time",
        "",
        f"torch threads = ONNX Runtime intra-op threads = {threads}; inference "
        f"(`torch.no_grad()`); freeze_parameters={frozen}. Generated by "
        "`benchmarks/profile_call.py`.",
        "",
        md(
            (
                "model",
                "eager µs",
                "ortlab µs",
                "bare ORT sessions µs",
                "Dynamo entry µs",
                "entry after ORT µs",
                "floor µs",
                "ortlab − (entry after ORT + bare) µs",
                "bare / floor",
                "partitions / sessions",
                "nodes in ORT",
            ),
            [
                (
                    r["name"],
                    f"{r['eager_us']:.0f}",
                    f"{r['ortlab_us']:.0f}",
                    f"{r['bare_ort_us']:.0f}",
                    f"{r['dynamo_entry_us']:.0f}",
                    f"{r['dynamo_entry_after_ort_us']:.0f}",
                    f"{r['floor_us']:.0f}",
                    f"{_rest_us(r):.0f}",
                    f"{r['bare_ort_us'] / r['floor_us']:.2f}",
                    f"{r['summary']['partitions']} / {r['summary']['sessions']}",
                    f"{r['summary']['nodes_in_ort']}/{r['summary']['nodes']}",
                )
                for r in results
            ],
        ),
        "",
        "`bare ORT sessions` runs each session the call used, on the inputs it received, "
        "with the backend's zero-copy hand-off. `Dynamo entry` is the model compiled with a "
        "backend that runs nothing (compiled as ortlab.compile compiles, floats specialized): "
        "Dynamo's own price per call, with warm "
        "caches; `entry after ORT` is the same right after the floor ran (floor + entry, "
        "minus floor): its guards and frame then find the CPU caches full of the model's "
        "data, as in a real call. `floor` is the whole model exported once and run by one "
        "bare session. `ortlab − (entry after ORT + bare)` is what remains: ortlab's glue, "
        "the hand-off, eager ops, the runtimes sharing the cores. `bare / floor` is ONNX "
        "Runtime on ortlab's partitions against the whole-model export.",
        "",
    ]
    for r in results:
        lines += [f"## {r['name']}", ""]
        rows = [
            (
                layer,
                f"{us:.1f}",
                f"{r['share'][layer] * 100:.0f}%",
                f"{r['share'][layer] * r['ortlab_us']:.1f}",
            )
            for layer, us in sorted(r["layers"].items(), key=lambda kv: -kv[1])
        ]
        lines += [
            f"{r['calls']} calls; unprofiled median {r['ortlab_us']:.0f} µs per call, "
            f"{r['profiled_us']:.0f} µs under cProfile.",
            "",
            md(("layer", "profiled µs/call", "share", "est. µs/call"), rows),
            "",
            "Top functions by own time:",
            "",
            md(
                ("own µs/call", "layer", "function"),
                [(f"{t / r['calls'] * 1e6:.1f}", layer, fn) for t, layer, fn in r["top"]],
            ),
            "",
        ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--frozen", action="store_true", help="freeze_parameters=True")
    parser.add_argument("--out", default=str(Path(__file__).with_name("profile.md")))
    ns = parser.parse_args(argv)
    torch.set_num_threads(ns.threads)
    results = []
    for name in ns.models.split(","):
        print(f"profiling {name} ...", file=sys.stderr)
        with contextlib.redirect_stdout(sys.stderr):
            results.append(profile_model(name, calls=ns.calls, frozen=ns.frozen))
        _torch_private.reset_dynamo()
    markdown = to_markdown(results, threads=ns.threads, frozen=ns.frozen)
    Path(ns.out).write_text(markdown + "\n", encoding="utf-8")
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
