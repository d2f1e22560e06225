"""Writing exported models to disk for inspection (``dump_path`` / ``ORTLAB_DUMP_PATH``).

For a prefix ``P``, the n-th model exported by one backend is written to ``P{n}.onnx`` and
the FX graph it came from to ``P{n}.txt``, ``n`` counting from 0 per prefix.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ortlab import errors

if TYPE_CHECKING:
    import torch.fx


def dump_prefix(option: str | None) -> str | None:
    """The dump prefix from the option, else ORTLAB_DUMP_PATH, else ONNXRT_DUMP_PATH."""
    return option or os.environ.get("ORTLAB_DUMP_PATH") or os.environ.get("ONNXRT_DUMP_PATH")


class ModelDumper:
    """Numbers and writes the models of one backend (the counters are per prefix)."""

    def __init__(self) -> None:
        self._counters: dict[str, int] = {}

    def dump(
        self, model_bytes: bytes, graph_module: torch.fx.GraphModule, option: str | None
    ) -> tuple[str, ...]:
        """Writes one model and its FX graph; returns the files (none without a prefix)."""
        prefix = dump_prefix(option)
        if not prefix:
            return ()
        n = self._counters.get(prefix, -1) + 1
        self._counters[prefix] = n
        onnx_file, txt_file = f"{prefix}{n}.onnx", f"{prefix}{n}.txt"
        try:
            with open(onnx_file, "wb") as f:
                f.write(model_bytes)
            with open(txt_file, "w", encoding="utf-8") as f:
                f.write(str(graph_module.graph))
        except OSError as e:
            raise DumpFailed(
                f"dump_path {prefix!r}: could not write {onnx_file} ({errors.describe(e)}); "
                "the model runs, not dumped. Point OrtBackendOptions.dump_path (or "
                "ORTLAB_DUMP_PATH) at a writable directory's prefix."
            ) from e
        return onnx_file, txt_file


class DumpFailed(Exception):
    """A model could not be written where the dump path says (the message names it)."""
