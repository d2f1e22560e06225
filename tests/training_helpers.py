"""What the training tests share: a tiny transformers causal LM with grouped-query
attention, and the two checks every real training workflow needs (everything ran in ONNX
Runtime; gradients are eager's)."""

from __future__ import annotations

import pytest
import torch

import ortlab

GQA_CONFIG = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


def causal_lm(family: str) -> torch.nn.Module:
    """A ``{family}ForCausalLM`` of GQA_CONFIG's size with seeded random weights."""
    transformers = pytest.importorskip("transformers")
    config = getattr(transformers, f"{family}Config")(**GQA_CONFIG)
    torch.manual_seed(0)
    return getattr(transformers, f"{family}ForCausalLM")(config)


def assert_all_in_onnx_runtime(backend: ortlab.OrtBackend) -> None:
    """Every node of every graph ran in ONNX Runtime: no node left in PyTorch, every
    partition ran there and none fell back."""
    assert backend.graphs
    for graph in backend.graphs:
        assert not graph.error, graph.error
        assert not graph.eager_node_names, [graph.verdict(n) for n in graph.eager_node_names]
        for partition in graph.partitions:
            assert partition.error is None, partition.error
            assert partition.run_count >= 1 and partition.eager_run_count == 0


def assert_gradients_match(model: torch.nn.Module, reference: torch.nn.Module) -> None:
    """Each parameter's gradient is the reference model's (None where that one's is)."""
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        if q.grad is None:
            assert p.grad is None, name
            continue
        torch.testing.assert_close(p.grad, q.grad, msg=name)
