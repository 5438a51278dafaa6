"""What the repros share: the tree they import (``GS_ROOT``, default this repository) and their MLP."""
import os
import sys
import warnings
from pathlib import Path

ROOT = os.environ.get("GS_ROOT", str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, ROOT)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402,N812
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402

warnings.simplefilter("ignore")
torch.set_num_threads(1)


class M(nn.Module):
    """L x (Linear, ReLU), a linear head and cross-entropy inside; ``return_input``: (loss, x)."""

    def __init__(self, D=64, L=4, classes=10, return_input=False):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(D, D), nn.ReLU()) for _ in range(L))
        self.head = nn.Linear(D, classes)
        self.return_input = return_input

    def forward(self, x, y):
        h = x
        for layer in self.layers:
            h = layer(h)
        loss = F.cross_entropy(self.head(h), y)
        return (loss, x) if self.return_input else loss


__all__ = ["F", "M", "nn", "te", "torch"]
