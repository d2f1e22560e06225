"""ortlab in several threads: exports and session creation are serialized, so concurrent
first calls never mix two translations, and calls running while another thread builds a
session get the right numbers."""

from __future__ import annotations

import threading
import warnings

import pytest
import torch

import ortlab

transformers = pytest.importorskip("transformers")


def _bert(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
    )
    return transformers.BertModel(config).eval()


def _in_threads(count, work):
    """Runs ``work(k)`` in ``count`` threads; returns the exceptions and ortlab's fall-back
    warnings they raised."""
    failures: list[BaseException] = []

    def run(k):
        try:
            work(k)
        except BaseException as e:
            failures.append(e)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=run, args=(k,)) for k in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    fallbacks = [w for w in caught if issubclass(w.category, ortlab.FallbackWarning)]
    return failures, fallbacks


def test_first_calls_of_four_backends_at_once_translate_one_at_a_time():
    """The exporter keeps process-wide state while translating: four first calls at once
    (a barrier lines them up) once mixed their nodes ('Value ... is not in the list') and
    sent partitions to PyTorch."""
    models = [_bert(k) for k in range(4)]
    compiled = [ortlab.compile(m) for m in models]
    ids = torch.randint(0, 100, (2, 8))
    with torch.no_grad():
        for c in compiled:
            c(ids)
    barrier = threading.Barrier(4)
    wrong = []

    def work(k):
        for _ in range(2):
            barrier.wait()
            compiled[k].ortlab_backend.clear_sessions()  # the next call exports again
            barrier.wait()
            x = torch.randint(0, 100, (2, 8))
            with torch.no_grad():
                got = compiled[k](x).last_hidden_state
                if not torch.allclose(got, models[k](x).last_hidden_state, atol=1e-5):
                    wrong.append(k)

    failures, fallbacks = _in_threads(4, work)
    assert not failures and not fallbacks and not wrong, (failures, fallbacks, wrong)
    for c in compiled:
        (partition,) = c.ortlab_backend.partitions
        assert partition.state == "ort" and partition.eager_run_count == 0


def test_calls_of_one_model_in_four_threads_while_new_shapes_compile():
    model = _bert(0)
    compiled = ortlab.compile(model)
    wrong = []

    def work(k):
        generator = torch.Generator().manual_seed(k)
        for i in range(200):  # 4 threads x 200 calls
            x = torch.randint(0, 100, (1 + (i + k) % 3, 8), generator=generator)
            with torch.no_grad():
                got = compiled(x).last_hidden_state
                if not torch.allclose(got, model(x).last_hidden_state, atol=1e-5):
                    wrong.append((k, i))

    failures, fallbacks = _in_threads(4, work)
    assert not failures and not fallbacks and not wrong, (failures, fallbacks, wrong)
    backend = compiled.ortlab_backend
    assert backend.execution_count == 800
    assert all(p.state == "ort" and p.eager_run_count == 0 for p in backend.partitions)
