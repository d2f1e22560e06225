"""``generate()`` of a language model: a module compiled whole compiles nothing for it
(the backend and the lab say so), ``%ortcompile model.generate(...)`` compiles its
forward and gives eager's tokens."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

import ortlab
from ortlab import _harness, magic
from ortlab.backend import _backend
from ortlab.bench import _realsize

GREEDY = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False)


@pytest.fixture(scope="module")
def lm():
    torch.manual_seed(0)
    return _realsize.llama_gqa(True)


@pytest.fixture(scope="module")
def prompt():
    torch.manual_seed(1)
    return torch.randint(4, 100, (1, 6))


def test_generate_of_a_compiled_module_says_it_compiles_nothing(lm, prompt):
    compiled = ortlab.compile(lm, compile_cache=False)
    with pytest.warns(UserWarning, match=r"model\.forward = ortlab\.compile"):
        compiled.generate(prompt, **GREEDY)
    backend = ortlab.backend_of(compiled)
    assert not backend.graphs
    assert backend.notes == [_backend.GENERATE_NOTE]
    compiled.generate(prompt, **GREEDY)  # said once
    assert backend.notes == [_backend.GENERATE_NOTE]
    inspector = ortlab.inspect(compiled)
    assert "Note: generate() of a module compiled whole" in inspector.text()
    assert "compiled nothing" in inspector.static_html()


def test_a_module_without_generate_keeps_torch_compile_s_attributes():
    compiled = ortlab.compile(torch.nn.Linear(2, 2), compile_cache=False)
    assert "generate" not in vars(compiled)


def test_ortcompile_of_generate_compiles_the_forward_and_gives_eager_s_tokens(lm, prompt):
    expected = lm.generate(prompt, **GREEDY)
    options, expression = magic.parse_arguments(
        "lm.generate(prompt, max_new_tokens=4, min_new_tokens=4, do_sample=False)"
    )
    result = magic.run_ortcompile(options, expression, dict(lm=lm, prompt=prompt))
    assert torch.equal(result.output, expected)
    assert result.mode == "inference"
    summary = result.backend.summary()
    assert summary["graphs"] >= 2  # the prompt, then one token at a time
    assert summary["nodes_in_ort"] == summary["nodes"]
    assert any("compiled model.forward" in n for n in result.notes)
    assert "forward" not in vars(lm)  # the module's own forward again


def test_ortcompile_of_a_compiled_module_s_generate_uses_the_module_s_own(lm, prompt):
    compiled = ortlab.compile(lm, compile_cache=False)
    options, expression = magic.parse_arguments("c.generate(prompt, max_new_tokens=2)")
    result = magic.run_ortcompile(options, expression, dict(c=compiled, prompt=prompt))
    assert result.backend.graphs
    assert not ortlab.backend_of(compiled).notes  # its generate was not called


def test_forward_compiled_in_restores_a_forward_set_on_the_instance(lm, prompt):
    calls = []

    def own(*args, **kwargs):
        calls.append("own")
        return type(lm).forward(lm, *args, **kwargs)

    def replacement(*args, **kwargs):
        calls.append("replacement")
        return type(lm).forward(lm, *args, **kwargs)

    lm.forward = own
    try:
        generate = _harness.forward_compiled_in(lm.generate, replacement)
        generate(prompt, max_new_tokens=1)
        assert set(calls) == {"replacement"}
        assert vars(lm)["forward"] is own
    finally:
        del lm.forward
    assert _harness.generate_method(lm.forward) is None
    assert _harness.generate_method(lm.generate) is not None
