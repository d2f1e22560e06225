"""The architecture is the import direction: the backend never loads notebook packages,
and every package's ``__all__`` lists exactly its public names."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

HEAVY = ("ipywidgets", "IPython", "matplotlib", "graphviz", "pandas")


def test_importing_ortlab_and_compiling_loads_no_notebook_packages():
    code = (
        "import sys, torch, ortlab\n"
        "c = ortlab.compile(lambda x: x.sin())\n"
        "c(torch.randn(3))\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    ).stdout
    assert out.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize(
    "module",
    [
        "ortlab",
        "ortlab.backend",
        "ortlab.errors",
        "ortlab.zoo",
        "ortlab._numerics",
        "ortlab.views",
        "ortlab.views.numerics",
        "ortlab.magic",
    ],
)
def test_all_lists_public_names_only_and_completely(module):
    mod = importlib.import_module(module)
    names = mod.__all__
    assert len(names) == len(set(names))
    assert not [n for n in names if n.startswith("_")]
    for name in names:
        assert hasattr(mod, name), f"{module}.__all__ names missing {name}"
    # Every public class/function defined in the module itself is exported.
    defined = [
        n
        for n, v in vars(mod).items()
        if not n.startswith("_")
        and callable(v)
        and getattr(v, "__module__", "") == mod.__name__
    ]
    assert set(defined) <= set(names), set(defined) - set(names)
