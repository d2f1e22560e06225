"""Command line: ``ortlab demo`` (``--corpus``: the corpus coverage), ``ortlab bench``
(``--corpus``: the corpus benchmark; ``--real-size``: real-size inference, training steps,
generation and a new process's first call), ``ortlab report``, ``ortlab conformance``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any


def _corpus_demo(args: argparse.Namespace) -> int:
    import torch

    from ortlab import _demo

    torch.set_num_threads(args.threads)
    print(
        f"ortlab corpus coverage — torch {torch.__version__}, {torch.get_num_threads()} "
        "threads",
        file=sys.stderr,
        flush=True,
    )
    # (no --inductor: corpus_coverage's default selection)
    chosen: dict[str, Any] = {} if args.inductor is None else {"inductor": args.inductor}
    if args.steps is not None:  # else corpus_coverage's default (_grads.TRAIN_STEPS)
        chosen["train_steps"] = args.steps
    rows, markdown, paths = _demo.corpus_coverage(
        args.models or None,
        out_dir=args.out,
        **chosen,
        timing=not args.no_timing,
        floor=not args.no_floor,
    )
    print(markdown)
    print(f"coverage: {paths[0]} and {paths[1]}")
    failed = [r for r in rows if r.failed]
    if failed:
        listed = ", ".join(f"{r.model} ({r.status})" for r in failed)
        print(f"FAILED: {listed}", file=sys.stderr)
        return 1
    return 0


def _demo(args: argparse.Namespace) -> int:
    import torch

    import ortlab.backend
    from ortlab import _demo

    if args.corpus:
        return _corpus_demo(args)
    torch.set_num_threads(args.threads)
    registry_s = ortlab.backend.warm_up()
    rows = _demo.run_demo(args.models or None, iters=args.iters)
    print(
        f"ortlab demo — torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"exporter registry built once in {registry_s:.2f} s (not in first-call times)"
    )
    print(_demo.format_table(rows))
    failed = [r.model for r in rows if not r.matches]
    if args.report:
        from ortlab import views

        os.makedirs(os.path.dirname(os.path.abspath(args.report)), exist_ok=True)
        path = views.report({r.model: r.backend for r in rows}, args.report)
        print(f"report: {path}")
        if args.notebook:
            from ortlab import _notebooks

            html = _notebooks.execute_to_html(
                args.notebook,
                os.path.join(
                    os.path.dirname(os.path.abspath(args.report)), "00_quickstart.html"
                ),
            )
            print(f"quickstart notebook: {html}")
    if failed:
        print(f"MISMATCH against eager: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


_DEFAULT = "default"
"""``--corpus`` given without a selection."""


def _names(text: str | None) -> list[str] | None:
    return [n.strip() for n in text.split(",") if n.strip()] if text else None


REAL_SIZE_PARTS = ("inference", "training", "generation", "first-call")
"""What ``ortlab bench --real-size`` runs, each written to its own file."""


def _real_size(args: argparse.Namespace) -> int:
    from ortlab.bench import _first_call, _generation, _realsize, _training

    parts = _names(args.real_size) or list(REAL_SIZE_PARTS)
    unknown = [p for p in parts if p not in REAL_SIZE_PARTS]
    if unknown:
        print(f"bench --real-size: unknown part(s) {unknown}; choose from {REAL_SIZE_PARTS}")
        return 2
    backends = _names(args.backends)
    by_model = {"inference": _realsize.run_realsize, "training": _training.run_training}
    for part in parts:
        if part in by_model:
            markdown = by_model[part](
                args.out,
                fast=args.fast,
                models=_names(args.models),
                backends=backends,
                threads=args.threads,
            )
        elif part == "first-call":
            markdown = _first_call.run_first_call(
                args.out, fast=args.fast, threads=args.threads
            )
        else:
            markdown = _generation.run_generation(
                args.out, fast=args.fast, backends=backends, threads=args.threads
            )
        print(markdown)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from ortlab.bench import _corpus, _zoo

    if args.real_size is not None:
        return _real_size(args)
    if args.corpus is not None:
        markdown = _corpus.run_corpus(
            args.out,
            selection=None if args.corpus == _DEFAULT else args.corpus,
            fast=args.fast,
            backends=_names(args.backends),
            threads=args.threads,
        )
        print(markdown)
        return 0
    markdown = _zoo.run_zoo(
        args.out,
        fast=args.fast,
        models=_names(args.models),
        backends=_names(args.backends),
        threads=args.threads,
        training=args.training,
    )
    print(markdown)
    return 0


def _report(args: argparse.Namespace) -> int:
    from ortlab import _demo, views

    rows = _demo.run_demo(args.models or None, iters=3)
    print(views.report({r.model: r.backend for r in rows}, args.path))
    return 0


def _conformance(args: argparse.Namespace) -> int:
    import torch

    from ortlab.backend import _conformance, _conformance_docs, _conformance_run

    torch.set_num_threads(args.threads)
    ops = _names(args.ops)
    out = args.out or (None if ops else _conformance.TABLE_FILE)
    settings = _conformance_run.Settings(
        ops=None if ops is None else tuple(ops),
        samples=args.samples,
        dtypes=tuple(_names(args.dtypes) or _conformance.DTYPES.values()),
        op_seconds=args.op_seconds,
        empty_apart=not args.file_empty,
    )
    print(
        f"ortlab conformance — torch {torch.__version__}, {settings.samples} samples per "
        f"OpInfo and dtype, {torch.get_num_threads()} thread(s)",
        file=sys.stderr,
        flush=True,
    )
    table = _conformance_run.generate(
        settings, progress=lambda line: print(line, file=sys.stderr, flush=True)
    )
    if out:
        _conformance_run.write(table, out, args.docs)
        print(f"table: {out}" + (f", docs: {args.docs}" if args.docs else ""))
    elif args.docs:
        _conformance_run.write(table, os.devnull, args.docs)
    else:
        for target in table.ops():
            for key, finding in sorted(table.rows[target].items()):
                print(f"{target} {key}: {finding.status} {finding.reason}".rstrip())
    print(_conformance_docs.summary(table))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ortlab`` command."""
    parser = argparse.ArgumentParser(prog="ortlab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="compile the model zoo, check it, print a table")
    demo.add_argument(
        "models",
        nargs="*",
        help="zoo model names (default: all); with --corpus, corpus models, families, "
        "'ci' or 'all'",
    )
    demo.add_argument(
        "--corpus",
        action="store_true",
        help="the coverage of the public-architecture corpus instead of the zoo: "
        "compile, outputs and decode step vs eager, gradients, first call, latency",
    )
    demo.add_argument("--out", default="reports", help="--corpus: folder of the md/json")
    demo.add_argument(
        "--inductor",
        default=None,
        help="--corpus: models whose inductor gradients are checked too ('ci', 'all', "
        "names, or 'none'; inductor compiles for 25-60 s per model; default: the ci "
        "subset, resnet18 and mobilenet_v2)",
    )
    demo.add_argument(
        "--steps",
        type=int,
        default=None,
        help="--corpus: SGD steps of the training check (default: the check's own, 10; "
        "0: no training)",
    )
    demo.add_argument(
        "--no-timing", action="store_true", help="--corpus: no latency measurement"
    )
    demo.add_argument("--no-floor", action="store_true", help="--corpus: no bare-ORT floor")
    demo.add_argument("--iters", type=int, default=20, help="timed calls per model")
    demo.add_argument("--threads", type=int, default=2, help="torch/ORT intra-op threads")
    demo.add_argument("--report", help="also write the HTML report of the zoo here")
    demo.add_argument(
        "--notebook", help="also execute this notebook to HTML beside the report"
    )
    demo.set_defaults(func=_demo)

    bench = sub.add_parser("bench", help="benchmark the zoo: eager/inductor/ortlab/ORT")
    bench.add_argument("--out", default="benchmarks", help="folder for results.md/json/png")
    bench.add_argument(
        "--fast",
        action="store_true",
        help="few iterations, a smoke run (and no inductor unless --backends names it)",
    )
    bench.add_argument(
        "--models", help="comma-separated zoo models (default: mlp,gelu_mlp,cnn,...)"
    )
    bench.add_argument(
        "--backends",
        help="comma-separated backends (default: eager,inductor,ortlab,ortlab-frozen,ort)",
    )
    bench.add_argument("--threads", type=int, default=2, help="torch/ORT intra-op threads")
    bench.add_argument("--training", action="store_true", help="time forward + backward")
    bench.add_argument(
        "--corpus",
        nargs="?",
        const=_DEFAULT,
        metavar="SELECTION",
        help="benchmark the public-architecture corpus instead of the zoo (writes "
        "corpus.md/json/png): without SELECTION the default set; or 'all', 'ci', a "
        "family, or comma-separated names",
    )
    bench.add_argument(
        "--real-size",
        nargs="?",
        const=",".join(REAL_SIZE_PARTS),
        metavar="PARTS",
        help="benchmark public checkpoints' sizes instead of the zoo: inference "
        "(realsize.md/json), training steps (training.md/json), generate() "
        "(generation.md/json) and a new process's first call (first-call: "
        "first_call.md/json); without PARTS all four, or comma-separated parts",
    )
    bench.set_defaults(func=_bench)

    report = sub.add_parser("report", help="write the zoo's HTML report")
    report.add_argument("path")
    report.add_argument("models", nargs="*")
    report.set_defaults(func=_report)

    conformance = sub.add_parser(
        "conformance",
        help="verify the ONNX translations against PyTorch's OpInfo samples in ONNX Runtime "
        "and write the conformance table",
    )
    conformance.add_argument(
        "--ops",
        help="comma-separated OpInfo names, e.g. add,nn.functional.nll_loss (default: all)",
    )
    conformance.add_argument(
        "--samples", type=int, default=3, help="samples per OpInfo and dtype (default 3)"
    )
    conformance.add_argument(
        "--dtypes",
        help="comma-separated dtypes (default: float32,float16,bfloat16,int64,bool)",
    )
    conformance.add_argument(
        "--out",
        help="where the table's JSON goes (default: the package's conformance.json for a "
        "run of every op; with --ops, nothing is written unless given)",
    )
    conformance.add_argument("--docs", help="also write the markdown report here")
    conformance.add_argument(
        "--op-seconds",
        type=float,
        default=90.0,
        help="an OpInfo still sampling after this long is cut short (default 90)",
    )
    conformance.add_argument(
        "--file-empty",
        action="store_true",
        help="file node calls with an empty tensor input under their key too (default: "
        "apart, in the table's meta)",
    )
    conformance.add_argument(
        "--threads", type=int, default=1, help="torch/ORT intra-op threads (default 1)"
    )
    conformance.set_defaults(func=_conformance)

    args = parser.parse_args(argv)
    if args.command == "bench" and args.corpus is not None and (args.models or args.training):
        parser.error("bench --corpus takes no --models or --training (they are the zoo's)")
    if (
        args.command == "bench"
        and args.real_size is not None
        and (args.corpus is not None or args.training)
    ):
        parser.error("bench --real-size takes no --corpus or --training")
    if args.command == "demo" and args.corpus and (args.report or args.notebook):
        parser.error("demo --corpus writes its own files (--out); --report is the zoo's")
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
