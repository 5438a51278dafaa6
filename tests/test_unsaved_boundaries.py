"""Stages whose boundaries no backward saves are merged (Note [Tensors no backward saves] in gpusolve/chain.py):
blocks that begin with a dropout collapse into one stage and nothing below plain autograd's peak fits. The error
says why and what to do (a review, 2026-11-28: bench/repros/rv7_train_seq_unsaved_boundaries.py)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import torch_exec as te
from gpusolve.errors import InfeasibleBudgetError

D = 32


class _DropoutFirst(nn.Module):
    def __init__(self):
        super().__init__()
        self.d, self.a, self.b = nn.Dropout(0.1), nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

    def forward(self, h):
        h = self.d(h)  # saves only its mask: the block's input is saved by no backward
        return h + self.b(torch.relu(self.a(h)))


def test_an_infeasible_budget_names_the_merged_boundaries():
    torch.manual_seed(0)
    stages = [nn.Linear(16, D)] + [_DropoutFirst() for _ in range(4)]
    w = te.CheckpointedSequential(stages, budget="50%", backend="cpu", profile_passes=1)
    with pytest.raises(InfeasibleBudgetError, match=r"merged.*Tensors no backward saves.*auto_checkpoint"):
        w.prepare(torch.randn(64, 16))
