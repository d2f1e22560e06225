"""ONNX's test-data layout: a model with inputs and expected outputs, runnable elsewhere.

# NOTE: the layout is the one of ONNX's backend tests, which ``onnx_test_runner`` (ONNX
# Runtime's test tool) and any ONNX backend test harness read:
#
#   <dir>/model.onnx
#   <dir>/test_data_set_0/input_0.pb, input_1.pb, …    TensorProto, named as the graph
#   <dir>/test_data_set_0/output_0.pb, …               inputs / outputs they belong to
#
# Frozen initializers stay in the model (they are part of it); Python scalars become 0-d
# tensors of the dtype the model declares for them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import onnx

DATA_SET = "test_data_set_0"
MODEL_FILE = "model.onnx"


def _array(value: Any, value_info: onnx.ValueInfoProto) -> np.ndarray:
    import numpy as np
    import onnx
    import torch

    if isinstance(value, torch.Tensor):
        tensor = value.detach()
        if tensor.dtype == torch.bool:
            return tensor.cpu().numpy()
        return tensor.cpu().contiguous().numpy()
    dtype = onnx.helper.tensor_dtype_to_np_dtype(value_info.type.tensor_type.elem_type)
    return np.asarray(value, dtype=dtype)


def write_test_case(
    directory: str | os.PathLike[str],
    model: onnx.ModelProto,
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    *,
    readme: str | None = None,
) -> str:
    """Writes ``model`` and one data set (``inputs`` in the order of the model's graph
    inputs, ``outputs`` in the order of its graph outputs); returns the directory.

    Raises:
        ValueError: the counts do not match the model's inputs and outputs.
    """
    import onnx
    from onnx import numpy_helper

    graph = model.graph
    if len(inputs) != len(graph.input) or len(outputs) != len(graph.output):
        raise ValueError(
            f"the model has {len(graph.input)} inputs and {len(graph.output)} outputs; got "
            f"{len(inputs)} input and {len(outputs)} output values"
        )
    from ortlab.backend import _runtime

    # Outputs the model returns in memory order (channels_last...) or before a final
    # reshape are written as it returns them: the runner hands PyTorch a permuted view,
    # or a view of another shape, of them.
    orders = _runtime.output_memory_orders(model)
    outputs = [v if p is None else v.permute(p) for v, p in zip(outputs, orders)]
    views = _runtime.output_views(model)
    outputs = [v if s is None else v.reshape(s[0]) for v, s in zip(outputs, views)]
    data = os.path.join(os.fspath(directory), DATA_SET)
    os.makedirs(data, exist_ok=True)
    onnx.save_model(model, os.path.join(os.fspath(directory), MODEL_FILE))
    for prefix, infos, values in (
        ("input", graph.input, inputs),
        ("output", graph.output, outputs),
    ):
        for i, (info, value) in enumerate(zip(infos, values)):
            proto = numpy_helper.from_array(_array(value, info), info.name)
            with open(os.path.join(data, f"{prefix}_{i}.pb"), "wb") as f:
                f.write(proto.SerializeToString())
    if readme is not None:
        with open(os.path.join(os.fspath(directory), "README.md"), "w", encoding="utf-8") as f:
            f.write(readme)
    return os.fspath(directory)


def load_test_case(
    directory: str | os.PathLike[str],
) -> tuple[onnx.ModelProto, list[np.ndarray], list[np.ndarray]]:
    """Reads back what :func:`write_test_case` wrote: ``(model, inputs, outputs)``."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load_model(os.path.join(os.fspath(directory), MODEL_FILE))
    data = os.path.join(os.fspath(directory), DATA_SET)

    def read(prefix: str, count: int) -> list[np.ndarray]:
        arrays = []
        for i in range(count):
            proto = onnx.TensorProto()
            with open(os.path.join(data, f"{prefix}_{i}.pb"), "rb") as f:
                proto.ParseFromString(f.read())
            arrays.append(numpy_helper.to_array(proto))
        return arrays

    inputs = read("input", len(model.graph.input))
    return model, inputs, read("output", len(model.graph.output))


def rerun_instructions(directory: str | os.PathLike[str]) -> str:
    """How to run a saved test case again (for READMEs next to it)."""
    path = os.fspath(directory)
    return (
        f"Run it again with ONNX Runtime's test runner: `onnx_test_runner {path}`, or in "
        "Python:\n\n"
        "```python\n"
        "import onnxruntime\n"
        "from ortlab.backend import load_test_case\n"
        f"model, inputs, expected = load_test_case({path!r})\n"
        "session = onnxruntime.InferenceSession(model.SerializeToString())\n"
        "names = [i.name for i in session.get_inputs()]\n"
        "got = session.run(None, dict(zip(names, inputs)))\n"
        "```\n"
    )
