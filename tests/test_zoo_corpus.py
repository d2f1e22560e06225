"""Tests of the zoo's corpus tier: registry, determinism, cheap import, and eager runs of the
fast (ci) subset, including the cached decode step of its decoder and a training step
with each model's own loss."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_zoo import assert_tensors_equal

from ortlab import errors, zoo

CORPUS = zoo.corpus()
CORPUS_NAMES = zoo.corpus_names()
CI_NAMES = zoo.corpus_names(ci=True)
CI_DECODERS = zoo.corpus_names("decoder", ci=True)


def _flat(values) -> list:
    """The tensors of an input tuple or output, with ``None`` kept and caches expanded."""
    out = []
    for v in values if isinstance(values, tuple) else (values,):
        if v is None or isinstance(v, torch.Tensor):
            out.append(v)
        else:  # a transformers Cache: its per-layer key and value tensors
            for layer in v.layers:
                out.extend([layer.keys, layer.values])
    return out


def _assert_same_tensors(a, b) -> None:
    assert_tensors_equal(_flat(a), _flat(b))


def _assert_finite_outputs(out) -> None:
    outs = out if isinstance(out, tuple) else (out,)
    assert outs
    for o in outs:
        assert isinstance(o, torch.Tensor), type(o)
        assert o.dtype == torch.float32
        assert torch.isfinite(o).all()


# --- registry ----------------------------------------------------------------------------


def test_corpus_is_large_and_covers_every_family():
    assert len(CORPUS) >= 24
    assert tuple(m.name for m in CORPUS) == CORPUS_NAMES
    assert {m.family for m in CORPUS} == set(zoo.FAMILIES)
    # Presentation order: grouped by family, families in the order of FAMILIES.
    order = [zoo.FAMILIES.index(m.family) for m in CORPUS]
    assert order == sorted(order)
    for family in zoo.FAMILIES:
        assert zoo.corpus_names(family) == tuple(m.name for m in CORPUS if m.family == family)


def test_names_are_unique_and_disjoint_from_the_teaching_tier():
    assert len(set(CORPUS_NAMES)) == len(CORPUS_NAMES)
    assert not set(CORPUS_NAMES) & set(zoo.names())


def test_teaching_tier_is_unchanged():
    assert len(zoo.names()) == 7
    assert all(m.tier == "teaching" and m.family == "" for m in zoo.all_models())
    assert not set(zoo.names()) & {m.name for m in CORPUS}


def test_get_finds_corpus_models():
    for m in CORPUS:
        assert zoo.get(m.name) is m
    with pytest.raises(errors.UnsupportedOptionError) as info:
        zoo.get("no_such_model")
    assert "resnet_tiny" in str(info.value) and "mlp" in str(info.value)


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_metadata_is_sane(name):
    m = zoo.get(name)
    assert m.tier == "corpus"
    assert m.family in zoo.FAMILIES and m.architecture
    assert m.description and "\n" not in m.description
    assert m.batch_sizes == tuple(sorted(set(m.batch_sizes))) and m.batch_sizes[0] >= 1
    assert sum(b > 1 for b in m.batch_sizes) >= 2
    # Dynamo specialises size 1, so the default is a size that stays symbolic.
    assert m.default_batch in m.batch_sizes and m.default_batch > 1
    assert 0 < m.atol <= 1e-3 and 0 < m.rtol <= 1e-3
    assert isinstance(hash(m), int)


def test_decoders_and_only_decoders_have_a_followup_call():
    for m in CORPUS:
        assert (m.followup_inputs is not None) == (m.family == "decoder"), m.name
    with pytest.raises(errors.UnsupportedOptionError, match="follow-up"):
        zoo.get("bert").followup_example_inputs(torch.nn.Identity())


def test_corpus_names_filters():
    ci, not_ci = set(zoo.corpus_names(ci=True)), set(zoo.corpus_names(ci=False))
    assert ci | not_ci == set(CORPUS_NAMES) and not ci & not_ci
    assert set(zoo.corpus_names("vision", ci=True)) <= set(zoo.corpus_names("vision"))
    with pytest.raises(errors.UnsupportedOptionError, match="family"):
        zoo.corpus_names("speech")


def test_ci_subset_is_small_and_covers_every_family():
    ci = [zoo.get(n) for n in CI_NAMES]
    assert 6 <= len(ci) <= 8
    assert {m.family for m in ci} == set(zoo.FAMILIES)
    # A CNN with batch norm and a vision transformer, and a decoder with a decode step.
    assert {"ResNet", "ViT"} <= {m.architecture for m in ci if m.family == "vision"}
    assert CI_DECODERS
    assert all(m.trainable for m in ci)


def test_zoo_model_validates_tier_and_family():
    base = zoo.get("mlp")
    with pytest.raises(errors.UnsupportedOptionError, match="tier"):
        dataclasses.replace(base, tier="zoo")
    with pytest.raises(errors.UnsupportedOptionError, match="family"):
        dataclasses.replace(base, tier="corpus", family="speech")
    assert dataclasses.replace(base, tier="corpus", family="text").family == "text"


# --- inputs (no model needed) ------------------------------------------------------------


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_inputs_are_deterministic_and_small(name):
    m = zoo.get(name)
    for batch in m.batch_sizes:
        first = m.example_inputs(batch)
        _assert_same_tensors(first, m.example_inputs(batch))
        for x in first:
            if x is None:
                continue
            assert x.shape[0] == batch
            if x.is_floating_point():
                assert x.dtype == torch.float32
            else:
                assert x.dtype == torch.int64
    _assert_same_tensors(m.example_inputs(), m.example_inputs(m.default_batch))


def test_import_does_not_load_transformers():
    code = "import sys, ortlab.zoo\nprint('transformers' in sys.modules)\n"
    repo_root = Path(zoo.__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=repo_root, capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["False"]


# --- the ci subset: builds and eager runs ------------------------------------------------


@pytest.mark.parametrize("name", CI_NAMES)
def test_ci_models_run_eagerly(name):
    m = zoo.get(name)
    model = m.build()
    with torch.no_grad():
        for batch in (m.default_batch, m.batch_sizes[0]):
            out = model(*m.example_inputs(batch))
            _assert_finite_outputs(out)
            first = out[0] if isinstance(out, tuple) else out
            assert first.shape[0] == batch


@pytest.mark.parametrize("name", CI_DECODERS)
def test_decode_step_is_fresh_deterministic_and_runs(name):
    m = zoo.get(name)
    model = m.build()
    input_ids, _ = m.example_inputs()
    first = m.followup_example_inputs(model)
    second = m.followup_example_inputs(model)
    _assert_same_tensors(first, second)
    next_ids, mask, cache = first
    assert next_ids.shape == (m.default_batch, 1) and next_ids.dtype == torch.int64
    assert mask.shape == (m.default_batch, input_ids.shape[1] + 1)
    assert cache is not second[2]  # fresh objects: a forward mutates the cache
    assert cache.get_seq_length() == input_ids.shape[1]
    with torch.no_grad():
        logits = model(*first)
        full = model(torch.cat([input_ids, next_ids], dim=1), mask)
    _assert_finite_outputs(logits)
    assert logits.shape[:2] == (m.default_batch, 1)
    assert cache.get_seq_length() == input_ids.shape[1] + 1
    assert second[2].get_seq_length() == input_ids.shape[1]
    # The cached step gives the last position of a full uncached run.
    torch.testing.assert_close(logits[:, -1], full[:, -1], atol=1e-5, rtol=1e-4)


# --- training objectives ------------------------------------------------------------------


def test_every_corpus_model_trains_on_its_own_loss():
    for m in CORPUS:
        objective = m.objective
        assert objective is not None, m.name
        assert objective.loss and objective.model_class, m.name
    # Each family's loss, as its users train it.
    assert {m.objective.loss for m in CORPUS if m.family == "decoder"} == {
        "next-token cross-entropy (labels = input_ids, shifted inside)"
    }
    heads = {m.name: m.objective.model_class for m in CORPUS}
    assert heads["bert"] == "BertForSequenceClassification"
    assert heads["t5"] == "T5ForConditionalGeneration"
    assert heads["whisper"] == "WhisperForConditionalGeneration"
    assert heads["wav2vec2"] == "Wav2Vec2ForCTC" and heads["hubert"] == "HubertForCTC"
    assert heads["deit"] == "DeiTForImageClassification" and zoo.get("deit").objective.note
    assert heads["resnet_tiny"] == "ResNetForImageClassification"


def test_teaching_models_have_no_objective():
    assert all(m.objective is None for m in zoo.all_models())
    with pytest.raises(errors.UnsupportedOptionError, match="no training objective"):
        zoo.get("mlp").training_inputs()


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_training_inputs_are_deterministic_and_carry_labels(name):
    m = zoo.get(name)
    first, second = m.training_inputs(), m.training_inputs(m.default_batch)
    assert first.keys() == second.keys()
    for key, value in first.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, second[key]), key
            assert value.shape[0] == m.default_batch, key
            assert value.dtype in (torch.float32, torch.int64), key
        else:
            assert value == second[key], key
    if m.family == "multimodal":
        assert first["return_loss"] is True  # the contrastive loss needs no labels
    else:
        assert first["labels"].dtype == torch.int64
    if m.family == "decoder":
        assert torch.equal(first["labels"], first["input_ids"])
    # The inference inputs are untouched: the training step's are theirs, as keywords.
    inference = m.example_inputs()
    shared = [v for v in first.values() if isinstance(v, torch.Tensor)]
    assert any(torch.equal(x, y) for x in inference if x is not None for y in shared)


@pytest.mark.parametrize("name", CI_NAMES)
def test_ci_models_have_finite_grads_on_their_own_loss(name):
    m = zoo.get(name)
    model = m.objective.build()
    assert not model.training
    model.train()
    loss = model(**m.training_inputs()).loss
    assert loss.shape == () and torch.isfinite(loss) and loss > 0
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads
    assert all(torch.isfinite(g).all() for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0


def _random_modules(model: torch.nn.Module) -> list[str]:
    """Modules that draw random numbers in training: dropout or stochastic depth with a
    non-zero probability."""
    found = []
    for name, module in model.named_modules():
        kind = type(module).__name__
        p = getattr(module, "p", None) if "Dropout" in kind else None
        if "DropPath" in kind or "StochasticDepth" in kind:
            p = getattr(module, "drop_prob", None)
        if p:
            found.append(f"{name} ({kind}, p={p})")
    return found


def test_no_corpus_model_draws_random_numbers_in_training():
    # A training step compares eager, float64 and compiled copies: each would draw its own
    # dropout masks or dropped branches and the gradients would belong to different nets.
    random = {n: _random_modules(zoo.get(n).build()) for n in CORPUS_NAMES}
    assert {n: found for n, found in random.items() if found} == {}
    # The training heads too (DistilBERT's classifier drops 0.2 by default).
    random = {n: _random_modules(zoo.get(n).objective.build()) for n in CORPUS_NAMES}
    assert {n: found for n, found in random.items() if found} == {}


# --- every model (slow) ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_every_corpus_model_runs_eagerly(name):
    m = zoo.get(name)
    model = m.build()
    assert not model.training
    with torch.no_grad():
        _assert_finite_outputs(model(*m.example_inputs()))
        if m.followup_inputs is not None:
            _assert_finite_outputs(model(*m.followup_example_inputs(model)))


@pytest.mark.slow
@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_every_corpus_model_learns_from_its_own_loss(name):
    m = zoo.get(name)
    model = m.objective.build().train()
    inputs = m.training_inputs()
    losses = []
    for _ in range(10):  # the corpus coverage's steps and learning rate
        model.zero_grad()
        loss = model(**inputs).loss
        loss.backward()
        losses.append(float(loss.detach()))
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p.sub_(0.05 * p.grad)
    # (CLIP's first step overshoots: its loss rises once, then falls.)
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0], losses
