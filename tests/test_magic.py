"""%ortcompile / %%ortcompile through a real IPython InteractiveShell."""

from __future__ import annotations

import pytest
import torch

import ortlab
from ortlab import magic, views


@pytest.fixture(scope="module")
def shell(tmp_path_factory):
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False  # keep the user's ~/.ipython untouched
    config.InteractiveShell.ipython_dir = str(tmp_path_factory.mktemp("ipython"))
    sh = InteractiveShell.instance(config=config)
    assert sh.run_cell("%load_ext ortlab", store_history=False).success
    sh.run_cell(
        "import torch\n"
        "from ortlab import zoo\n"
        "mlp, (x,) = zoo.get('mlp').instantiate()\n"
        "net, (h,) = zoo.get('custom_op').instantiate()\n",
        store_history=False,
    )
    yield sh
    InteractiveShell.clear_instance()


def run(shell, source):
    result = shell.run_cell(source, store_history=False)
    return result


def test_line_magic_compiles_the_callee_runs_it_and_eager_and_returns_a_result(shell, capsys):
    result = run(shell, "r = %ortcompile --no-diff net(h)")
    assert result.success, result.error_in_exec
    r = shell.user_ns["r"]
    assert isinstance(r, magic.OrtCompileResult)
    backend = r.backend
    assert backend is ortlab.backend_of(r.compiled)
    summary = backend.summary()
    assert 0 < summary["nodes_in_ort"] < summary["nodes"]  # soft_clip stays eager
    expected = shell.user_ns["net"](shell.user_ns["h"])
    torch.testing.assert_close(r.eager_output, expected)
    torch.testing.assert_close(r.output, expected, atol=1e-5, rtol=1e-5)
    assert r.max_abs_diff == pytest.approx(
        float((r.output - expected).detach().abs().max()), abs=1e-9
    )
    assert r.first_call_seconds > 0 and r.diff is None
    assert f"{summary['nodes_in_ort']}/{summary['nodes']} nodes in ONNX Runtime" in r.verdict
    assert "max abs diff" in r.verdict and "first call" in r.verdict
    assert isinstance(r.inspector, views.Inspector) and r.inspector.backend is backend
    # The Inspector was displayed (as text in a terminal shell) under the verdict.
    out = capsys.readouterr().out
    assert r.verdict in out and "soft_clip" in out
    # The result stays usable in later cells: the compiled callee takes new shapes.
    assert run(shell, "y = r.compiled(torch.randn(7, 8)); print(tuple(y.shape))").success
    assert "(7, 4)" in capsys.readouterr().out
    assert r.backend.execution_count > summary["executions"]
    assert "OrtCompileResult(net(h)" in repr(r) and "net(h)" in r._repr_html_()


def test_each_magic_call_gets_a_fresh_backend_and_never_hits_the_recompile_limit(shell):
    backends = []
    with torch._dynamo.config.patch(recompile_limit=2):
        for _ in range(3):
            assert run(shell, "r = %ortcompile --no-diff mlp(x)").success
            r = shell.user_ns["r"]
            summary = r.backend.summary()
            assert summary["nodes_in_ort"] == summary["nodes"] > 0
            backends.append(r.backend)
    assert len({id(b) for b in backends}) == 3


def test_options_reach_the_backend_and_torch_compile(shell):
    # Without AOTAutograd, inputs that require grad keep partitions eager: use no_grad.
    # A fresh input: Dynamo marks tensors it saw with grad as dynamic, even for static.
    line = (
        "with torch.no_grad():\n"
        "    r = %ortcompile --static --ep CPU --no-aot --fullgraph --no-diff mlp(x.clone())"
    )
    assert run(shell, line).success
    r = shell.user_ns["r"]
    options = r.backend.options
    assert options.use_aot_autograd is False
    names = [
        p[0] if isinstance(p, tuple) else p for p in options.preferred_execution_providers
    ]
    assert names == ["CPUExecutionProvider"]
    assert [g.kind for g in r.backend.graphs] == ["inference"]
    (session,) = r.backend.sessions
    assert all("s" not in t.split("[")[1] for t in session.input_schema), session.input_schema


def test_tolerance_and_bench_options_show_in_the_verdict(shell):
    assert run(
        shell, "r = %ortcompile --atol 1e-4 --rtol 1e-4 --bench 3 --no-diff mlp(x)"
    ).success
    r = shell.user_ns["r"]
    assert r.atol == 1e-4 and r.rtol == 1e-4
    assert r.within_tolerance is True and "within tolerance" in r.verdict
    assert set(r.bench) == {"ortlab_ms", "eager_ms", "speedup"}
    assert r.bench["ortlab_ms"] > 0 and r.bench["eager_ms"] > 0
    assert "ms/call" in r.verdict


def test_cell_magic_runs_the_setup_and_compiles_the_last_expression(shell):
    cell = "%%ortcompile --no-diff\nw = torch.randn(5, 8)\nscale = 2\nnet(w * scale)\n"
    assert run(shell, "r = None").success
    result = run(shell, cell)
    assert result.success, result.error_in_exec
    r = result.result
    assert isinstance(r, magic.OrtCompileResult)
    assert tuple(shell.user_ns["w"].shape) == (5, 8) and shell.user_ns["scale"] == 2
    assert r.expression == "net(w * scale)"
    assert tuple(r.output.shape) == (5, 4)
    torch.testing.assert_close(r.output, r.eager_output, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("%ortcompile mlp[x]", "not a call expression"),
        ("%ortcompile mlp", "not a call expression"),
        ("%ortcompile --bogus mlp(x)", "unrecognized arguments: --bogus"),
        ("%ortcompile --bench many mlp(x)", "invalid int value"),
        ("%ortcompile mlp(undefined_tensor)", "name 'undefined_tensor' is not defined"),
        ("%ortcompile", "no call expression"),
        ("%ortcompile --atol", "--atol needs a value"),
        ("%ortcompile mlp(x", "not a Python expression"),
        ("%ortcompile x.shape[0](x)", "is not callable"),
        ("%%ortcompile\nz = 1\n", "last line must be the call"),
        ("%%ortcompile mlp(x)\nmlp(x)\n", "takes only options"),
    ],
)
def test_bad_input_is_a_one_line_usage_error_not_a_traceback(shell, capsys, source, message):
    from IPython.core.error import UsageError

    result = run(shell, source)
    assert isinstance(result.error_in_exec, UsageError)
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" not in text
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("UsageError: %ortcompile"), lines
    assert message in lines[0]


def test_max_abs_diff_handles_structures_shapes_and_nans():
    a = torch.tensor([1.0, float("nan"), 3.0])
    assert magic.max_abs_diff((a, 2), (a.clone(), 2)) == 0.0
    assert magic.max_abs_diff(a, torch.tensor([1.0, float("nan"), 3.5])) == 0.5
    assert magic.max_abs_diff(a, torch.zeros(4)) == float("inf")
    assert magic.max_abs_diff((a,), (a, a)) == float("inf")
    # The one comparator's rules: NaN on one side only is an infinite difference, and
    # Python numbers differ by their difference.
    assert magic.max_abs_diff(a, torch.tensor([1.0, 2.0, 3.0])) == float("inf")
    assert magic.max_abs_diff((a, 2), (a, 5)) == 3.0


def test_within_tolerance_decides_element_by_element_like_assert_close():
    eager = torch.tensor([1000.0, 0.0])
    output = torch.tensor([1000.0, 5e-3])
    result = magic.OrtCompileResult(
        expression="f(x)",
        compiled=None,
        backend=None,
        output=output,
        eager_output=eager,
        max_abs_diff=magic.max_abs_diff(output, eager),
        first_call_seconds=0.0,
        atol=1e-3,
        rtol=1e-3,
    )
    # 5e-3 > atol + rtol * |0|: outside, though max|eager| * rtol would have allowed 1.0.
    assert result.within_tolerance is False
    result.atol = 1e-2
    assert result.within_tolerance is True
    result.atol = result.rtol = None
    assert result.within_tolerance is None


def test_diff_is_on_by_default_and_adds_the_numerics_report(shell):
    assert run(shell, "r = %ortcompile net(h)").success
    r = shell.user_ns["r"]
    assert r.diff_error is None
    assert r.diff is not None and r.diff.passed
    assert r.diff.max_abs_error <= 1e-5
    assert "numerics passed" in r.verdict
    assert r.inspector.subjects[0].diff is r.diff
