"""The ops Dynamo writes for optimizer steps and list updates, decomposed into ops with
translations: ``prims.fma`` (Dynamo's spelling of ``addcmul_`` with a value, and of
``add_`` with a tensor ``alpha``) and the ``_foreach_*`` ops (weight EMAs,
``clip_grad_norm_``, ``clip_grad_value_``). None has a translation: they ran in PyTorch,
cutting a compiled Adam step into two partitions and an EMA update into one per list op.
Each is what PyTorch computes: ``a * b + c`` for ``fma`` (its reference), and the
per-tensor op over the lists for a ``_foreach_*`` op.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

aten = torch.ops.aten


def fma(a: torch.Tensor, b: Any, c: torch.Tensor) -> Any:
    """Dynamo's spelling of ``addcmul_(t1, t2, value=v)`` and of ``add_(x, alpha=tensor)``
    (every Adam-family optimizer step), ``prims.fma``, has no translation; in PyTorch it
    runs as its reference, ``a * b + c``, which is what this is."""
    product = aten.mul.Tensor(a, b)
    return aten.add.Tensor(product, c)


_FOREACH = (
    "abs acos add addcdiv addcmul asin atan ceil clamp_max clamp_min clone copy cos cosh "
    "div erf erfc exp expm1 floor frac lerp lgamma log log10 log1p log2 max maximum "
    "minimum mm mul neg pow reciprocal round rsqrt sigmoid sign sin sinh sqrt sub tan "
    "tanh trunc zero"
).split()
"""The ``_foreach_*`` ops that are their per-tensor op over lists (``_foreach_norm`` is
``linalg_vector_norm``)."""


def _per_tensor(op: Callable[..., Any]) -> Callable[..., Any]:
    """``_foreach_<op>`` as ``op`` on each tensor: list arguments (tensors, or numbers
    of a ``ScalarList``) are taken element by element, the others passed whole."""

    def decompose(*args: Any, **kwargs: Any) -> Any:
        count = next(len(a) for a in args if isinstance(a, (list, tuple)))
        return [
            op(*(a[i] if isinstance(a, (list, tuple)) else a for a in args), **kwargs)
            for i in range(count)
        ]

    return decompose


def _per_tensor_addc(op: Callable[..., Any]) -> Callable[..., Any]:
    """``_foreach_addcmul``/``addcdiv``: their per-tensor op takes ``value`` by keyword."""

    def decompose(tensors: Any, tensors1: Any, tensors2: Any, value: Any = 1) -> Any:
        values = value if isinstance(value, (list, tuple)) else [value] * len(tensors)
        return [op(*abc, value=v) for *abc, v in zip(tensors, tensors1, tensors2, values)]

    return decompose


def foreach_norm(tensors: Sequence[torch.Tensor], ord: Any = 2, dtype: Any = None) -> Any:
    return [aten.linalg_vector_norm.default(t, ord, dtype=dtype) for t in tensors]


def table() -> dict[Any, Any]:
    """The decompositions, by op: ``prims.fma``, and the ``_foreach_*`` ops (EMA updates,
    ``clip_grad_norm_``, optimizers with ``foreach=True`` compiled whole), each its
    per-tensor op. (``addcmul``/``addcdiv`` with a tensor of values, one per tensor, and
    ``maximum``/``minimum`` with numbers keep their op.)"""
    table: dict[Any, Any] = {
        torch.ops.prims.fma.default: fma,
        aten._foreach_norm.Scalar: foreach_norm,
    }
    for name in _FOREACH:
        packet = getattr(aten, f"_foreach_{name}", None)
        per_tensor = getattr(aten, name, None)
        if packet is None or per_tensor is None:
            continue
        for overload in packet.overloads():
            if overload.endswith("out") or (name.startswith("addc") and overload == "Tensor"):
                continue
            if name in ("maximum", "minimum") and overload.startswith("Scalar"):
                continue  # maximum/minimum take no number
            per = _per_tensor_addc if name.startswith("addc") else _per_tensor
            table[getattr(packet, overload)] = per(per_tensor)
    return table
