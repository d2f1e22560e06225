"""Every private ONNX Runtime API ortlab uses, in one place.

# NOTE: the cheapest torch <-> ORT hand-off goes below ``InferenceSession``'s public
# Python API (measured per call on a 16-element model: ``sess.run`` with numpy 20 us,
# IOBinding 30 us, ``run_with_ort_values`` 133 us, this path 17 us, zero-copy both ways).
# It uses onnxruntime's pybind layer, which carries no stability promise; every use is
# reached through this module, and tests/test_ort_private.py pins each one:
#
#   onnxruntime.capi._pybind_state.OrtDevice        device descriptors for OrtValues
#   onnxruntime.capi._pybind_state.OrtValueVector   push_back_batch (torch data pointers,
#                                                   no copy), push_back, to_dlpacks
#   onnxruntime.capi._pybind_state.OrtValue         from_dlpack (dtypes numpy lacks:
#                                                   bfloat16), ortvalue_from_shape_and_
#                                                   onnx_type (empty tensors of those)
#   onnxruntime.capi._pybind_state.RunOptions
#   InferenceSession._sess                          run_with_ortvaluevector,
#                                                   run_with_iobinding
#   OrtValue._ortvalue, IOBinding._iobinding        the pybind objects behind the wrappers
#                                                   (bind_ortvalue_input/_output)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnxruntime
    import torch


def _pybind() -> Any:
    from onnxruntime.capi import _pybind_state

    return _pybind_state


def ort_device(device: torch.device) -> Any:
    """ORT's descriptor of a torch device (CUDA, CPU; anything else as an NPU)."""
    C = _pybind()
    if device.type == "cuda":
        kind = C.OrtDevice.cuda()
    elif device.type == "cpu":
        kind = C.OrtDevice.cpu()
    else:
        kind = C.OrtDevice.npu()
    return C.OrtDevice(kind, C.OrtDevice.default_memory(), device.index or 0)


def value_vector() -> Any:
    """An empty ``OrtValueVector`` (inputs by data pointer; outputs as DLPack)."""
    return _pybind().OrtValueVector()


def ortvalue_from_dlpack(tensor: torch.Tensor) -> Any:
    """A pybind OrtValue over ``tensor``'s memory (no copy), for dtypes ONNX Runtime's
    numpy-typed APIs cannot name (bfloat16). ``tensor`` must outlive the value."""
    import torch.utils.dlpack

    return _pybind().OrtValue.from_dlpack(torch.utils.dlpack.to_dlpack(tensor), False)


def empty_ortvalue(shape: Sequence[int], onnx_type: int, device: torch.device) -> Any:
    """A pybind OrtValue of ``shape`` and ONNX element type ``onnx_type`` allocated by
    ONNX Runtime on ``device`` (empty tensors, which have no torch memory to wrap)."""
    return _pybind().OrtValue.ortvalue_from_shape_and_onnx_type(
        list(shape), onnx_type, ort_device(device)
    )


def run_options(*, shrink_arenas: str = "") -> Any:
    """ORT's ``RunOptions`` as the pybind object the low-level run calls take.

    Args:
        shrink_arenas: Devices whose memory arenas give their free memory back to the
            system at the end of the run (``"cpu:0;gpu:0"``; run option
            ``memory.enable_memory_arena_shrinkage``). ``""``: none.
    """
    options = _pybind().RunOptions()
    if shrink_arenas:
        options.add_run_config_entry("memory.enable_memory_arena_shrinkage", shrink_arenas)
    return options


def session_core(session: onnxruntime.InferenceSession) -> Any:
    """The pybind session behind an ``InferenceSession`` (``run_with_ortvaluevector``,
    ``run_with_iobinding``)."""
    return session._sess


def ortvalue_core(value: onnxruntime.OrtValue) -> Any:
    """The pybind OrtValue behind an ``onnxruntime.OrtValue``."""
    return value._ortvalue


def iobinding_core(binding: onnxruntime.IOBinding) -> Any:
    """The pybind IOBinding behind an ``onnxruntime.IOBinding``."""
    return binding._iobinding
