"""OrtBackendOptions validation and the backend instance cache (seed 001's matrix)."""

from __future__ import annotations

import dataclasses

import onnxruntime
import onnxscript
import pytest
import torch
from onnxscript import FLOAT
from onnxscript import opset18 as op

import ortlab
from ortlab import OrtBackend, OrtBackendOptions


def test_options_are_frozen_and_documented():
    opts = OrtBackendOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.preallocate_output = True  # type: ignore[misc]
    source = open(ortlab.backend._options.__file__, encoding="utf-8").read()
    for field in dataclasses.fields(OrtBackendOptions):
        # Every field is followed by a docstring in the class body.
        assert f"{field.name}:" in source
        after = source.split(f"    {field.name}:", 1)[1]
        assert '"""' in after.split("\n\n", 1)[0], f"{field.name} has no docstring"


def test_unknown_dict_key_names_the_valid_options():
    with pytest.raises(ortlab.UnsupportedOptionError) as info:
        OrtBackendOptions.from_value({"use_aot_autograd": True, "prealocate_output": True})
    message = str(info.value)
    assert "'prealocate_output'" in message
    assert "preallocate_output" in message and "dump_path" in message


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"preferred_execution_providers": "CPUExecutionProvider"}, "sequence"),
        ({"preferred_execution_providers": [42]}, "42"),
        ({"use_aot_autograd": "yes"}, "use_aot_autograd"),
        ({"dynamic_shapes": "auto"}, "dynamic_shapes"),
        ({"ort_fusions": "auto"}, "ort_fusions must be None"),
        ({"ort_fusions": 1}, "ort_fusions"),
        ({"pre_ort_model_transforms": [1]}, "not callable"),
        ({"ort_session_options": {"threads": 1}}, "SessionOptions"),
        ({"dump_path": 3}, "dump_path"),
        ({"opset_version": 17}, "opset_version"),
        ({"opset_version": 24}, "from 18 to 23"),
        ({"opset_version": "20"}, "opset_version"),
        ({"opset_version": True}, "opset_version"),
        ({"strict": 1}, "strict"),
        ({"min_partition_size": 0}, "min_partition_size"),
        ({"min_partition_size": 2.5}, "min_partition_size"),
        ({"custom_translations": "aten.gelu"}, "dict"),
        ({"custom_translations": {"aten.gelu": print}}, "not a torch op"),
        ({"custom_translations": {torch.ops.aten.gelu.default: 3}}, "not an onnxscript"),
    ],
)
def test_bad_option_values_are_clear_errors(kwargs, needle):
    with pytest.raises(ortlab.UnsupportedOptionError, match=needle):
        OrtBackendOptions(**kwargs)


def test_providers_are_normalised_so_dicts_equal_dataclasses():
    opts = OrtBackendOptions(preferred_execution_providers=["A", ("B", {"x": 1}), ("C", None)])
    assert opts.preferred_execution_providers == (("A", {}), ("B", {"x": 1}), ("C", {}))
    assert OrtBackendOptions.from_value(dataclasses.asdict(opts)) == opts


CACHEABLE = [
    None,
    OrtBackendOptions(),
    OrtBackendOptions(use_aot_autograd=True),
    OrtBackendOptions(use_aot_autograd=False),
    OrtBackendOptions(preallocate_output=True),
    OrtBackendOptions(preallocate_output=False),
    OrtBackendOptions(infer_execution_providers=True),
    OrtBackendOptions(infer_execution_providers=False),
    OrtBackendOptions(preferred_execution_providers=["A", "B", "C"]),
    OrtBackendOptions(preferred_execution_providers=["A", "B", ("C", {"option": "value"})]),
    OrtBackendOptions(default_execution_providers=["Something"]),
    OrtBackendOptions(dynamic_shapes=True),
    OrtBackendOptions(use_aot_autograd=False, dynamic_shapes=True),
]


@pytest.mark.parametrize("options", CACHEABLE, ids=lambda o: repr(o)[:60])
def test_equal_options_share_one_cached_instance(options):
    assert not OrtBackend.get_cached_instances()
    first = OrtBackend.get_cached_instance_for_options(options)
    again = OrtBackend.get_cached_instance_for_options(options)
    assert again is first
    assert len(OrtBackend.get_cached_instances()) == 1
    as_dict = dataclasses.asdict(options) if options is not None else None
    assert OrtBackend.get_cached_instance_for_options(as_dict) is first


def test_session_options_are_never_shared():
    options = OrtBackendOptions(ort_session_options=onnxruntime.SessionOptions())
    first = OrtBackend.get_cached_instance_for_options(options)
    second = OrtBackend.get_cached_instance_for_options(options)
    assert first is not second
    assert first.options.ort_session_options is options.ort_session_options


def test_instance_cache_keeps_at_most_eight_evicting_the_oldest():
    backends = [
        OrtBackend.get_cached_instance_for_options({"dump_path": f"p{i}_"}) for i in range(10)
    ]
    cached = OrtBackend.get_cached_instances()
    assert len(cached) == 8
    assert cached == tuple(backends[2:])
    OrtBackend.clear_cached_instances()
    assert OrtBackend.get_cached_instances() == ()


def test_compile_accepts_dict_options_and_rejects_unknown_keys():
    compiled = torch.compile(
        lambda x: x.relu() + 1, backend="ortlab", options={"preallocate_output": True}
    )
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), x.relu() + 1)
    (backend,) = OrtBackend.get_cached_instances()
    assert backend.options.preallocate_output is True
    assert backend.execution_count == 1

    bad = torch.compile(lambda x: x + 1, backend="ortlab", options={"no_such_option": 1})
    with pytest.raises(Exception, match="no_such_option"):
        bad(x)


def test_custom_translation_without_a_return_type_is_refused_with_the_fix():
    @onnxscript.script()
    def unannotated(x):
        return op.Tanh(x)

    with pytest.raises(ortlab.UnsupportedOptionError, match=r"annotate its return type"):
        OrtBackendOptions(custom_translations={torch.ops.aten.tanh.default: unannotated})


def test_custom_translations_are_stored_as_pairs_and_compare_equal():
    @onnxscript.script()
    def tanh(x: FLOAT) -> FLOAT:
        return op.Tanh(x)

    a = OrtBackendOptions(custom_translations={torch.ops.aten.tanh.default: tanh})
    b = OrtBackendOptions(custom_translations=[(torch.ops.aten.tanh.default, tanh)])
    assert a == b and a.custom_translations == ((torch.ops.aten.tanh.default, tanh),)
    assert hash(a) == hash(b)


def test_replace_validates_like_the_constructor():
    opts = OrtBackendOptions(freeze_parameters=True)
    changed = opts.replace(min_partition_size=3)
    assert changed.min_partition_size == 3 and changed.freeze_parameters
    assert opts.min_partition_size == 1  # unchanged
    with pytest.raises(ortlab.UnsupportedOptionError, match="Valid options"):
        opts.replace(min_partition=3)
    with pytest.raises(ortlab.UnsupportedOptionError, match="min_partition_size"):
        opts.replace(min_partition_size=-1)


@onnxscript.script()
def _clip_one_arg(x: FLOAT) -> FLOAT:
    return op.Clip(x)


@onnxscript.script()
def _gelu_three_args(x: FLOAT, approximate: str, extra: float) -> FLOAT:
    return op.Gelu(x)


@onnxscript.script()
def _gelu_renamed(x: FLOAT, approx: str) -> FLOAT:
    return op.Gelu(x)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"freeze_parameter": True}, r"Did you mean 'freeze_parameters'"),
        (
            {"excluded_ops": ["aten.gelou"]},
            r"excluded_ops: 'aten.gelou' names no op.*'aten.gelu'",
        ),
        ({"excluded_ops": ["aten.add.Nope"]}, r"has no overload 'Nope'"),
        ({"excluded_ops": [42]}, r"excluded_ops: 42 is not an op"),
        (
            {"custom_translations": {torch.ops.aten.clamp.default: _clip_one_arg}},
            r"custom_translations\[aten.clamp.default\]: '_clip_one_arg' has no parameter "
            r"'min'|takes 1 argument",
        ),
        (
            {"custom_translations": {torch.ops.aten.gelu.default: _gelu_three_args}},
            r"requires 3 arguments, but aten::gelu\(self, approximate\) passes at most 2",
        ),
        (
            {"custom_translations": {torch.ops.aten.gelu.default: _gelu_renamed}},
            r"has no parameter 'approximate'",
        ),
    ],
)
def test_options_are_checked_when_given_and_say_what_was_meant(options, message):
    with pytest.raises(ortlab.UnsupportedOptionError, match=message):
        OrtBackendOptions.from_value(options)


def test_excluded_op_names_resolve_to_the_ops_they_name():
    opts = OrtBackendOptions(
        excluded_ops=["aten.gelu", "aten::add.Tensor", torch.ops.aten.mul]
    )
    assert opts.excluded_ops == (
        torch.ops.aten.gelu,
        torch.ops.aten.add.Tensor,
        torch.ops.aten.mul,
    )


def test_session_options_onnx_runtime_refuses_are_named_when_given(tmp_path):
    so = onnxruntime.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "missing" / "model.onnx")
    with pytest.raises(ortlab.UnsupportedOptionError, match=r"optimized_model_filepath"):
        OrtBackendOptions(ort_session_options=so)
    so.optimized_model_filepath = str(tmp_path / "model.onnx")
    assert OrtBackendOptions(ort_session_options=so).ort_session_options is so
