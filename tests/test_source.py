"""Source locations: a node's user source line, readable paths and function names."""

from __future__ import annotations

import torch

from ortlab.backend import _source


def test_source_is_the_innermost_frame_outside_torch(tmp_path):
    import os

    graph = torch.fx.Graph()
    node = graph.call_function(torch.ops.aten.relu.default, ())
    torch_file = os.path.join(os.path.dirname(torch.__file__), "nn", "functional.py")
    node.meta["stack_trace"] = (
        f'  File "{tmp_path / "project" / "model.py"}", line 12, in forward\n'
        "    h = self.block(x)\n"
        f'  File "{tmp_path / "project" / "blocks.py"}", line 40, in forward\n'
        "    return F.relu(self.fc(x))\n"
        "           ^^^^^^^^^^^^^^^^^^\n"
        f'  File "{torch_file}", line 1700, in relu\n'
        "    result = torch.relu(input)\n"
    )
    assert _source.user_source(node) == "blocks.py:40 in forward: return F.relu(self.fc(x))"
    node.meta["stack_trace"] = f'  File "{torch_file}", line 1700, in relu\n'
    assert _source.user_source(node) == "torch/nn/functional.py:1700 in relu"
    del node.meta["stack_trace"]
    assert _source.user_source(node) == ""


def test_dynamo_resume_functions_and_notebook_cells_read_as_people_name_them(tmp_path):
    assert _source.function_name("forward") == "forward"
    assert (
        _source.function_name("torch_dynamo_resume_in_forward_at_11")
        == "forward (resumed after line 11)"
    )
    # ipykernel compiles a cell to <tmp>/ipykernel_<pid>/<hash>.py
    assert _source.short_path(str(tmp_path / "ipykernel_4242" / "497510299.py")) == "cell"
