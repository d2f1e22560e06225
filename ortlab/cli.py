"""Command line: ``ortlab demo``, ``ortlab bench``, ``ortlab report``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


def _demo(args: argparse.Namespace) -> int:
    import torch

    import ortlab.backend
    from ortlab import _demo

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


def _names(text: str | None) -> list[str] | None:
    return [n.strip() for n in text.split(",") if n.strip()] if text else None


def _bench(args: argparse.Namespace) -> int:
    from ortlab.bench import _zoo

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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ortlab`` command."""
    parser = argparse.ArgumentParser(prog="ortlab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="compile the model zoo, check it, print a table")
    demo.add_argument("models", nargs="*", help="zoo model names (default: all)")
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
    bench.set_defaults(func=_bench)

    report = sub.add_parser("report", help="write the zoo's HTML report")
    report.add_argument("path")
    report.add_argument("models", nargs="*")
    report.set_defaults(func=_report)

    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
