"""%ortcompile / %%ortcompile through a real IPython InteractiveShell."""

from __future__ import annotations

import dataclasses
import itertools
import re

import numpy as np
import pytest
import torch

import ortlab
from ortlab import magic, views
from ortlab.bench import _engine, _format

MAGIC_OPTIONS = (
    "-h",
    "--help",
    "--infer",
    "--train",
    "--static",
    "--dynamic",
    "--fullgraph",
    "--ep",
    "--no-aot",
    "--option",
    "--atol",
    "--rtol",
    "--bench",
    "--diff",
    "--no-diff",
)


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
        "net, (h,) = zoo.get('custom_op').instantiate()\n"
        "def double_sin(a):\n"
        "    return torch.sin(a) * 2\n",
        store_history=False,
    )
    yield sh
    InteractiveShell.clear_instance()


def run(shell, source):
    result = shell.run_cell(source, store_history=False)
    return result


@pytest.fixture
def created_backends(monkeypatch):
    """Every OrtBackend created while the test runs."""
    created = []
    init = ortlab.OrtBackend.__init__

    def counting_init(self, *args, **kwargs):
        created.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(ortlab.OrtBackend, "__init__", counting_init)
    return created


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
    assert r.mode == "inference" and r.verdict.startswith("ortlab, inference:")
    assert isinstance(r.inspector, views.Inspector) and r.inspector.backend is backend
    # The Inspector was displayed (as text in a terminal shell) under the verdict; the
    # lab's own time joins the verdict once the Inspector is drawn.
    out = capsys.readouterr().out
    assert r.verdict.split(" · lab ")[0] in out and "soft_clip" in out
    assert r.lab_seconds > 0 and f"lab {r.lab_seconds:.1f} s" in r.verdict
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


@pytest.mark.parametrize(
    ("flag", "symbolic"),
    [
        ("", (False, True)),  # torch.compile's default: static, then symbolic on a change
        ("--static ", (False, False)),  # one static graph per shape
        ("--dynamic ", (True,)),  # symbolic from the first call: one session for both
    ],
)
def test_shape_flags_choose_torch_compiles_dynamic(shell, flag, symbolic):
    line = f"with torch.no_grad():\n    r = %ortcompile {flag}--no-diff mlp(x.clone())"
    assert run(shell, line).success
    r = shell.user_ns["r"]
    x = shell.user_ns["x"]
    with torch.no_grad():
        r.compiled(torch.randn(x.shape[0] + 3, *x.shape[1:]))
    schemas = [", ".join(s.input_schema) for s in r.backend.sessions]
    assert tuple(re.search(r"\[s\d+", t) is not None for t in schemas) == symbolic, schemas


def test_tolerance_and_bench_options_show_in_the_verdict(shell):
    assert run(
        shell, "r = %ortcompile --atol 1e-4 --rtol 1e-4 --bench 3 --no-diff mlp(x)"
    ).success
    r = shell.user_ns["r"]
    assert r.atol == 1e-4 and r.rtol == 1e-4
    assert r.within_tolerance is True and "within tolerance" in r.verdict
    b = r.bench
    assert b["calls"] == 3 and b["warmup"] == magic.BENCH_WARMUP
    for side in ("ortlab", "eager"):
        assert 0 < b[f"{side}_p10_ms"] <= b[f"{side}_ms"] <= b[f"{side}_p90_ms"]
    assert b["speedup"] == pytest.approx(b["eager_ms"] / b["ortlab_ms"])
    ms = _format.fmt3
    assert (
        f"median [p10–p90] of 3 calls: ortlab {ms(b['ortlab_ms'])} ms "
        f"[{ms(b['ortlab_p10_ms'])}–{ms(b['ortlab_p90_ms'])}] vs eager {ms(b['eager_ms'])} ms"
    ) in r.verdict


def test_bench_measures_what_freezing_the_parameters_gains(shell):
    assert run(shell, "r = %ortcompile --no-diff mlp(x)").success
    r = shell.user_ns["r"]
    assert r.freeze is None and any("--bench 20" in n for n in r.notes)
    assert run(shell, "r = %ortcompile --no-diff --bench 3 mlp(x)").success
    r = shell.user_ns["r"]
    advice = r.freeze
    assert advice.setting == "freeze_parameters=True" and not advice.note
    assert advice.current_seconds > 0 and advice.trial_seconds > 0
    assert "freeze_parameters=True: " in r.verdict and "measured on this model" in r.verdict
    # The trial calls the shown model as the call was made (no grad): it used to call it
    # with grad on, which recompiled it into forward and backward graphs.
    assert {g.kind for g in r.backend.graphs} == {"inference"}
    assert run(
        shell, "r = %ortcompile --no-diff --bench 3 --option freeze_parameters=True mlp(x)"
    ).success
    r = shell.user_ns["r"]
    assert r.freeze is None and not any("--bench 20" in n for n in r.notes)


def test_bench_is_timed_by_the_engine_with_warm_up_and_interleaved_blocks(shell, monkeypatch):
    # The engine's clock made fake: an ortlab call "takes" 20 ms and an eager one 30 ms,
    # the 2nd and 3rd after the warm-up ten times that, and a warm-up call 1 s. The
    # medians are then known, and the blocks do not depend on the machine's load.
    warmup = magic.BENCH_WARMUP
    calls, now, measured = [], [0.0], {}
    base = {"ortlab": 0.020, "eager": 0.030}
    real_measure = _engine.measure

    def cost(name):
        k = calls.count(name) - 1
        each = base.get(name, 0.010)  # the freeze_parameters trial: "current", "trial"
        return 1.0 if k < warmup else each * (10 if k - warmup in (1, 2) else 1)

    def measure(steps, timing, **_):
        def timed(name, step):
            def call():
                step()
                calls.append(name)
                now[0] += cost(name)

            return call

        wrapped = {name: timed(name, step) for name, step in steps.items()}
        measured.update(real_measure(wrapped, timing, clock=lambda: now[0]))
        return measured

    monkeypatch.setattr(_engine, "measure", measure)
    assert run(shell, "r = %ortcompile --no-diff --bench 5 mlp(x)").success
    b = shell.user_ns["r"].bench
    # Medians and p10-p90 of the engine's samples: not a mean, and no warm-up call in them.
    for side in ("ortlab", "eager"):
        samples = measured[side].samples
        assert len(samples) == 5 and max(samples) < 1.0
        assert b[f"{side}_ms"] == pytest.approx(base[side] * 1e3)
        assert b[f"{side}_p10_ms"] == pytest.approx(np.percentile(samples, 10) * 1e3)
        assert b[f"{side}_p90_ms"] == pytest.approx(np.percentile(samples, 90) * 1e3)
    assert np.mean(measured["ortlab"].samples) > 0.021  # an outlier was timed
    assert b["speedup"] == pytest.approx(1.5)
    assert calls[: 2 * warmup] == ["ortlab"] * warmup + ["eager"] * warmup
    # Then blocks of calls, alternating between the two, several rounds of each.
    blocks = [name for name, _ in itertools.groupby(calls[2 * warmup :])]
    assert blocks[:4] == ["ortlab", "eager"] * 2


def test_a_call_that_reaches_no_graph_says_so_and_what_to_do(shell):
    shell.user_ns["same"] = lambda t: t  # no operation: Dynamo compiles no graph
    assert run(shell, "r = %ortcompile --no-diff same(x)").success
    r = shell.user_ns["r"]
    assert not r.backend.graphs
    assert "no graph reached ortlab" in r.verdict
    assert any("recompile limit" in n and "--dynamic" in n for n in r.notes), r.notes


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
        ("%ortcompile --infer --train mlp(x)", "--infer and --train exclude each other"),
        ("%ortcompile --static --dynamic mlp(x)", "--static and --dynamic exclude each"),
        ("%ortcompile --option bogus=1 mlp(x)", "Unknown ortlab option(s) 'bogus'. Valid"),
        (
            "%ortcompile --option min_partition_size=0 mlp(x)",
            "OrtBackendOptions.min_partition_size must be an int >= 1",
        ),
        (
            "%ortcompile --option freeze_parameters=1 mlp(x)",
            "OrtBackendOptions.freeze_parameters must be True or False; got 1.",
        ),
        (
            "%ortcompile --option dump_path=out/p mlp(x)",
            "is neither a Python literal (2, True, None, 'text', [...]) nor a name",
        ),
        ("%ortcompile --option freeze_parameters mlp(x)", "write KEY=VALUE"),
        ("%ortcompile --option min_partition_size=torch.nope mlp(x)", "no attribute 'nope'"),
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


def test_an_eval_module_runs_inference_one_graph_and_no_backward(shell):
    # Grad is enabled in the notebook; the zoo's mlp is in eval() mode.
    assert torch.is_grad_enabled() and not shell.user_ns["mlp"].training
    assert run(shell, "r = %ortcompile mlp(x)").success
    r = shell.user_ns["r"]
    assert r.mode == "inference" and "ortlab, inference:" in r.verdict
    assert [g.kind for g in r.backend.graphs] == ["inference"]
    assert all(p.run_count > 0 and p.sessions for p in r.backend.partitions)
    assert not r.output.requires_grad and r.gradients is None
    assert r.diff.backward is False and r.diff.gradients == []


def test_train_runs_times_and_diffs_forward_and_backward(shell, created_backends):
    assert run(shell, "r = %ortcompile --train --bench 2 --atol 1e-5 mlp(x)").success
    r = shell.user_ns["r"]
    assert r.mode == "training" and "ortlab, training:" in r.verdict
    assert "first call" in r.verdict and "(forward + backward)" in r.verdict
    # One compile: forward and backward graphs, each run in ONNX Runtime, and the timed
    # calls (forward + backward too) reused them.
    assert len(created_backends) == 1
    assert [g.kind for g in r.backend.graphs] == ["forward", "backward"]
    assert all(p.sessions and p.run_count >= 1 for p in r.backend.partitions)
    backward = r.backend.graphs[1].partitions[0]
    assert backward.run_count >= 1 + magic.BENCH_WARMUP + r.bench["calls"]
    # Gradients of every parameter and of the input, compared in the diff and the verdict.
    params = [n for n, _ in shell.user_ns["mlp"].named_parameters()]
    expected = [f"grad[{n}]" for n in params] + ["grad[input[0]]"]
    assert list(r.gradients) == list(r.eager_gradients) == expected
    assert [t.name for t in r.diff.gradients] == expected and r.diff.backward
    assert r.diff.passed and r.grad_max_abs_diff < 1e-5
    assert f"gradients {r.grad_max_abs_diff:.3g}" in r.verdict
    # Nothing accumulated in the user's module.
    assert all(p.grad is None for p in shell.user_ns["mlp"].parameters())


def test_the_mode_follows_the_module_and_the_grad_mode_unless_chosen(shell):
    setup = "import copy\nmlp_t = copy.deepcopy(mlp).train()\n"
    assert run(shell, setup).success
    modes = {}
    for source in (
        "%ortcompile --no-diff mlp_t(x)",  # train() module, grad enabled
        "%ortcompile --no-diff --infer mlp_t(x)",
        "%ortcompile --no-diff --train mlp(x)",  # eval() module, chosen
        "%ortcompile --no-diff double_sin(x)",  # a function, grad enabled
        "with torch.no_grad():\n    r = %ortcompile --no-diff double_sin(x)",
        "with torch.no_grad():\n    r = %ortcompile --no-diff mlp_t(x)",
    ):
        assignment = source if source.startswith("with") else f"r = {source}"
        assert run(shell, assignment).success, source
        r = shell.user_ns["r"]
        kinds = [g.kind for g in r.backend.graphs]
        modes[source] = (r.mode, kinds)
    assert list(modes.values()) == [
        ("training", ["forward", "backward"]),
        ("inference", ["inference"]),
        ("training", ["forward", "backward"]),
        ("training", ["forward", "backward"]),
        ("inference", ["inference"]),
        ("inference", ["inference"]),
    ]


def test_one_compile_per_magic_call_and_the_diff_reuses_its_records(shell, created_backends):
    assert run(shell, "r = %ortcompile net(h)").success
    r = shell.user_ns["r"]
    assert created_backends == [r.backend]
    assert r.diff.backend is r.backend
    (graph,) = r.backend.graphs
    # The report's partition runs are the magic's own call: each partition ran once.
    assert [p.run_count for p in graph.partitions] == [1] * len(graph.partitions)
    assert [(d.name, d.state, d.run) for d in r.diff.partitions] == [
        (p.name, "ort", 0) for p in graph.partitions
    ]


def test_option_sets_any_backend_option_from_literals_and_notebook_names(shell):
    setup = (
        "import types\n"
        "seen = []\n"
        "hooks = types.SimpleNamespace(transforms=[seen.append])\n"
        "gelu_ops = ['aten.gelu']\n"
    )
    assert run(shell, setup).success
    line = (
        "r = %ortcompile --no-diff --option min_partition_size=2 "
        "--option freeze_parameters=True --option 'dump_path=None' "
        "--option excluded_ops=gelu_ops --option=pre_ort_model_transforms=hooks.transforms "
        "--option \"default_execution_providers=['CPUExecutionProvider', "
        "('CPUExecutionProvider', {})]\" mlp(x)"
    )
    assert run(shell, line).success
    r = shell.user_ns["r"]
    options = r.backend.options
    assert options.min_partition_size == 2 and options.freeze_parameters is True
    assert options.excluded_ops == (torch.ops.aten.gelu,) and options.dump_path is None
    assert options.pre_ort_model_transforms == (shell.user_ns["seen"].append,)
    assert options.default_execution_providers == (
        ("CPUExecutionProvider", {}),
        ("CPUExecutionProvider", {}),
    )
    assert len(shell.user_ns["seen"]) == len(r.backend.sessions) >= 1
    # --option comes after the shorthands: it wins.
    line = "r = %ortcompile --no-diff --no-aot --option use_aot_autograd=True mlp(x)"
    assert run(shell, line).success
    assert shell.user_ns["r"].backend.options.use_aot_autograd is True


@pytest.mark.parametrize(
    "source", ["%ortcompile -h", "%ortcompile --help mlp(x)", "%%ortcompile -h\nmlp(x)\n"]
)
def test_help_prints_every_option_and_runs_nothing(shell, capsys, created_backends, source):
    assert run(shell, "r = None").success
    result = run(shell, source)
    assert result.success and result.result is None
    out = capsys.readouterr().out
    assert out.lstrip().startswith("%ortcompile [-h]")
    fields = [f.name for f in dataclasses.fields(ortlab.OrtBackendOptions)]
    assert [o for o in (*MAGIC_OPTIONS, *fields) if o not in out] == []
    assert "Mode: a module in eval() mode" in out
    assert created_backends == []


def test_question_mark_shows_the_generated_help(shell, capsys):
    doc = shell.find_line_magic("ortcompile").__doc__
    assert doc == shell.find_cell_magic("ortcompile").__doc__
    fields = [f.name for f in dataclasses.fields(ortlab.OrtBackendOptions)]
    assert [o for o in (*MAGIC_OPTIONS, *fields) if o not in doc] == []
    assert run(shell, "%ortcompile?").success
    out = capsys.readouterr().out
    assert "Docstring:" in out and "--option <KEY=VALUE>" in out and "--train" in out


def test_parse_arguments_splits_options_from_the_call_as_written():
    # Quotes and brackets keep their spaces; a word wholly in quotes loses its quotes.
    options, call = magic.parse_arguments(
        "--bench 5 --option dump_path='out/p' --option "
        '\'excluded_ops=["aten.gelu", "aten.relu"]\' --ep=CUDA '
        "--option default_execution_providers=[('CPU', {'a': 1})]  model(x,  y='a  b')"
    )
    assert options.bench == 5 and options.ep == ["CUDA"]
    assert options.option == [
        "dump_path='out/p'",
        'excluded_ops=["aten.gelu", "aten.relu"]',
        "default_execution_providers=[('CPU', {'a': 1})]",
    ]
    assert call == "model(x,  y='a  b')"
    with pytest.raises(ortlab.OrtlabError, match="unrecognized arguments: --nope"):
        magic.parse_arguments("--nope model(x)")
