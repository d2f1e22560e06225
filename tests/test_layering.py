"""The architecture is the import direction: the backend never loads notebook packages,
and every package's ``__all__`` lists exactly its public names."""

from __future__ import annotations

import ast
import importlib
import pathlib
import subprocess
import sys

import pytest

import ortlab as ortlab_package

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
        "ortlab.numerics",
        "ortlab.bench",
        "ortlab.profiling",
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


# Lower layers never import higher ones at module level (docs/architecture.md). Within a
# layer, numerics and bench use each other's leaf modules: bench compares outputs with
# numerics' comparator, the numerics sweep times with bench's engine; profiling times with
# the engine (and bench's Dynamo entry) and compares outputs with the comparator.
LAYERS = (
    ("ortlab.errors", "ortlab._deps", "ortlab._html"),
    ("ortlab.backend",),
    ("ortlab._harness",),
    ("ortlab.numerics", "ortlab.bench", "ortlab.profiling", "ortlab.zoo", "ortlab._notebooks"),
    ("ortlab.views",),
    ("ortlab.magic", "ortlab._demo", "ortlab.cli"),
)


def _layer(module: str) -> int | None:
    for index, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    return None


def _module_level_imports(path: pathlib.Path) -> set[str]:
    """Modules imported at module level (TYPE_CHECKING blocks included: coupling too);
    ortlab uses absolute imports only."""
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        nested = ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]
        for item in nested:
            if isinstance(item, ast.Import):
                found.update(a.name for a in item.names)
            elif isinstance(item, ast.ImportFrom) and item.module:
                found.add(item.module)
                found.update(f"{item.module}.{a.name}" for a in item.names)
    return {m for m in found if m.startswith("ortlab")}


def test_modules_import_only_their_own_layer_or_below():
    root = pathlib.Path(ortlab_package.__file__).parent
    wrong = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        module = ".".join(parts).removesuffix(".__init__")
        own = _layer(module)
        if own is None:  # the package itself re-exports every layer
            continue
        for imported in _module_level_imports(path):
            layer = _layer(imported)
            if layer is not None and layer > own:
                wrong.append(f"{module} (layer {own}) imports {imported} (layer {layer})")
    assert not wrong, "\n".join(wrong)
    assert _layer("ortlab.numerics._compare") == _layer("ortlab.bench._engine") == 3


PRIVATE_API_HOMES = ("backend/_torch_private.py", "backend/_ort_private.py")


def _is_private(dotted: str) -> bool:
    """A torch module path or attribute with a private part (``torch._ops``,
    ``torch.utils._sympy``), or ONNX Runtime's bindings; ops (``torch.ops.aten._foo``)
    and dunders (``torch.__version__``) are not."""
    if ".capi" in dotted or dotted.startswith("onnxruntime.capi"):
        return True
    if not dotted.startswith("torch.") or dotted.startswith("torch.ops."):
        return False
    return any(p.startswith("_") and not p.startswith("__") for p in dotted.split("."))


def _private_api_uses(source: str) -> list[str]:
    """Names in code (strings and comments aside) that reach into torch's private modules
    (``torch._ops``, ``torch._dynamo`` …) or ONNX Runtime's bindings (``capi``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            dotted = ast.unparse(node)
            if _is_private(dotted):
                found.append(dotted)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if _is_private(node.module):
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if _is_private(a.name)]
    return found


def test_private_torch_and_onnxruntime_apis_are_used_in_their_two_modules_only():
    root = pathlib.Path(ortlab_package.__file__).parent
    uses = {
        str(path.relative_to(root)): found
        for path in sorted(root.rglob("*.py"))
        if str(path.relative_to(root)) not in PRIVATE_API_HOMES
        and (found := _private_api_uses(path.read_text(encoding="utf-8")))
    }
    assert not uses, uses
    # the check sees what it looks for, and only that
    planted = _private_api_uses(
        "import torch._dynamo\nx = torch._ops.OpOverload\nfrom torch.utils._sympy import f\n"
    )
    assert {"torch._dynamo", "torch._ops.OpOverload", "torch.utils._sympy"} <= set(planted)
    assert _private_api_uses("y = torch.ops.aten._local_scalar_dense.default\n") == []
    assert _private_api_uses('v = torch.__version__; "torch._dynamo"  # torch._ops\n') == []
