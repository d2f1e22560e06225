"""Zero-copy execution of one ONNX Runtime session on torch tensors.

# NOTE: the cheapest torch <-> ORT hand-off measured on this stack (ORT's private
# pybind layer, reached through ``_ort_private``):
#
#   torch tensors --push_back_batch(data_ptr…)--> OrtValueVector        (no copy)
#   InferenceSession._sess.run_with_ortvaluevector(...)                  (ORT allocates)
#   OrtValueVector.to_dlpacks(torch.utils.dlpack.from_dlpack) --> torch  (no copy)
#
# Adjustments made around it: non-contiguous inputs are made contiguous; empty tensors
# (data_ptr 0, refused by push_back_batch) go through OrtValue one by one; Python
# scalars and SymInts become 0-d tensors of the dtype the model declares; a (1,)-shaped
# tensor feeding a 0-d input is reshaped; bool outputs (uint8 through DLPack) are cast
# back; outputs that Dynamo expects as Python scalars are ``.item()``-ed.
#
# Layouts: an output whose FX value is a dense tensor laid out in another dim order than
# contiguous (channels_last: NCHW values in NHWC memory) comes back with those strides,
# as eager returns it. The exported model ends such an output with a Transpose to its
# memory order (``_export``; the permutations are in the model's metadata, under
# :data:`MEMORY_ORDER_KEY`), and the runner returns ORT's tensor permuted back, over
# the same memory (:func:`over_memory`: not an autograd view):
#
#   ONNX:   Y [N,C,H,W] -> Transpose(0,2,3,1) -> output [N,H,W,C]   (contiguous)
#   torch:  output.permute(0,3,1,2): [N,C,H,W], strides (HWC,1,WC,C) (channels_last)
#
# Measured per call on a ResNet block (64 channels, two 3x3 convs, frozen weights, 2
# threads): batch 2, 28x28: 27-31 ms, where restriding a contiguous output with one copy
# took 44 ms (and the contiguous output alone, with the wrong strides, 20-25 ms); batch
# 8, 56x56: 163 ms, 215 with the copy, 148 without either.
#
# Reshapes: ORT copies a graph output that a Reshape (Squeeze, Unsqueeze, Flatten)
# produces, where inside the graph the same op shares its input's buffer. An output that
# ends in one is returned before it (``_export``; its ONNX shape in the metadata, under
# :data:`VIEW_KEY`) and viewed to the FX value's shape here: GPT-2's training step
# copied its [512, 50257] logits on every call.
#
# CUDA: ORT's CUDA provider runs on its own stream, so the stream that produced the
# inputs (torch's current one) is synchronized before ORT reads them; ORT synchronizes
# its own stream at the end of a run, so its outputs are ready for torch.
#
# CUDA graphs (``StaticBindingRunner``): ORT captures the kernels of the first runs and
# replays them, which requires the same device addresses on every run. Inputs are
# copied into buffers bound once through an IOBinding, and outputs are cloned out of
# the bound output buffers (the next replay overwrites them).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import onnx
import sympy
import torch
import torch.utils.dlpack

from ortlab.backend import _dtypes, _ort_private, _session, _torch_private

if TYPE_CHECKING:
    import onnxruntime


def onnx_elem_to_torch(elem_type: int) -> torch.dtype:
    """The torch dtype of an ONNX element type (see :mod:`ortlab.backend._dtypes`)."""
    return _dtypes.from_onnx(elem_type)


MEMORY_ORDER_KEY = "ortlab.output_memory_order"
"""Model metadata: a JSON object mapping the name of each graph output the model returns
in memory order to the permutation it applied (see the module NOTE). By name, so that a
copy of the model with more outputs (the lab's debug models) still reads right."""

_MAX_MEMORY_ORDER_RANK = 6


def memory_order(value: Any) -> tuple[int, ...] | None:
    """The permutation that lists a tensor's dims in memory order, outermost first
    (``(0, 2, 3, 1)`` for a channels_last NCHW tensor), when its layout is a dense
    permutation of a contiguous one; ``None`` when it is contiguous, not a tensor, or
    laid out otherwise (expanded, sliced...). Symbolic sizes and strides are compared as
    expressions, without adding guards."""
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
        return None
    rank = value.dim()
    if rank < 2 or rank > _MAX_MEMORY_ORDER_RANK:
        return None
    sizes, strides = tuple(value.shape), tuple(value.stride())
    for perm in itertools.permutations(range(rank)):  # the identity first
        if _dense_in_order(sizes, strides, perm):
            return None if perm == tuple(range(rank)) else perm
    return None


def _dense_in_order(sizes: Sequence[Any], strides: Sequence[Any], perm: Sequence[int]) -> bool:
    """Whether the strides are those of a contiguous tensor of the sizes taken in
    ``perm``'s order (a dim of size 1 may have any stride)."""
    expected: Any = 1
    for dim in reversed(perm):
        size = sizes[dim]
        if not (isinstance(size, int) and size == 1) and not _same(strides[dim], expected):
            return False
        expected = expected * size
    return True


def _same(a: Any, b: Any) -> bool:
    """Whether two sizes are equal as numbers or as expressions (no guard added)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    difference = _expression(a) - _expression(b)
    return bool(sympy.expand(difference) == 0)


def _expression(size: Any) -> Any:
    return size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(int(size))


def output_memory_orders(proto: onnx.ModelProto) -> tuple[tuple[int, ...] | None, ...]:
    """Per graph output of a model exported by ortlab, the permutation it was returned
    in (``None``: as the FX value's dims are); all ``None`` for a model without them."""
    orders: dict[str, list[int]] = {}
    for prop in proto.metadata_props:
        if prop.key == MEMORY_ORDER_KEY:
            orders = json.loads(prop.value)
    return tuple(
        tuple(orders[o.name]) if o.name in orders else None for o in proto.graph.output
    )


def over_memory(
    base: torch.Tensor, shape: Sequence[int], stride: Sequence[int] | None = None
) -> torch.Tensor:
    """A tensor over ``base``'s memory in ``shape`` (``stride``; contiguous by default)
    that is not an autograd view of it. The runner's outputs are read back this way (an
    output returned before its reshape, one in another memory order): in a training
    graph the runner runs inside AOTAutograd's autograd Function, and a view made there
    may not be written in place later (Longformer's training step raised "a view ...
    created inside a custom Function"). ``base`` is ORT's buffer, referenced nowhere
    else."""
    if stride is None:
        stride = torch.empty(tuple(shape), device="meta").stride()
    alias = torch.empty(0, dtype=base.dtype, device=base.device)
    offset = base.storage_offset()
    return alias.set_(base.untyped_storage(), offset, tuple(shape), tuple(stride))


VIEW_KEY = "ortlab.output_views"
"""Model metadata: a JSON object mapping the name of each graph output the model returns
before a final reshape to its shape in ONNX and the shape the runner views it to (the FX
value's; see ``_export._outputs_before_views``). By name, like
:data:`MEMORY_ORDER_KEY`."""


def output_views(
    proto: onnx.ModelProto,
) -> tuple[tuple[tuple[int, ...], tuple[int, ...]] | None, ...]:
    """Per graph output of a model exported by ortlab, ``(shape in ONNX, shape it is
    viewed to)`` where the model returns it before a final reshape (``None``: as is)."""
    shapes: dict[str, list[list[int]]] = {}
    for prop in proto.metadata_props:
        if prop.key == VIEW_KEY:
            shapes = json.loads(prop.value)
    return tuple(
        (tuple(shapes[o.name][0]), tuple(shapes[o.name][1])) if o.name in shapes else None
        for o in proto.graph.output
    )


def _inverse(perm: Sequence[int]) -> tuple[int, ...]:
    inverse = [0] * len(perm)
    for position, dim in enumerate(perm):
        inverse[dim] = position
    return tuple(inverse)


_MAX_CACHED_SCALARS = 64


class _InputSpec:
    """What one ONNX input expects, and how to check/convert an argument for it."""

    __slots__ = ("_scalars", "device", "dims", "dtype", "is_scalar_fx", "np_dtype", "rank")

    def __init__(self, value_info: onnx.ValueInfoProto, fx_value: Any, arg: Any) -> None:
        tensor_type = value_info.type.tensor_type
        self.dtype = onnx_elem_to_torch(tensor_type.elem_type)
        self.np_dtype = _dtypes.numpy_type(self.dtype)
        dims = tensor_type.shape.dim
        self.rank = len(dims)
        # None marks a symbolic dim: any size matches.
        self.dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in dims)
        self.is_scalar_fx = not isinstance(fx_value, torch.Tensor)
        # A session is bound to the devices of the inputs it was created for.
        self.device = arg.device if isinstance(arg, torch.Tensor) else torch.device("cpu")
        # 0-d tensors for Python scalars (SymInt sizes such as the batch size, .item()
        # results) seen before: torch.tensor(x) costs 10-40 us a call, a dict lookup well
        # under 1 us.
        # ORT never writes to its inputs, so sharing them between calls is safe.
        self._scalars: dict[tuple[type, Any], torch.Tensor] = {}

    def matches(self, arg: Any) -> bool:
        if isinstance(arg, torch.Tensor):
            if arg.dtype != self.dtype or arg.device != self.device:
                return False
            shape = arg.shape
            if len(shape) != self.rank:
                return self.rank == 0 and tuple(shape) == (1,)
            for size, dim in zip(shape, self.dims):
                if dim is not None and dim != size:
                    return False
            return True
        if isinstance(arg, bool):
            return self.rank == 0 and self.dtype == torch.bool
        if isinstance(arg, int):
            return self.rank == 0 and not self.dtype.is_floating_point
        if isinstance(arg, float):
            return self.rank == 0 and self.dtype.is_floating_point
        return False

    def convert(self, arg: Any) -> torch.Tensor:
        if isinstance(arg, torch.Tensor):
            if self.rank == 0 and arg.dim() == 1:
                arg = arg.reshape(())
            return arg if arg.is_contiguous() else arg.contiguous()
        # Floats are keyed by their exact bits: as dict keys -0.0 == 0.0 and nan != nan.
        key = (float, arg.hex()) if isinstance(arg, float) else (type(arg), arg)
        tensor = self._scalars.get(key)
        if tensor is None:
            if len(self._scalars) >= _MAX_CACHED_SCALARS:
                self._scalars.clear()
            tensor = self._scalars[key] = torch.tensor(arg, dtype=self.dtype)
        return tensor


def input_slots(count: int, frozen: Mapping[int, Any]) -> tuple[int, ...]:
    """Positions among a partition's ``count`` arguments that are ONNX inputs (the
    frozen ones are initializers)."""
    return tuple(i for i in range(count) if i not in frozen)


def _frozen_changed(check: tuple[int, torch.Tensor, int, int], args: Sequence[Any]) -> bool:
    """Whether the argument at a frozen position is no longer the frozen tensor as it was
    (another tensor, written in place, or its storage swapped by ``.data = ...``)."""
    index, tensor, version, data_ptr = check
    return (
        args[index] is not tensor
        or tensor._version != version
        or (tensor.data_ptr() != data_ptr)
    )


class OrtRunner:
    """Runs one session; holds everything precomputed for the per-call hot path."""

    def __init__(
        self,
        session: onnxruntime.InferenceSession,
        proto: onnx.ModelProto,
        *,
        input_fx_values: Sequence[Any],
        output_fx_values: Sequence[Any],
        args: Sequence[Any],
        frozen: dict[int, torch.Tensor],
        preallocate_output: bool,
        guaranteed: bool = False,
    ) -> None:
        self._sess = _ort_private.session_core(session)
        self.session = session
        self.input_names = tuple(i.name for i in proto.graph.input)
        self.output_names = tuple(o.name for o in proto.graph.output)
        # What a frozen tensor must still have for this session to serve it: its version
        # (in-place writes) and data pointer (``param.data = ...`` swaps the storage).
        self._frozen_checks = tuple(
            (i, t, t._version, t.data_ptr()) for i, t in sorted(frozen.items())
        )
        # Positions (among the partition's placeholders) that are ONNX inputs.
        self.slots = input_slots(len(input_fx_values), frozen)
        if len(self.slots) != len(self.input_names):
            raise ValueError(
                f"the ONNX model has {len(self.input_names)} inputs but the partition passes "
                f"{len(self.slots)}"
            )
        if len(self.output_names) != len(output_fx_values):
            raise ValueError(
                f"the ONNX model has {len(self.output_names)} outputs but the partition "
                f"returns {len(output_fx_values)}"
            )
        self.specs = tuple(
            _InputSpec(vi, input_fx_values[slot], args[slot])
            for vi, slot in zip(proto.graph.input, self.slots)
        )
        # Whether each call must check the arguments against the input schema. Not for a
        # session exported from the partition's own FX metadata (symbolic where Dynamo's
        # dims are): Dynamo's guards already hold every call's graph inputs to that
        # metadata (dtype, device, rank, static sizes), and the partition's inputs follow
        # from them. Only frozen tensors need checking then (they can change in place).
        self._check_schema = not guaranteed
        # How each ONNX input is made from its argument: a tensor of the declared rank
        # only needs to be contiguous; the rest (Python scalars, a (1,)-shaped tensor for
        # a 0-d input) goes through its spec.
        self._plan = tuple(
            (
                slot,
                spec,
                isinstance(input_fx_values[slot], torch.Tensor)
                and input_fx_values[slot].dim() == spec.rank,
            )
            for spec, slot in zip(self.specs, self.slots)
        )
        # Per-call constants, computed once (the hot path allocates only what it must).
        self._np_dtypes = [spec.np_dtype for spec in self.specs]
        self._ort_devices = [_ort_private.ort_device(spec.device) for spec in self.specs]
        views = output_views(proto)
        for vi, fx_value, view in zip(proto.graph.output, output_fx_values, views):
            self._check_output(vi, fx_value, viewed=view is not None)
        # Outputs ORT returns before a final reshape: (position, ONNX shape, FX shape).
        self._views = tuple(
            (i, *shapes) for i, shapes in enumerate(views) if shapes is not None
        )
        self.output_fx_values = tuple(output_fx_values)
        self._input_fx_values = tuple(input_fx_values)
        self.scalar_outputs = tuple(
            i for i, v in enumerate(output_fx_values) if not isinstance(v, torch.Tensor)
        )
        self.bool_outputs = tuple(
            i
            for i, vi in enumerate(proto.graph.output)
            if vi.type.tensor_type.elem_type == onnx.TensorProto.BOOL
        )
        # (output, input) pairs whose output ONNX Runtime may return in the input's memory.
        self._aliasing = aliasing_outputs(proto)
        devices = [
            v.device if isinstance(v, torch.Tensor) else torch.device("cpu")
            for v in output_fx_values
        ]
        self.output_devices = [_ort_private.ort_device(d) for d in devices]
        # Outputs ORT returns in memory order: (position, its permutation, the inverse).
        self._memory_orders = tuple(
            (i, perm, _inverse(perm))
            for i, perm in enumerate(output_memory_orders(proto))
            if perm is not None
        )
        self.output_torch_devices = devices
        self.preallocate_output = preallocate_output
        self.run_options = _ort_private.run_options()
        # After an outsized run, the next one gives the arena's free memory back.
        self._shrinking_options = _ort_private.run_options(shrink_arenas=_arenas(devices))
        self._typical_output_bytes: int | None = None
        self._shrink_next = False
        self.record: Any = None
        """The SessionRecord describing this session (set by the partition)."""
        self.keep_last_inputs = False
        """Keep the tensors of the last run's ONNX inputs in ``last_inputs`` (inference
        partitions: what ``SessionRecord.save`` writes)."""
        self.fused = False
        """The model was rewritten with ONNX Runtime's fused operators (set by the
        partition, which replaces it by the unfused model if a run fails)."""
        self.regrow: Callable[[], OrtRunner] | None = None
        """Set on a session given one thread for its short first runs: makes the same
        session with more threads, for when its runs grow long (larger inputs)."""
        self.last_inputs: list[torch.Tensor] = []
        self._device_cache: dict[torch.device, Any] = {}
        # CUDA devices of the inputs: their current streams are synchronized before a run.
        self._cuda_devices = tuple(
            dict.fromkeys(s.device for s in self.specs if s.device.type == "cuda")
        )

    @staticmethod
    def _check_output(
        value_info: onnx.ValueInfoProto, fx_value: Any, *, viewed: bool = False
    ) -> None:
        """Refuse a model whose outputs would not be what PyTorch expects (never a wrong
        number): dtype and rank must agree with the FX graph's metadata (the rank does
        not for an output returned before a reshape: ``viewed``)."""
        elem = value_info.type.tensor_type.elem_type
        dtype = onnx_elem_to_torch(elem)
        if isinstance(fx_value, torch.Tensor):
            expected = fx_value.dtype
            rank = len(value_info.type.tensor_type.shape.dim)
            if (
                not viewed
                and value_info.type.tensor_type.HasField("shape")
                and rank != fx_value.dim()
            ):
                raise ValueError(
                    f"output {value_info.name!r} has rank {rank} in ONNX but {fx_value.dim()} "
                    "in PyTorch"
                )
        else:
            return  # Python scalars are converted with .item()
        if dtype != expected:
            raise ValueError(
                f"output {value_info.name!r} is {dtype} in ONNX but {expected} in PyTorch"
            )

    def matches(self, args: Sequence[Any]) -> bool:
        """Whether this session serves these partition arguments: its frozen tensors are
        unchanged and (unless Dynamo's guards already ensure it) the arguments have its
        input schema."""
        # Hot path: plain loops, early exits, _frozen_changed inlined.
        for index, tensor, version, data_ptr in self._frozen_checks:
            if (
                args[index] is not tensor
                or tensor._version != version
                or tensor.data_ptr() != data_ptr
            ):
                return False
        if self._check_schema:
            for spec, slot in zip(self.specs, self.slots):
                if not spec.matches(args[slot]):
                    return False
        return True

    def stale_frozen(self, args: Sequence[Any]) -> tuple[int, ...]:
        """Frozen positions whose tensor in ``args`` is the frozen one changed in place, or
        another tensor: this session will never serve those arguments again."""
        return tuple(check[0] for check in self._frozen_checks if _frozen_changed(check, args))

    def _device(self, device: torch.device) -> Any:
        d = self._device_cache.get(device)
        if d is None:
            d = self._device_cache[device] = _ort_private.ort_device(device)
        return d

    def _input_vector(
        self, tensors: list[torch.Tensor], dtypes: list[Any] | None = None, devices: Any = None
    ) -> Any:
        vec = _ort_private.value_vector()
        vec.reserve(len(tensors))
        if dtypes is None:
            dtypes = [_dtypes.numpy_type(t.dtype) for t in tensors]
            devices = [self._device(t.device) for t in tensors]
        pointers = [t.data_ptr() for t in tensors]
        if None in dtypes or (0 in pointers and any(t.numel() == 0 for t in tensors)):
            # One by one: an empty tensor (no memory to point at; push_back_batch refuses
            # data pointer 0) is allocated by ONNX Runtime, a dtype numpy lacks
            # (bfloat16) crosses through DLPack.
            for t, dtype, device in zip(tensors, dtypes, devices):
                if t.numel() == 0:
                    empty = _ort_private.empty_ortvalue(
                        t.shape, _dtypes.onnx_type(t.dtype), t.device
                    )
                    vec.push_back(empty)
                elif dtype is None:
                    vec.push_back(_ort_private.ortvalue_from_dlpack(t))
                else:
                    vec.push_back_batch([t], [t.data_ptr()], [dtype], [t.shape], [device])
            return vec
        vec.push_back_batch(tensors, pointers, dtypes, [t.shape for t in tensors], devices)
        return vec

    def _output_shapes(self, args: Sequence[Any]) -> list[tuple[int, ...]] | None:
        """Concrete output shapes from the FX metadata, binding input symbols to sizes."""
        bindings: dict[Any, int] = {}
        for slot in self.slots:
            arg = args[slot]
            fx = self._input_fx_values[slot]
            if isinstance(fx, torch.Tensor) and isinstance(arg, torch.Tensor):
                for dim, size in zip(fx.shape, arg.shape):
                    if isinstance(dim, torch.SymInt):
                        bindings[dim.node.expr] = int(size)
            elif isinstance(fx, torch.SymInt):
                bindings[fx.node.expr] = int(arg)
        shapes = []
        for value in self.output_fx_values:
            if not isinstance(value, torch.Tensor):
                return None
            shape = []
            for dim in value.shape:
                if isinstance(dim, torch.SymInt):
                    expr = dim.node.expr
                    if not isinstance(expr, int):
                        expr = expr.xreplace(bindings)
                        if not expr.is_number:
                            return None  # e.g. an unbacked (data-dependent) size
                    shape.append(int(expr))
                else:
                    shape.append(int(dim))
            shapes.append(tuple(shape))
        return shapes

    def physical_shapes(self, shapes: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """The shapes of ORT's outputs for outputs of these (FX) shapes: those returned
        in memory order have their dims in that order."""
        physical = list(shapes)
        for i, perm, _ in self._memory_orders:
            physical[i] = tuple(shapes[i][d] for d in perm)
        for i, shape, _ in self._views:
            physical[i] = shape
        return physical

    def _sync_inputs(self) -> None:
        """Waits for torch's pending work on the inputs' CUDA devices (ORT reads them on
        another stream)."""
        for device in self._cuda_devices:
            torch.cuda.current_stream(device).synchronize()

    def _note_output_size(self, results: Sequence[Any]) -> None:
        """Decides whether the next run shrinks the arena (see :data:`OUTSIZED_BYTES`);
        a few integer products per run."""
        size = sum(
            r.numel() * r.element_size() for r in results if isinstance(r, torch.Tensor)
        )
        typical = self._typical_output_bytes
        if typical is None:
            self._typical_output_bytes = size
            self._shrink_next = False
        else:
            self._shrink_next = size > max(4 * typical, typical + OUTSIZED_BYTES)

    def run(self, args: Sequence[Any]) -> list[Any]:
        """Runs the session on the partition's arguments; returns its outputs in order."""
        tensors = []
        for slot, spec, plain in self._plan:
            arg = args[slot]
            if plain:
                # ONNX Runtime reads the memory as the declared type. Dynamo's guards
                # hold graph inputs to it, but a value made in PyTorch between
                # partitions can differ from its fake tensor (prims.signbit: float32
                # fake, bool real), and would be read out of bounds.
                if arg.dtype is not spec.dtype:
                    raise TypeError(
                        f"partition input {slot} is {arg.dtype}, but the session was built "
                        f"for {spec.dtype} (its fake tensor's dtype)"
                    )
                tensors.append(arg if arg.is_contiguous() else arg.contiguous())
            else:
                tensors.append(spec.convert(arg))
        if self.keep_last_inputs:
            self.last_inputs = tensors
        inputs = self._input_vector(tensors, self._np_dtypes, self._ort_devices)
        if self._cuda_devices:
            self._sync_inputs()
        outputs = _ort_private.value_vector()
        prealloc = None
        if self.preallocate_output:
            try:
                shapes = self._output_shapes(args)
            except Exception:  # an expression we cannot evaluate: let ORT allocate
                shapes = None
            if shapes is not None:
                prealloc = [
                    torch.empty(shape, dtype=v.dtype, device=dev)
                    for shape, v, dev in zip(
                        self.physical_shapes(shapes),
                        self.output_fx_values,
                        self.output_torch_devices,
                    )
                ]
                outputs = self._input_vector(prealloc)
        self._sess.run_with_ortvaluevector(
            self._shrinking_options if self._shrink_next else self.run_options,
            self.input_names,
            inputs,
            self.output_names,
            outputs,
            self.output_devices,
        )
        if prealloc is not None:
            results: list[Any] = list(prealloc)
        else:
            results = outputs.to_dlpacks(torch.utils.dlpack.from_dlpack)
            for i in self.bool_outputs:  # DLPack carries ORT's bool tensors as uint8
                results[i] = results[i].view(torch.bool)
            self._note_output_size(results)
        for i, j in self._aliasing:
            # ORT handed back an input's buffer: ours may be a temporary contiguous copy
            # (freed below), the caller's may change later. The output gets its own.
            if results[i].data_ptr() == tensors[j].data_ptr():
                results[i] = results[i].clone()
        for i, _, shape in self._views:
            results[i] = over_memory(results[i], shape)
        for i, _, inverse in self._memory_orders:
            order = results[i].permute(inverse)  # its shape and strides only
            results[i] = over_memory(results[i], order.shape, order.stride())
        for i in self.scalar_outputs:
            results[i] = results[i].item()
        # Keep the inputs alive until ORT is done with their memory.
        del tensors
        return results


_ALIASING_OPS = frozenset({"Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten"})
"""ONNX Runtime's CPU kernels of these ops may return their input's buffer (their kernel
definitions declare the alias)."""


def aliasing_outputs(proto: onnx.ModelProto) -> tuple[tuple[int, int], ...]:
    """``(output position, input position)`` of the outputs that are a graph input, or
    reach one through ops that may return their input's memory (:data:`_ALIASING_OPS`):
    ONNX Runtime may return them in that input's buffer. A one-node model of ``t`` on a
    1-D tensor is its input, and the runtime's temporary contiguous copy of a strided
    input was freed under it (the conformance suite found outputs of 6.5e10)."""
    inputs = {vi.name: i for i, vi in enumerate(proto.graph.input)}
    producers = {out: node for node in proto.graph.node for out in node.output}
    pairs = []
    for position, vi in enumerate(proto.graph.output):
        name = vi.name
        while name not in inputs and name in producers:
            node = producers[name]
            if node.domain not in ("", "ai.onnx") or node.op_type not in _ALIASING_OPS:
                break
            name = node.input[0]
        if name in inputs:
            pairs.append((position, inputs[name]))
    return tuple(pairs)


OUTSIZED_BYTES = 64 * 2**20
"""A run whose outputs exceed the first run's by this much (and four times over) is
outsized: ONNX Runtime's arena grew for it and never shrinks by itself (1.2 GiB stayed
held after one 4M-row batch), so the next run gives the arena's free memory back."""


def _arenas(devices: Sequence[torch.device]) -> str:
    """The arena names of ``memory.enable_memory_arena_shrinkage`` for these devices."""
    names = {"cpu:0"}
    names.update(f"gpu:{d.index or 0}" for d in devices if d.type == "cuda")
    return ";".join(sorted(names))


_CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})


def static_binding_blocker(
    proto: onnx.ModelProto,
    output_fx_values: Sequence[Any],
    args: Sequence[Any],
    slots: Sequence[int],
    *,
    first_provider: str,
) -> str:
    """Why a session of ``proto`` cannot run as a CUDA graph ("" when it can): every ONNX
    input and output must be a CUDA tensor of static shape, with no control flow, and the
    session's first execution provider must be CUDA's."""
    graph = proto.graph
    for name, slot in zip((i.name for i in graph.input), slots):
        arg = args[slot]
        if not isinstance(arg, torch.Tensor):
            return f"input {name!r} is a Python scalar, not a CUDA tensor"
        if arg.device.type != "cuda":
            return f"input {name!r} is on {arg.device.type}, not CUDA"
    for value_info, fx_value in zip(graph.output, output_fx_values):
        if not isinstance(fx_value, torch.Tensor):
            return f"output {value_info.name!r} is a Python scalar, not a tensor"
        if fx_value.device.type != "cuda":
            return f"output {value_info.name!r} is on {fx_value.device.type}, not CUDA"
    for value_info in graph.input:
        dims = value_info.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            return (
                f"input {value_info.name!r} has symbolic dims; CUDA graphs need static "
                "shapes (torch.compile(dynamic=False) or "
                "OrtBackendOptions(dynamic_shapes=False))"
            )
        if any(d.dim_value == 0 for d in dims):
            return f"input {value_info.name!r} is empty"
    ops = sorted({n.op_type for n in graph.node} & _CONTROL_FLOW_OPS)
    if ops:
        return f"the model has control flow ({', '.join(ops)}), which CUDA graphs cannot hold"
    if first_provider != _session.CUDA:
        return f"the session's first execution provider is {first_provider}"
    return ""


class StaticBindingRunner(OrtRunner):
    """Runs a session through one IOBinding whose buffers never move (what ORT's CUDA
    graphs need): each call copies its activations into the bound input buffers (module
    state is bound where it lives) and returns copies of the bound output buffers.

    Only for sessions that :func:`static_binding_blocker` accepts (all tensors, static
    shapes); works on any device, CUDA graphs or not.
    """

    def __init__(
        self, session: onnxruntime.InferenceSession, proto: onnx.ModelProto, **kwargs: Any
    ) -> None:
        super().__init__(session, proto, **kwargs)
        shapes = self._output_shapes(kwargs["args"])
        if shapes is None:
            raise ValueError("the output shapes do not follow from the input shapes")
        if any(0 in shape for shape in shapes):
            raise ValueError("an output is empty (nothing to bind)")
        # Module state (parameters, buffers) keeps its address from call to call: it is
        # bound as it is, so weights are not copied on every call, and in-place updates
        # are seen. A call whose tensor lives elsewhere (e.g. after ``param.data = ...``)
        # does not match this runner, which is bound to the old address.
        self._in_buffers: list[torch.Tensor] = []
        copied, direct_checks = [], []
        for spec, slot in zip(self.specs, self.slots):
            arg = kwargs["args"][slot]
            if (
                _torch_private.is_module_state(arg)
                and arg.is_contiguous()
                and tuple(arg.shape) == spec.dims
            ):
                buffer = arg.detach()  # holds the storage, even after ``.data = ...``
                direct_checks.append((slot, buffer.data_ptr()))
            else:
                buffer = torch.empty(spec.dims, dtype=spec.dtype, device=spec.device)  # type: ignore[arg-type]
                copied.append((buffer, spec, slot))
            self._in_buffers.append(buffer)
        self._copied = tuple(copied)
        self._direct_checks = tuple(direct_checks)
        self._out_buffers = [
            torch.empty(shape, dtype=v.dtype, device=device)
            for shape, v, device in zip(
                self.physical_shapes(shapes), self.output_fx_values, self.output_torch_devices
            )
        ]
        binding = session.io_binding()
        for name, buffer in zip(self.input_names, self._in_buffers):
            _bind(binding, name, buffer, output=False)
        for name, buffer in zip(self.output_names, self._out_buffers):
            _bind(binding, name, buffer, output=True)
        self._binding = _ort_private.iobinding_core(binding)

    def matches(self, args: Sequence[Any]) -> bool:
        for slot, data_ptr in self._direct_checks:
            arg = args[slot]
            if not isinstance(arg, torch.Tensor) or arg.data_ptr() != data_ptr:
                return False
        return super().matches(args)

    def run(self, args: Sequence[Any]) -> list[Any]:
        for buffer, spec, slot in self._copied:
            buffer.copy_(spec.convert(args[slot]))
        if self.keep_last_inputs:
            self.last_inputs = self._in_buffers
        self._sync_inputs()
        self._sess.run_with_iobinding(self._binding, self.run_options)
        results = [buffer.clone() for buffer in self._out_buffers]
        for i, _, shape in self._views:
            results[i] = over_memory(results[i], shape)
        for i, _, inverse in self._memory_orders:
            order = results[i].permute(inverse)  # its shape and strides only
            results[i] = over_memory(results[i], order.shape, order.stride())
        return results


def _bind(
    binding: onnxruntime.IOBinding, name: str, tensor: torch.Tensor, *, output: bool
) -> None:
    """Binds ``tensor``'s memory to an input or output of ``binding`` (a dtype numpy
    lacks, bfloat16, as an OrtValue over that memory)."""
    element_type = _dtypes.numpy_type(tensor.dtype)
    if element_type is None:
        core = _ort_private.iobinding_core(binding)
        bind_value = core.bind_ortvalue_output if output else core.bind_ortvalue_input
        bind_value(name, _ort_private.ortvalue_from_dlpack(tensor))
        return
    bind = binding.bind_output if output else binding.bind_input
    bind(
        name,
        tensor.device.type,
        tensor.device.index or 0,
        element_type,
        tuple(tensor.shape),
        tensor.data_ptr(),
    )
