"""Plans that offload checkpoints to pinned host memory, on a CUDA device: the measured peak holds the
budget, gradients equal plain autograd's, the host link is measured, the copies run on their own stream.

Skipped without a CUDA device. Memory is ``torch.cuda.max_memory_allocated`` above the bytes allocated
just before the step (parameters, their already-allocated gradients and the input): what the budget
counts. Pinned host buffers are host memory and do not count.
"""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device for torch"),
              pytest.mark.filterwarnings("ignore::gpusolve.FallbackWarning")]

import torch_exec as te  # noqa: E402
from gpusolve import store_all_peak_bytes  # noqa: E402
from gpusolve.offload.dp import min_offload_bytes  # noqa: E402
from gpusolve.offload.link import Link  # noqa: E402
from gpusolve.schedule import OpKind  # noqa: E402
from torch_exec.offload import HostCopies, measure_link  # noqa: E402
from _torch_helpers import assert_grads_close  # noqa: E402
from _torch_helpers import cuda_net as net  # noqa: E402
from _torch_helpers import measure_cuda_step as measure_step  # noqa: E402

# Copies priced at nothing: the solver swaps wherever it saves memory (the memory checks do not depend on
# the link's speed: a release waits for its copy, a prefetch holds its block from its issue).
FAST = Link(float("inf"), float("inf"))


@pytest.fixture(scope="module")
def setup():
    targets = torch.randint(0, 10, (64,), device="cuda")
    x = torch.randn(64, 3, 64, 64, device="cuda")
    probe = te.CheckpointedSequential(net(targets), budget="64GiB", profile_passes=3, offload=FAST)
    probe.prepare(x)
    return targets, x, probe._last.profile, probe._last.exec_chain


def test_measure_link_positive():
    result = measure_link(sizes=(1 << 20, 8 << 20, 32 << 20), repeats=3)
    assert result["d2h_bytes_per_ms"] > 0 and result["h2d_bytes_per_ms"] > 0 and result["latency_ms"] >= 0
    link = Link.from_dict(result)
    assert link.d2h_ms(1 << 20) > 0 and not link.is_useless
    assert len(result["points"]) == 6 and result["device"]


def test_host_copies_round_trip_on_cuda():
    copies = HostCopies("cuda")
    assert copies.cuda and copies.stream is not None
    st = copies.step()
    a = torch.randn(8, 16, 12, 12, device="cuda").to(memory_format=torch.channels_last)
    h = torch.randn(64, 256, device="cuda")
    state = (a, torch.arange(5, device="cuda"), h[:, ::2])  # the view is not dense: no temporary (Note [Exact copies])
    want = tuple(t.clone() for t in state)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    st.offload(2, state)
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() == before  # the copy to the host allocates nothing on the device
    state = (a * 2, state[1], None)  # compute continues while the copy runs; a_2 stays readable
    st.release(2)
    st.prefetch(2)
    back = st.acquire(2)
    torch.cuda.synchronize()
    assert all(torch.equal(g, w) for g, w in zip(back, want, strict=True))
    assert back[0].is_cuda and back[0].is_contiguous(memory_format=torch.channels_last)
    assert back[2].stride() == (256, 2) and back[2].untyped_storage().nbytes() == h.untyped_storage().nbytes()
    bufs = [store.host for store in st.slots[2][2]]
    assert all(b.is_pinned() for b in bufs)
    st.close()
    assert {id(b) for b in bufs} == {id(b) for b in copies.buffers()}


def test_release_does_not_block_the_host_and_the_reused_block_waits_for_the_copy():
    """Note [Release in stream order]: release returns while the copy to the host is still queued (the
    compute stream sleeps before it), and a block the allocator hands out again at once is written only
    after the copy has read it: the host copy holds a_s's values."""
    copies = HostCopies("cuda")
    st = copies.step()
    a = torch.randn(16 << 20, device="cuda")  # 64 MiB
    want = a.cpu()
    torch.cuda.synchronize()
    torch.cuda._sleep(400_000_000)  # ~0.2 s of GPU time ahead of the copy on the compute stream
    st.offload(1, a)
    event = st.done[1]
    st.release(1, a)
    assert not event.query(), "release waited on the host for the copy"
    del a
    b = torch.full((16 << 20,), 7.0, device="cuda")  # may reuse a_1's block: queued behind the wait
    st.prefetch(1)
    back = st.acquire(1)
    torch.cuda.synchronize()
    assert torch.equal(back.cpu(), want) and bool((b == 7).all())
    st.close()


def low_budget(chain, where: float = 0.1) -> int:
    """A budget ``where`` of the way from the least the combined class can run in to the store-all peak:
    near the least, the plan offloads (copies cost nothing over FAST) and the 1024-bucket DP finds one."""
    lo, hi = min_offload_bytes(chain), store_all_peak_bytes(chain)
    return int(lo + where * (hi - lo))


@pytest.mark.parametrize("where", [0.1, 0.4, 0.7])
def test_measured_peak_within_budget_with_offloading(setup, where):
    targets, x, profile, chain = setup
    budget = low_budget(chain, where)
    model = te.CheckpointedSequential(net(targets), budget=budget, offload=FAST)
    model.prepare(x, profile=profile)
    swaps = any(op.kind is OpKind.OFFLOAD for op in model.plan.schedule)
    if where == 0.1:
        assert swaps, "the plan does not offload"
    copies = model._last.copies
    assert (copies is not None) == swaps
    measure_step(model, x)  # warm-up: allocator, cuDNN, the pinned host buffers of the plan
    allocations = copies.allocations if swaps else 0
    for p in model.parameters():
        p.grad.zero_()
    peak = measure_step(model, x)
    if swaps:
        assert copies.allocations == allocations and copies.buffers()  # pinned once per plan
        assert all(b.is_pinned() for b in copies.buffers())
    predicted = model.plan.predicted_peak_bytes
    assert peak <= budget, f"measured peak {peak} B exceeds the budget {budget} B (predicted {predicted} B)"


def test_gradients_match_plain_autograd_with_offloading(setup):
    targets, x, profile, chain = setup
    ref = net(targets)
    model = copy.deepcopy(ref)
    wrapped = te.CheckpointedSequential(model, budget=low_budget(chain), offload=FAST)
    wrapped.prepare(x, profile=profile)
    assert wrapped.plan.swaps > 0
    assert_two_steps_match(ref, model, wrapped, x)


def assert_two_steps_match(ref, model, run, x):
    """Two steps of ``run`` (over ``model``'s parameters; the second reuses the pinned buffers) give
    ``ref``'s gradients and buffers, at the GPU tests' tolerances."""
    for _ in range(2):
        for p in list(ref.parameters()) + list(model.parameters()):
            p.grad = None
        torch.manual_seed(1)
        ref(x).backward()
        torch.manual_seed(1)
        run(x).backward()
        assert_grads_close(ref, model)


def test_measured_link_option(setup):
    targets, x, profile, chain = setup
    ref = net(targets)
    model = copy.deepcopy(ref)
    wrapped = te.CheckpointedSequential(model, budget=low_budget(chain, 0.4), offload="measure")
    wrapped.prepare(x, profile=profile)
    link = wrapped._last.link
    assert link is not None and link.d2h_bytes_per_ms > 0 and link.h2d_bytes_per_ms > 0
    assert wrapped.link_for(x.device) is link  # measured once per device
    torch.manual_seed(1)
    ref(x).backward()
    torch.manual_seed(1)
    wrapped(x).backward()
    assert_grads_close(ref, model, buffers=False)


def test_op_clock_on_cuda_times_every_op_on_the_compute_stream(setup):
    """torch_exec.opclock.OpClock with CUDA events: one time per op, in schedule order, across the
    forward's program and the backward's (which autograd runs on a thread of its own); they add up to
    about the step's own time."""
    from torch_exec.opclock import OpClock
    targets, x, profile, chain = setup
    wrapped = te.CheckpointedSequential(net(targets), budget=low_budget(chain, 0.4), offload=FAST)
    wrapped.prepare(x, profile=profile)
    wrapped(x).backward()  # warm-up
    schedule = wrapped.plan.schedule
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with OpClock(x.device) as clock:
        start.record()
        wrapped(x).backward()
        end.record()
    ops = clock.ops()
    assert [(code, s) for code, s, *_ in ops] == [(te.executor._CODES[op.kind], op.stage) for op in schedule]
    assert all(ms >= 0 and host >= 0 for *_, ms, host in ops)
    total = sum(m[3] for m in ops)
    assert 0 < total <= start.elapsed_time(end) * 1.01  # the loss and autograd's own work are outside the ops


def test_paper_plan_on_cuda_matches_autograd_and_holds_its_budget(setup):
    """torch_exec.paper_offload on a device: the offloading paper's plan (tapes to pinned host memory and
    back on the copy stream, no recomputation) gives plain autograd's gradients, pins its buffers once,
    and its measured peak holds the budget, below plain autograd's."""
    from gpusolve.offload.compare import paper_least_bytes, paper_plan
    from torch_exec.paper_offload import PaperOffloadRunner, planning_instance
    targets, x, profile, _ = setup
    ref = net(targets)
    model = copy.deepcopy(ref)
    wrapped = te.CheckpointedSequential(model, budget="64GiB")
    wrapped.prepare(x, profile=profile)
    chain = planning_instance(wrapped, x)  # the caller's loss, its seed and one allocator block reserved
    link = Link.parse("50GB/s")
    top = store_all_peak_bytes(wrapped._last.plain_chain)
    budget = (paper_least_bytes(chain, link, True) + top) // 2
    plan = paper_plan(chain, budget, link)
    assert plan.decisions
    runner = PaperOffloadRunner(wrapped._last.groups, plan, x.device, modules=[model])
    assert_two_steps_match(ref, model, runner, x)
    allocations = runner.copies.allocations

    class Run(torch.nn.Module):  # what measure_step reads: the parameters and a call
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            return runner(x)
    plain_peak = measure_step(ref, x)
    peak = measure_step(Run(), x)
    assert runner.copies.allocations == allocations
    assert peak <= plan.predicted_peak_bytes <= budget < plain_peak, (peak, budget, plan.predicted_peak_bytes,
                                                                      plain_peak)
