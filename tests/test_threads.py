"""ONNX Runtime's intra-op threads: ``intra_op_threads="auto"`` times short sessions
against a one-thread twin and keeps the faster; the choice is on the records."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import onnxruntime
import pytest
import torch

import ortlab
from ortlab import OrtBackendOptions, errors
from ortlab.backend import _session, _threads
from ortlab.views import _fragments


class _Clock:
    """A fake clock that only moves when a fake session runs."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Runner:
    def __init__(self, name: str, seconds: float) -> None:
        self.name, self.seconds, self.runs = name, seconds, 0


def _probe(
    several: float, single: float
) -> tuple[_Runner, _threads.ThreadChoice, list[_Runner]]:
    clock = _Clock()
    made: list[_Runner] = []

    def twin() -> _Runner:
        made.append(_Runner("single", single))
        return made[-1]

    def run(runner: _Runner) -> None:
        runner.runs += 1
        clock.now += runner.seconds

    first = _Runner("several", several)
    kept, choice = _threads.probe(first, 2, twin=twin, run=run, clock=clock)
    return kept, choice, [first, *made]


def test_a_short_session_keeps_one_thread_when_that_is_faster():
    kept, choice, (first, twin) = _probe(several=0.4e-3, single=0.25e-3)
    assert kept is twin and choice.threads == 1 and choice.probed_from == 2
    assert choice.note == (
        "1 thread: 0.250 ms with 1 thread vs 0.400 ms with 2 (median of 5 runs each)"
    )
    assert first.runs == twin.runs == 1 + _threads.PROBE_RUNS
    assert choice.seconds == pytest.approx((1 + _threads.PROBE_RUNS) * (0.4e-3 + 0.25e-3))


def test_a_short_session_keeps_its_threads_when_one_thread_is_not_faster():
    kept, choice, (first, _twin) = _probe(several=0.3e-3, single=0.3e-3)
    assert kept is first and choice.threads == 2
    assert choice.note.startswith("2 threads: 0.300 ms with 1 thread vs 0.300 ms with 2")


def test_a_long_session_is_not_probed_and_runs_once():
    # The first run sizes the session, as for every A/B choice (_choose.faster).
    kept, choice, made = _probe(several=5 * _threads.PROBE_BELOW_SECONDS, single=1e-6)
    assert made == [kept] and kept.runs == 1 and choice.threads == 2
    assert choice.note == "2 threads: a run takes 10.00 ms (one thread is tried under 2 ms)"
    kept, choice, made = _probe(several=_threads.PROBE_BELOW_SECONDS, single=1e-6)
    assert made == [kept] and kept.runs == 1 and choice.threads == 2


def test_a_twin_that_fails_leaves_the_session_as_it_was():
    clock = _Clock()
    first = _Runner("several", 1e-4)

    def twin() -> _Runner:
        raise RuntimeError("no memory for a second session")

    def run(runner: _Runner) -> None:
        clock.now += runner.seconds

    kept, choice = _threads.probe(first, 2, twin=twin, run=run, clock=clock)
    assert kept is first and choice.threads == 2
    assert choice.note == (
        "2 threads: the one-thread twin failed (RuntimeError: no memory for a second session)"
    )


def test_choose_makes_one_session_unless_auto_asks_for_a_probe():
    made: list[int | None] = []

    def make(threads: int | None) -> _Runner:
        made.append(threads)
        return _Runner(f"{threads}", 1e-4 if threads == 1 else 2e-4)

    clock = _Clock()

    def run(runner: _Runner) -> None:
        clock.now += runner.seconds

    cpu = _session.CPU
    with _torch_threads(2):
        runner, choice = _threads.choose(
            OrtBackendOptions(intra_op_threads=2), cpu, make, run, clock=clock
        )
        assert made == [2] and choice.probed_from is None and choice.seconds == 0.0
        made.clear()
        runner, choice = _threads.choose(
            OrtBackendOptions(), cpu, make, run, probe_threads=False, clock=clock
        )
        assert made == [2] and choice == _threads.ThreadChoice(2, "")
        made.clear()
        runner, choice = _threads.choose(OrtBackendOptions(), cpu, make, run, clock=clock)
    assert made == [2, 1] and runner.name == "1"
    assert (choice.threads, choice.probed_from) == (1, 2) and choice.seconds > 0


def test_user_session_options_without_a_count_leave_it_to_onnx_runtime():
    so = onnxruntime.SessionOptions()  # intra_op_num_threads 0: ORT's default
    choice, probe = _threads.initial(OrtBackendOptions(ort_session_options=so), _session.CPU)
    assert (choice.threads, probe) == (None, False)
    model = torch.nn.Linear(4, 2).eval()
    with torch.no_grad():
        compiled = ortlab.compile(model, ort_session_options=so)
        compiled(torch.randn(3, 4))
    (session,) = compiled.ortlab_backend.sessions
    assert (session.threads, session.threads_note) == (None, "set by ort_session_options")
    assert (
        "intra-op threads</td><td>ONNX Runtime&#x27;s default (set by ort_session_options)"
        in (_fragments.onnx_model_info(session))
    )


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def test_what_is_probed_and_what_options_fix():
    cpu = _session.CPU
    with _torch_threads(2):
        choice, probe = _threads.initial(OrtBackendOptions(), cpu)
        assert (choice.threads, probe) == (2, True)
        choice, probe = _threads.initial(OrtBackendOptions(), _session.CUDA)
        assert (choice.threads, probe) == (2, False)
        assert "CUDAExecutionProvider" in choice.note
        choice, probe = _threads.initial(OrtBackendOptions(intra_op_threads=3), cpu)
        assert (choice, probe) == (_threads.ThreadChoice(3, "set by intra_op_threads"), False)
        so = onnxruntime.SessionOptions()
        so.intra_op_num_threads = 4
        choice, probe = _threads.initial(OrtBackendOptions(ort_session_options=so), cpu)
        assert (choice.threads, probe) == (4, False)
        assert choice.note == "set by ort_session_options"
    with _torch_threads(1):
        choice, probe = _threads.initial(OrtBackendOptions(), cpu)
        assert (choice.threads, probe) == (1, False)


@pytest.mark.parametrize("value", [0, -1, True, "many", 1.5])
def test_bad_thread_counts_are_refused_naming_the_option(value):
    with pytest.raises(errors.UnsupportedOptionError, match="intra_op_threads"):
        OrtBackendOptions(intra_op_threads=value)


def test_thread_count_and_user_session_options_are_not_both_accepted():
    with pytest.raises(errors.UnsupportedOptionError, match="ort_session_options"):
        OrtBackendOptions(intra_op_threads=1, ort_session_options=onnxruntime.SessionOptions())


def _ort_threads(session: onnxruntime.InferenceSession) -> int:
    return session.get_session_options().intra_op_num_threads


def test_partition_sessions_record_the_threads_their_session_has(monkeypatch):
    made: list[int] = []
    create = _session.create_session

    def recording(*args, **kwargs):
        session = create(*args, **kwargs)
        made.append(_ort_threads(session))
        return session

    monkeypatch.setattr(_session, "create_session", recording)
    # Every run counts as short, however loaded the machine is.
    monkeypatch.setattr(_threads, "PROBE_BELOW_SECONDS", 60.0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)
    )
    x = torch.randn(3, 8)
    with _torch_threads(2), torch.no_grad():
        # Unfused: a fused model is timed against an unfused twin, one more session.
        compiled = ortlab.compile(model, ort_fusions=False)
        torch.testing.assert_close(compiled(x), model(x))
        # A short run is probed: a session with torch's 2 threads, then a 1-thread twin.
        assert made == [2, 1]
        made.clear()
        fixed = ortlab.compile(model, intra_op_threads=1, ort_fusions=False)
        torch.testing.assert_close(fixed(x), model(x))
        assert made == [1]
    (auto,) = compiled.ortlab_backend.sessions
    assert auto.threads in (1, 2) and "median of 5 runs each" in auto.threads_note
    assert auto.timings["threads"] > 0
    (one,) = fixed.ortlab_backend.sessions
    assert (one.threads, one.threads_note) == (1, "set by intra_op_threads")
    assert "threads" not in one.timings
    assert "intra-op threads</td><td>1 (set by intra_op_threads)" in (
        _fragments.onnx_model_info(one)
    )


def test_standalone_sessions_choose_threads_only_when_asked(monkeypatch):
    monkeypatch.setattr(_threads, "PROBE_BELOW_SECONDS", 60.0)
    model = torch.nn.Linear(4, 2).eval()
    x = torch.randn(3, 4)
    proto = torch.onnx.export(model, (x,), dynamo=True, verbose=False).model_proto
    with _torch_threads(2):
        plain = ortlab.backend.create_session(proto, like=[x])
        chosen = ortlab.backend.create_session(proto, like=[x], choose_threads=True)
    assert plain.threads.threads == 2 and _ort_threads(plain.session) == 2
    assert chosen.threads.threads in (1, 2) and "median" in chosen.threads.note
    assert _ort_threads(chosen.session) == chosen.threads.threads
    torch.testing.assert_close(chosen.run([x])[0], model(x), rtol=1e-5, atol=1e-6)


def _one_thread_probe_and_a_model(monkeypatch) -> torch.nn.Module:
    """Plants a probe that always keeps the one-thread twin; returns a small MLP."""

    def one_thread(runner, threads, *, twin, run, clock):
        return twin(), _threads.ThreadChoice(1, "planted", probed_from=threads)

    monkeypatch.setattr(_threads, "probe", one_thread)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU()).eval()


def test_a_one_thread_session_whose_runs_grow_long_gets_its_threads_back(monkeypatch):
    # The probe saw small inputs; the same symbolic session later runs large ones.
    model = _one_thread_probe_and_a_model(monkeypatch)
    with _torch_threads(2), torch.no_grad():
        compiled = ortlab.compile(model, dynamic=True)
        for batch in (2, 3):
            compiled(torch.randn(batch, 8))
        (session,) = compiled.ortlab_backend.sessions
        assert (session.threads, session.threads_note) == (1, "planted")
        monkeypatch.setattr(_threads, "REGROW_AFTER_SECONDS", 0.0)  # every run is long
        for batch in (4, 5):
            x = torch.randn(batch, 8)
            torch.testing.assert_close(compiled(x), model(x))
    assert session.threads == 2
    assert session.threads_note.startswith("planted; 2 threads from run 3 on: a run took ")
    assert session.run_count == 4 and len(compiled.ortlab_backend.sessions) == 1


def test_a_session_that_cannot_be_regrown_keeps_running_on_one_thread(monkeypatch):
    model = _one_thread_probe_and_a_model(monkeypatch)
    with _torch_threads(2), torch.no_grad():
        compiled = ortlab.compile(model, dynamic=True)
        compiled(torch.randn(2, 8))
        create = _session.create_session
        attempts = []

        def refusing(*args, **kwargs):
            attempts.append(1)
            raise RuntimeError("no memory for another session")

        monkeypatch.setattr(_session, "create_session", refusing)
        monkeypatch.setattr(_threads, "REGROW_AFTER_SECONDS", 0.0)
        for batch in (4, 5):
            x = torch.randn(batch, 8)
            torch.testing.assert_close(compiled(x), model(x))
        monkeypatch.setattr(_session, "create_session", create)
    (session,) = compiled.ortlab_backend.sessions
    assert attempts == [1]  # tried once, not on every long run
    assert (session.threads, session.threads_note) == (1, "planted")
    assert session.run_count == 3 and not compiled.ortlab_backend.partitions[0].error
