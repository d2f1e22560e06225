"""Where an FX node or a graph comes from in the user's code: stack-trace frames, the
user's source line, readable paths and function names.

# NOTE: Dynamo records each node's ``stack_trace`` (the lowering keeps it) and the
# frame it compiled. The user's code is what is outside torch and ortlab: a ``F.linear``
# call points at the user's line, not at ``torch/nn/functional.py``; a graph of torch
# modules alone (a ``Sequential``) is named by its outermost module. Verdicts, graph
# records and the views all name code through this module.
"""

from __future__ import annotations

import os
import re

import torch
import torch.fx

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
# ortlab's own wrappers (the lab's fresh entry points, the magic's call) are not the
# user's code either.
_ORTLAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


_DYNAMO_DIR = os.path.join(_TORCH_DIR, "_dynamo") + os.sep


def is_dynamo_file(path: str) -> bool:
    """Whether ``path`` is Dynamo's own code (its wrappers around a compiled call)."""
    return os.path.abspath(path).startswith(_DYNAMO_DIR)


def is_users_file(path: str) -> bool:
    """Whether ``path`` is the user's code: not inside torch or ortlab."""
    absolute = os.path.abspath(path)
    return not absolute.startswith((_TORCH_DIR, _ORTLAB_DIR))


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>\S+)\s*$')


_RESUMED = re.compile(r"^torch_dynamo_resume_in_(?P<name>.+)_at_(?P<line>\d+)$")


def function_name(name: str) -> str:
    """A code object's name as people read it: Dynamo's resume functions (the code after
    a graph break, ``torch_dynamo_resume_in_forward_at_11``) read ``"forward (resumed
    after line 11)"``."""
    match = _RESUMED.match(name)
    if match is None:
        return name
    return f"{match['name']} (resumed after line {match['line']})"


_WRAPPER_NAMES = frozenset(
    {"wrapper", "wrapped", "_wrapper", "inner", "decorator", "decorated"}
)
"""The names decorators give the function they return (``functools.wraps`` keeps the
code object's own name, which is what a stack shows)."""


def is_decorator_wrapper(frame: tuple[str, int, str, str]) -> bool:
    """Whether a stack frame ``(file, line, name, code)`` is a library decorator's
    wrapper (:data:`_WRAPPER_NAMES`, in an installed package: the user's own function
    named ``inner`` keeps its name)."""
    file, _, name, _ = frame
    return name in _WRAPPER_NAMES and any(
        part in file for part in ("site-packages", "dist-packages")
    )


def short_path(path: str) -> str:
    """A path as people read it: ``"cell"`` for a notebook cell, from the package down
    when installed (``transformers/models/gpt2/modeling_gpt2.py``), else relative to the
    working directory when under it, else the file name."""
    absolute = os.path.abspath(path)
    if os.path.basename(os.path.dirname(absolute)).startswith("ipykernel_"):
        return "cell"  # a notebook cell (ipykernel names its code after a hash)
    for marker in ("site-packages" + os.sep, "dist-packages" + os.sep):
        if marker in absolute:
            return absolute.split(marker, 1)[1]
    cwd = os.getcwd() + os.sep
    if absolute.startswith(cwd):
        return absolute[len(cwd) :]
    return os.path.basename(absolute)


def _frames(trace: str) -> list[tuple[str, int, str, str]]:
    """``(file, line, function, code)`` per frame of a ``stack_trace``, outermost first."""
    frames: list[tuple[str, int, str, str]] = []
    lines = trace.splitlines()
    for i, line in enumerate(lines):
        match = _FRAME.match(line)
        if match is None:
            continue
        code = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if _FRAME.match(code):
            code = ""
        frames.append((match["file"], int(match["line"]), match["name"], code))
    return frames


def outer_frames(graph_module: torch.fx.GraphModule) -> list[tuple[str, int, str, str]]:
    """The frames of the first node stack trace of the graph that has user code, from its
    outermost user frame down (or, for a graph of torch modules only, from its outermost
    frame outside Dynamo's wrappers); ``[]`` when no node has a stack trace."""
    fallback: list[tuple[str, int, str, str]] = []
    for node in graph_module.graph.nodes:
        frames = _frames(node.meta.get("stack_trace") or "")
        for i, frame in enumerate(frames):
            if is_users_file(frame[0]):
                return frames[i:]
        if not fallback:
            fallback = [f for f in frames if not is_dynamo_file(f[0])]
    return fallback


def outer_module(graph_module: torch.fx.GraphModule) -> str:
    """``"Sequential.forward"``: the outermost module of the graph's first node that
    records its module stack (a graph of torch modules has no user frames); ``""``."""
    for node in graph_module.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if stack:
            _, module_class = next(iter(stack.values()))
            return f"{getattr(module_class, '__name__', module_class)}.forward"
    return ""


def user_source(node: torch.fx.Node) -> str:
    """Where ``node`` comes from in the user's code: ``"model.py:12 in forward: y = f(x)"``.

    The innermost frame of the node's ``stack_trace`` (Dynamo records it; the lowering
    keeps it) that is not inside torch or ortlab, so a ``F.linear`` call points at the
    user's line, not at ``torch/nn/functional.py``. ``""`` when the node has none.
    """
    trace = node.meta.get("stack_trace")
    if not trace:
        return ""
    frames = _frames(trace)
    if not frames:
        return ""
    outside = [f for f in frames if is_users_file(f[0])]
    file, line, name, code = (outside or frames)[-1]
    text = f"{short_path(file)}:{line} in {function_name(name)}"
    return f"{text}: {code}" if code else text
