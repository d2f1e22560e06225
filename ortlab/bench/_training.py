"""The training-step benchmark: one SGD step at the sizes users train, eager vs inductor vs
ortlab (``ortlab bench --real-size training``, part of ``make bench``).

A step is what a training loop does: the forward with the model's own loss
(``model(**inputs, labels=y).loss``, the ``transformers`` class with its training head),
``loss.backward()``, ``optimizer.step()`` (plain SGD, run by PyTorch for every backend)
and ``optimizer.zero_grad()``. Each backend trains its own copy of the same weights;
the first step's loss is compared with eager's, every step is timed by the one timer
(:func:`ortlab.bench.measure`, interleaved), and ortlab's records say how many nodes of
its forward and backward graphs stayed in PyTorch.

The models (:data:`TRAINING_MODELS`): a 4-layer BERT (hidden 256) on 8x128 tokens with a
sequence-classification head, a ResNet-18 on 8 images of 112x112, a 6-layer GPT-2
(hidden 384) on 4x128 tokens with its language-model loss.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

import ortlab.backend
from ortlab import _closeness, errors
from ortlab.backend import _torch_private
from ortlab.bench import _backends, _engine, _format, _machine
from ortlab.zoo import _hf, _model

TRAINING_BACKENDS = ("eager", "inductor", "ortlab", _backends.ORTLAB_OPENVINO)
"""Backends of the training table (``fast``: without inductor; ``ortlab-openvino`` where
OpenVINO's plugin provider is installed)."""

_OURS = ("ortlab", _backends.ORTLAB_OPENVINO)

LEARNING_RATE = 1e-3
"""The SGD step size (no momentum, no weight decay)."""

TIMING: dict[str, Any] = dict(warmup=1, min_time=1.5, min_iters=5, max_iters=200)
_FAST_TIMING: dict[str, Any] = dict(warmup=1, min_time=0.02, min_iters=2, max_iters=5)


@dataclasses.dataclass(frozen=True)
class TrainingModel:
    """One row of the training table.

    Attributes:
        name: Short identifier, e.g. ``"bert-4l"``.
        description: The configuration and the batch, in a few words.
        build: ``build(tiny)`` returns the model with its training head (train mode,
            weights drawn under seed 0) and its keyword inputs, labels included.
    """

    name: str
    description: str
    build: Callable[[bool], tuple[nn.Module, dict[str, torch.Tensor]]]


class LossOf(nn.Module):
    """``(*inputs)`` -> ``net(**dict(zip(names, inputs))).loss``: the model's own loss,
    called with positional tensors (as every backend of :mod:`ortlab.bench` calls)."""

    def __init__(self, net: nn.Module, names: Sequence[str]) -> None:
        super().__init__()
        self.net = net
        self.names = tuple(names)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.net(**dict(zip(self.names, inputs, strict=True))).loss


def _trained(model_class: str, config: Mapping[str, Any]) -> nn.Module:
    def make() -> nn.Module:
        net_class = getattr(_hf.transformers(), model_class)
        return net_class(net_class.config_class(**config))

    return _model.seeded_build(make).train()


def _bert(tiny: bool) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    size = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4)
    size |= dict(intermediate_size=1024)
    if tiny:
        size = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2)
        size |= dict(intermediate_size=64, vocab_size=_hf.VOCAB)
    config = size | _hf.NO_DROPOUT | _hf.SINGLE_LABEL | dict(num_labels=3)
    config["attn_implementation"] = "sdpa"
    model = _trained("BertForSequenceClassification", config)
    batch, seq = (2, 16) if tiny else (8, 128)
    inputs = {
        "input_ids": _hf.token_ids(batch, seq, 600),
        "attention_mask": _hf.padding_mask(batch, seq),
        "labels": torch.randint(0, 3, (batch,), generator=_model.generator(_hf.LABEL_SEED)),
    }
    return model, inputs


def _resnet18(tiny: bool) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    size: dict[str, Any] = dict(layer_type="basic", embedding_size=64)
    size |= dict(hidden_sizes=[64, 128, 256, 512], depths=[2, 2, 2, 2], num_labels=1000)
    if tiny:
        size |= dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=10)
    model = _trained("ResNetForImageClassification", size | _hf.SINGLE_LABEL)
    batch, pixels = (2, 32) if tiny else (8, 112)
    labels = torch.randint(
        0, size["num_labels"], (batch,), generator=_model.generator(_hf.LABEL_SEED)
    )
    return model, {"pixel_values": _hf.images(601, pixels)(batch)[0], "labels": labels}


def _gpt2(tiny: bool) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    size: dict[str, Any] = dict(n_layer=6, n_embd=384, n_head=6)
    if tiny:
        size = dict(n_layer=1, n_embd=32, n_head=2, vocab_size=_hf.VOCAB, n_positions=64)
    config = size | dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    config["attn_implementation"] = "sdpa"
    model = _trained("GPT2LMHeadModel", config)
    batch, seq = (2, 16) if tiny else (4, 128)
    ids = _hf.token_ids(batch, seq, 602)
    return model, {"input_ids": ids, "labels": ids.clone()}


TRAINING_MODELS = (
    TrainingModel(
        "bert-4l",
        "BertForSequenceClassification, 4 layers, hidden 256, 8×128 tokens",
        _bert,
    ),
    TrainingModel(
        "resnet-18",
        "ResNetForImageClassification (ResNet-18), 8×112², 1000 classes",
        _resnet18,
    ),
    TrainingModel(
        "gpt2-6l",
        "GPT2LMHeadModel, 6 layers, hidden 384, 50k vocabulary, 4×128 tokens",
        _gpt2,
    ),
)
"""The models of the training table, in order."""


@dataclasses.dataclass(kw_only=True)
class TimedRow:
    """A row of a table timed by :func:`ortlab.bench.measure`: its median and p10-p90
    (ms) and calls, or why it failed; the load when its run started."""

    median_ms: float = math.nan
    p10_ms: float = math.nan
    p90_ms: float = math.nan
    iters: int = 0
    load_avg_1m: float | None = None
    error: str = ""

    def record(self, measurement: _engine.Measurement) -> bool:
        """Takes the statistics of ``measurement``; ``False`` when it failed."""
        if measurement.error is not None:
            self.error = measurement.error
            return False
        self.median_ms, self.p10_ms = measurement.median_ms, measurement.p10_ms
        self.p90_ms, self.iters = measurement.p90_ms, len(measurement.samples)
        return True

    def spread(self) -> str:
        """``"12.3 (11.9–13.0)"``, or ``"error"``."""
        if self.error:
            return "error"
        low, high = _format.fmt_ms(self.p10_ms), _format.fmt_ms(self.p90_ms)
        return f"{_format.fmt_ms(self.median_ms)} ({low}–{high})"


@dataclasses.dataclass
class TrainingRow(TimedRow):
    """What one backend measured on one model (a failure carries its error)."""

    model: str
    backend: str
    first_step_s: float = math.nan
    first_loss: float = math.nan
    """The loss of the first step (all backends start from the same weights)."""
    grad_error: float = math.nan
    """The first step's gradients against eager's (:func:`gradient_error`)."""
    forward_nodes: tuple[int, int] | None = None
    """ortlab: ``(nodes in PyTorch, nodes)`` of its forward graphs."""
    backward_nodes: tuple[int, int] | None = None
    """ortlab: ``(nodes in PyTorch, nodes)`` of its backward graphs."""
    partitions: tuple[int, int] | None = None
    """ortlab: partitions of its forward and of its backward graphs."""
    graphs: int | None = None


def _ortlab_counts(backend: ortlab.backend.OrtBackend, row: TrainingRow) -> None:
    """The eager nodes and partitions of ortlab's forward and backward graphs."""
    counts = {}
    parts = {}
    for kind in ("forward", "backward"):
        graphs = [g for g in backend.graphs if g.kind == kind]
        nodes = sum(g.node_count for g in graphs)
        in_ort = sum(len(g.ort_node_names) for g in graphs)
        counts[kind] = (nodes - in_ort, nodes)
        parts[kind] = sum(len(g.partitions) for g in graphs)
    row.forward_nodes, row.backward_nodes = counts["forward"], counts["backward"]
    row.partitions = (parts["forward"], parts["backward"])
    row.graphs = len(backend.graphs)


def make_train_step(
    call: Callable[..., torch.Tensor],
    target: nn.Module,
    args: tuple[torch.Tensor, ...],
    *,
    first_grads: list[torch.Tensor | None] | None = None,
) -> Callable[[], torch.Tensor]:
    """One SGD step of ``target`` through ``call``: forward with the loss, backward,
    ``optimizer.step()``, ``zero_grad()``; returns the loss (detached).

    Args:
        first_grads: Filled with a copy of each parameter's gradient (``None`` where it
            has none) by the first step.
    """
    optimizer = torch.optim.SGD(target.parameters(), lr=LEARNING_RATE)

    def step() -> torch.Tensor:
        loss = call(*args)
        loss.backward()
        if first_grads is not None and not first_grads:
            first_grads.extend(
                None if p.grad is None else p.grad.detach().clone()
                for p in target.parameters()
            )
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


GRADIENT_SCALE_FLOOR = 1e-3
"""A parameter's gradient error is relative to its largest eager gradient, or to this
fraction of the model's largest, whichever is larger: a gradient that is zero in exact
arithmetic (an attention key's bias) is rounding noise on both sides."""


def gradient_error(
    grads: Sequence[torch.Tensor | None], eager: Sequence[torch.Tensor | None]
) -> float:
    """The worst parameter's largest gradient difference from eager's, relative to its
    scale (see :data:`GRADIENT_SCALE_FLOOR`); a gradient on one side only is ``inf``."""
    scales = [0.0 if g is None or not g.numel() else float(g.abs().max()) for g in eager]
    floor = GRADIENT_SCALE_FLOOR * max(scales, default=0.0)
    worst = 0.0
    for ours, theirs, scale in zip(grads, eager, scales, strict=True):
        if ours is None or theirs is None:
            if ours is not theirs:
                return math.inf
            continue
        difference = _closeness.max_error(ours, theirs)
        if difference:
            worst = max(worst, difference / max(scale, floor) if scale or floor else math.inf)
    return worst


def bench_training_model(
    spec: TrainingModel, backends: Sequence[str], *, tiny: bool, **timing: Any
) -> list[TrainingRow]:
    """One model's training step under ``backends``: a row each (a failure is a row)."""
    rows = {b: TrainingRow(spec.name, b) for b in backends}
    try:
        net, inputs = spec.build(tiny)
    except Exception as e:
        for row in rows.values():
            row.error = errors.describe(e)
        return list(rows.values())
    model = LossOf(net, list(inputs))
    args = tuple(inputs.values())
    steps: dict[str, _engine.Step] = {}
    grads: dict[str, list[torch.Tensor | None]] = {}
    load = _machine.machine_facts().get("load_avg_1m")
    for backend, row in rows.items():
        row.load_avg_1m = load
        try:
            target = _backends.prepare_target(model, eval_mode=False)
            start = time.perf_counter()
            call, ortlab_backend = _backends.make_call(
                backend, target, args, training=True, dynamic=None, ortlab_options={}
            )
            grads[backend] = []
            step = make_train_step(call, target, args, first_grads=grads[backend])
            row.first_loss = float(step())
            row.first_step_s = time.perf_counter() - start
            if ortlab_backend is not None:
                _ortlab_counts(ortlab_backend, row)
            steps[backend] = step
        except Exception as e:  # a backend's failure is a row, never a crash
            row.error = errors.describe(e)
    if grads.get("eager"):
        for backend, theirs in grads.items():
            if theirs:
                rows[backend].grad_error = gradient_error(theirs, grads["eager"])
    grads.clear()
    measured = _engine.measure(steps, _engine.Timing(**timing))
    for backend, m in measured.items():
        rows[backend].record(m)
    return list(rows.values())


def _nodes_text(counts: tuple[int, int] | None) -> str:
    return "" if counts is None else f"{counts[0]} of {counts[1]}"


def training_markdown(
    rows: Sequence[TrainingRow], *, machine: Mapping[str, Any], fast: bool = False
) -> str:
    """The training report: a line per model (medians, ratios, gradients against eager's,
    what stayed eager), then a row per backend, the machine and the errors."""
    by_model: dict[str, dict[str, TrainingRow]] = {}
    for row in rows:
        by_model.setdefault(row.model, {})[row.backend] = row
    ours_run = [b for b in _OURS if any(b in runs for runs in by_model.values())]
    summary = []
    for name, runs in by_model.items():
        medians = {b: r.median_ms for b, r in runs.items() if not r.error}
        ours = runs.get("ortlab")
        eager_loss = runs["eager"].first_loss if "eager" in runs else math.nan

        def ratio(b: str, to: str, medians: dict[str, float] = medians) -> str:
            return _format.fmt_ratio(medians.get(b, math.nan) / medians.get(to, math.nan))

        summary.append(
            [
                name,
                *(
                    runs[b].spread() if b in runs else ""
                    for b in ("eager", "inductor", *ours_run)
                ),
                *(ratio(b, to) for b in ours_run for to in ("eager", "inductor")),
                *(
                    _format.fmt(runs[b].grad_error if b in runs else math.nan, "{:.1e}")
                    for b in ours_run
                ),
                _nodes_text(ours.forward_nodes if ours else None),
                _nodes_text(ours.backward_nodes if ours else None),
                ""
                if ours is None or ours.partitions is None
                else "{} / {}".format(*ours.partitions),
                _format.fmt(
                    abs((ours.first_loss if ours else math.nan) - eager_loss), "{:.1e}"
                ),
                _format.fmt(runs[next(iter(runs))].load_avg_1m or math.nan, "{:.2f}"),
            ]
        )
    described = [f"`{m.name}`: {m.description}" for m in TRAINING_MODELS if m.name in by_model]
    lines = ["# ortlab training steps", ""]
    if fast:
        lines += ["> **Fast mode**: tiny configurations, a smoke run, not a measurement.", ""]
    lines += [
        "One training step: forward with the model's own loss, `loss.backward()`, "
        f"`SGD(lr={LEARNING_RATE}).step()` and `zero_grad()` (the optimizer in PyTorch for "
        f"every backend); median ms per step with p10–p90, {machine.get('torch_threads')} "
        "threads, all backends of a model timed in one run, interleaved. "
        "`ortlab-openvino` is ortlab with OpenVINO's plugin provider preferred (each "
        "session on it or on the CPU provider, whichever was faster). `grad error`: the "
        "first step's gradients against eager's, the worst parameter's largest "
        "difference relative to its largest eager gradient (or to a thousandth of the "
        "model's largest, if larger). `eager nodes` are ortlab's "
        "ATen nodes that run in PyTorch, of all its forward (backward) graphs' nodes; "
        "`partitions` its ONNX Runtime partitions in forward / backward; `|Δ loss|` the "
        "first step's loss against eager's (same weights).",
        "",
        *(f"- {text}" for text in described),
        "",
        _format.markdown_table(
            [
                "model",
                "eager ms",
                "inductor ms",
                *(f"{b} ms" for b in ours_run),
                *(f"{b} / {to}" for b in ours_run for to in ("eager", "inductor")),
                *(f"grad error, {b}" for b in ours_run),
                "eager nodes, forward",
                "eager nodes, backward",
                "partitions",
                "|Δ loss|",
                "load",
            ],
            summary,
        ),
        "",
        "## First step",
        "",
        "Seconds: compile (forward and backward) + the first step.",
        "",
        _format.markdown_table(
            ["model", "backend", "first step (s)", "iters", "error"],
            [
                [r.model, r.backend, _format.fmt(r.first_step_s, "{:.1f}"), r.iters, r.error]
                for r in rows
            ],
        ),
        "",
        *_format.machine_section(machine),
    ]
    return "\n".join(lines)


def run_training(
    out_dir: str | os.PathLike[str],
    *,
    fast: bool = False,
    models: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
    threads: int = 2,
) -> str:
    """Times a training step of each model; writes ``training.md`` and ``training.json``.

    Args:
        out_dir: Folder for the results (created if missing).
        fast: Tiny configurations and a handful of steps (a smoke run); without
            ``backends``, also without inductor.
        models: Names of :data:`TRAINING_MODELS`; ``None``: all of them.
        backends: Backend names; ``None``: :data:`TRAINING_BACKENDS`.
        threads: torch and ONNX Runtime intra-op threads.

    Returns:
        The markdown written to ``training.md``.

    Raises:
        UnsupportedOptionError: an unknown model, or a floor (``"ort"``) among the
            backends (before anything runs).
    """
    known = {m.name: m for m in TRAINING_MODELS}
    for name in models or ():
        if name not in known:
            raise errors.UnsupportedOptionError(
                f"no training model {name!r}; choose from {list(known)}"
            )
    specs = [known[n] for n in models] if models is not None else list(TRAINING_MODELS)
    if backends is None:
        backends = tuple(
            b
            for b in TRAINING_BACKENDS
            if not (fast and b == "inductor")
            and not (
                b == _backends.ORTLAB_OPENVINO
                and _backends.OPENVINO_PROVIDER not in ortlab.backend.available_providers()
            )
        )
    backends = _backends.check_backends(backends)
    if any(b.startswith("ort") and not b.startswith("ortlab") for b in backends):
        raise errors.UnsupportedOptionError(
            "training: the ONNX Runtime floor is inference only."
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        machine = _machine.machine_facts()
        if any(b.startswith("ortlab") for b in backends):
            machine["exporter_warm_up_s"] = round(ortlab.backend.warm_up(), 2)
        timing = _FAST_TIMING if fast else TIMING
        rows = []
        with _engine.settled_heap() as settle:
            for spec in specs:
                _torch_private.reset_dynamo()  # the previous model's compiled code goes
                settle()
                rows += bench_training_model(spec, backends, tiny=fast, **timing)
    finally:
        torch.set_num_threads(old_threads)
    machine["transformers"] = _machine.version_of("transformers")
    if hasattr(os, "getloadavg"):
        machine["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    markdown = training_markdown(rows, machine=machine, fast=fast)
    (out / "training.md").write_text(markdown, encoding="utf-8")
    payload = {
        "machine": machine,
        "fast": fast,
        "rows": [
            {k: _format.json_value(v) for k, v in dataclasses.asdict(r).items()} for r in rows
        ],
    }
    (out / "training.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return markdown
