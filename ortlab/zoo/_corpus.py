"""The corpus tier of the zoo: public architectures with random weights."""

from __future__ import annotations

from ortlab.zoo._model import ZooModel

MODELS: tuple[ZooModel, ...] = ()
