"""Hooked parameters go through the parameter tap (Note [Hooks of routed parameters] in torch_exec/executor.py):
the schedule's backward hands the stages' part of their gradient to the engine, which sums it with any other
part (a head tied to an embedding, computed outside the wrapper) and runs the hooks once, as plain autograd
does. Each case is compared with plain autograd on a copy of the model: hook calls, gradients and weights
bit for bit, and the measured peak against the budget."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import torch_exec as te  # noqa: E402
from _torch_helpers import optimizer_in_backward  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::torch_exec.CPUTimingWarning",
                                        "ignore::gpusolve.FallbackWarning")

V, D = 60, 32


class LM(nn.Module):
    """An embedding and six blocks (wrapped: ``body``), the head tied to the embedding computed outside them."""

    def __init__(self, unused: bool = False, tied: bool = True):
        super().__init__()
        torch.manual_seed(0)
        self.wte = nn.Embedding(V, D)
        self.out = None if tied else nn.Linear(D, V)  # the head: tied to the embedding, or a layer of its own
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(D, 2 * D), nn.Tanh(), nn.Linear(2 * D, D))
                                    for _ in range(6))
        if unused:  # a parameter a stage holds and never reads: no gradient reaches it
            self.blocks[2].register_parameter("spare", nn.Parameter(torch.ones(D)))
        self.body = None

    def forward(self, ids):
        h = self.body(ids) if self.body is not None else self.blocks_of(self.wte(ids))
        logits = F.linear(h, self.wte.weight) if self.out is None else self.out(h)
        return F.cross_entropy(logits.flatten(0, 1), ids.flatten())

    def blocks_of(self, h):
        for b in self.blocks:
            h = b(h)
        return h


def wrapped_pair(unused=False, tied=True):
    """The model, a copy run by plain autograd, and the wrapper over the model's embedding and blocks 8 KiB above its
    least budget (the stages back-propagated in several segments)."""
    ref = LM(unused, tied)
    model = copy.deepcopy(ref)
    model.body = te.CheckpointedSequential([model.wte, *model.blocks], budget="100%", backend="cpu")
    model.body.prepare(IDS)
    # room for the head computed outside the wrapper, which a step over the budget teaches it to reserve (Note
    # [The caller's turn]; at the least budget itself the next call would then raise)
    model.body.replan(model.body.min_budget_bytes + 8192)
    assert not model.body._last.plain and len(model.body._last.plan.schedule) > 0
    return model, ref


IDS = torch.randint(0, V, (8, 12), generator=torch.Generator().manual_seed(0))


def hook_all(model, kind, calls):
    """Hooks of ``kind`` on every parameter, counting their calls by name in ``calls``."""
    if kind == "optimizer":  # PyTorch's optimizer step in the backward
        optimizer_in_backward(model, calls)
        return
    if kind == "accumulator":  # the same through PyTorch's API, a hook on each AccumulateGrad node
        from torch.distributed.optim import _apply_optimizer_in_backward
        _apply_optimizer_in_backward(torch.optim.Adam, model.parameters(), {"lr": 1e-2})
        return
    for name, p in model.named_parameters():  # a clamp, then a logger of the whole gradient
        p.register_hook(lambda g: g.clamp(-2e-3, 2e-3))
        p.register_post_accumulate_grad_hook(lambda p, name=name: calls.setdefault(name, []).append(p.grad.clone()))


def batch(step):
    return torch.randint(0, V, (8, 12), generator=torch.Generator().manual_seed(step + 1))


def steps(model, ref, n, compare=lambda: None):
    """``n`` steps of both models, ``compare`` after each backward; by how much the wrapper's measured peaks (beyond
    the parameters' gradients) exceed the predicted ones."""
    model.body.measure_memory(n)
    for step in range(n):
        ids = batch(step)
        model(ids).backward()
        ref(ids).backward()
        compare()
        for p in (*model.parameters(), *ref.parameters()):
            p.grad = None
    return [r.peak_beyond_set_grads - r.predicted_peak for r in model.body.memory_report()[-n:]]


def adam_steps(model) -> dict:
    """How many steps each parameter's optimizer in the backward (PyTorch's API) has made, by name."""
    return {name: int(p._in_backward_optimizers[0].state[p]["step"]) for name, p in model.named_parameters()}


@pytest.mark.parametrize("kind", ["optimizer", "accumulator", "clamp"])
def test_a_parameter_read_outside_the_wrapper_runs_its_hooks_once(kind):
    # bench/repros/rv6_diff_hooks_param_read_outside.py: the stage's segment ran the tied weight's hooks on its
    # part, the outer graph again on the head's (Adam stepped twice per backward; the clamp clipped each part).
    # The hooks on the accumulator node of PyTorch's _apply_optimizer_in_backward too
    # (bench/repros/rv9_hooks_accumulator_node_tied.py, Note [Hooks on the accumulator node] in torch_exec/_util.py).
    # The peak is within the plan by as much as the same model's without hooks (the head, computed outside the
    # wrapper, is measured too and planned for by no one: above the budget either way). The first backward runs
    # the hooks on the whole gradient and finds the head's part; the next ones too (Note [Hooks of routed
    # parameters])
    unhooked = steps(*wrapped_pair(), 3)
    model, ref = wrapped_pair()
    ours, theirs, done = {}, {}, []
    hook_all(model, kind, ours)
    hook_all(ref, kind, theirs)

    def compare():
        if kind == "accumulator":
            done.append(None)
            ours.update(adam_steps(model)), theirs.update(adam_steps(ref))
            assert set(theirs.values()) == {len(done)}  # one step per backward
        assert ours.keys() == theirs.keys() and ours
        for name in theirs:
            if kind == "accumulator":
                assert ours[name] == theirs[name], name
            elif kind == "optimizer":
                assert ours[name] == theirs[name] == 1, name
            else:
                assert len(ours[name]) == len(theirs[name]) == 1, name
                torch.testing.assert_close(ours[name][0], theirs[name][0], rtol=0, atol=0, msg=name)
        for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)
            if kind == "clamp":
                torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0, msg=name)
        ours.clear(), theirs.clear()

    overs = steps(model, ref, 3, compare)
    if kind != "clamp":  # (the clamp's logger keeps a copy of every gradient: the caller's memory)
        assert all(over <= unhooked[0] for over in overs), (overs, unhooked)


@pytest.mark.parametrize("prior", [None, 0.5], ids=["grad_none", "accumulating"])
def test_hooks_of_a_parameter_no_gradient_reaches_do_not_run(prior):
    # the tap hands the engine nothing for it, and the engine calls its accumulator with None: guarded, its hooks
    # skip that call, as plain autograd, which never calls it; .grad stays as it was
    model, ref = wrapped_pair(unused=True)
    spare = model.blocks[2].spare
    calls = []
    spare.register_hook(lambda g: calls.append(("grad", g)) or g)
    spare.register_post_accumulate_grad_hook(lambda p: calls.append(("post", p.grad)))
    model.wte.weight.register_post_accumulate_grad_hook(lambda p: calls.append(("wte", None)))
    spare.grad = None if prior is None else torch.full_like(spare, prior)
    kept = spare.grad
    model(IDS).backward()
    assert calls == [("wte", None)]
    assert spare.grad is kept and (prior is None or bool((kept == prior).all()))
    ref(IDS).backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        if name != "blocks.2.spare":
            torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0, msg=name)
    # the guards went with the pass: the hooks are the user's own again
    assert all(type(h).__name__ == "function" for h in spare._backward_hooks.values())
    assert all(type(h).__name__ == "function" for h in spare._post_accumulate_grad_hooks.values())


def test_post_accumulate_hooks_run_once_while_gradients_accumulate():
    # .grad already set: the stages' part is added in place (no buffer beside it), the hooks suspended meanwhile,
    # and the engine's one call of the accumulator, after the head's part, runs them
    model, ref = wrapped_pair()
    ours, theirs = {}, {}
    for m, calls in ((model, ours), (ref, theirs)):
        for name, p in m.named_parameters():
            p.register_post_accumulate_grad_hook(lambda p, name=name, calls=calls: calls.setdefault(name, []).append(
                p.grad.clone()))
    for micro in range(2):
        ids = torch.randint(0, V, (8, 12), generator=torch.Generator().manual_seed(micro))
        grads_before = [p.grad for p in model.parameters()]
        model(ids).backward()
        ref(ids).backward()
        if micro:  # accumulated in place, as AccumulateGrad does
            assert all(p.grad is g for p, g in zip(model.parameters(), grads_before, strict=True))
    assert ours.keys() == theirs.keys() and all(len(v) == 2 for v in ours.values())
    for name in theirs:  # the tied weight's parts are added in another order: G + stages + head, G + (head + stages)
        for g, h in zip(ours[name], theirs[name], strict=True):
            torch.testing.assert_close(g, h, rtol=0 if name != "wte.weight" else 1e-6,
                                       atol=0 if name != "wte.weight" else 1e-8, msg=name)


def test_a_call_naming_hooked_parameters_reaches_the_schedule():
    # routed, hooked parameters are named like any other: autograd.grad gets the schedule's part summed with
    # the head's and their gradient hooks applied, as plain autograd's, and fills no .grad
    model, ref = wrapped_pair()
    for m in (model, ref):
        m.wte.weight.register_hook(lambda g: g * 3)
    named = [model.wte.weight, model.blocks[0][0].weight]
    got = torch.autograd.grad(model(IDS), named)
    want = torch.autograd.grad(ref(IDS), [ref.wte.weight, ref.blocks[0][0].weight])
    for g, h in zip(got, want, strict=True):
        torch.testing.assert_close(g, h, rtol=0, atol=0)
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("route", ["tensor", "accumulator"])
def test_an_optimizer_in_the_backward_still_frees_each_gradient_early(route):
    # the first backward runs a hooked parameter's hooks on the whole gradient, after the schedule's backward, and
    # learns that no part comes from outside the wrapper; from then on they run in the stages' segments, so the
    # optimizer stepped there frees each gradient as plain autograd's does (a review: every gradient was held to the
    # end of the backward, bench/repros/rv9_hooks_optimizer_in_backward_peak.py)
    from torch_exec.meter import measure_peak

    def make():
        torch.manual_seed(0)
        return nn.Sequential(*[nn.Sequential(nn.Linear(128, 128), nn.Tanh()) for _ in range(8)], nn.Linear(128, 4))

    x = torch.randn(8, 128)
    grads = sum(p.numel() * 4 for p in make().parameters())
    peaks = {}
    for hooked in (False, True):
        seq = make()
        w = te.CheckpointedSequential(seq, budget="100%", backend="cpu")
        w.prepare(x)
        w.replan(w.min_budget_bytes)
        if hooked and route == "accumulator":  # PyTorch's API: hooks on the AccumulateGrad nodes
            from torch.distributed.optim import _apply_optimizer_in_backward
            _apply_optimizer_in_backward(torch.optim.SGD, seq.parameters(), {"lr": 1e-2})
        elif hooked:
            for p in seq.parameters():
                opt = torch.optim.SGD([p], lr=1e-2)

                def stepped(p, opt=opt):
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                p.register_post_accumulate_grad_hook(stepped)
        for step in range(3):
            for p in seq.parameters():
                p.grad = None
            _, reading = measure_peak(lambda: w(x).square().sum().backward())
            peaks[hooked, step] = reading.peak
    assert peaks[True, 0] > peaks[False, 0] - grads // 2  # the first: every gradient until the hooks ran
    assert peaks[True, 1] == peaks[True, 2] < peaks[False, 1] - grads // 2, peaks


def test_a_reader_outside_that_appears_later_is_warned_about_then_summed():
    # the first backwards found no part from outside the wrapper; a later step reads the weight outside too: that
    # step runs the hooks once per part (as before the change), says so, and the next ones once on the whole
    model, ref = wrapped_pair(tied=False)
    ours, theirs = {}, {}
    hook_all(model, "clamp", ours)
    hook_all(ref, "clamp", theirs)
    aux = torch.randn(V, D)

    def step(ids, tied_aux: bool):
        ours.clear(), theirs.clear()
        for m in (model, ref):
            loss = m(ids)
            if tied_aux:  # a second loss on the embedding, outside the wrapper
                loss = loss + (m.wte.weight * aux).sum() * 1e-3
            loss.backward()
        for p in (*model.parameters(), *ref.parameters()):
            p.grad = None

    step(batch(0), False)
    step(batch(1), False)
    with pytest.warns(UserWarning, match=r"shape \(60, 32\) .* from code outside the wrapper, which earlier "
                      r"backwards did not: in this backward its hooks ran once per part"):
        step(batch(2), True)
    assert len(ours["wte.weight"]) == 2 and len(theirs["wte.weight"]) == 1
    step(batch(3), True)
    assert ours.keys() == theirs.keys()
    for name in theirs:
        assert len(ours[name]) == len(theirs[name]) == 1, name
        torch.testing.assert_close(ours[name][0], theirs[name][0], rtol=0, atol=0, msg=name)


def test_two_calls_leave_the_hooks_of_a_parameter_no_gradient_reaches_alone():
    # a gradient hook and .grad already set: the deferral of Note [Hooks across calls before one backward] ran its
    # post-accumulate hook at the end of the pass although no gradient reached it (a review: Adam stepped it,
    # bench/repros/rv9_hooks_unused_two_calls_post_hook.py)
    model, ref = wrapped_pair(unused=True)
    spare = model.blocks[2].spare
    calls = []
    spare.register_hook(lambda g: g.clamp(-1, 1))
    spare.register_post_accumulate_grad_hook(lambda p: calls.append("post"))
    spare.grad = torch.full_like(spare, 0.5)
    kept = spare.grad
    (model(IDS) + model(batch(5))).backward()
    (ref(IDS) + ref(batch(5))).backward()
    assert calls == [] and spare.grad is kept and bool((kept == 0.5).all())
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        if name != "blocks.2.spare":
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-8, msg=name)


def test_ddp_searching_for_unused_parameters_runs_hooked_parameters():
    # DistributedDataParallel(find_unused_parameters=True) around the wrapper with a hooked parameter raised "Expected
    # to mark a variable ready only once" (a review: bench/repros/rv9_hooks_ddp_find_unused.py): the hooked one is
    # routed too, its hooks left in the segments (DDP's own hook on its accumulator counts the calls)
    import os
    import tempfile

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    def make():
        torch.manual_seed(0)
        return nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(6)], nn.Linear(16, 3))

    x, y = torch.randn(8, 16), torch.randint(0, 3, (8,))
    dist.init_process_group("gloo", store=dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1),
                            rank=0, world_size=1)
    try:
        ref, seq = make(), make()
        w = te.CheckpointedSequential(seq, budget="100%", backend="cpu")
        w.prepare(x)
        w.replan(w.min_budget_bytes)
        calls = {id(seq): 0, id(ref): 0}
        for m in (seq, ref):
            m[0][0].weight.register_post_accumulate_grad_hook(lambda p, m=m: calls.__setitem__(id(m), calls[id(m)] + 1))
        ddp = DDP(w, find_unused_parameters=True)
        for _ in range(2):
            for p in (*seq.parameters(), *ref.parameters()):
                p.grad = None
            F.cross_entropy(ddp(x), y).backward()
            F.cross_entropy(ref(x), y).backward()
            for p, q in zip(seq.parameters(), ref.parameters(), strict=True):
                torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)
        assert calls[id(seq)] == calls[id(ref)] == 2
    finally:
        dist.destroy_process_group()
