"""Every zoo model runs through ortlab and matches eager PyTorch (and its gradients)."""

from __future__ import annotations

import copy

import pytest
import torch

from ortlab import OrtBackend, zoo


def _loss_weights(out: torch.Tensor) -> torch.Tensor:
    # A fixed random projection: out.sum() has zero gradient through a final LayerNorm.
    return torch.randn(out.shape, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", zoo.names())
def test_zoo_model_matches_eager_across_its_batch_sweep(name):
    spec = zoo.get(name)
    model = spec.build()
    backend = OrtBackend()
    with torch._dynamo.config.patch(**dict(spec.dynamo_config)), torch.no_grad():
        compiled = torch.compile(copy.deepcopy(model), backend=backend, dynamic=True)
        for batch in spec.batch_sizes:
            args = spec.example_inputs(batch)
            torch.testing.assert_close(
                compiled(*args), model(*args), atol=spec.atol, rtol=spec.rtol
            )
    summary = backend.summary()
    assert summary["failed_partitions"] == 0, [p.error for p in backend.partitions]
    assert summary["executions"] >= len(spec.batch_sizes)
    # Dynamo specialises size 1; all other sizes share one symbolic graph and session.
    # (transformer_layer guards the lowering: under torch.func.functionalize the fake mode
    # int()-ed a symbolic size inside F.multi_head_attention_forward, a guard that
    # specialised each new batch size into a graph of its own.)
    assert len(backend.graphs) <= 2, [g.cause for g in backend.graphs]
    assert summary["sessions"] == summary["partitions"]
    assert summary["nodes_in_ort"] > 0
    if spec.expects_fallback:
        assert summary["nodes_eager"] > 0


@pytest.mark.parametrize("name", [n for n in zoo.names() if zoo.get(n).trainable])
def test_zoo_model_gradients_match_eager(name):
    spec = zoo.get(name)
    model = spec.build().train()
    reference = copy.deepcopy(model)
    backend = OrtBackend()
    args = spec.example_inputs()
    with torch._dynamo.config.patch(**dict(spec.dynamo_config)):
        compiled = torch.compile(model, backend=backend, dynamic=True)
        out = compiled(*args)
    expected = reference(*args)
    torch.testing.assert_close(out, expected, atol=spec.atol, rtol=spec.rtol)
    weights = _loss_weights(expected)
    (out * weights).sum().backward()
    (expected * weights).sum().backward()
    for (pname, p), q in zip(reference.named_parameters(), model.parameters()):
        torch.testing.assert_close(
            q.grad,
            p.grad,
            atol=spec.atol * 10,
            rtol=spec.rtol * 10,
            msg=f"{name}: gradient of {pname}",
        )
    kinds = [g.kind for g in backend.graphs]
    assert "backward" in kinds
    backward_runs = sum(p.run_count for p in backend.partitions if p.graph_kind == "backward")
    assert backward_runs >= 1, "the backward graph ran entirely in PyTorch"
