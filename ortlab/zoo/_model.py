"""The :class:`ZooModel` record, its training :class:`Objective`, and the functions every
zoo builder shares."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from ortlab import errors

TIERS = ("teaching", "corpus")
"""The zoo's tiers: hand-written teaching models, and the public-architecture corpus."""

FAMILIES = ("vision", "text", "decoder", "encoder-decoder", "audio", "multimodal")
"""The families of the corpus tier, in presentation order."""


@dataclasses.dataclass(frozen=True)
class Objective:
    """How a model trains the way its users train it: with its own loss, computed inside
    its forward from labels (``loss = model(**inputs, labels=y).loss``).

    Attributes:
        loss: The loss in a few words, e.g. ``"cross-entropy on class labels"``.
        model_class: The class that computes it, e.g. ``"BertForSequenceClassification"``
            (a training head where the inference model has none).
        build: Builds that model, deterministically (same weights on every call), in
            ``eval()`` mode; called with :attr:`make_inputs`' keywords it returns an output
            whose ``loss`` is the scalar loss.
        make_inputs: Returns the keyword inputs of a training step for a batch size, the
            labels included, deterministically.
        note: Why the training model is not the inference model's class, where it is not.
    """

    loss: str
    model_class: str
    build: Callable[[], nn.Module]
    make_inputs: Callable[[int], dict[str, Any]]
    note: str = ""


@dataclasses.dataclass(frozen=True)
class ZooModel:
    """One example model of the zoo.

    Attributes:
        name: Short identifier, e.g. ``"mlp"``; the key of :func:`get`.
        description: One line for tables.
        build: Builds a fresh model, deterministically (same weights on every call), in
            ``eval()`` mode.
        make_inputs: Returns the example positional inputs for a batch size,
            deterministically.
        batch_sizes: The batch-size sweep, ascending; several sizes above 1 and usually 1.
        default_batch: The batch size used when none is given; one of ``batch_sizes``.
        trainable: Whether gradients make sense (floating parameters on the path to the
            output and a differentiable graph).
        atol: Absolute tolerance an ONNX Runtime result (float32) should meet against eager.
        rtol: Relative tolerance an ONNX Runtime result (float32) should meet against eager.
        dynamo_config: ``torch._dynamo.config`` overrides the model needs, e.g.
            ``{"capture_dynamic_output_shape_ops": True}``; apply them with
            ``torch._dynamo.config.patch(**model.dynamo_config)``. Stored read-only.
        expects_fallback: True when part of the model is expected to stay in eager PyTorch
            (an op without an ONNX translation, a data-dependent op).
        tier: ``"teaching"`` (the hand-written models of :func:`names`) or ``"corpus"``
            (public architectures, :func:`corpus_names`).
        family: For corpus models, one of :data:`FAMILIES`; empty for teaching models.
        architecture: The public architecture, e.g. ``"ResNet"`` or ``"GPT-2"``.
        ci: Whether the model belongs to the fast subset the test suite compiles.
        followup_inputs: For decoder language models: given the eager model and a batch
            size, returns the positional inputs of a second call, one decode step with a
            key/value cache filled by an eager prefill on that model. Returns fresh objects
            on every call (a forward mutates the cache), deterministically. ``None`` for
            models that have no second call.
        grad_atol: Absolute tolerance of parameter gradients against eager, where measured.
        grad_rtol: Relative tolerance of parameter gradients against eager, where measured.
        objective: How the model trains with its own loss (:class:`Objective`); ``None``
            for models without one (the teaching tier), which train on a projection of
            their output.
    """

    name: str
    description: str
    build: Callable[[], nn.Module]
    make_inputs: Callable[[int], tuple]
    batch_sizes: tuple[int, ...]
    default_batch: int
    trainable: bool
    atol: float
    rtol: float
    # hash=False: a mappingproxy is unhashable, and leaving it out keeps ZooModel hashable.
    dynamo_config: Mapping[str, object] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({}), hash=False
    )
    expects_fallback: bool = False
    tier: str = "teaching"
    family: str = ""
    architecture: str = ""
    ci: bool = False
    followup_inputs: Callable[[nn.Module, int], tuple] | None = None
    grad_atol: float | None = None
    grad_rtol: float | None = None
    objective: Objective | None = None

    def __post_init__(self) -> None:
        # Copy, so that mutating the dict passed in cannot change a frozen ZooModel.
        object.__setattr__(
            self, "dynamo_config", types.MappingProxyType(dict(self.dynamo_config))
        )
        object.__setattr__(self, "batch_sizes", tuple(self.batch_sizes))
        if self.default_batch not in self.batch_sizes:
            raise errors.UnsupportedOptionError(
                f"ZooModel {self.name!r}: default_batch={self.default_batch} is not one of "
                f"batch_sizes={self.batch_sizes}; add it to the sweep or pick one of them."
            )
        if self.tier not in TIERS:
            raise errors.UnsupportedOptionError(
                f"ZooModel {self.name!r}: tier={self.tier!r} is not one of {TIERS}."
            )
        if self.tier == "corpus" and self.family not in FAMILIES:
            raise errors.UnsupportedOptionError(
                f"ZooModel {self.name!r}: a corpus model needs a family, one of {FAMILIES}; "
                f"got {self.family!r}."
            )

    def _check_batch(self, batch: int | None) -> int:
        if batch is None:
            return self.default_batch
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise errors.UnsupportedOptionError(
                f"ZooModel {self.name!r}: batch must be an int >= 1, got {batch!r}."
            )
        return batch

    def example_inputs(self, batch: int | None = None) -> tuple:
        """Returns the example positional inputs for ``batch``.

        Args:
            batch: Batch size; ``None`` means :attr:`default_batch`. Any size >= 1 works,
                not only those of :attr:`batch_sizes`.

        Returns:
            The positional inputs, ready for ``model(*inputs)``.
        """
        return self.make_inputs(self._check_batch(batch))

    def followup_example_inputs(self, model: nn.Module, batch: int | None = None) -> tuple:
        """Returns the inputs of the second call (a cached decode step) for ``batch``.

        Args:
            model: The eager model whose prefill fills the cache (e.g. from :meth:`build`).
            batch: Batch size; ``None`` means :attr:`default_batch`.

        Returns:
            Fresh positional inputs, ready for ``model(*inputs)``.

        Raises:
            UnsupportedOptionError: The model has no second call (:attr:`followup_inputs`
                is ``None``).
        """
        if self.followup_inputs is None:
            raise errors.UnsupportedOptionError(
                f"ZooModel {self.name!r} has no follow-up call (only decoder language "
                "models do)."
            )
        return self.followup_inputs(model, self._check_batch(batch))

    def training_inputs(self, batch: int | None = None) -> dict[str, Any]:
        """Returns the keyword inputs of a training step (labels included) for ``batch``.

        Args:
            batch: Batch size; ``None`` means :attr:`default_batch`.

        Returns:
            Fresh keyword inputs, ready for ``objective.build()(**inputs).loss``.

        Raises:
            UnsupportedOptionError: The model has no :attr:`objective`.
        """
        if self.objective is None:
            raise errors.UnsupportedOptionError(
                f"ZooModel {self.name!r} has no training objective (the corpus models do); "
                "train it on a projection of its output."
            )
        return self.objective.make_inputs(self._check_batch(batch))

    def instantiate(self, batch: int | None = None) -> tuple[nn.Module, tuple]:
        """Builds a fresh model together with its example inputs.

        Args:
            batch: Batch size of the inputs; ``None`` means :attr:`default_batch`.

        Returns:
            ``(model, inputs)`` with ``model(*inputs)`` ready to run.
        """
        return self.build(), self.example_inputs(batch)


def seeded_build(factory: Callable[[], nn.Module]) -> nn.Module:
    """Calls ``factory`` under seed 0 without moving the caller's RNG; returns it in eval."""
    # fork_rng so that building a model never moves the caller's global RNG; devices=[]
    # because the zoo builds on CPU and forking CUDA RNGs would initialise CUDA.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = factory()
    return model.eval()


def generator(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``, for deterministic example inputs."""
    return torch.Generator().manual_seed(seed)
