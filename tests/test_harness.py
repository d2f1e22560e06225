"""The lab's shared harness: one rule each for unwrapping, fresh entries, flattening
outputs and telling a notebook from a terminal."""

from __future__ import annotations

import sys
import types

import torch

from ortlab import _harness


class _Net(torch.nn.Module):
    def forward(self, x):
        return x * 2


def test_unwrap_compiled_finds_the_module_or_function_behind_torch_compile():
    net = _Net()
    assert _harness.unwrap_compiled(torch.compile(net)) is net

    def double(x):
        return x * 2

    assert _harness.unwrap_compiled(torch.compile(double)) is double
    assert _harness.unwrap_compiled(net) is net and _harness.unwrap_compiled(len) is len


def test_fresh_entry_has_a_code_object_of_its_own_and_binds_keyword_arguments():
    def scaled(x, *, by):
        return x * by

    first = _harness.fresh_entry(scaled, name="call_a", kwargs={"by": 3})
    second = _harness.fresh_entry(scaled, name="call_a", kwargs={"by": 3})
    assert first.__code__ is not second.__code__  # Dynamo caches per code object
    assert first.__name__ == first.__code__.co_name
    assert first.__name__.startswith("call_a_") and first.__name__ != second.__name__
    assert first(2) == 6


def test_fresh_entries_do_not_share_the_sizes_dynamo_has_seen():
    # Dynamo's automatic dynamic shapes key on a code's file, line and name: entries of
    # one name made a second model's sizes symbolic because the first had other sizes.
    symbolic = []

    def record(graph_module, example_inputs):
        symbolic.append(any(isinstance(a, torch.SymInt) for a in example_inputs))
        return graph_module.forward

    for size in (3, 5):
        entry = _harness.fresh_entry(torch.nn.ReLU(), name="call_b")
        torch.compile(entry, backend=record)(torch.ones(2, size))
    assert symbolic == [False, False]


def test_named_leaves_names_every_value_of_a_nested_output():
    out = (torch.ones(1), {"logits": torch.zeros(2), "n": 3}, [None])
    names = [name for name, _ in _harness.named_leaves(out)]
    assert names == ["output[0]", "output[1]['logits']", "output[1]['n']", "output[2][0]"]
    ((name, leaf),) = _harness.named_leaves(torch.ones(1))
    assert name == "output" and torch.equal(leaf, torch.ones(1))
    assert [n for n, _ in _harness.named_leaves([torch.ones(1)], root="input")] == ["input[0]"]
    tensors = _harness.tensor_leaves(out)
    assert [t.shape for t in tensors] == [(1,), (2,)]


class _Layer:
    def __init__(self, keys, values):
        self.keys, self.values, self.is_initialized = keys, values, True


class _Cache:  # the shape of transformers' DynamicCache, which pytree does not flatten
    def __init__(self, *layers):
        self.layers = list(layers)
        self._private = torch.zeros(1)


def test_named_leaves_looks_into_objects_that_hold_tensors_like_a_kv_cache():
    k, v = torch.ones(2), torch.zeros(2)
    leaves = _harness.named_leaves({"h": torch.ones(1), "cache": _Cache(_Layer(k, v))})
    assert [n for n, _ in leaves] == [
        "output['h']", "output['cache'].layers[0].keys", "output['cache'].layers[0].values",
    ]  # fmt: skip
    assert leaves[1][1] is k and leaves[2][1] is v
    empty = _Cache()  # holds no tensor (its private one is not read): kept as it is
    assert _harness.named_leaves(empty) == [("output", empty)]


def test_notebook_and_interactive_follow_the_shell_and_the_terminal(monkeypatch):
    assert not _harness.in_notebook() and not _harness.in_ipython()  # pytest: no IPython

    class ZMQInteractiveShell:  # a kernel's shell, found by class name along the MRO
        pass

    class ColabShell(ZMQInteractiveShell):
        pass

    fake = types.SimpleNamespace(get_ipython=ColabShell)
    monkeypatch.setitem(sys.modules, "IPython", fake)
    assert _harness.in_notebook() and _harness.in_ipython() and _harness.interactive()
    no_shell = types.SimpleNamespace(get_ipython=lambda: None)
    monkeypatch.setitem(sys.modules, "IPython", no_shell)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert not _harness.in_notebook() and not _harness.interactive()
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert _harness.interactive()
