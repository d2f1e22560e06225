"""Lazy imports of optional dependencies, with install hints.

The backend never needs these; views, plots and the magic import them through
:func:`require` so that a missing package raises an error naming the extra to install.
"""

from __future__ import annotations

import importlib
from typing import Any

from ortlab import errors

# module name -> (pip package, ortlab extra)
_HINTS: dict[str, tuple[str, str]] = {
    "ipywidgets": ("ipywidgets", "notebook"),
    "IPython": ("ipython", "notebook"),
    "matplotlib": ("matplotlib", "notebook"),
    "pandas": ("pandas", "notebook"),
    "graphviz": ("graphviz", "notebook"),
    "transformers": ("transformers", "zoo"),
    "tqdm": ("tqdm", "notebook"),
    "nbformat": ("nbformat", "notebook"),
    "nbclient": ("nbclient", "notebook"),
    "nbconvert": ("nbconvert", "notebook"),
    "jupyter_client": ("jupyter_client", "notebook"),
    "openvino": ("openvino", "peers"),
}


def require(module: str) -> Any:
    """Imports ``module`` or raises :class:`~ortlab.errors.MissingDependencyError`.

    Args:
        module: Importable module name, e.g. ``"ipywidgets"`` or ``"matplotlib.pyplot"``.

    Returns:
        The imported module.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        package, extra = _HINTS.get(top, (top, "notebook"))
        raise errors.MissingDependencyError(
            f"ortlab needs the optional package {package!r} for this feature. "
            f"Install it with: pip install 'ortlab[{extra}]' (or pip install {package})."
        ) from e
