"""The built-in example models: what they are, how to build them and feed them.

Each :class:`ZooModel` bundles a deterministic builder, deterministic example inputs for any
batch size, the batch-size sweep the notebooks and benchmarks use, and the tolerances an
ONNX Runtime result is expected to meet against eager PyTorch. The zoo has two tiers:

* the **teaching** tier (:func:`names`, :func:`all_models`): seven small models written for
  the lab. Two are deliberately awkward for the backend: ``"custom_op"`` holds an op with
  no ONNX translation and ``"data_dependent"`` has a data-dependent output shape, so parts
  of both stay in eager.
* the **corpus** tier (:func:`corpus_names`, :func:`corpus`): public architectures from
  ``transformers`` (ResNet, ViT, BERT, GPT-2, Llama, T5, Whisper, CLIP, ...) in small
  configurations with random weights, grouped by family. Decoder language models also
  describe a second call, a decode step with a key/value cache
  (:attr:`ZooModel.followup_inputs`). Each trains with its own loss
  (:attr:`ZooModel.objective`, :meth:`ZooModel.training_inputs`): the model with its
  training head, labels in, ``.loss`` out. The models flagged :attr:`ZooModel.ci` are the
  fast subset the test suite compiles.

:func:`get` finds a model of either tier by name.

Importing this package is cheap: ``transformers`` is imported only when a model that needs
it is built, and the custom op is registered only when ``"custom_op"`` is built.
"""

from __future__ import annotations

from ortlab import errors
from ortlab.zoo import _corpus, _teaching
from ortlab.zoo._model import FAMILIES, TIERS, Objective, ZooModel

__all__ = [
    # the record
    "ZooModel",
    "Objective",
    "TIERS",
    "FAMILIES",
    # any tier
    "get",
    # teaching tier
    "names",
    "all_models",
    # corpus tier
    "corpus_names",
    "corpus",
]

_BY_NAME: dict[str, ZooModel] = {m.name: m for m in (*_teaching.MODELS, *_corpus.MODELS)}
if len(_BY_NAME) != len(_teaching.MODELS) + len(_corpus.MODELS):  # pragma: no cover
    raise RuntimeError("ortlab.zoo: a corpus model reuses a name of the zoo")


def names() -> tuple[str, ...]:
    """Returns the names of the teaching models, in presentation order."""
    return tuple(m.name for m in _teaching.MODELS)


def all_models() -> tuple[ZooModel, ...]:
    """Returns every teaching model, in the order of :func:`names`."""
    return _teaching.MODELS


def corpus_names(family: str | None = None, *, ci: bool | None = None) -> tuple[str, ...]:
    """Returns the names of the corpus models, grouped by family.

    Args:
        family: Only this family (one of :data:`FAMILIES`); ``None`` means all.
        ci: ``True``: only the fast subset the test suite compiles; ``False``: only the
            others; ``None``: both.

    Returns:
        The names, in presentation order.

    Raises:
        UnsupportedOptionError: ``family`` is not one of :data:`FAMILIES`.
    """
    if family is not None and family not in FAMILIES:
        raise errors.UnsupportedOptionError(
            f"Unknown corpus family {family!r}; choose one of: {', '.join(FAMILIES)}."
        )
    return tuple(
        m.name
        for m in _corpus.MODELS
        if (family is None or m.family == family) and (ci is None or m.ci == ci)
    )


def corpus() -> tuple[ZooModel, ...]:
    """Returns every corpus model, in the order of :func:`corpus_names`."""
    return _corpus.MODELS


def get(name: str) -> ZooModel:
    """Returns the zoo model called ``name``, of either tier.

    Args:
        name: One of :func:`names` or :func:`corpus_names`.

    Returns:
        The :class:`ZooModel`.

    Raises:
        UnsupportedOptionError: ``name`` is not a zoo model.
    """
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise errors.UnsupportedOptionError(
            f"Unknown zoo model {name!r}; choose one of: {', '.join(names())} "
            f"(teaching), or of the corpus: {', '.join(corpus_names())}."
        ) from None
