"""`ortlab demo` (what `make demo` runs): table, report, exit code."""

from __future__ import annotations

import pytest
from test_views_helpers import parse

from ortlab import _demo, cli, zoo


def test_demo_prints_the_table_and_writes_the_report(tmp_path, capsys):
    report = tmp_path / "out" / "zoo.html"
    code = cli.main(["demo", "mlp", "custom_op", "--iters", "2", "--report", str(report)])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("model"))
    for column in (
        "partitions",
        "sessions",
        "nodes ORT/eager",
        "max abs diff",
        "first call s",
    ):
        assert column in header
    rows = [line.split() for line in lines if line.startswith(("mlp ", "custom_op "))]
    assert [r[0] for r in rows] == ["mlp", "custom_op"]
    assert all("yes" in r for r in rows)
    assert f"report: {report}" in out
    parsed = parse(report.read_text(encoding="utf-8"))
    assert {"table", "svg"} <= {tag for tag, _ in parsed.tags}
    assert "custom_op" in "".join(parsed.text)


def test_demo_row_counts_come_from_the_records():
    (row,) = _demo.run_demo(["custom_op"], iters=2)
    summary = row.backend.summary()
    assert (row.partitions, row.sessions) == (summary["partitions"], summary["sessions"])
    assert row.nodes_eager >= 1  # the custom op stays in PyTorch
    assert row.matches and row.max_abs_diff <= zoo.get("custom_op").atol


def test_unknown_zoo_model_is_a_clear_error():
    with pytest.raises(Exception, match="choose one of: mlp"):
        cli.main(["demo", "no_such_model", "--iters", "1"])


def test_report_command_writes_one_section_per_model(tmp_path, capsys):
    path = tmp_path / "report.html"
    assert cli.main(["report", str(path), "mlp"]) == 0
    assert capsys.readouterr().out.strip().endswith(str(path))
    text = path.read_text(encoding="utf-8")
    assert "mlp" in text and "fused_0" in text
