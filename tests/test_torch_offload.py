"""Plans that offload checkpoints to host memory, executed on the CPU (torch_exec/offload.py, the copy ops
of torch_exec/executor.py's interpreter): gradients, losses and buffers bitwise equal to plain autograd and
to the recompute-only executor, the host-copy handlers, the pool of host buffers, the ``offload=`` option.

On the CPU the "host" copy is a second CPU tensor and the copies are synchronous: the ops run in the same
order as on CUDA, so everything but the overlap and the device memory saved is checked here
(tests/test_torch_offload_gpu.py measures those)."""
from __future__ import annotations

import copy
import random
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
from torch_exec.report import MemoryBudgetWarning  # noqa: E402
from gpusolve import InfeasibleBudgetError, solve, store_all_peak_bytes  # noqa: E402
from gpusolve.dp.minpeak import min_feasible_bytes  # noqa: E402
from gpusolve.offload.dp import min_offload_bytes  # noqa: E402
from gpusolve.offload.link import Link  # noqa: E402
from gpusolve.schedule import Checkpoint, Op, OpKind, Swap, Tape, policy_to_schedule, tape_chain  # noqa: E402
from gpusolve.simulate import simulate  # noqa: E402
from torch_exec.executor import BWD, PREFETCH, TAPE, annotate, split_schedule  # noqa: E402
from torch_exec.offload import HostCopies, measure_link  # noqa: E402
from _torch_helpers import DT, Fork, Join, LinearStage, Mix, convnet, loss_of, mlp, random_policy, wrap  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::torch_exec.CPUTimingWarning",
                                        "ignore::gpusolve.FallbackWarning")

FAST = Link(float("inf"), float("inf"))  # copies cost nothing: the solver swaps wherever it saves memory


# ---------------------------------------------------------------------------- helpers
def without_swaps(policy):
    """The same tree with every Swap(k) a Checkpoint(k): the recompute-only executor runs the very same
    computations, so its results must be bitwise those of the swapping run."""
    if isinstance(policy, Tape):
        return Tape(None if policy.right is None else without_swaps(policy.right))
    return Checkpoint(policy.k, right=without_swaps(policy.right), left=without_swaps(policy.left))


def count_swaps(policy) -> int:
    if isinstance(policy, Tape):
        return 0 if policy.right is None else count_swaps(policy.right)
    return int(isinstance(policy, Swap)) + count_swaps(policy.right) + count_swaps(policy.left)


def step(net, x, seed=123):
    """One forward and backward; returns (loss, input gradient)."""
    torch.manual_seed(seed)
    x = x.detach().clone().requires_grad_(x.requires_grad)
    loss = loss_of(net(x))
    loss.backward()
    return loss.detach(), x.grad


def assert_bitwise(ref_model, model, ref, got):
    """Same loss, input gradient, parameter gradients and buffers, bit for bit."""
    assert torch.equal(ref[0], got[0]), "loss"
    assert (ref[1] is None) == (got[1] is None)
    if ref[1] is not None:
        assert torch.equal(ref[1], got[1]), "input gradient"
    for (name, p), q in zip(ref_model.named_parameters(), model.parameters(), strict=True):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            assert torch.equal(p.grad, q.grad), f"gradient of {name}"
    for (name, b), c in zip(ref_model.named_buffers(), model.buffers(), strict=True):
        assert torch.equal(b, c), f"buffer {name}"


def run_policy_three_ways(make, x, policy_of):
    """Plain autograd, the recompute-only executor (Swap -> Checkpoint) and the offloading executor with
    ``policy_of(chain)``: all three bitwise equal. Returns the offloading wrapper."""
    ref_model, rec_model, off_model = make(), make(), make()
    ref = step(ref_model, x)
    box = {}

    def swapping(chain):
        box["policy"] = policy_of(chain)
        return box["policy"]
    off = wrap(off_model, offload=FAST, schedule_fn=swapping)
    got = step(off, x)
    rec = wrap(rec_model, schedule_fn=lambda chain: without_swaps(box["policy"]))
    got_rec = step(rec, x)
    assert_bitwise(ref_model, off_model, ref, got)
    assert_bitwise(rec_model, off_model, got_rec, got)
    return off, box["policy"]


# ---------------------------------------------------------------------------- HostCopies
def test_host_copies_round_trip_exact_and_keeps_layout():
    copies = HostCopies("cpu")
    assert copies.stream is None and not copies.cuda
    st = copies.step()
    a = torch.randn(2, 3, 4, 5, dtype=DT).to(memory_format=torch.channels_last)
    b = torch.arange(7)
    state = (a, b, None, torch.randn(3, dtype=torch.float32))
    expect = tuple(None if t is None else t.clone() for t in state)
    st.offload(4, state)
    st.release(4, state)
    assert st.host_bytes() == sum(t.numel() * t.element_size() for t in state if t is not None)
    del state
    st.prefetch(4)
    back = st.acquire(4)
    assert isinstance(back, tuple) and len(back) == 4 and back[2] is None
    for got, want in zip(back, expect, strict=True):
        if want is not None:
            assert torch.equal(got, want) and got.dtype == want.dtype and got.stride() == want.stride()
    assert back[0].is_contiguous(memory_format=torch.channels_last)
    # a single tensor comes back as a tensor
    t = torch.randn(5, 2, dtype=DT).t()  # not dense in its own order: any exact copy will do
    st.offload(2, t)
    st.release(2, t)
    st.prefetch(2)
    u = st.acquire(2)
    assert isinstance(u, torch.Tensor) and torch.equal(u, t) and u.data_ptr() != t.data_ptr()


def test_host_copies_move_storages_whole_and_keep_views():
    # Note [Exact copies]: each storage once, whole; each tensor back as the same view of its copy.
    st = HostCopies("cpu").step()
    h = torch.randn(6, 8, dtype=DT)
    cplx = torch.randn(5, dtype=torch.complex64)
    state = (h[:, ::2], h[1:, -1], torch.randn(3, 4, dtype=DT)[1:], cplx.conj(), torch._neg_view(cplx.conj()))
    expect = [t.clone() for t in state]
    layout = [(t.storage_offset(), t.shape, t.stride(), t.untyped_storage().nbytes(), t.is_conj(), t.is_neg())
              for t in state]
    st.offload(1, state)
    st.release(1, state)
    # h's storage once (not its two views apiece), the slice's whole base, the complex storage once
    assert st.host_bytes() == h.untyped_storage().nbytes() + 12 * DT.itemsize + cplx.untyped_storage().nbytes()
    del state
    st.prefetch(1)
    back = st.acquire(1)
    for got, want, lay in zip(back, expect, layout, strict=True):
        assert torch.equal(got, want)
        assert (got.storage_offset(), got.shape, got.stride(), got.untyped_storage().nbytes(),
                got.is_conj(), got.is_neg()) == lay
    assert back[0].untyped_storage().data_ptr() == back[1].untyped_storage().data_ptr() != h.data_ptr()
    assert back[3].untyped_storage().data_ptr() == back[4].untyped_storage().data_ptr()
    # a tensor whose values are not its storage's bytes (sparse) is not copied: it comes back as itself
    sp = torch.randn(2, 3).to_sparse()
    st.offload(2, (sp, h))
    st.release(2, (sp, h))
    st.prefetch(2)
    back = st.acquire(2)
    assert back[0] is sp and torch.equal(back[1], h) and back[1] is not h


def test_host_copies_errors():
    st = HostCopies("cpu").step()
    with pytest.raises(RuntimeError, match="acquire"):
        st.acquire(3)
    with pytest.raises(RuntimeError, match="prefetch"):
        st.prefetch(3)
    with pytest.raises(RuntimeError, match="release"):
        st.release(3)
    x = torch.randn(4)
    st.offload(3, x)
    with pytest.raises(RuntimeError, match="offload"):
        st.offload(3, x)
    with pytest.raises(RuntimeError, match="prefetch"):  # not released yet
        st.prefetch(3)
    st.release(3, x)
    st.prefetch(3)
    with pytest.raises(RuntimeError, match="prefetch"):  # prefetched already
        st.prefetch(3)
    assert torch.equal(st.acquire(3), x)
    with pytest.raises(RuntimeError, match="acquire"):
        st.acquire(3)


def test_release_waits_in_stream_order_not_on_the_host(monkeypatch):
    """Note [Release in stream order]: on CUDA ``release`` makes the compute stream wait for the copy's
    event and never blocks the host on it (the CUDA behaviour: tests/test_torch_offload_gpu.py); here the
    CUDA calls are faked, so the test fails if release synchronises the host."""
    class Event:
        def synchronize(self):
            raise AssertionError("release blocked the host on the copy's event")

        def query(self):
            return False

    waited = []

    class Stream:
        def wait_event(self, event):
            waited.append(event)

    copies = HostCopies("cpu")
    event = Event()
    monkeypatch.setattr(copies, "copy", lambda pairs: event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    st = copies.step()
    x = torch.randn(8)
    st.offload(4, x)
    assert not waited
    st.release(4, x)
    assert waited == [event]


def test_host_copies_pool_reuse_and_shared_storages():
    copies = HostCopies("cpu")
    x, y = torch.randn(8, dtype=DT), torch.randn(8, dtype=DT)
    first = copies.step()
    first.offload(1, x)
    first.release(1, x)
    first.close()
    pool = copies.buffers()
    assert len(pool) == 1 and copies.allocations == 1
    second, third = copies.step(), copies.step()  # two steps alive at once
    second.offload(1, y)
    third.offload(1, x)
    assert copies.allocations == 2 and not copies.buffers()
    second.release(1, y)
    third.release(1, x)
    second.prefetch(1)
    third.prefetch(1)
    assert torch.equal(second.acquire(1), y) and torch.equal(third.acquire(1), x)
    second.close()
    third.close()
    assert {id(b) for b in pool} <= {id(b) for b in copies.buffers()} and len(copies.buffers()) == 2
    # a tensor another held state shares (pass-through) is not copied: it comes back as itself
    st = copies.step()
    held = te.executor.U.storages(x)
    st.offload(5, (x, y), held=set(held))
    st.release(5, (x, y))
    st.prefetch(5)
    back = st.acquire(5)
    assert back[0] is x and back[1] is not y and torch.equal(back[1], y)
    # ... also when the sharing starts after the offload (a later state passes it through)
    st.offload(6, (x, y))
    st.release(6, (x, y), held=set(te.executor.U.storages(y)))
    st.prefetch(6)
    back = st.acquire(6)
    assert back[1] is y and back[0] is not x and torch.equal(back[0], x)


def test_measure_link_needs_cuda():
    with pytest.raises(ValueError, match="CUDA"):
        measure_link("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            measure_link()


# ---------------------------------------------------------------------------- schedule structure
def test_prefetch_before_last_backward_and_tape_runs():
    # Swap(1) at (1, 4) with k = 3 = N - 1, overlapping: prefetch(1) right before bwd(4), i.e. between
    # FWD_TAPE(N) and BWD(N); the split puts it first in the backward.
    policy = Checkpoint(1, right=Swap(3, right=Tape(None), left=Tape(Tape(None)), overlap=True), left=Tape(None))
    schedule = policy_to_schedule(policy, 0, 4)
    text = [str(op) for op in schedule]
    at = text.index("fwd_tape(4)")
    assert text[at + 1:at + 3] == ["prefetch(1)", "bwd(4)"]
    assert split_schedule(schedule, 4) == at
    with pytest.raises(ValueError):
        split_schedule(schedule[:at + 1] + [Op(OpKind.FREE, 3)] + schedule[at + 1:], 4)
    # The right part of an overlapping Swap is a tape run k+1..t: prefetch(i) before bwd(k+1) splits it,
    # so bwd(k+1) is a segment of its own that runs after the prefetch; k+2..t stays one segment.
    policy = Swap(2, right=Tape(Tape(Tape(None))), left=Tape(None), overlap=True)
    schedule = policy_to_schedule(Checkpoint(1, right=policy, left=Tape(None)), 0, 5)
    program = annotate(schedule)
    text = [str(op) for op in schedule]
    assert text[text.index("bwd(4)") + 1:text.index("bwd(4)") + 3] == ["prefetch(1)", "bwd(3)"]
    tapes = {s: arg for code, s, arg, _ in program if code == TAPE}
    bwds = {s: arg for code, s, arg, _ in program if code == BWD}
    assert tapes[3] == 0 and tapes[4] == 0 and tapes[5] == 1  # 3 alone; 4..5 one segment
    assert bwds[5] == 4 and bwds[4] == 0 and bwds[3] == 3
    assert [code for code, *_ in program].count(PREFETCH) == 1


# ---------------------------------------------------------------------------- solved plans
@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5])
def test_solved_offload_plans_match_autograd_and_recompute(fraction):
    x = torch.randn(16, 4, dtype=DT, requires_grad=True)
    probe = wrap(mlp(width=24, depth=8), offload=FAST)
    probe.prepare(x)
    chain = probe._last.exec_chain
    lo, hi = min_offload_bytes(chain), store_all_peak_bytes(chain)
    assert probe.min_budget_bytes == lo <= min_feasible_bytes(chain)
    budget = int(lo + fraction * (hi - lo))
    ref_model, off_model, rec_model = (mlp(width=24, depth=8) for _ in range(3))
    ref = step(ref_model, x)
    off = wrap(off_model, budget=budget, bucket=1, offload=FAST)
    got = step(off, x)
    plan = off.plan
    assert plan.link == FAST and plan.predicted_peak_bytes <= budget
    # below recompute only's least budget it must swap; above, the free link makes it swap unless recomputing is as
    # fast (the stages' times are measured: on a loaded CPU a recomputed stage measured next to nothing, and the
    # plan at 0.5 kept no swap, as fast as recompute only's)
    if plan.swaps == 0:
        assert budget >= min_feasible_bytes(off.chain)
        assert plan.predicted_time_ms == pytest.approx(solve(off.chain, budget, bucket=1, backend="cpu").predicted_time_ms,
                                                       rel=1e-6)
    assert (plan.swaps > 0) == any(op.kind is OpKind.OFFLOAD for op in plan.schedule)
    assert simulate(off.chain, plan.schedule, link=FAST).peak_bytes == plan.predicted_peak_bytes
    assert_bitwise(ref_model, off_model, ref, got)
    if budget >= min_feasible_bytes(chain):
        rec = wrap(rec_model, budget=budget, bucket=1)
        got_rec = step(rec, x)
        assert not any(op.kind is OpKind.OFFLOAD for op in rec.plan.schedule)
        assert_bitwise(rec_model, off_model, got_rec, got)


def test_offload_option_forms_and_replan():
    x = torch.randn(16, 4, dtype=DT, requires_grad=True)
    wrapped = wrap(mlp(width=24, depth=8), offload="1e6GB/s")
    assert wrapped.offload == Link.parse("1e6GB/s") and "offload=" in repr(wrapped)
    wrapped.prepare(x)
    budget = (wrapped.min_budget_bytes + store_all_peak_bytes(wrapped._last.exec_chain)) // 3
    wrapped.replan(budget=budget)
    assert wrapped.plan.swaps > 0 and wrapped._last.copies is not None
    assert any("same memory" in note for note in wrapped.plan.notes)  # offloading on the CPU: a test path
    wrapped.replan(offload=None)  # recompute only
    assert wrapped._last.copies is None and wrapped._last.link is None
    assert not any(op.kind is OpKind.OFFLOAD for op in wrapped.plan.schedule)
    wrapped.replan(offload=Link.useless())  # a link that cannot move data: the recompute DP's plan
    assert not any(op.kind is OpKind.OFFLOAD for op in wrapped.plan.schedule)
    assert wrapped.min_budget_bytes == min_feasible_bytes(wrapped._last.exec_chain)
    wrapped.replan(offload=FAST.to_dict())
    assert wrapped._last.link == FAST and wrapped.plan.swaps > 0
    with pytest.raises(TypeError, match="offload"):
        wrap(mlp(depth=6), offload=12)
    with pytest.raises(ValueError):
        wrap(mlp(depth=6), offload="fast please")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            wrap(mlp(depth=6), offload="measure")


def test_infeasible_budget_with_offload_names_minimum():
    wrapped = wrap(mlp(depth=4), budget=64, offload=FAST)
    with pytest.raises(InfeasibleBudgetError) as err:
        wrapped(torch.randn(5, 4, dtype=DT, requires_grad=True))
    assert err.value.min_bytes > 64


def test_swap_schedule_needs_a_link():
    def policy(chain):
        assert chain.n >= 3
        return Checkpoint(1, right=Swap(2, right=tape_chain(2, chain.n), left=Tape(None)), left=Tape(None))
    wrapped = wrap(mlp(depth=4), schedule_fn=policy)
    with pytest.raises(ValueError, match="link"):
        wrapped(torch.randn(5, 4, dtype=DT, requires_grad=True))


# ---------------------------------------------------------------------------- explicit Swap policies
def test_random_swap_policies_match_autograd_and_recompute():
    rng = random.Random(0)
    x = torch.randn(5, 4, dtype=DT, requires_grad=True)
    kinds, swaps, overlaps = set(), 0, set()
    for trial in range(20):
        off, policy = run_policy_three_ways(lambda t=trial: mlp(depth=6, seed=t), x,
                                            lambda chain: random_policy(rng, 0, chain.n, 0.7, p_swap=0.6))
        kinds |= {op.kind for op in off.plan.schedule}
        swaps += count_swaps(policy)
        assert off.plan.swaps == count_swaps(policy) and off.plan.link == FAST
        schedule = off.plan.schedule
        n = off.chain.n
        at = [str(op) for op in schedule].index(f"fwd_tape({n})")
        overlaps.add(schedule[at + 1].kind)
    assert {OpKind.OFFLOAD, OpKind.RELEASE, OpKind.PREFETCH, OpKind.ACQUIRE} <= kinds and swaps >= 10
    assert OpKind.PREFETCH in overlaps  # some plan prefetched right before BWD(N)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dropout_batchnorm_swap_policies(seed):
    rng = random.Random(seed)
    x = torch.randn(4, 3, 8, 8, dtype=DT, requires_grad=True)
    off, policy = run_policy_three_ways(lambda: convnet(seed=seed, dropout=0.3, conv_tanh=True), x,
                                        lambda chain: random_policy(rng, 0, chain.n, 0.9, p_swap=0.9))
    assert count_swaps(policy) > 0
    bns = [m for m in off.modules() if isinstance(m, nn.BatchNorm2d)]
    assert bns and all(int(m.num_batches_tracked) == 1 for m in bns)  # statistics updated once


def test_batchnorm_stats_updated_once_with_swaps():
    def every_stage(chain):  # Swap at every boundary: each stage re-runs, each checkpoint is moved out
        def node(i, j):
            if j == i + 1:
                return Tape(None)
            return (Swap if i > 0 else Checkpoint)(i + 1, right=node(i + 1, j), left=Tape(None))
        return node(0, chain.n)
    x = torch.randn(4, 3, 8, 8, dtype=DT)
    off, policy = run_policy_three_ways(lambda: convnet(conv_tanh=True), x, every_stage)
    assert count_swaps(policy) == off.chain.n - 2
    assert int(off.stages[1].num_batches_tracked) == 1


class Carry(LinearStage):
    """Passes x through unchanged (a shared storage between consecutive states)."""

    def forward(self, state):
        x, h = state
        return (x, torch.sin(self.lin(h)))


def test_tuple_states_swap_policies():
    rng = random.Random(3)

    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 5), Fork(5), Mix(5), Carry(5), Carry(5), Mix(5), Join(),
                             nn.Linear(5, 2)).to(DT)
    x = torch.randn(3, 4, dtype=DT, requires_grad=True)
    total = 0
    for _ in range(10):
        _, policy = run_policy_three_ways(make, x, lambda chain: random_policy(rng, 0, chain.n, 0.8, p_swap=0.8))
        total += count_swaps(policy)
    assert total > 0


def test_solved_plans_never_swap_outputs_that_share_a_storage():
    """Fork and Carry pass x on, so their outputs share x's storage with the states before and after
    them: the profiler's held_from says so, and the solver never moves those to the host (Note
    [Outputs passed through] in gpusolve/chain.py), at any budget; gradients stay plain autograd's."""
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 16), Fork(16), Carry(16), Carry(16), Mix(16), Carry(16), Join(),
                             nn.Linear(16, 2)).to(DT)
    x = torch.randn(8, 4, dtype=DT, requires_grad=True)
    probe = wrap(make(), offload=FAST)
    probe.prepare(x)
    chain = probe._last.exec_chain
    never = {s for s in range(1, chain.n + 1) if not chain.swappable()[s]}
    assert never == {1, 2, 3, 4, 5, 6}, never  # Linear's output to Carry's: x passed on, then x + h passed on
    lo, hi = min_offload_bytes(chain), store_all_peak_bytes(chain)
    for fraction in (0.0, 0.3, 0.6):
        ref_model, off_model = make(), make()
        ref = step(ref_model, x)
        off = wrap(off_model, budget=int(lo + fraction * (hi - lo)), bucket=1, offload=FAST)
        got = step(off, x)
        swapped = {op.stage for op in off.plan.schedule if op.kind is OpKind.OFFLOAD}
        assert not swapped & never, (fraction, swapped)
        assert_bitwise(ref_model, off_model, ref, got)


# ---------------------------------------------------------------------------- steps
def test_two_sgd_steps_and_pinned_buffers_reused():
    x0 = torch.randn(16, 4, dtype=DT)
    ref_model = mlp(width=24, depth=8)
    model = copy.deepcopy(ref_model)
    wrapped = wrap(model, offload=FAST, bucket=1)
    wrapped.prepare(x0)
    budget = min_offload_bytes(wrapped._last.exec_chain)
    wrapped.replan(budget=budget)
    assert wrapped.plan.swaps > 0
    opt_r = torch.optim.SGD(ref_model.parameters(), lr=0.1, momentum=0.9)
    opt_w = torch.optim.SGD(wrapped.parameters(), lr=0.1, momentum=0.9)
    copies = wrapped._last.copies
    pools = []
    for k in range(3):
        x = torch.randn(16, 4, dtype=DT)
        for net, opt in ((ref_model, opt_r), (wrapped, opt_w)):
            opt.zero_grad()
            torch.manual_seed(100 + k)
            loss_of(net(x)).backward()
            opt.step()
        assert wrapped._last.copies is copies  # one HostCopies per plan
        pools.append(({id(b) for b in copies.buffers()}, copies.allocations))
    assert pools[0][0] and pools[0] == pools[1] == pools[2]  # the same host buffers, none allocated again
    for (name, p), q in zip(ref_model.named_parameters(), model.parameters(), strict=True):
        assert torch.equal(p, q), name
    wrapped.replan(budget=budget + 1)  # a new plan builds new host copies
    assert wrapped._last.copies is not copies


def test_two_forwards_before_one_backward_and_retained_graph():
    x1, x2 = torch.randn(16, 4, dtype=DT), torch.randn(16, 4, dtype=DT)
    ref_model = mlp(width=24, depth=8)
    model = copy.deepcopy(ref_model)
    wrapped = wrap(model, offload=FAST, bucket=1)
    wrapped.prepare(x1)
    wrapped.replan(budget=min_offload_bytes(wrapped._last.exec_chain))
    assert wrapped.plan.swaps > 0
    # two steps alive at once: each holds its own host copies
    (loss_of(ref_model(x1)) + loss_of(ref_model(x2))).backward()
    (loss_of(wrapped(x1)) + loss_of(wrapped(x2))).backward()
    for p, q in zip(ref_model.parameters(), model.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)
    # a kept graph: the second backward prefetches the forward's host copies again
    for net in (ref_model, wrapped):
        net.zero_grad()
        y = loss_of(net(x1))
        y.backward(retain_graph=True)
        y.backward()
    for p, q in zip(ref_model.parameters(), model.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)
    # autograd.grad naming the input and parameters
    xa, xb = x1.clone().requires_grad_(), x1.clone().requires_grad_()
    want = torch.autograd.grad(loss_of(ref_model(xa)), [xa] + list(ref_model.parameters()))
    got = torch.autograd.grad(loss_of(wrapped(xb)), [xb] + list(model.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))


@pytest.mark.parametrize("grads_before", [True, False])
def test_the_first_measured_step_of_a_cpu_offload_plan_reads_as_the_next(grads_before):
    # On the CPU the host buffers are CPU memory too. A review: the first step of every plan allocates the pool's "host" buffers in the CPU memory it
    # measures, and read over its budget by exactly them (later steps find them made before the meter
    # started); the report warned and advised re-profiling, which makes a new pool. Note [Gradients set
    # during the step] in torch_exec/report.py: a mark before each new buffer, which counts below after it.
    x = torch.randn(64, 4, dtype=DT)
    model = mlp(width=64, depth=8)
    wrapped = wrap(model, offload=FAST, bucket=1)
    wrapped.prepare(x)
    chain = wrapped._last.exec_chain
    budget = min_offload_bytes(chain) + (store_all_peak_bytes(chain) - min_offload_bytes(chain)) // 4
    wrapped.replan(budget=budget)  # a new plan: an empty pool
    assert wrapped.plan.swaps > 0
    wrapped.measure_memory(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MemoryBudgetWarning)
        for _ in range(2):
            if grads_before:
                for p in model.parameters():
                    p.grad = torch.zeros_like(p)
            else:
                model.zero_grad(set_to_none=True)
            loss_of(wrapped(x)).backward()
        first, second = wrapped.memory_report()[-2:]
    assert wrapped._last.copies.allocations > 0
    assert first.measured_peak > second.measured_peak  # the buffers are in the first step's raw reading
    assert first.beyond_param_grads == second.beyond_param_grads <= budget, str(wrapped.memory_report())
    if grads_before:  # from the second step on the buffers come from the pool, made before the meter started
        assert second.measured_peak <= budget


def test_retained_graph_random_swap_policies():
    # Swaps nested in the backward (a Swap inside a recomputed left part offloads again in every
    # backward) and the forward's host copies prefetched once per backward.
    rng = random.Random(7)
    x = torch.randn(5, 4, dtype=DT)
    nested = 0
    for trial in range(8):
        ref_model, model = mlp(depth=6, seed=trial), mlp(depth=6, seed=trial)
        box = {}

        def policy(chain, box=box):
            box["p"] = random_policy(rng, 0, chain.n, 0.8, p_swap=0.8)
            return box["p"]
        wrapped = wrap(model, offload=FAST, schedule_fn=policy)
        for net in (ref_model, wrapped):
            y = loss_of(net(x))
            y.backward(retain_graph=True)
            y.backward()
        for p, q in zip(ref_model.parameters(), model.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad)
        split = wrapped._last.split
        nested += sum(op.kind is OpKind.OFFLOAD for op in wrapped.plan.schedule[split + 1:])
        copies = wrapped._last.copies
        assert (copies is None) == (count_swaps(box["p"]) == 0)
        if copies is not None:  # every step gave its host buffers back
            assert copies.buffers() and len(copies.buffers()) == copies.allocations
    assert nested > 0


def test_auto_checkpoint_passes_the_link_on():
    """``auto_checkpoint(model, budget, offload=...)``: the one-call route solves the combined DP too;
    gradients bitwise plain autograd's, and the plan moves checkpoints to the 'host'."""
    x = torch.randn(16, 4, dtype=DT, requires_grad=True)
    ref_model, auto_model = mlp(width=24, depth=8), mlp(width=24, depth=8)
    ref = step(ref_model, x)
    wrapped = te.auto_checkpoint(auto_model, "50%", bucket=1, offload=FAST, sample=(x,))
    got = step(wrapped, x)
    plan = wrapped.plan
    assert plan.link == FAST and plan.swaps > 0 and plan.predicted_peak_bytes <= plan.budget_bytes
    assert_bitwise(ref_model, auto_model, ref, got)


def test_profile_marks_outputs_the_executor_cannot_move():
    """A stage returning a sparse tensor: its profiled output is device_only (torch_exec._util.copyable), so
    a chain whose stage ends there never offloads it (Chain.swappable; Note [Exact copies])."""
    class ToSparse(nn.Module):
        def forward(self, x):
            return torch.tanh(x).to_sparse()

    class ToDense(nn.Module):
        def forward(self, x):
            return x.to_dense() * 2

    model = nn.Sequential(nn.Linear(4, 16), ToSparse(), ToDense(), nn.Linear(16, 2)).to(DT)
    data = te.profile_dict(model, torch.randn(8, 4, dtype=DT), passes=1)
    assert [bool(s.get("device_only")) for s in data["stages"]] == [False, True, False, False]


# ---------------------------------------------------------------------------- per-op times (diagnosis)
def test_op_clock_times_every_op_of_an_offload_plan_against_the_simulator():
    """torch_exec.opclock.OpClock marks every op the interpreter runs, in schedule order (the forward's
    program then the backward's); bench/offload_executor.py's op_time_table lines them up with the
    simulator's per-op times (a tape segment's backward predicted where it runs)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from offload_executor import op_time_table
    from torch_exec.opclock import OpClock

    x = torch.randn(16, 4, dtype=DT, requires_grad=True)
    probe = wrap(mlp(width=24, depth=8), offload=FAST)
    probe.prepare(x)
    chain = probe._last.exec_chain
    budget = (min_offload_bytes(chain) + store_all_peak_bytes(chain)) // 3
    wrapped = wrap(mlp(width=24, depth=8), budget=budget, bucket=1, offload=FAST)
    step(wrapped, x)  # plans and runs once
    schedule = wrapped.plan.schedule
    assert wrapped.plan.swaps > 0
    step(wrapped, x)  # no clock: nothing is recorded anywhere
    with OpClock() as clock:
        with pytest.raises(RuntimeError, match="already active"):
            OpClock().__enter__()
        step(wrapped, x)
    measured = clock.ops()
    assert len(clock.programs) == 2 and len(measured) == len(schedule)
    assert all(ms >= 0 and host >= 0 for *_, ms, host in measured)
    assert all(ms == pytest.approx(host) for *_, ms, host in measured)  # on the CPU both are the host's
    sim = simulate(wrapped.chain, schedule, link=FAST, trace=True)
    assert len(sim.op_ms) == len(schedule) and sum(sim.op_ms) == pytest.approx(sim.time_ms)
    table = op_time_table(schedule, measured, sim.op_ms)
    assert table["predicted_ms"] == pytest.approx(sim.time_ms)
    assert table["measured_ms"] == pytest.approx(sum(m[3] for m in measured)) == pytest.approx(table["host_ms"])
    counts = {}
    for op in schedule:
        counts[op.kind.value] = counts.get(op.kind.value, 0) + 1
    assert {k: v["count"] for k, v in table["by_kind"].items()} == counts
    assert {"offload", "release", "prefetch", "acquire"} <= set(counts)
    # a segment's backward: its later BWDs carry no prediction, the one that runs it carries them all
    program = annotate(schedule)
    merged = [i for i, (code, _, arg, _) in enumerate(program) if code == BWD and not arg]
    bwd_total = sum(ms for op, ms in zip(schedule, sim.op_ms) if op.kind is OpKind.BWD)
    assert table["by_kind"]["bwd"]["predicted_ms"] == pytest.approx(bwd_total)
    assert merged, "the plan should have a tape run (a segment of several stages)"
    per_op = [p for _, _, p, _ in table["ops"]]
    assert all(per_op[i] == 0.0 for i in merged) and sum(per_op) == pytest.approx(sim.time_ms)
    assert [text for text, *_ in table["ops"]] == [str(op) for op in schedule]
    assert len(table["worst"]) == min(8, len(schedule))
    with pytest.raises(ValueError, match="not the schedule's"):
        op_time_table(schedule[::-1], measured, sim.op_ms)



def test_offload_executor_report_has_the_op_times_table(tmp_path):
    """bench/offload_executor.py's report with --op-times rows: the per-kind table, written on the CPU
    (a failure here would lose the GPU run's report)."""
    import sys
    from pathlib import Path
    from types import SimpleNamespace
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from offload_executor import write_report
    kinds = {"bwd": {"count": 3, "measured_ms": 4.5, "predicted_ms": 4.0, "host_ms": 1.0},
             "release": {"count": 1, "measured_ms": 2.0, "predicted_ms": 0.0, "host_ms": 0.1}}
    row = dict(network="densenet121", method="combined", budget_label="35%", budget_bytes=1 << 30, swaps=1,
               recomputations=2, measured_peak_bytes=1 << 29, predicted_peak_bytes=1 << 29, within_budget=True,
               step_ms=7.0, predicted_step_ms=4.0,
               op_times={"measured_ms": 6.5, "predicted_ms": 4.0, "host_ms": 1.1, "by_kind": kinds, "worst": [],
                         "ops": []})
    args = SimpleNamespace(gpu_tag="cpu_test", out=tmp_path, device_name="CPU", date="2026-11-27", steps=5)
    link = {"d2h_bytes_per_ms": 5e7, "h2d_bytes_per_ms": 5e7, "latency_ms": 0.005}
    write_report(link, [row], [], args, "python bench/offload_executor.py --op-times")
    text = (tmp_path / "offload_executor_cpu_test.md").read_text()
    assert "## Op times (--op-times)" in text
    assert "| densenet121 | 35% | combined | 6.5 / 4.0 | 1.1 | - | - | 4.5 / 4.0 | - | 2.0 / 0.0 |" in text



def test_offload_executor_time_ops_fills_the_row_or_keeps_it():
    """bench/offload_executor.py's --op-times step for one plan, run on the CPU: the row gets the per-kind
    table; when the diagnosis fails the row keeps what was measured and names the error."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from offload_executor import time_ops

    x = torch.randn(16, 4, dtype=DT, requires_grad=True)
    probe = wrap(mlp(width=24, depth=8), offload=FAST)
    probe.prepare(x)
    chain = probe._last.exec_chain
    wrapped = wrap(mlp(width=24, depth=8), budget=(min_offload_bytes(chain) + store_all_peak_bytes(chain)) // 3,
                   bucket=1, offload=FAST)
    step(wrapped, x)
    row, errors = {"step_ms": 1.5}, []
    time_ops(row, wrapped, lambda: step(wrapped, x), FAST, x.device, errors, "mlp combined 33%")
    assert errors == [] and row["step_ms"] == 1.5
    assert row["op_times"]["by_kind"]["offload"]["count"] == wrapped.plan.swaps
    assert row["op_times"]["predicted_ms"] == pytest.approx(wrapped.plan.predicted_time_ms)

    def broken():
        raise RuntimeError("CUDA out of memory")
    row = {"step_ms": 1.5}
    time_ops(row, wrapped, broken, FAST, x.device, errors, "mlp combined 33%")
    assert row == {"step_ms": 1.5, "op_times_error": "RuntimeError: CUDA out of memory"}
    assert errors == ["mlp combined 33%: --op-times raised RuntimeError: CUDA out of memory"]


def test_the_plan_is_an_offload_plan_where_plain_autograd_fits():
    """With offload= given, wrapped.plan has the link and the swaps where plain autograd fits too (a plain
    Plan before: plan.swaps raised AttributeError at "100%")."""
    from gpusolve.offload.solver import OffloadPlan
    x = torch.randn(16, 4, dtype=DT, requires_grad=True)
    wrapped = wrap(mlp(width=24, depth=8), offload=FAST, budget="100%")
    wrapped.prepare(x)
    assert isinstance(wrapped.plan, OffloadPlan) and wrapped.plan.link == FAST and wrapped.plan.swaps == 0
    assert any("plain autograd fits" in note for note in wrapped.plan.notes)


def test_offload_with_the_exact_backend_is_refused_before_profiling():
    """The combined DP has no exact backend: offload= with backend="exact" raised at the first call, after
    profiling; now when the wrapper is made or re-planned (which then changes nothing)."""
    model = mlp(width=8, depth=3)
    with pytest.raises(ValueError, match="no 'exact' backend: pass backend='auto'"):
        te.CheckpointedSequential(model, budget="50%", backend="exact", offload="12GB/s")
    with pytest.raises(ValueError, match="no 'exact' backend"):
        te.auto_checkpoint(model, "50%", backend="exact", offload="12GB/s")
    wrapped = te.CheckpointedSequential(model, budget="50%", backend="exact")
    with pytest.raises(ValueError, match="no 'exact' backend"):
        wrapped.replan(offload="12GB/s")
    assert wrapped.offload is None


def test_a_forward_dropped_without_its_backward_gives_its_host_buffers_back():
    # bench/repros/rv7_offload_dropped_step_pool.py: such a step kept the pool's buffers, and every later step
    # took new ones (pinned again on CUDA)
    x = torch.randn(16, 4, dtype=DT)
    wrapped = wrap(mlp(width=24, depth=8), offload=FAST)
    wrapped.prepare(x)
    wrapped.replan(budget=(wrapped.min_budget_bytes + store_all_peak_bytes(wrapped._last.exec_chain)) // 3)
    assert wrapped.plan.swaps > 0
    loss_of(wrapped(x)).backward()
    copies = wrapped._last.copies
    first = copies.allocations
    for _ in range(3):
        loss_of(wrapped(x)).item()  # a forward whose graph is dropped: no backward
        loss_of(wrapped(x)).backward()
    assert copies.allocations == first, (first, copies.allocations)


def test_auto_replan_of_the_link_reaches_the_signatures_captured_later_and_a_join_refuses_it():
    # bench/repros/rv7_offload_auto_replan_new_signature.py, rv7_offload_join_replan_typeerror.py
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(24, 24), nn.Tanh())])
    wrapped = te.auto_checkpoint(model, "80%", backend="cpu", offload=FAST, profile_passes=1)
    wrapped.prepare(torch.randn(16, 24))
    wrapped.replan(offload=None)
    wrapped.prepare(torch.randn(8, 24))  # a new signature: planned without a link, as replan said
    assert wrapped.executor.offload is None and wrapped.executor._last.link is None

    class Towers(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Sequential(*[nn.Linear(24, 24) for _ in range(4)])
            self.b = nn.Sequential(*[nn.Linear(24, 24) for _ in range(4)])

        def forward(self, x, y):
            return (self.a(x) * self.b(y)).sum()
    towers = te.auto_checkpoint(Towers(), "60%", backend="cpu", profile_passes=1)
    towers.prepare(torch.randn(16, 24), torch.randn(16, 24))
    if type(towers.executor).__name__ != "CheckpointedJoin":
        pytest.skip("not captured as a join here")
    with pytest.raises(ValueError, match="captured as a join network.*offload="):
        towers.replan(offload="12GB/s")


def test_namedtuple_states_run_and_keep_their_type():
    # a review: stages passing a namedtuple crashed the first call ("S.__new__() missing 1 required positional
    # argument"), recompute only (U.map_state) and, that mended, an offloading plan at its first prefetch (_fill)
    from collections import namedtuple
    state = namedtuple("State", "h aux")

    class First(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(16, 16).to(DT)

        def forward(self, x):
            return state(torch.tanh(self.lin(x)), x[:, :2] * 2)

    class Mid(First):
        def forward(self, st):
            assert isinstance(st, state), type(st)
            h = torch.tanh(self.lin(st.h)) + st.aux[:, :1]
            return state(h, h[:, :2] * 3)

    class Last(First):
        def forward(self, st):
            return self.lin(st.h).sum(dim=1)

    torch.manual_seed(0)
    stages = [First(), *[Mid() for _ in range(6)], Last()]
    x = torch.randn(8, 16, dtype=DT, requires_grad=True)
    reference = copy.deepcopy(stages)
    expected = step(nn.Sequential(*reference), x)
    for offload in (None, "inf"):
        mine = copy.deepcopy(stages)
        net = te.CheckpointedSequential(mine, budget="1GiB", backend="cpu", offload=offload, profile_passes=1,
                                        profile_warmup=0)
        net.prepare(x)
        net.replan(budget=net.min_budget_bytes)
        loss, grad = step(net, x)
        assert offload is None or net.plan.swaps > 0, "the least budget with a free link moves nothing"
        assert torch.equal(loss, expected[0]) and torch.equal(grad, expected[1])
        for p, q in zip(nn.Sequential(*mine).parameters(), nn.Sequential(*reference).parameters(), strict=True):
            assert torch.equal(p.grad, q.grad)
