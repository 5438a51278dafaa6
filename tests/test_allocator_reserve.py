"""Note [Allocator blocks] (torch_exec/_util.py): on a CUDA device every plan reserves one cached block
the caching allocator may hand over unsplit, once per step (a join's too), unless expandable segments
are on. The device is faked where it must be CUDA (the rule is replaced by one that answers for the CPU):
what is checked is that the reserve reaches the byte model exactly once."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
from torch_exec import _util as U  # noqa: E402
from torch_exec.executor import least_budget_bytes  # noqa: E402
from gpusolve.join.dp import min_peak_join  # noqa: E402
from _torch_helpers import DT  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::torch_exec.CPUTimingWarning", "ignore::gpusolve.FallbackWarning")

OPTS = dict(profile_passes=1, profile_warmup=0)
MiB = 1 << 20


@pytest.mark.parametrize("settings, expandable", [
    ("", False), ("max_split_size_mb:128,expandable_segments:False", False),
    ("max_split_size_mb:128,expandable_segments:True", True), ("expandable_segments : True", True),
    ("expandable_segments:True,expandable_segments:False", False),  # torch keeps the last entry
    ("expandable_segments:true", False),                            # torch takes only "True"
])
def test_the_rule_reserves_one_remainder_on_cuda_without_expandable_segments(monkeypatch, settings, expandable):
    """What torch parsed decides (its settings accessor), whatever the environment says."""
    monkeypatch.setattr(torch._C, "_accelerator_getAllocatorSettings", lambda: settings, raising=False)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True" if not expandable else "")
    assert U.ALLOCATOR_REMAINDER == MiB and U.allocator_reserve_bytes("cpu") == 0
    assert U.expandable_segments() is expandable
    assert U.allocator_reserve_bytes("cuda") == (0 if expandable else MiB)


def test_without_torch_s_accessor_the_variable_older_torch_reads_decides(monkeypatch):
    monkeypatch.delattr(torch._C, "_accelerator_getAllocatorSettings", raising=False)
    monkeypatch.delattr(torch._C, "_accelerator_setAllocatorSettings", raising=False)
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")  # older torch does not read it
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    assert U.allocator_reserve_bytes("cuda") == MiB
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64,expandable_segments:True")
    assert U.allocator_reserve_bytes("cuda") == 0

    def broken():
        raise RuntimeError("no allocator")
    monkeypatch.setattr(torch._C, "_accelerator_getAllocatorSettings", broken, raising=False)
    assert U.allocator_reserve_bytes("cuda") == 0  # the accessor failed: the variable


def test_torch_2_11_reads_the_new_variable_where_the_old_one_is_unset(monkeypatch):
    # torch 2.11 has the accelerator's allocator settings (a setter) but no accessor: it reads PYTORCH_CUDA_ALLOC_CONF
    # where set, else PYTORCH_ALLOC_CONF (checked 2026-11-29: a bad key in the one it reads raised)
    monkeypatch.delattr(torch._C, "_accelerator_getAllocatorSettings", raising=False)
    monkeypatch.setattr(torch._C, "_accelerator_setAllocatorSettings", lambda text: None, raising=False)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    assert U.allocator_reserve_bytes("cuda") == 0
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64")  # torch reads this one alone
    assert U.allocator_reserve_bytes("cuda") == MiB


def stages():
    torch.manual_seed(0)
    layers = [nn.Linear(16, 32)]
    for _ in range(5):
        layers += [nn.Tanh(), nn.Linear(32, 32)]
    return nn.Sequential(*layers, nn.Linear(32, 1)).to(DT)


def prepared(budget="1GiB"):
    model = te.CheckpointedSequential(stages(), budget=budget, bucket=1, **OPTS)
    model.prepare(torch.randn(8, 16, dtype=DT, requires_grad=True))
    return model


def test_a_chain_plan_reserves_it_once(monkeypatch):
    without = prepared()
    monkeypatch.setattr(U, "allocator_reserve_bytes", lambda device_type: MiB)
    model = prepared()
    a, b = without._last.exec_chain, model._last.exec_chain
    assert b.reserved_bytes - a.reserved_bytes == MiB
    # the chain model's least budget (min_budget_bytes is the lower of it and plain autograd's measured peak)
    assert least_budget_bytes(b, None) - least_budget_bytes(a, None) == MiB
    assert any("one unsplit allocator block (1048576 B" in n for n in b.provenance["notes"])
    # the plain chain (what plain autograd holds, measured) does not get it
    assert model._last.plain_chain.reserved_bytes == without._last.plain_chain.reserved_bytes


def test_a_join_reserves_it_once_not_per_branch(monkeypatch):
    def make():
        torch.manual_seed(1)
        towers = [[nn.Linear(6, 12).to(DT), nn.Tanh(), nn.Linear(12, 12).to(DT)] for _ in range(3)]
        return towers, (lambda *outs: sum(o.square().mean() for o in outs))
    xs = [torch.randn(5, 6, dtype=DT, requires_grad=True) for _ in range(3)]

    def join():
        towers, head = make()
        j = te.CheckpointedJoin(towers, head, budget="1GiB", **OPTS)
        j.prepare(*xs)
        return j
    without = join()
    monkeypatch.setattr(U, "allocator_reserve_bytes", lambda device_type: MiB)
    with_reserve = join()
    assert with_reserve.net.reserved_bytes - without.net.reserved_bytes == MiB
    assert with_reserve._last.plain_net.reserved_bytes == without._last.plain_net.reserved_bytes
    assert [c.reserved_bytes for c in with_reserve.net.branches] == [c.reserved_bytes for c in without.net.branches]
    # the join model's least budget (min_budget_bytes is the lower of it and plain autograd's measured peak)
    assert min_peak_join(with_reserve.net).min_bytes - min_peak_join(without.net).min_bytes == MiB
