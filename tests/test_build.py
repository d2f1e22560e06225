"""Building a session by declared steps (``_build``): the candidates' fall back and the
choice between them, shared by partitions and the bench's floor."""

from __future__ import annotations

import pytest

from ortlab.backend import _build


class _Session:
    def __init__(self, model: str, outputs: list[float]) -> None:
        self.model, self.outputs = model, outputs


def _candidates(*labels):
    return [_build.Candidate(label, lambda label=label: (label, {"f": 1})) for label in labels]


def _pick(candidates, *, refuse=(), wrong=(), compare=False, expected=(1.0,)):
    def open_session(model):
        if model in refuse:
            raise RuntimeError(f"{model} refused")
        return _Session(model, [2.0] if model in wrong else list(expected))

    import torch

    return _build.pick(
        candidates,
        open_session=open_session,
        run=lambda s: [torch.tensor(v) for v in s.outputs],
        expected=lambda: [torch.tensor(v) for v in expected],
        compare=compare,
    )


def test_the_steps_are_declared_with_their_failure_policies():
    assert [s.name for s in _build.STEPS] == [
        "export",
        "dump",
        "candidates",
        "choose",
        "record",
    ]
    assert all(s.on_failure for s in _build.STEPS)


def test_a_refused_fused_candidate_gives_way_to_the_unfused_one_and_says_why():
    picked = _pick(_candidates("fused", "unfused"), refuse={"fused"})
    assert picked.label == "unfused" and picked.session.model == "unfused"
    assert picked.note.startswith("ONNX Runtime could not run the fused model")
    assert picked.given_up_seconds > 0


def test_a_fused_candidate_that_disagrees_with_pytorch_gives_way():
    picked = _pick(_candidates("fused", "unfused"), wrong={"fused"})
    assert picked.label == "unfused"
    assert picked.note.startswith("the fused model's outputs differ from PyTorch's")


def test_the_last_candidates_failure_is_raised():
    with pytest.raises(RuntimeError, match="unfused refused"):
        _pick(_candidates("fused", "unfused"), refuse={"fused", "unfused"})


def test_a_kept_fused_candidate_is_timed_against_the_next_when_asked(monkeypatch):
    from ortlab.backend import _fusions

    monkeypatch.setattr(
        _fusions, "compare_speed", lambda run, make, fusions, **_: (make()(), (False, "x"))[1]
    )
    picked = _pick(_candidates("fused", "unfused"), compare=True)
    assert picked.label == "unfused" and picked.fusions == {} and picked.note == "x"
    assert _pick(_candidates("fused", "unfused")).label == "fused"  # compare=False
