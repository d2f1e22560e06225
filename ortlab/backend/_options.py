"""OrtBackendOptions: every knob of the ortlab backend, validated.

# NOTE: options are a frozen dataclass so that equal options can share one backend
# instance (``OrtBackend.get_cached_instance_for_options``). Sequences are normalised to
# tuples in ``__post_init__`` so that a dataclass and the dict made from it compare equal.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

from ortlab import errors
from ortlab.backend import _torch_private

MIN_OPSET = 18
"""Oldest opset torchlib's translations exist for (``TORCHLIB_OPSET`` in the exporter)."""
MAX_OPSET = 23
"""Newest opset the exporter targets (``torch.onnx._constants.ONNX_MAX_OPSET``)."""

if TYPE_CHECKING:
    import onnx
    import onnxruntime

OrtExecutionProvider = Union[str, tuple[str, Mapping[str, Any]]]  # noqa: UP007 (runtime alias)
"""An execution provider: a name, or a ``(name, provider_options)`` pair."""


def _normalize_providers(
    field: str, value: Sequence[OrtExecutionProvider] | None
) -> tuple[tuple[str, dict[str, Any]], ...] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise errors.UnsupportedOptionError(
            f"OrtBackendOptions.{field} must be a sequence of execution providers, e.g. "
            f'["CUDAExecutionProvider", ("CPUExecutionProvider", {{}})]; got {value!r}.'
        )
    out: list[tuple[str, dict[str, Any]]] = []
    for ep in value:
        if isinstance(ep, str):
            out.append((ep, {}))
        elif (
            isinstance(ep, (tuple, list))
            and len(ep) == 2
            and isinstance(ep[0], str)
            and (ep[1] is None or isinstance(ep[1], Mapping))
        ):
            out.append((ep[0], dict(ep[1] or {})))
        else:
            raise errors.UnsupportedOptionError(
                f"OrtBackendOptions.{field}: {ep!r} is not an execution provider; use a name "
                'like "CPUExecutionProvider" or a (name, options-dict) pair.'
            )
    return tuple(out)


def did_you_mean(name: str, choices: Sequence[str]) -> str:
    """``" Did you mean 'x'?"`` when a choice is close to ``name``, else ``""``."""
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.75)
    return f" Did you mean {close[0]!r} (for {name!r})?" if close else ""


def _resolve_op(op: Any) -> Any:
    """An ``excluded_ops`` entry as the op it names (an ``OpOverload`` or packet; a
    Python callable as given)."""
    if _torch_private.is_op_overload(op) or _torch_private.is_op_packet(op):
        return op
    if isinstance(op, str):
        try:
            return _torch_private.op_by_name(op)
        except LookupError as e:
            name = op.strip().removeprefix("torch.ops.").replace("::", ".")
            namespace = name.split(".", 1)[0] if "." in name else "aten"
            packet = ".".join(name.split(".")[:2])
            hint = did_you_mean(packet, _torch_private.op_names(namespace))
            raise errors.UnsupportedOptionError(
                f"OrtBackendOptions.excluded_ops: {op!r} names no op ({e}).{hint} Use an "
                "op's name ('aten.gelu', 'aten.add.Tensor') or the op itself "
                "(torch.ops.aten.gelu)."
            ) from None
    if callable(op) and not isinstance(op, type):
        return op  # a Python function Dynamo keeps in graphs (operator.getitem...)
    raise errors.UnsupportedOptionError(
        f"OrtBackendOptions.excluded_ops: {op!r} is not an op; use an op's name "
        "('aten.gelu'), an OpOverload (torch.ops.aten.gelu.default) or a packet "
        "(torch.ops.aten.gelu)."
    )


def _check_session_options(options: onnxruntime.SessionOptions) -> None:
    """Builds a one-node session with the user's ``SessionOptions``, so that settings
    ONNX Runtime refuses are reported when given, by name, not at a first call as
    ``InvalidArgument: SystemError : 2``."""
    import os

    for name in ("optimized_model_filepath", "profile_file_prefix"):
        path = getattr(options, name, "")
        directory = os.path.dirname(path) if path else ""
        if directory and not os.path.isdir(directory):
            raise errors.UnsupportedOptionError(
                f"OrtBackendOptions.ort_session_options.{name} = {path!r}: its directory "
                f"{directory!r} does not exist; ONNX Runtime refuses such session "
                "options. Create the directory or change the setting."
            )
    from ortlab.backend import _session

    try:
        _session.probe_session_options(options)
    except Exception as e:
        raise errors.UnsupportedOptionError(
            "OrtBackendOptions.ort_session_options: ONNX Runtime refuses these session "
            f"options ({errors.describe(e)}). Settings: "
            f"{_session.describe_session_options(options)}."
        ) from e


def _normalize_translations(
    value: Mapping[Any, Callable[..., Any]] | Sequence[Any] | None,
) -> tuple[tuple[Any, Callable[..., Any]], ...] | None:
    """``{op: function}`` as a tuple of pairs (so options stay hashable and comparable)."""
    if value is None:
        return None
    pairs = list(value.items()) if isinstance(value, Mapping) else value
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence):
        raise errors.UnsupportedOptionError(
            "OrtBackendOptions.custom_translations must be a dict {op: onnxscript "
            f"function}}, e.g. {{torch.ops.mylib.my_op.default: my_op_onnx}}; got {value!r}."
        )
    out = []
    for pair in pairs:
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise errors.UnsupportedOptionError(
                f"OrtBackendOptions.custom_translations: {pair!r} is not an (op, function) "
                "pair."
            )
        op, function = pair
        if not (_torch_private.is_op_overload(op) or _torch_private.is_op_packet(op)):
            raise errors.UnsupportedOptionError(
                f"OrtBackendOptions.custom_translations: key {op!r} is not a torch op; use "
                "an OpOverload such as torch.ops.mylib.my_op.default (or its packet)."
            )
        if not callable(function):
            raise errors.UnsupportedOptionError(
                f"OrtBackendOptions.custom_translations[{op}]: {function!r} is not an "
                "onnxscript function."
            )
        signature = getattr(function, "op_signature", None)
        if signature is not None and not getattr(signature, "outputs", True):
            # The exporter makes the call's outputs from the signature: without a return
            # type the ONNX node has none and the export fails far from the cause.
            raise errors.UnsupportedOptionError(
                f"OrtBackendOptions.custom_translations[{op}]: the onnxscript function "
                f"{getattr(function, 'name', function)!r} declares no outputs; annotate its "
                "return type, e.g. `def f(x: FLOAT, limit: float) -> FLOAT:`."
            )
        _check_arity(op, function)
        out.append((op, function))
    return tuple(out)


def _python_signature(function: Callable[..., Any]) -> inspect.Signature | None:
    """The Python signature of an onnxscript function (or a plain one); ``None`` when it
    has none to read."""
    target = getattr(function, "function", function)  # @onnxscript.script() wraps it
    try:
        return inspect.signature(target)
    except (TypeError, ValueError):
        return None


def _check_arity(op: Any, function: Callable[..., Any]) -> None:
    """A translation must take the op's arguments as its schema lists them (positional
    ones by position, keyword-only ones and defaults by name: ortlab passes defaults
    explicitly) and return as many values. Checked when the option is given, not at the
    first call."""
    overloads = (
        [getattr(op, name) for name in op.overloads()]
        if _torch_private.is_op_packet(op)
        else [op]
    )
    name = getattr(function, "name", getattr(function, "__name__", repr(function)))
    where = f"OrtBackendOptions.custom_translations[{op}]: {name!r}"
    signature = getattr(function, "op_signature", None)
    outputs = getattr(signature, "outputs", None)
    for overload in overloads:
        returns = len(overload._schema.returns)
        if outputs and returns and len(outputs) != returns:
            raise errors.UnsupportedOptionError(
                f"{where} returns {len(outputs)} value(s), but {overload._schema.name} "
                f"returns {returns}."
            )
    python = _python_signature(function)
    if python is None:
        return
    params = list(python.parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return
    names = {p.name for p in params}
    for overload in overloads:
        arguments = list(overload._schema.arguments)
        schema = f"{overload._schema.name}({', '.join(a.name for a in arguments)})"
        needs = [p for p in params if p.default is p.empty]
        if len(needs) > len(arguments):
            raise errors.UnsupportedOptionError(
                f"{where} requires {len(needs)} arguments, but {schema} passes at most "
                f"{len(arguments)}; its parameters must follow the op's schema."
            )
        positional = [a for a in arguments if not a.kwarg_only]
        if len(params) < len(positional):
            raise errors.UnsupportedOptionError(
                f"{where} takes {len(params)} argument(s), but {schema} passes up to "
                f"{len(positional)} by position; its parameters must follow the op's "
                "schema."
            )
        by_name = [
            a.name
            for a in arguments
            if a.kwarg_only or (a.has_default_value() and a.default_value is not None)
        ]
        missing = [n for n in by_name if n not in names]
        if missing:
            raise errors.UnsupportedOptionError(
                f"{where} has no parameter {missing[0]!r}, which {schema} passes by name; "
                "name the parameters as the op's schema does."
            )


@dataclasses.dataclass(frozen=True)
class OrtBackendOptions:
    """Options of :class:`~ortlab.OrtBackend` (the ``"ortlab"`` torch.compile backend).

    Example::

        opts = OrtBackendOptions(preferred_execution_providers=["CUDAExecutionProvider"])
        compiled = torch.compile(model, backend="ortlab", options=opts)
        # or, equivalently, options={"preferred_execution_providers": [...]}
    """

    preferred_execution_providers: Sequence[OrtExecutionProvider] | None = None
    """Execution providers tried first, before the ones inferred from devices. Each is a
    name (``"CUDAExecutionProvider"``) or a ``(name, provider_options)`` pair. A plugin
    provider (``"OpenVINOExecutionProvider"``, ``pip install 'ortlab[openvino]'``) runs
    CPU partitions (a CUDA partition keeps the CUDA provider): each session on it is
    checked against PyTorch and timed against ONNX Runtime's CPU provider on its first
    inputs, and the faster one runs it; float64 models stay on the CPU provider
    (``SessionRecord.provider_note`` says which, and why)."""

    infer_execution_providers: bool = True
    """Infer providers from the devices of the inputs (then of the graph's outputs):
    CUDA tensors select ``CUDAExecutionProvider``."""

    default_execution_providers: Sequence[OrtExecutionProvider] | None = None
    """Providers used when nothing is preferred or inferred. ``None`` means
    ``["CPUExecutionProvider"]``; CPU is always appended as the last resort."""

    preallocate_output: bool = False
    """Allocate output tensors in PyTorch and let ONNX Runtime write into them. Measured
    slower on CPU (ORT's arena reuses memory); useful to keep outputs in torch's allocator
    on GPU."""

    use_aot_autograd: bool = True
    """Lower through AOTAutograd (min-cut partitioning, ONNX-friendly decompositions) so
    training works and backward graphs run in ONNX Runtime. ``False``: the Dynamo graph is
    lowered to ATen without autograd; partitions then run in PyTorch whenever an input
    requires grad (inference only)."""

    dynamic_shapes: bool | None = None
    """``None``: keep exactly the dims Dynamo produced (``torch.compile(dynamic=...)``
    decides: by default static for the first shapes, symbolic for the sizes that changed
    once; with ``dynamic=True`` one ONNX model serves a whole batch sweep). ``False``:
    export each partition with the concrete shapes of the call (one session per input
    shape). ``True``: require symbolic dims; a graph Dynamo captured with static shapes
    is still run, with one warning saying to pass ``dynamic=True`` to ``torch.compile``
    (or ``ortlab.compile``)."""

    ort_session_options: onnxruntime.SessionOptions | None = None
    """``onnxruntime.SessionOptions`` used for every session, as given (their thread
    settings included). ``None``: ortlab's defaults (no spinning, threads from
    ``intra_op_threads``). Backends with this option set are never shared through the
    instance cache."""

    intra_op_threads: int | str = "auto"
    """ONNX Runtime's intra-op threads per CPU session (with ortlab's default session
    options). ``"auto"``: ``torch.get_num_threads()``, except for sessions whose run is
    short (under 2 ms): those are timed against a one-thread twin on their first inputs
    and the faster is kept (waking threads costs more than it saves on small ops).
    ``SessionRecord.threads`` and ``threads_note`` say what was chosen and why. An int
    fixes the count."""

    pre_ort_model_transforms: Sequence[Callable[[onnx.ModelProto], None]] | None = None
    """Callables applied in order to each exported ``onnx.ModelProto`` (in place) before
    ONNX Runtime sees it: the model after ONNX Runtime's fused operators (``ort_fusions``;
    turn those off to edit the unfused graph), which is then not checked against PyTorch
    (the transforms change it on purpose). With transforms, onnxscript's optimizer does
    not run on partitions without fusions: they see the translation's own constants and
    nodes. A transform that raises makes that partition run in PyTorch."""

    dump_path: str | None = None
    """Prefix ``P``: the n-th exported model is written to ``P{n}.onnx`` and its FX graph to
    ``P{n}.txt`` (n from 0, per backend). ``None``: environment variable
    ``ORTLAB_DUMP_PATH``, then ``ONNXRT_DUMP_PATH``; unset means no dump."""

    excluded_ops: Sequence[Any] = ()
    """Ops kept in PyTorch even when ONNX could run them: ``torch.ops.aten.gelu.default``,
    an overload packet (``torch.ops.aten.gelu``) or its name (``"aten.gelu"``,
    ``"aten::add.Tensor"``), resolved to the op when given (a name that is no op is an
    error, with the closest op name). Useful to study partitioning or to route around a
    provider bug."""

    freeze_parameters: bool = False
    """Inference graphs only: bake parameters and buffers into the ONNX model as
    initializers, so ONNX Runtime can constant-fold, pre-pack and fuse them and each call
    passes only activations (measured: the CNN's convolutions run ~1.4x faster in ORT).
    A frozen tensor that changes afterwards (in place, replaced, or its ``.data``
    swapped) makes the partition re-export on its next call; one that changed twice is
    passed as an input from then on. Writes that bypass PyTorch's version counter
    (through ``.data`` in place, or a numpy view) are not seen: leave this off for
    weights updated that way."""

    ort_fusions: bool | None = None
    """Rewrite inference partitions with ONNX Runtime's fused operators (attention, layer
    and RMS normalisation with the residual add before it, bias + GELU, rotary embeddings:
    onnxscript's ``ort_fusions``). ``None``: in partitions whose graph holds a pattern's
    first op (a Softmax, a normalisation, a GELU), where it measured 5-25% faster per call
    on the corpus's transformers, for 0.1-0.5 s more per session at its first call; the
    fused and unfused models are then timed on the first inputs and the faster runs
    (attention over many short windows, as in MobileViT and Swin, ran 12-18% slower
    fused). ``True``: fused in every inference partition, without timing; ``False``:
    never. Training graphs are never rewritten. A fused model's outputs on its first
    inputs are checked against the partition run in PyTorch; one that differs, or that
    ONNX Runtime refuses or cannot run (then or on later inputs), is replaced by the
    unfused one.
    ``SessionRecord.fusions`` and ``fusion_note`` say what happened."""

    opset_version: int | None = None
    """ONNX opset the partitions are exported with. ``None``: the exporter's default (that
    of ``torch.onnx.export``, 20 on torch 2.13), whose translations use newer fused ops
    such as ``Gelu``. Lower it (down to 18, the oldest torchlib supports) when the models
    must load in an older ONNX Runtime."""

    cuda_graphs: bool = False
    """Replay each CUDA partition as a CUDA graph (ONNX Runtime's ``enable_cuda_graph``):
    kernel launches cost one graph launch per call. Applies to sessions whose inputs
    and outputs are all CUDA tensors of static shape and whose nodes all run on the CUDA
    provider. Activations are copied into buffers bound once, parameters and buffers of
    the module are bound where they live (no copy; in-place updates are seen), and the
    outputs are copied out, so results stay valid after the next call. Where it cannot
    apply (CPU inputs, symbolic dims, Python scalars, control flow, ORT refusing), the
    session runs normally and ``SessionRecord.cuda_graph_note`` says why."""

    strict: bool = False
    """Raise :class:`~ortlab.errors.CompileError` when a step of ortlab's compile fails
    (lowering, export, session creation, a run) instead of recording the failure and
    running that graph or partition in PyTorch. For CI and for debugging ortlab itself;
    nodes without an ONNX translation are not failures and still run in PyTorch."""

    compile_cache: bool | str | None = None
    """Keep each partition's ONNX model and what was decided for it (fusions, threads)
    on disk, so that a new process does not export, fuse, check and time it again.
    ``None`` / ``True``: in ``$ORTLAB_CACHE_DIR`` (``off`` there turns it off), else
    ``~/.cache/ortlab/compile`` (2 GiB at most, the oldest-used evicted;
    ``ortlab.clear_cache()`` empties it); a string: that directory; ``False``: no cache.
    The key pins the partition's graph and inputs, the frozen weights' bytes, the options
    and providers, the versions of torch, onnx, onnxscript and onnxruntime, and the
    machine; an entry that does not check out is rebuilt, never run."""

    keep_last_run: bool = False
    """Keep each inference session's last inputs and outputs on its record
    (``SessionRecord.last_inputs`` / ``last_outputs``), for ``SessionRecord.save``. Off by
    default: they hold a whole batch (and its outputs) alive until the next call;
    ``%ortcompile`` turns it on."""

    min_partition_size: int = 1
    """Partitions with fewer ``call_function`` nodes than this stay in PyTorch (their
    verdicts say so): a tiny partition between two eager ops can cost more in the
    torch <-> ONNX Runtime hand-off than it saves."""

    custom_translations: (
        Mapping[Any, Callable[..., Any]] | Sequence[tuple[Any, Callable[..., Any]]] | None
    ) = None
    """ONNX translations for ops the exporter has none for (a custom op, say), as
    ``{op: onnxscript_function}``: ``op`` is an ``OpOverload``
    (``torch.ops.mylib.soft_clip.default``) or packet, ``onnxscript_function`` an
    ``@onnxscript.script()`` function (or a Python function building the graph with
    onnxscript ops) taking the op's arguments. They are added to this backend's copy of
    the exporter's registry, so those nodes can run in ONNX Runtime. Annotate the
    function's inputs and return type (``def f(x: FLOAT, limit: float) -> FLOAT``) and
    define it at module level: onnxscript resolves the annotations in the module's
    globals. Checked when given against the op's schema: the function takes its
    arguments (those with defaults by the schema's names) and returns as many values.
    Stored as a tuple of ``(op, function)`` pairs."""

    def replace(self, **changes: Any) -> OrtBackendOptions:
        """A copy with ``changes`` applied, validated like the constructor.

        Raises:
            UnsupportedOptionError: a key is not an option, or a value is invalid.
        """
        merged = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        merged.update(changes)
        return OrtBackendOptions.from_value(merged)

    def __post_init__(self) -> None:
        for name in ("preferred_execution_providers", "default_execution_providers"):
            object.__setattr__(self, name, _normalize_providers(name, getattr(self, name)))
        for name in (
            "infer_execution_providers",
            "preallocate_output",
            "use_aot_autograd",
            "freeze_parameters",
            "cuda_graphs",
            "strict",
            "keep_last_run",
        ):
            if not isinstance(getattr(self, name), bool):
                raise errors.UnsupportedOptionError(
                    f"OrtBackendOptions.{name} must be True or False; "
                    f"got {getattr(self, name)!r}."
                )
        opset = self.opset_version
        if opset is not None and (
            isinstance(opset, bool)
            or not isinstance(opset, int)
            or not MIN_OPSET <= opset <= MAX_OPSET
        ):
            raise errors.UnsupportedOptionError(
                f"OrtBackendOptions.opset_version must be None (the exporter's default) or "
                f"an int from {MIN_OPSET} to {MAX_OPSET}; got {opset!r}."
            )
        if self.ort_fusions is not None and not isinstance(self.ort_fusions, bool):
            raise errors.UnsupportedOptionError(
                "OrtBackendOptions.ort_fusions must be None (where the graph has patterns "
                f"to fuse), True or False; got {self.ort_fusions!r}."
            )
        if self.dynamic_shapes not in (None, True, False):
            raise errors.UnsupportedOptionError(
                f"OrtBackendOptions.dynamic_shapes must be None, True or False; "
                f"got {self.dynamic_shapes!r}."
            )
        transforms = self.pre_ort_model_transforms
        if transforms is not None:
            if callable(transforms) or not isinstance(transforms, Sequence):
                raise errors.UnsupportedOptionError(
                    "OrtBackendOptions.pre_ort_model_transforms must be a sequence of "
                    f"callables (onnx.ModelProto) -> None; got {transforms!r}."
                )
            for t in transforms:
                if not callable(t):
                    raise errors.UnsupportedOptionError(
                        f"OrtBackendOptions.pre_ort_model_transforms: {t!r} is not callable."
                    )
            object.__setattr__(self, "pre_ort_model_transforms", tuple(transforms))
        cache = self.compile_cache
        if cache is not None and not isinstance(cache, (bool, str)):
            raise errors.UnsupportedOptionError(
                "OrtBackendOptions.compile_cache must be None (the default directory), "
                f"True, False or a directory; got {cache!r}."
            )
        if self.dump_path is not None and not isinstance(self.dump_path, str):
            raise errors.UnsupportedOptionError(
                f"OrtBackendOptions.dump_path must be a string prefix; got {self.dump_path!r}."
            )
        if self.ort_session_options is not None:
            import onnxruntime

            if not isinstance(self.ort_session_options, onnxruntime.SessionOptions):
                raise errors.UnsupportedOptionError(
                    "OrtBackendOptions.ort_session_options must be an "
                    f"onnxruntime.SessionOptions; got {type(self.ort_session_options)!r}."
                )
            _check_session_options(self.ort_session_options)
        threads = self.intra_op_threads
        if threads != "auto" and (
            isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
        ):
            raise errors.UnsupportedOptionError(
                'OrtBackendOptions.intra_op_threads must be "auto" or an int >= 1; '
                f"got {threads!r}."
            )
        if threads != "auto" and self.ort_session_options is not None:
            raise errors.UnsupportedOptionError(
                "OrtBackendOptions.intra_op_threads applies to ortlab's default session "
                "options; with ort_session_options given, set intra_op_num_threads on "
                "those instead."
            )
        excluded = self.excluded_ops
        if isinstance(excluded, str) or not isinstance(excluded, Sequence):
            excluded = (excluded,)
        object.__setattr__(self, "excluded_ops", tuple(_resolve_op(op) for op in excluded))
        size = self.min_partition_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise errors.UnsupportedOptionError(
                "OrtBackendOptions.min_partition_size must be an int >= 1 (nodes per "
                f"partition); got {size!r}."
            )
        object.__setattr__(
            self, "custom_translations", _normalize_translations(self.custom_translations)
        )

    @classmethod
    def from_value(
        cls, value: OrtBackendOptions | Mapping[str, Any] | None
    ) -> OrtBackendOptions:
        """Options from an instance, a dict of field names, or ``None`` (defaults).

        Raises:
            UnsupportedOptionError: a dict key is not an option (the message lists them).
        """
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            valid = [f.name for f in dataclasses.fields(cls)]
            unknown = sorted(str(k) for k in value if k not in valid)
            if unknown:
                hints = "".join(did_you_mean(name, valid) for name in unknown)
                raise errors.UnsupportedOptionError(
                    f"Unknown ortlab option(s) {', '.join(map(repr, unknown))}.{hints} "
                    f"Valid options: {', '.join(valid)}."
                )
            return cls(**value)
        raise errors.UnsupportedOptionError(
            "ortlab options must be an OrtBackendOptions, a dict or None; "
            f"got {type(value)!r}."
        )
