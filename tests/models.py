"""Small models shared by several test files (import as ``from models import Net``)."""

from __future__ import annotations

import torch
from torch import nn


class Net(nn.Module):
    """Two linear layers, a ReLU, a sigmoid and a buffer: parameters and a buffer to
    freeze, and nothing that stays in PyTorch."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)
        self.register_buffer("offset", torch.full((4,), 0.25))

    def forward(self, x):
        return torch.sigmoid(self.fc2(torch.relu(self.fc1(x)))) + self.offset


class LabelledClassifier(nn.Module):
    """A linear classifier whose call takes ``labels=`` and returns the loss, as
    transformers' models do."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x, labels=None):
        return nn.functional.cross_entropy(self.linear(x), labels)


def encoder_masks(kind: str, mask_keyword: str) -> dict[str, torch.Tensor | bool]:
    """Keyword arguments of a transformer encoder (layer) on a [3, 6, d] batch: no mask
    (``"none"``), a key padding mask with a padded tail in the second sequence
    (``"padding"``), or a causal mask (``"causal"``, passed as ``mask_keyword``)."""
    if kind == "padding":
        padding = torch.zeros(3, 6, dtype=torch.bool)
        padding[1, 4:] = True
        return {"src_key_padding_mask": padding}
    if kind == "causal":
        causal = nn.Transformer.generate_square_subsequent_mask(6)
        return {mask_keyword: causal, "is_causal": True}
    return {}
