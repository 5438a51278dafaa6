"""torch_exec.CheckpointedJoin on the CPU: k branches meeting at a head, gradients against plain autograd
(bitwise where the chain executor's tests are), BatchNorm, dropout, Siamese shared weights, an empty branch,
measured peaks against the budget, errors."""
from __future__ import annotations

import copy
import random
import types

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
from gpusolve import InfeasibleBudgetError  # noqa: E402
from gpusolve.join.bytesim import simulate_join, store_all_join_peak_bytes  # noqa: E402
from gpusolve.join.network import BranchCheckpoint, BranchTape  # noqa: E402
from gpusolve.schedule import OpKind  # noqa: E402
from torch_exec.meter import measure_peak  # noqa: E402
from _torch_helpers import DT, measured_step, random_policy  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::torch_exec.CPUTimingWarning", "ignore::gpusolve.FallbackWarning")

OPTS = dict(profile_passes=1, profile_warmup=0)


# ---------------------------------------------------------------------------- models
def tower(seed, width=12, depth=4, dropout=0.0, bn=False, inp=6):
    torch.manual_seed(seed)
    layers = [nn.Linear(inp, width)]
    for d in range(depth):
        layers += [nn.Tanh(), nn.Linear(width, width)]
        if bn and d % 2 == 0:
            layers += [nn.BatchNorm1d(width)]
        if dropout and d % 2 == 1:
            layers += [nn.Dropout(dropout)]
    return nn.Sequential(*layers).to(DT)


class Head(nn.Module):
    """A head with parameters over k outputs: a weighted product of projections, squared."""

    def __init__(self, k, width=12, seed=7):
        super().__init__()
        torch.manual_seed(seed)
        self.proj = nn.ModuleList([nn.Linear(width, 4) for _ in range(k)]).to(DT)

    def forward(self, *outs):
        z = self.proj[0](outs[0])
        for p, o in zip(self.proj[1:], outs[1:], strict=True):
            z = z * p(o)
        return z.square().mean() + 0.1 * z.sum()


def triplet(a, p, n):
    """A parameter-free triplet loss."""
    return torch.relu((a - p).square().sum(1) - (a - n).square().sum(1) + 1.0).mean()


def random_join_policy(rng, net, p_ckpt=0.7):
    """A random join policy: branch actions in random interleaving, tapes or checkpoints at random."""
    pos, lengths, actions = [0] * net.k, net.lengths, []
    while True:
        open_ = [b for b in range(net.k) if pos[b] < lengths[b]]
        if not open_:
            return tuple(actions)
        b = rng.choice(open_)
        i = pos[b]
        if rng.random() < p_ckpt:
            k = rng.randint(i + 1, lengths[b])
            actions.append(BranchCheckpoint(b, k, random_policy(rng, i, k, 0.6)))
            pos[b] = k
        else:
            actions.append(BranchTape(b))
            pos[b] = i + 1


# ---------------------------------------------------------------------------- helpers
def inputs(k, batch=5, inp=6, grad=True, seed=3):
    torch.manual_seed(seed)
    return [torch.randn(batch, inp, dtype=DT, requires_grad=grad) for _ in range(k)]


def fresh(xs):
    return [x.detach().clone().requires_grad_(x.requires_grad) for x in xs]


def plain_step(branches, head, xs, seed=123):
    torch.manual_seed(seed)
    xs = fresh(xs)
    head(*[b(x) if len(b) else x for b, x in zip(branches, xs, strict=True)]).backward()
    return [x.grad for x in xs]


def join_step(join, xs, seed=123):
    torch.manual_seed(seed)
    xs = fresh(xs)
    join(*xs).backward()
    return [x.grad for x in xs]


def params_of(*modules):
    seen, out = set(), []
    for m in modules:
        for name, p in m.named_parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out.append((name, p))
    return out


def assert_same(ref_mods, mods, ref_xg, xg, exact=True):
    tol = dict(rtol=0, atol=0) if exact else dict(rtol=1e-6, atol=1e-9)
    for (name, p), (_, q) in zip(params_of(*ref_mods), params_of(*mods), strict=True):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            torch.testing.assert_close(q.grad, p.grad, **tol, msg=f"grad of {name}")
    for ref, mod in zip(ref_mods, mods, strict=True):
        for (name, b), c in zip(ref.named_buffers(), mod.buffers(), strict=True):
            torch.testing.assert_close(c, b, rtol=0, atol=0, msg=f"buffer {name}")
    for a, b in zip(ref_xg, xg, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(b, a, **tol)


def recomputes(plan) -> bool:
    turn = next(i for i, op in enumerate(plan.schedule) if op.kind is OpKind.TURN)
    return any(op.kind in (OpKind.FWD_NOGRAD, OpKind.FWD_TAPE) for op in plan.schedule[turn + 1:])


def compare(make, xs, exact=True, budget="1GiB", **kwargs):
    """make() -> (branches, head); the same model run plainly and through CheckpointedJoin."""
    ref_branches, ref_head = make()
    branches, head = make()
    ref_xg = plain_step(ref_branches, ref_head, xs)
    join = te.CheckpointedJoin([list(b) for b in branches], head, budget=budget, **OPTS, **kwargs)
    xg = join_step(join, xs)
    assert_same(list(ref_branches) + [ref_head], list(branches) + [head], ref_xg, xg, exact=exact)
    return join


@pytest.fixture
def solved(monkeypatch):
    """These towers are tiny: plain autograd's measured step fits every budget the byte model allows,
    and would run as such (CheckpointedJoin's plain-fits rule). The tests that exercise the join DP's
    plans take its measured peak as not fitting."""
    monkeypatch.setattr(te.CheckpointedJoin, "plain_peak_bytes_for", staticmethod(lambda entry: 1 << 62))


def budgets_between(join, xs, fractions):
    join.prepare(*xs)
    lo, hi = join.min_budget_bytes, store_all_join_peak_bytes(join.net)
    return [int(lo + f * (hi - lo)) for f in fractions]


# ---------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("fraction", [1.0, 0.4, 0.0])
def test_two_tower_solved_plans_match_autograd_bitwise(k, fraction, solved):
    xs = inputs(k)

    def make():
        return [tower(seed, depth=3 + seed) for seed in range(k)], Head(k)
    probe = te.CheckpointedJoin([list(b) for b in make()[0]], make()[1], budget="1GiB", **OPTS)
    (budget,) = budgets_between(probe, xs, [fraction])
    join = compare(make, xs, budget=budget, bucket=1)
    assert join.plan.feasible and join.plan.predicted_peak_bytes <= budget
    assert simulate_join(join.net, join.plan.schedule).peak_bytes == join.plan.predicted_peak_bytes
    if fraction == 0.0:
        assert recomputes(join.plan)


@pytest.mark.parametrize("seed", range(6))
def test_random_join_policies_match_autograd_bitwise(seed):
    rng = random.Random(seed)
    k = 2 + seed % 2
    xs = inputs(k, seed=seed)

    def make():
        return [tower(s, depth=2 + s) for s in range(k)], Head(k)
    join = compare(make, xs, schedule_fn=lambda net: random_join_policy(rng, net))
    kinds = {op.kind for op in join.plan.schedule}
    assert {OpKind.FWD_NOGRAD, OpKind.FWD_TAPE, OpKind.BWD, OpKind.TURN} <= kinds


def test_triplet_head_without_parameters_and_inputs_without_grad():
    xs = inputs(3, grad=False)

    def make():
        return [tower(s, depth=3) for s in range(3)], triplet
    ref_b, _ = make()
    branches, _ = make()
    plain_step(ref_b, triplet, xs)
    join = te.CheckpointedJoin([list(b) for b in branches], triplet, budget="1GiB", **OPTS,
                               schedule_fn=lambda net: random_join_policy(random.Random(1), net, 0.9))
    xg = join_step(join, xs)
    assert xg == [None, None, None]
    assert_same(ref_b, branches, [None] * 3, xg)


def test_siamese_shared_weights_accumulate_from_both_branches():
    """The same module objects in two branches: gradients accumulate from both, bitwise as plain."""
    xs = inputs(2)

    def make():
        t = tower(0, depth=4)
        return [t, t], Head(2)
    ref_b, ref_h = make()
    branches, head = make()
    ref_xg = plain_step(ref_b, ref_h, xs)
    join = te.CheckpointedJoin([list(b) for b in branches], head, budget="1GiB", **OPTS)
    join.prepare(*xs)
    join.replan(budget=join.min_budget_bytes)
    assert recomputes(join.plan)
    xg = join_step(join, xs)
    assert len(list(join.parameters())) == len(list(branches[0].parameters())) + len(list(head.parameters()))
    assert_same([ref_b[0], ref_h], [branches[0], head], ref_xg, xg)


@pytest.mark.parametrize("siamese", [False, True])
def test_batchnorm_statistics_updated_once_per_branch_run(siamese):
    xs = inputs(2, batch=6)

    def make():
        a = tower(0, depth=4, bn=True)
        return [a, a if siamese else tower(1, depth=4, bn=True)], Head(2)
    ref_b, ref_h = make()
    branches, head = make()
    ref_xg = plain_step(ref_b, ref_h, xs)
    # Checkpoint everything: every BN stage runs again in the backward.
    rng = random.Random(0)
    join = te.CheckpointedJoin([list(b) for b in branches], head, budget="1GiB", **OPTS,
                               schedule_fn=lambda net: random_join_policy(rng, net, 1.0))
    xg = join_step(join, xs)
    assert recomputes(join.plan)
    assert_same(list(ref_b) + [ref_h], list(branches) + [head], ref_xg, xg, exact=True)
    bn = [m for m in branches[0].modules() if isinstance(m, nn.BatchNorm1d)][0]
    assert int(bn.num_batches_tracked) == (2 if siamese else 1)


@pytest.mark.parametrize("seed", range(4))
def test_dropout_in_every_branch_replays_the_same_masks(seed):
    """Random interleavings of the branches: the forward phase runs branch by branch (Note [Draw
    order]) so the masks are plain autograd's; recomputations replay them."""
    rng = random.Random(seed)
    xs = inputs(2, seed=seed)

    def make():
        return [tower(0, depth=4, dropout=0.3), tower(1, depth=4, dropout=0.5)], Head(2)
    join = compare(make, xs, exact=True, schedule_fn=lambda net: random_join_policy(rng, net, 0.8))
    assert recomputes(join.plan)
    turn = next(i for i, op in enumerate(join.plan.schedule) if op.kind is OpKind.TURN)
    forward = [op.branch for op in join.plan.schedule[:turn]]
    assert forward == sorted(forward)


def test_siamese_dropout_and_batchnorm_solved_at_low_budget(solved):
    xs = inputs(2, batch=6)

    def make():
        t = tower(0, depth=4, dropout=0.3, bn=True)
        return [t, t], Head(2)
    probe = te.CheckpointedJoin([list(b) for b in make()[0]], make()[1], budget="1GiB", **OPTS)
    (budget,) = budgets_between(probe, xs, [0.2])
    join = compare(make, xs, exact=True, budget=budget, bucket=1)
    assert recomputes(join.plan)


def test_empty_branch_feeds_the_head_directly():
    xs = inputs(1) + [torch.randn(5, 12, dtype=DT, requires_grad=True)]  # the head reads it as is

    def make():
        return [tower(0, depth=4), nn.Sequential()], Head(2)
    ref_b, ref_h = make()
    branches, head = make()
    ref_xg = plain_step(ref_b, ref_h, xs)
    join = te.CheckpointedJoin([list(branches[0]), []], head, budget="1GiB", **OPTS)
    join.prepare(*xs)
    assert join.net.lengths[1] == 0
    join.replan(budget=join.min_budget_bytes)
    xg = join_step(join, xs)
    assert recomputes(join.plan)
    assert xg[1] is not None
    assert_same([ref_b[0], ref_h], [branches[0], head], ref_xg, xg)


def test_head_output_structure_and_non_differentiable_parts():
    xs = inputs(2)

    def head(a, b):
        loss = (a * b).sum()
        return {"loss": loss, "metric": (a - b).abs().mean().detach(), "count": 3, "pair": (a.argmax(1), loss * 2)}
    ta, tb = tower(0), tower(1)
    ra, rb = copy.deepcopy(ta), copy.deepcopy(tb)
    ref = head(ra(xs[0]), rb(xs[1]))
    join = te.CheckpointedJoin([list(ta), list(tb)], head, budget="1GiB", **OPTS,
                               schedule_fn=lambda net: random_join_policy(random.Random(2), net, 1.0))
    out = join(*xs)
    assert set(out) == {"loss", "metric", "count", "pair"} and out["count"] == 3
    assert not out["metric"].requires_grad and not out["pair"][0].requires_grad
    assert torch.equal(out["pair"][0], ref["pair"][0]) and torch.equal(out["loss"], ref["loss"])
    (out["loss"] + out["pair"][1]).backward()
    (ref["loss"] + ref["pair"][1]).backward()
    for p, q in zip(list(ra.parameters()) + list(rb.parameters()), list(ta.parameters()) + list(tb.parameters()),
                    strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=0)


# ---------------------------------------------------------------------------- training
def test_two_sgd_steps_equal_plain(solved):
    def make():
        return [tower(0, depth=4, dropout=0.2, bn=True), tower(1, depth=3)], Head(2)
    ref_b, ref_h = make()
    branches, head = make()
    xs0 = inputs(2, batch=6)
    probe = te.CheckpointedJoin([list(b) for b in make()[0]], make()[1], budget="1GiB", **OPTS)
    (budget,) = budgets_between(probe, xs0, [0.1])
    join = te.CheckpointedJoin([list(b) for b in branches], head, budget=budget, bucket=1, **OPTS)
    ref_params = [p for _, p in params_of(*ref_b, ref_h)]
    opt_r = torch.optim.SGD(ref_params, lr=0.1, momentum=0.9)
    opt_j = torch.optim.SGD(join.parameters(), lr=0.1, momentum=0.9)
    assert len(list(join.parameters())) == len(ref_params)
    for step in range(2):
        xs = inputs(2, batch=6, seed=10 + step)
        for net, opt in ((lambda *x: ref_h(*[b(t) for b, t in zip(ref_b, x, strict=True)]), opt_r), (join, opt_j)):
            opt.zero_grad()
            torch.manual_seed(100 + step)
            net(*xs).backward()
            opt.step()
    assert recomputes(join.plan)
    for (name, p), (_, q) in zip(params_of(*ref_b, ref_h), params_of(*branches, head), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-9, msg=name)
    for ref, mod in zip(ref_b, branches, strict=True):
        for (name, b), c in zip(ref.named_buffers(), mod.buffers(), strict=True):
            torch.testing.assert_close(c, b, rtol=1e-6, atol=1e-9, msg=name)


def test_budget_none_is_plain_autograd():
    xs = inputs(2)
    join = compare(lambda: ([tower(0), tower(1)], Head(2)), xs, budget=None)
    assert join.plan is None
    out = join(*xs)
    assert "JoinFunction" not in type(out.grad_fn).__name__
    with torch.no_grad():
        join(*xs)


# ---------------------------------------------------------------------------- memory
def _measured_peak(join, xs) -> int:
    return measured_step(join, lambda: join(*xs).backward()).peak


def test_measured_peak_holds_the_budget_and_low_budgets_recompute():
    torch.manual_seed(0)
    xs = [torch.randn(64, 32, dtype=torch.float32) for _ in range(2)]

    def wide(seed):
        torch.manual_seed(seed)
        layers = []
        for _ in range(6):
            layers += [nn.Linear(32, 128), nn.Tanh(), nn.Linear(128, 32), nn.Tanh()]
        return nn.Sequential(*layers)
    head = Head(2, width=32).float()
    towers = [wide(0), wide(1)]
    join = te.CheckpointedJoin([list(t) for t in towers], head, budget="1GiB", **OPTS)
    join.prepare(*xs)
    lo, hi = join.min_budget_bytes, store_all_join_peak_bytes(join.net)
    plain = _measured_peak(te.CheckpointedJoin([list(t) for t in towers], head, budget=None), xs)
    results = []
    for budget in (hi, (lo + hi) // 2, (3 * lo + hi) // 4, lo):
        join.replan(budget=budget)
        measured = _measured_peak(join, xs)
        results.append((budget, join.plan.predicted_peak_bytes, measured))
        assert measured <= budget, results
    assert recomputes(join.plan)  # at the minimum
    assert results[-1][2] < 0.6 * plain, (results, plain)
    print("budget, predicted, measured:", results, "plain:", plain)


def test_measured_peak_holds_the_budget_when_the_caller_keeps_the_heads_output():
    # Note [The caller holds a_N]: a head returning a large tensor (the loss computed outside), kept
    # by the caller through the backward, is reserved with its gradient.
    torch.manual_seed(0)
    xs = [torch.randn(64, 32, dtype=torch.float32) for _ in range(2)]

    class Wide(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(32, 512), nn.Linear(32, 512)

        def forward(self, u, v):
            return self.a(u) * self.b(v)  # 64 x 512 floats: 128 KiB
    towers = [nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(32, 32), nn.Tanh())]) for _ in range(2)]
    join = te.CheckpointedJoin([list(t) for t in towers], Wide(), budget="1GiB", **OPTS)
    join.prepare(*xs)
    for p in join.parameters():
        p.grad = torch.zeros_like(p)

    def step():
        out = join(*xs)
        out.sum().backward()  # a loss that allocates nothing of out's size (its gradient is a view)
        del out  # only after the backward
    for budget in (join.min_budget_bytes, (join.min_budget_bytes + store_all_join_peak_bytes(join.net)) // 2):
        join.replan(budget=budget)
        step()
        _, reading = measure_peak(step)
        assert reading.peak <= budget, (budget, reading.peak, join.plan.predicted_peak_bytes)


# ---------------------------------------------------------------------------- errors
def test_bad_inputs_and_budget_below_minimum():
    xs = inputs(2)
    join = te.CheckpointedJoin([list(tower(0)), list(tower(1))], Head(2), budget=64, **OPTS)
    with pytest.raises(TypeError, match="one input per branch"):
        join(xs[0])
    with pytest.raises(TypeError, match="branch 1"):
        join(xs[0], "not a tensor")
    with pytest.raises(InfeasibleBudgetError, match="minimum") as err:
        join(*xs)
    assert err.value.min_bytes > 64 and str(err.value.min_bytes) in str(err.value)
    join.replan(budget="0.1%")
    with pytest.raises(InfeasibleBudgetError, match=r"needs at least [\d.]+%"):
        join(*xs)
    with pytest.raises(ValueError, match="k >= 2"):
        te.CheckpointedJoin([list(tower(0))], Head(1))
    with pytest.raises(ValueError, match="every branch is empty"):
        te.CheckpointedJoin([[], []], Head(2))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_retain_graph_backwards_match_plain_autograd(seed):
    # they were refused; now every backward that keeps the graph starts again from the forward's state,
    # as the chain's (Note [Retained graphs]): dropout masks replayed, BatchNorm statistics updated once
    xs = inputs(2)

    def make():
        return [tower(0, dropout=0.3, bn=True), tower(1, dropout=0.3, bn=True)], Head(2)
    towers, head = make()
    join = te.CheckpointedJoin([list(t) for t in towers], head, budget="1GiB", **OPTS,
                               schedule_fn=lambda net: random_join_policy(random.Random(seed), net, 1.0))
    ref_towers, ref_head = make()
    results = []
    for run in ("plain", "join"):
        torch.manual_seed(5)
        rxs = fresh(xs)
        if run == "plain":
            out, params = ref_head(*(t(x) for t, x in zip(ref_towers, rxs))), list(ref_head.parameters())
            params += [p for t in ref_towers for p in t.parameters()]
        else:
            out, params = join(*rxs), list(head.parameters()) + [p for t in towers for p in t.parameters()]
        out.backward(retain_graph=True)
        first = [p.grad.clone() for p in params] + [x.grad.clone() for x in rxs]
        named = torch.autograd.grad(out * 3, [rxs[1], params[0]], retain_graph=True)
        (out * 2).backward()
        buffers = [b.clone() for m in (ref_towers if run == "plain" else towers) for b in m.buffers()]
        results.append((first, list(named), [p.grad for p in params] + [x.grad for x in rxs], buffers))
        if run == "join":
            with pytest.raises(RuntimeError, match="pass retain_graph=True to the earlier backward"):
                out.backward()
    assert not join.plan.decided_by == "plain autograd"
    assert any(op.kind is OpKind.FWD_NOGRAD for op in join.plan.schedule)  # something is recomputed
    for got, want in zip(results[1], results[0], strict=True):
        assert len(got) == len(want) and all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize("call", ["backward_inputs", "autograd_grad", "input_grad"])
def test_calls_that_name_tensors_behave_as_in_plain_autograd(call):
    # the parameters reached no node of the step: the engine skipped its backward, and the named
    # parameters were left without gradients, with no error; then such calls were refused. They now
    # run as the chain's do (Note [Autograd calls that name tensors] in torch_exec/executor.py).
    xs = inputs(2)

    def make():
        return [tower(0), tower(1, dropout=0.3)], Head(2)
    towers, head = make()
    join = te.CheckpointedJoin([list(t) for t in towers], head, budget="1GiB", **OPTS,
                               schedule_fn=lambda net: random_join_policy(random.Random(0), net, 1.0))
    ref_towers, ref_head = make()
    named, ref_named = [towers[0][0].weight, head.proj[1].bias], [ref_towers[0][0].weight, ref_head.proj[1].bias]
    torch.manual_seed(5)
    loss = join(*xs)
    torch.manual_seed(5)
    rxs = fresh(xs)
    want = ref_head(*(t(x) for t, x in zip(ref_towers, rxs)))
    assert torch.equal(loss, want)
    if call == "backward_inputs":
        loss.backward(inputs=named)
        want.backward(inputs=ref_named)
        got, expected = [p.grad for p in named], [p.grad for p in ref_named]
    elif call == "autograd_grad":
        got, expected = torch.autograd.grad(loss, named), torch.autograd.grad(want, ref_named)
    else:
        got, expected = torch.autograd.grad(loss, xs[1]), torch.autograd.grad(want, rxs[1])
    assert all(g is not None and torch.equal(g, e) for g, e in zip(got, expected, strict=True))
    others = [p for p in join.parameters() if all(p is not q for q in named)]
    assert all(p.grad is None for p in others)  # no other .grad touched


def test_the_least_budget_is_plain_autograds_where_the_join_model_asks_more(monkeypatch):
    # a review: the join named the join model's least (100.5 % of plain autograd's measured peak) while
    # plain autograd runs at its peak; as for CheckpointedSequential, the least budget is the lower of the two
    import torch_exec.join as J
    xs = inputs(2)
    join = te.CheckpointedJoin([list(tower(0)), list(tower(1))], Head(2), budget="1GiB", **OPTS)
    join.prepare(*xs)
    plain = join.plain_peak_bytes_for(join._last)
    above = plain + 4096
    monkeypatch.setattr(J, "min_peak_join", lambda net: types.SimpleNamespace(min_bytes=above))

    def refuse(*args, **kwargs):
        raise InfeasibleBudgetError(f"below the minimum feasible budget {above} B", above)
    monkeypatch.setattr(J, "solve_join", refuse)
    assert join.min_budget_bytes == plain
    join.replan(budget=plain)
    assert join.plan.decided_by == "plain autograd"
    with pytest.raises(InfeasibleBudgetError, match=rf"below plain autograd's measured peak {plain} B") as err:
        join.replan(budget="99%")
    assert err.value.min_bytes == plain and "needs at least 100%" in str(err.value)


def test_plain_autograd_runs_when_its_measured_step_fits():
    xs = inputs(2)

    def make():
        return [tower(seed, depth=3 + seed) for seed in range(2)], Head(2)
    probe = te.CheckpointedJoin([list(b) for b in make()[0]], make()[1], budget="1GiB", **OPTS)
    probe.prepare(*xs)
    peak = probe.plain_peak_bytes_for(probe._last)
    join = compare(make, xs, budget=peak)
    assert join.plan.decided_by == "plain autograd" and join._last.plain
    assert join.plan.predicted_peak_bytes == peak and join.plan.predicted_time_ms == join.plan.store_all_time_ms
    join.measure_memory(1)
    join_step(join, xs)
    record = join.memory_report()[-1]
    assert record.plan == "store-all (plain autograd)" and record.within_budget, record
    join.replan(budget=peak - 1)  # below it, the join DP's plan
    assert join.plan.decided_by != "plain autograd" and not join._last.plain


def test_one_tensor_fed_to_a_branch_that_writes_it_in_place_is_refused():
    # a review: join(h, h, h) with an in-place first stage in branch 0. Plain autograd lets branch 1 and the head
    # read what that stage wrote; a branch under a plan works on a copy of its input, so the join trained another
    # function (loss 3.962 against 4.044), silently. Refused now; with branch 0's own copy it is plain autograd's
    def stages(seed, inplace):
        torch.manual_seed(seed)
        first = [nn.ReLU(inplace=True)] if inplace else []
        return first + [m for _ in range(4) for m in (nn.Linear(16, 16).to(DT), nn.Tanh())]

    def head(a, b, c):
        return (a * b).sum() + (c * a).mean()

    branches = [stages(0, True), stages(1, False), None]
    reference = copy.deepcopy(branches)
    join = te.CheckpointedJoin(branches, head, budget="1GiB", backend="cpu", **OPTS)
    x = torch.randn(8, 16, dtype=DT)
    h = x.clone().requires_grad_() * 1
    join.prepare(h, h, h)
    join.replan(budget=join.min_budget_bytes)
    with pytest.raises(ValueError, match=r"branch 0's first stage writes its input in place.*branch\(es\) \[1, 2\]"):
        join(h, h, h)
    leaf = x.clone().requires_grad_()
    h = leaf * 1
    join(h.clone(), h, h).backward()  # the remedy the message names: branch 0 its own copy
    ref_leaf = x.clone().requires_grad_()
    g = ref_leaf * 1
    plain = [nn.Sequential(*b) for b in reference[:2]]
    head(plain[0](g.clone()), plain[1](g), g).backward()
    assert torch.equal(leaf.grad, ref_leaf.grad)
    for mine, theirs in zip(branches[:2], reference[:2], strict=True):
        for p, q in zip(nn.Sequential(*mine).parameters(), nn.Sequential(*theirs).parameters(), strict=True):
            assert torch.equal(p.grad, q.grad)


def test_a_head_that_writes_a_branch_output_in_place_is_refused_before_any_step():
    """Seen while profiling the head, the refusal comes before a step under a plan: BatchNorm statistics and the RNG
    are as the call found them (review rv19: the step's forward ran first,
    bench/repros/rv19_join_head_inplace_refusal_after_step.py); where the step runs as plain autograd the head runs
    (review rv19b: it was refused at any budget, bench/repros/rv19b_join_head_inplace_refused_when_plain_runs.py)."""
    branches = [tower(1, bn=True, dropout=0.1), tower(2)]
    head = lambda a, b: ((a.relu_() - b) ** 2).mean()  # noqa: E731
    join = te.CheckpointedJoin([list(b) for b in branches], head, budget="96%", backend="cpu", **OPTS)
    xs = [torch.randn(16, 6, dtype=DT) for _ in range(2)]
    with pytest.warns(te.InputMutationWarning):
        join.prepare(*xs)
    assert not join._last.plain
    stats = [t.clone() for t in branches[0].buffers()]
    rng = torch.get_rng_state()
    for _ in range(2):
        with pytest.raises(RuntimeError, match="the head wrote in place into"):
            join(*xs)
        assert all(torch.equal(a, b) for a, b in zip(stats, branches[0].buffers()))
        assert torch.equal(rng, torch.get_rng_state())
    join.replan(budget="100%")
    torch.manual_seed(0)
    loss = join(*xs)
    torch.manual_seed(0)
    assert join._last.plain and torch.equal(loss, head(branches[0](xs[0]), branches[1](xs[1])))


def test_a_branch_whose_boundaries_no_backward_saves_is_checkpointed_inside():
    """A branch of transformer layers, whose boundaries no backward saves, merged into one stage, and the join's
    least budget was plain autograd's peak (review rv19: bench/repros/rv19_join_branch_unsaved_boundaries_merged.py).
    The join is planned over both groupings of its branches, as a chain is (Note [Two groupings of unsaved
    boundaries]): at half of plain autograd's peak the kept grouping's plan runs, within its budget, with plain
    autograd's loss and gradients."""
    torch.manual_seed(0)
    text = nn.Sequential(*[nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True) for _ in range(4)])
    other = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(4)])
    reference = copy.deepcopy(nn.ModuleList([text, other]))
    tokens, feats = torch.randn(8, 8, 32), torch.randn(8, 32)

    def head(a, b):
        return ((a.mean(1) - b) ** 2).mean()
    join = te.CheckpointedJoin([list(text), list(other)], head, budget="50%", backend="cpu", **OPTS)
    join.prepare(tokens, feats)
    faces = (join._last, join._last.regrouped)
    assert [f.branches[0].chain.n for f in faces] == [1, 4] or [f.branches[0].chain.n for f in faces] == [4, 1]
    assert join._last.unsaved_kept and join._last.branches[0].chain.n == 4
    assert join.min_budget_bytes < 0.5 * join.plain_peak_bytes_for(join._last)
    peak = measured_step(join, lambda: join(tokens, feats).backward())
    assert peak.peak <= join.plan.budget_bytes
    for p in join.parameters():
        p.grad = None
    loss = join(tokens, feats)
    loss.backward()
    expected = head(reference[0](tokens), reference[1](feats))
    expected.backward()
    assert torch.equal(loss, expected)
    for p, q in zip(join.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-7)


def test_a_percentage_without_a_measured_peak_is_of_the_profiles_own_grouping():
    """Profiled stage by stage (no plain step measured), a percentage is of the store-all peak of the join over the
    branches' own grouping, whichever face runs: the kept face's over-counts (review rv19b:
    bench/repros/rv19b_join_kept_face_percent_of_overcount.py, 60 % planned within 64.0 % of it)."""
    torch.manual_seed(0)
    text = nn.Sequential(*[nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True) for _ in range(4)])
    other = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(4)])
    join = te.CheckpointedJoin([list(text), list(other)], lambda a, b: ((a.mean(1) - b) ** 2).mean(), budget="60%",
                               backend="cpu", profile_isolated=True, **OPTS)
    plan = join.prepare(torch.randn(8, 8, 32), torch.randn(8, 32))
    entry = join._last
    merged = entry.regrouped if entry.unsaved_kept else entry
    exact = max(store_all_join_peak_bytes(merged.plain_net), merged.floor_bytes)
    assert store_all_join_peak_bytes(merged.regrouped.plain_net) > exact  # the other face's over-count
    assert plan.budget_bytes == int(0.6 * exact) and join.plain_peak_bytes_for(merged.regrouped) == exact


def test_the_face_that_keeps_plain_autograds_results_runs_first():
    """executor.plan_faces with ``keeps`` (a join's draw order): a face whose plan keeps plain autograd's order runs
    before a faster one that does not, unless it would add a parameter read by several stages (review rv19b:
    bench/repros/rv19b_join_face_choice_ignores_draw_order.py, the faster face's dropout masks differed)."""
    from torch_exec.executor import plan_faces
    shared = object()

    def faces(merged_ms, kept_ms, merged_keeps, kept_keeps, kept_shared=()):
        merged = types.SimpleNamespace(ms=merged_ms, ok=merged_keeps, shared_params=(), name="merged")
        kept = types.SimpleNamespace(ms=kept_ms, ok=kept_keeps, shared_params=kept_shared, name="kept")
        return merged, kept

    def plan(face, fallback):
        face.plan = types.SimpleNamespace(predicted_time_ms=face.ms)
    for args, runs in (((10, 8, True, False), "merged"), ((8, 10, False, True), "kept"),
                       ((10, 8, True, True), "kept"), ((10, 8, False, False), "kept"),
                       ((10, 8, False, True, (shared,)), "merged")):
        merged, kept = faces(*args)
        assert plan_faces(merged, kept, plan, keeps=lambda face: face.ok).name == runs, args
    merged, kept = faces(10, 8, True, False)
    assert plan_faces(merged, kept, plan).name == "kept"  # without keeps: the faster


def test_only_random_draws_and_buffers_several_branches_write_are_order_sensitive():
    """Note [Draw order]: a tower's own BatchNorm gives the same statistics in any branch order; a module two branches
    share does not, nor does a dropout (review rv19e: every stage with a buffer was counted, and the join warned and ran
    a slower face for it, bench/repros/rv19e_join_order_warning_unshared_buffers.py)."""
    from torch_exec.join import _order_sensitive
    xs = [torch.randn(16, 6, dtype=DT) for _ in range(2)]
    head = lambda a, b: ((a - b) ** 2).mean()  # noqa: E731
    for towers, sensitive in (((tower(1, bn=True), tower(2, bn=True)), False),
                              ((tower(1, bn=True),) * 2, True), ((tower(1, dropout=0.1), tower(2)), True)):
        join = te.CheckpointedJoin([list(t) for t in towers], head, budget="1GiB", backend="cpu", **OPTS)
        join.prepare(*xs)
        assert any(_order_sensitive(join._last.branches)) == sensitive, towers


def test_a_draw_order_warning_comes_with_the_plans_first_step():
    """Once per plan, as it runs: not for a plan a refused replan throws away or a face that does not run (review
    rv19e: bench/repros/rv19e_join_refused_replan_warns_order.py)."""
    import warnings
    from torch_exec.join import JoinOrderWarning
    join = te.CheckpointedJoin([list(tower(1)), list(tower(2))], lambda a, b: ((a - b) ** 2).mean(), budget="96%",
                               backend="cpu", **OPTS)
    xs = [torch.randn(16, 6, dtype=DT) for _ in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", JoinOrderWarning)
        join.prepare(*xs)
    join._last.order_warning = "stand-in message"  # what _draw_order writes where the order cannot be kept
    with pytest.warns(JoinOrderWarning, match="stand-in message"):
        join(*xs).backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error", JoinOrderWarning)
        join(*xs).backward()  # once per plan
