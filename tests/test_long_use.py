"""Long use: a dump path that cannot be written, memory released on reset and when the
compiled model is dropped, no last batch kept alive by default."""

from __future__ import annotations

import gc
import os

import onnxruntime
import pytest
import torch

import ortlab


def _live_sessions() -> int:
    # type(), not isinstance(): a dead weak proxy among the objects raises on the latter.
    return sum(1 for o in gc.get_objects() if type(o) is onnxruntime.InferenceSession)


def _mlp(i: int = 0) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64 + i)
    )


@pytest.mark.parametrize("where", ["missing", "read-only"])
def test_a_dump_path_that_cannot_be_written_is_a_note_and_the_partition_runs(tmp_path, where):
    if where == "missing":
        prefix = str(tmp_path / "no" / "such" / "dir" / "m_")
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes to read-only directories")
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        prefix = str(locked / "m_")
    compiled = ortlab.compile(_mlp(), dump_path=prefix)
    x = torch.randn(3, 64)
    with torch.no_grad(), pytest.warns(RuntimeWarning, match=r"dump_path .*could not write"):
        compiled(x)
        compiled(torch.randn(5, 64))  # warned once per backend
    backend = compiled.ortlab_backend
    assert all(p.state == "ort" and p.eager_run_count == 0 for p in backend.partitions)
    session = backend.sessions[0]
    assert session.dump_files == () and "dump_path" in session.dump_note


def test_dynamo_reset_releases_every_session_of_every_kind_of_compile():
    x = torch.randn(4, 64)
    own = ortlab.OrtBackend()
    compiled = [
        ortlab.compile(_mlp(1)),
        torch.compile(_mlp(2), backend="ortlab"),
        torch.compile(_mlp(3), backend=own),
    ]
    with torch.no_grad():
        for c in compiled:
            c(x)
    assert _live_sessions() >= 3
    torch._dynamo.reset()
    gc.collect()
    assert _live_sessions() == 0
    assert not ortlab.OrtBackend.get_cached_instances()
    assert own.graphs and not any(s.active for s in own.sessions)  # records stay


def test_dropping_the_compiled_model_releases_its_sessions():
    for i in range(5):
        compiled = ortlab.compile(_mlp(i))
        with torch.no_grad():
            compiled(torch.randn(4, 64))
    del compiled
    gc.collect()
    assert _live_sessions() == 0


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_thirty_models_compiled_and_reset_leave_no_session_and_little_memory():
    def compile_and_reset(i: int) -> None:
        compiled = torch.compile(_mlp(i), backend="ortlab")
        with torch.no_grad():
            compiled(torch.randn(4, 64))
        torch._dynamo.reset()

    compile_and_reset(0)  # the exporter's registry and one-time imports
    gc.collect()
    start = _rss_mib()
    for i in range(30):
        compile_and_reset(i)
    gc.collect()
    assert _live_sessions() == 0
    assert _rss_mib() < start * 1.15, (start, _rss_mib())


def test_a_partitions_session_records_are_bounded_like_its_sessions():
    """One record (with its ONNX model) per new static shape was kept forever."""
    from ortlab.backend import _executor

    compiled = ortlab.compile(_mlp(), dynamic_shapes=False)
    with torch.no_grad():
        for n in range(1, 40):  # n=1 is its own graph; then one symbolic graph
            compiled(torch.randn(n, 64))
    first, symbolic = compiled.ortlab_backend.partitions
    assert len(first.sessions) == 1
    bound = _executor.MAX_SESSION_RECORDS_PER_PARTITION
    assert len(symbolic.sessions) == bound and symbolic.dropped_sessions == 38 - bound
    assert sum(s.active for s in symbolic.sessions) == _executor.MAX_SESSIONS_PER_PARTITION
    assert [s.index for s in symbolic.sessions] == list(range(38 - bound, 38))
    assert symbolic.session(37) is symbolic.sessions[-1] and symbolic.session(0) is None


def test_freezing_says_once_which_weight_writes_it_sees():
    from ortlab.backend import _executor

    _executor._say_which_writes_frozen_weights_see.cache_clear()
    model = _mlp()
    with torch.no_grad():
        with pytest.warns(RuntimeWarning, match=r"cannot see writes.*\.data") as caught:
            ortlab.compile(model, freeze_parameters=True)(torch.randn(2, 64))
            ortlab.compile(_mlp(1), freeze_parameters=True)(torch.randn(2, 64))
    assert sum("freeze_parameters=True bakes" in str(w.message) for w in caught) == 1
    # What it says: a write through .data in place is not seen...
    compiled = ortlab.compile(model, freeze_parameters=True)
    x = torch.randn(2, 64)
    with torch.no_grad():
        compiled(x)
        model[0].weight.data.mul_(2)
        stale = compiled(x)
        assert not torch.allclose(stale, model(x))
        # ...and clear_sessions() makes the next call see it.
        compiled.ortlab_backend.clear_sessions()
        torch.testing.assert_close(compiled(x), model(x))


def test_diff_of_a_compiled_call_flags_frozen_weights_written_behind_pytorchs_back():
    from ortlab import numerics

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    compiled = ortlab.compile(model, freeze_parameters=True)
    x = torch.randn(3, 8)
    with torch.no_grad():
        compiled(x)
    assert numerics.diff_compiled(compiled, x).passed
    model[0].weight.data.mul_(2)  # not counted: the frozen session keeps the old weight
    report = numerics.diff_compiled(compiled, x)
    assert not report.passed
    (stale,) = [text for p in report.partitions for text in p.stale_frozen]
    assert "no longer matches the module's tensor" in stale
    assert report.cause_text() == stale


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_one_outsized_batch_leaves_little_memory_held_after_the_next_call():
    """ONNX Runtime's arena grows for an outsized batch and never shrinks by itself: the
    call after it gives the free memory back."""
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64)
    )
    # Two threads, not "auto": a one-thread choice (a coin toss for this model) is regrown
    # to more threads by the outsized run, and the memory then freed is another story.
    compiled = ortlab.compile(model, dynamic=True, intra_op_threads=2)
    small = torch.randn(8, 64)
    with torch.no_grad():
        for _ in range(3):
            compiled(small)
        gc.collect()
        start = _rss_mib()
        big = torch.randn(1_000_000, 64)
        out = compiled(big)
        del out, big
        gc.collect()
        held = _rss_mib() - start
        compiled(small)
        gc.collect()
        after = _rss_mib() - start
    assert held > 200, held  # the arena grew (and the test can see it)
    assert after < 100, (held, after)
