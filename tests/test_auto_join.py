"""auto_checkpoint on join networks (Note [Join detection] in torch_exec/auto.py), on the CPU: a model
whose inputs' branches meet at a loss (CLIP-style two towers, Siamese, triplet) is found to be one,
runs under the join DP's plan with plain autograd's losses, gradients and BatchNorm statistics, holds
its budget as the allocator measures it, and needs less memory than the same model cut as one chain;
graphs that are not joins the executor can run stay chains, with a note saying why."""
from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402,N812

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import models as A  # noqa: E402  (examples/models.py)
import torch_exec as te  # noqa: E402
from torch_exec.executor import reference_peak_bytes  # noqa: E402
from torch_exec.join import CheckpointedJoin, JoinOrderWarning  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::torch_exec.CPUTimingWarning", "ignore::gpusolve.FallbackWarning")

BRANCHES = {"two_tower": 2, "two_tower_embeddings": 2, "two_tower_typed": 2, "siamese": 2, "triplet": 3}


def _loss(name, loss_of):
    if name == "two_tower_embeddings":  # back-propagate through an embedding the head passes through too
        return lambda out: out["loss"] + out["image_embeds"].square().mean()
    return loss_of


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _step(model, args, loss_of, seed=3):
    torch.manual_seed(seed)
    loss = loss_of(model(*args))
    loss.backward()
    return loss.detach()


@pytest.mark.parametrize("name", list(BRANCHES))
def test_a_join_trains_like_plain_autograd_and_holds_its_budget(name):
    model, args, _, loss_of = A.make(name)
    loss_of = _loss(name, loss_of)
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "100%")
    wrapped.prepare(*args)
    assert isinstance(wrapped.executor, CheckpointedJoin), wrapped.capture.notes
    assert len(wrapped.capture.branches) == BRANCHES[name]
    assert all(len(stages) >= 2 for stages in wrapped.capture.branches), wrapped.capture.notes
    entry = wrapped.executor._last
    least = wrapped.executor.min_budget_bytes
    plain = wrapped.executor.plain_peak_bytes_for(entry)
    assert least < plain
    for budget in (int(least + 0.5 * (plain - least)), least):
        wrapped.replan(budget)
        plan = wrapped.plan
        forwards = sum(op.kind.name.startswith("FWD") for op in plan.schedule)
        assert plan.feasible and forwards > sum(wrapped.executor.net.lengths), plan.summary()  # recomputes
        model.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
        with torch.no_grad():  # a step skipped below (plan's order) leaves other BatchNorm statistics
            for a, b in zip(reference.buffers(), model.buffers(), strict=True):
                b.copy_(a)
        expected = _step(reference, args, loss_of)
        wrapped.measure_memory(1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", JoinOrderWarning)  # checked below through the buffers
            got = _step(wrapped, args, loss_of)
        record = wrapped.memory_report()[-1]
        assert record.within_budget and record.beyond_param_grads <= budget, (budget, record)
        if any("not plain autograd's" in note for note in plan.notes):
            # Note [Draw order] in torch_exec/join.py: dropout masks and shared BatchNorm statistics then
            # follow the plan's order (the plan says so, with a JoinOrderWarning)
            assert name in ("siamese", "triplet")
            continue
        assert torch.equal(got, expected) or torch.allclose(got, expected, rtol=1e-6, atol=1e-7)
        ref, new = _grads(reference), _grads(model)
        assert ref.keys() == new.keys()
        for key in ref:
            torch.testing.assert_close(new[key], ref[key], rtol=1e-5, atol=1e-6, msg=key)
        for (key, a), b in zip(reference.named_buffers(), model.buffers()):
            torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7, msg=key)


def test_the_join_needs_less_memory_than_the_same_model_cut_as_one_chain(monkeypatch):
    # one value across a cut: the image tower's output crosses every point of the text tower. (With more,
    # Note [Values read late], the chain cuts through it as well.)
    import torch_exec.auto as auto
    monkeypatch.setattr(auto, "LONG_LIVED_CROSSING", auto.MAX_CROSSING)
    model, args, _, _ = A.make("two_tower", batch=8)
    joined = te.auto_checkpoint(model, "100%")
    joined.prepare(*args)
    chained = te.auto_checkpoint(model, "100%", join=False)
    chained.prepare(*args)
    assert isinstance(chained.executor, te.CheckpointedSequential)
    assert any("cut as one chain: join=False" in note for note in chained.capture.notes)
    # Without the join, the text tower runs after the image tower's output is made: no cut inside it.
    assert chained.executor.chain.n < sum(len(b) for b in joined.capture.branches)
    assert joined.executor.min_budget_bytes < 0.8 * chained.executor.min_budget_bytes


def test_a_percentage_is_of_the_plain_step_measured_as_for_a_chain():
    """The join measures plain autograd's step itself; the chain's profiler measures the same step its
    own way: two measurements of one quantity."""
    model, args, _, _ = A.make("two_tower", batch=8)
    joined = te.auto_checkpoint(model, "50%")
    joined.prepare(*args)
    chained = te.auto_checkpoint(model, "100%", join=False)  # 50 % is below its least budget
    chained.prepare(*args)
    join_peak = joined.executor.plain_peak_bytes_for(joined.executor._last)
    chain_peak = reference_peak_bytes(chained.executor._last)[0]
    assert abs(join_peak - chain_peak) <= 0.02 * chain_peak, (join_peak, chain_peak)
    assert joined.plan.budget_bytes == int(0.5 * join_peak) or abs(joined.plan.budget_bytes - 0.5 * join_peak) <= 1
    assert any("of plain autograd's peak" in note for note in joined.plan.notes)


class _SharedScale(nn.Module):
    """Both towers read one value made from parameters only: not a join the executor can run."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 8))
        self.b = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 8))
        self.log_scale = nn.Parameter(torch.zeros(()))

    def forward(self, x, y):
        scale = self.log_scale.exp()
        return F.mse_loss(self.a(x) * scale, self.b(y) * scale)


def test_a_value_of_parameters_read_by_two_branches_keeps_the_chain():
    torch.manual_seed(0)
    model = _SharedScale()
    args = (torch.randn(4, 8), torch.randn(4, 8))
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "100%")
    wrapped.prepare(*args)
    assert isinstance(wrapped.executor, te.CheckpointedSequential)
    assert any("made from parameters only and read by several branches" in note for note in wrapped.capture.notes)
    assert torch.equal(_step(wrapped, args, lambda out: out), _step(reference, args, lambda out: out))


def test_join_free_models_are_unchanged():
    model, args, kwargs, _ = A.make("resnet")
    wrapped = te.auto_checkpoint(model, "100%")
    wrapped.prepare(*args, **kwargs)
    assert wrapped.capture.branches is None
    assert not any("join" in note for note in wrapped.capture.notes)


def test_executor_keywords_the_join_lacks_keep_the_chain_and_caller_keeps_is_noted():
    model, args, _, _ = A.make("siamese")
    offloading = te.auto_checkpoint(model, "100%", offload="12GB/s")
    offloading.prepare(*args)
    assert isinstance(offloading.executor, te.CheckpointedSequential)
    assert any("cut as one chain: CheckpointedJoin takes no offload" in note for note in offloading.capture.notes)
    keeping = te.auto_checkpoint(model, "100%", caller_keeps="loss")
    keeping.prepare(*args)
    assert isinstance(keeping.executor, CheckpointedJoin)
    assert any("caller_keeps='loss' does not apply to a join network" in note for note in keeping.capture.notes)
    exact = te.auto_checkpoint(model, "100%", backend="exact")
    exact.prepare(*args)
    assert any("backend='exact' has no join DP" in note for note in exact.capture.notes)


@pytest.mark.gpu
def test_a_two_tower_model_holds_its_budget_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    model, args, _, loss_of = A.make("two_tower", batch=32)
    model = model.cuda()
    args = tuple(a.cuda() for a in args)
    reference = copy.deepcopy(model)
    # 60 %: on the H200 (2026-11-28) this join's least budget was 53.6 % of plain autograd's measured peak (its
    # small tensors in the allocator's 512-byte blocks), and 50 % was refused naming it
    wrapped = te.auto_checkpoint(model, "60%", backend="cpu")
    wrapped.prepare(*args)
    assert isinstance(wrapped.executor, CheckpointedJoin)
    expected = _step(reference, args, loss_of)
    got = _step(wrapped, args, loss_of)  # the first 3 CUDA steps are measured anyway
    record = wrapped.memory_report()[-1]
    assert record.within_budget, record
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    ref, new = _grads(reference), _grads(model)
    for key in ref:
        torch.testing.assert_close(new[key], ref[key], rtol=1e-4, atol=1e-5, msg=key)


def test_replan_with_profile_profiles_the_join_again():
    """The budget warning tells users to call replan(profile=True): the join takes it too."""
    model, args, _, loss_of = A.make("triplet")
    wrapped = te.auto_checkpoint(model, "100%")
    wrapped.prepare(*args)
    first = wrapped.executor._last
    wrapped.replan(budget=wrapped.executor.min_budget_bytes, profile=True)
    assert wrapped.executor._last is None and not wrapped.executor._entries
    _step(wrapped, args, loss_of)
    assert wrapped.executor._last is not first and wrapped.plan.budget_bytes == wrapped.executor.min_budget_bytes


class _TwoEmbeddings(nn.Module):
    """BERT's shape: two lookups (tokens, segments) meet at once and everything after is one chain."""

    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(50, 16)
        self.segments = nn.Embedding(2, 16)
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16))
                                      for _ in range(6)])

    def forward(self, ids, segments):
        return self.layers(self.tokens(ids) + self.segments(segments)).square().mean()


def test_inputs_that_meet_at_once_keep_the_chain():
    """As a join, the head would be every layer, run whole; as a chain, each layer is a stage."""
    torch.manual_seed(0)
    model = _TwoEmbeddings()
    ids = torch.randint(0, 50, (4, 32))
    wrapped = te.auto_checkpoint(model, "100%")
    wrapped.prepare(ids, (ids % 2))
    assert isinstance(wrapped.executor, te.CheckpointedSequential)
    assert any("largest part that runs whole" in note for note in wrapped.capture.notes), wrapped.capture.notes
    assert wrapped.executor.chain.n >= 6


def _mlp(depth=5, drop=0.0, width=64):
    layers = [nn.Linear(16, width), nn.GELU()]
    for _ in range(depth - 2):
        layers += [nn.Linear(width, width), nn.GELU()] + ([nn.Dropout(drop)] if drop else [])
    return nn.Sequential(*layers, nn.Linear(width, 16))


class _Towers(nn.Module):
    """Two MLP towers to an MSE loss, run in the order ``order`` says: "ab", "ba" or "lockstep";
    ``scale_first`` computes a parameter-only scale before the towers (branch a reads it)."""

    def __init__(self, order="ab", drop=0.2, scale_first=False):
        super().__init__()
        self.a, self.b = _mlp(drop=drop), _mlp(drop=drop)
        self.log_scale = nn.Parameter(torch.zeros(()))
        self.order, self.scale_first = order, scale_first

    def forward(self, x, y):
        s = self.log_scale.exp() if self.scale_first else None  # read at the end of tower a
        if self.order == "lockstep":
            for la, lb in zip(self.a, self.b):
                x, y = la(x), lb(y)
            a, b = x, y
        elif self.order == "ba":
            b = self.b(y)
            a = self.a(x)
        else:
            a, b = self.a(x), self.b(y)
        return F.mse_loss(a if s is None else a * s, b)


def _holds_and_matches(model, args, least_only=False):
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "100%")
    wrapped.prepare(*args)
    if isinstance(wrapped.executor, CheckpointedJoin):
        wrapped.replan(wrapped.executor.min_budget_bytes)
    expected = _step(reference, args, lambda out: out)
    wrapped.measure_memory(1)
    got = _step(wrapped, args, lambda out: out)
    assert wrapped.memory_report()[-1].within_budget
    assert torch.equal(got, expected)
    for (key, p), q in zip(reference.named_parameters(), model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-6, atol=1e-7, msg=key)
    return wrapped


def test_branches_run_in_the_models_order():
    """The model runs its second tower first: the join's branch 0 is that tower, so dropout draws
    follow plain autograd's order at every budget, with no Draw-order note."""
    torch.manual_seed(0)
    args = (torch.randn(8, 16), torch.randn(8, 16))
    wrapped = _holds_and_matches(_Towers("ba"), args)
    assert isinstance(wrapped.executor, CheckpointedJoin)
    assert not any("not plain autograd's" in note for note in wrapped.plan.notes)


def test_towers_run_in_lockstep_with_dropout_keep_the_chain():
    torch.manual_seed(0)
    args = (torch.randn(8, 16), torch.randn(8, 16))
    wrapped = _holds_and_matches(_Towers("lockstep"), args)
    assert isinstance(wrapped.executor, te.CheckpointedSequential)
    assert any("interleave random draws or buffer updates" in note for note in wrapped.capture.notes)


class _AuxTower(_Towers):
    """Tower a also feeds the loss from its middle (an auxiliary loss): its branch ends at its last cut before that
    and its later layers run in the head, after tower b."""

    def forward(self, x, y):
        middle = self.a[:4](x)
        a, b = self.a[4:](middle), self.b(y)
        return F.mse_loss(a, b) + 0.1 * middle.pow(2).mean()


@pytest.mark.parametrize("drop", [0.0, 0.2])
def test_a_head_that_draws_before_a_branch_would_keeps_the_chain(drop):
    """The head runs after every branch: where what it computes draws random numbers the model drew before a later
    branch (tower a's last dropouts, moved into the head by its auxiliary loss), a join would draw other masks than
    plain autograd, silently (review rv19: bench/repros/rv19_join_head_remainder_draw_order.py); without dropout
    the same model is a join."""
    torch.manual_seed(0)
    args = (torch.randn(8, 16), torch.randn(8, 16))
    wrapped = _holds_and_matches(_AuxTower(drop=drop), args)
    assert isinstance(wrapped.executor, te.CheckpointedSequential if drop else CheckpointedJoin)
    assert any("head interleave random draws" in note for note in wrapped.capture.notes) == bool(drop)


def test_inputs_that_require_grad_still_make_a_join():
    """ep.module()'s input guard read every input: it carried gradient and blocked the join."""
    torch.manual_seed(0)
    model = _Towers(drop=0.0)
    x, y = torch.randn(8, 16, requires_grad=True), torch.randn(8, 16, requires_grad=True)
    rx, ry = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "100%")
    wrapped.prepare(x, y)
    assert isinstance(wrapped.executor, CheckpointedJoin), wrapped.capture.notes
    wrapped.replan(wrapped.executor.min_budget_bytes)
    wrapped.measure_memory(1)
    _step(wrapped, (x, y), lambda out: out)
    _step(reference, (rx, ry), lambda out: out)
    assert wrapped.memory_report()[-1].within_budget
    torch.testing.assert_close(x.grad, rx.grad, rtol=0, atol=0)
    torch.testing.assert_close(y.grad, ry.grad, rtol=0, atol=0)


def test_a_parameter_scale_computed_first_moves_to_its_reader():
    torch.manual_seed(0)
    args = (torch.randn(8, 16), torch.randn(8, 16))
    wrapped = _holds_and_matches(_Towers(drop=0.0, scale_first=True), args)
    assert isinstance(wrapped.executor, CheckpointedJoin)
    assert all(len(stages) >= 4 for stages in wrapped.capture.branches), wrapped.capture.notes


class _Views(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.towers = nn.ModuleList(_mlp(depth=3, width=8) for _ in range(k))

    def forward(self, *xs):
        return torch.stack([t(x) for t, x in zip(self.towers, xs)]).var(0).mean()


def test_too_many_branches_for_the_join_dp_keep_the_chain():
    torch.manual_seed(0)
    xs = tuple(torch.randn(4, 16) for _ in range(7))
    wrapped = te.auto_checkpoint(_Views(7), "100%")
    wrapped.prepare(*xs)
    assert isinstance(wrapped.executor, te.CheckpointedSequential)
    assert any("exceeds JOIN_DP_WORK" in note for note in wrapped.capture.notes), wrapped.capture.notes


@pytest.mark.parametrize("preallocated", [False, True], ids=["grads-none", "grads-allocated"])
def test_under_autocast_a_join_trains_like_plain_autograd_and_holds_its_budget(preallocated):
    """bfloat16 autocast on a two-tower model: the image tower's first convolution (its input needs no
    gradient) takes workspace the size of the image batch in its backward. Before the profile's
    reading was kept whole for such a stage (gpusolve/chain.py), 3 of 16 captures went 13 280 B over
    their least budget with gradients allocated, and auto_checkpoint kept such models a chain."""
    model, args, _, loss_of = A.make("two_tower")
    reference = copy.deepcopy(model)

    def step(net):
        torch.manual_seed(3)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = net(*args)
        loss = loss_of(out).float()
        loss.backward()
        return loss.detach()
    wrapped = te.auto_checkpoint(model, "100%")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        wrapped.prepare(*args)
    assert isinstance(wrapped.executor, CheckpointedJoin), wrapped.capture.notes
    wrapped.replan(wrapped.executor.min_budget_bytes)
    for net in (model, reference):
        for p in net.parameters():
            p.grad = torch.zeros_like(p) if preallocated else None
    expected = step(reference)
    wrapped.measure_memory(1)
    got = step(wrapped)
    record = wrapped.memory_report()[-1]
    assert record.within_budget, (record.beyond_param_grads, record.budget)
    assert torch.equal(got, expected)
    for (key, p), q in zip(reference.named_parameters(), model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=0, msg=key)


class _Noisy(_Towers):
    """Noise drawn for the second input after the first tower's dropout drew (a value made from an
    input only: side data, which the prologue would draw first)."""

    def forward(self, x, y):
        a = self.a(x)
        y = y + 0.1 * torch.randn_like(y)
        return F.mse_loss(a, self.b(y))


@pytest.mark.parametrize("join", [True, False])
def test_random_side_data_drawn_after_the_model_drew_keeps_plain_autograds_numbers(join):
    torch.manual_seed(0)
    model = _Noisy(drop=0.2)
    args = (torch.randn(8, 16), torch.randn(8, 16))
    reference = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "100%", join=join)
    wrapped.prepare(*args)
    assert isinstance(wrapped.executor, CheckpointedJoin if join else te.CheckpointedSequential)
    wrapped.replan(wrapped.executor.min_budget_bytes)
    model.zero_grad(set_to_none=True)
    reference.zero_grad(set_to_none=True)
    assert torch.equal(_step(wrapped, args, lambda out: out), _step(reference, args, lambda out: out))
    for (key, p), q in zip(reference.named_parameters(), model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-6, atol=1e-7, msg=key)


def test_a_smaller_last_batch_below_its_least_percentage_runs_within_the_others_budget():
    """As for chains (tests/test_auto.py): the Siamese network's least budget is a larger share of
    plain autograd's peak at batch 2 than at batch 8 ("55%" lies between)."""
    from gpusolve import FallbackWarning, InfeasibleBudgetError
    model, args, _, loss_of = A.make("siamese", batch=8)
    small = tuple(t[:2] for t in args)
    wrapped = te.auto_checkpoint(model, "55%")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JoinOrderWarning)
        loss_of(wrapped(*args)).backward()
        ceiling = wrapped.plan.budget_bytes
        wrapped.measure_memory(1)
        with pytest.warns(FallbackWarning, match="below its least budget"):
            loss_of(wrapped(*small)).backward()
    assert isinstance(wrapped.executor, CheckpointedJoin)
    assert wrapped.plan.budget_bytes == ceiling and wrapped.memory_report()[-1].within_budget
    alone = te.auto_checkpoint(A.make("siamese", batch=8)[0], "55%")
    with pytest.raises(InfeasibleBudgetError, match="needs at least"):
        alone(*small)
