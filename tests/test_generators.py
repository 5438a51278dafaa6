"""Note [Generators of the model's own] (torch_exec/_util.py): stages that draw from a torch.Generator of the
model's own (a module attribute, or one a plain callable closes over) are replayed with it when recomputed,
as they are with torch's default generator; preparing leaves it as it was."""
from __future__ import annotations

import copy
import warnings

import pytest
torch = pytest.importorskip("torch")  # the suite runs without torch: these tests skip
import torch.nn.functional as F
from torch import nn

import torch_exec as te
from _torch_helpers import export_takes_generators

D = 32


class _Noisy(nn.Module):
    def __init__(self, gen, held="attribute"):
        super().__init__()
        self.l = nn.Linear(D, D)
        self.held = held
        # an attribute, or in a list or dict attribute (a review found those unseen: rv7_rev_generator_in_container)
        self.gen = {"attribute": gen, "list": [gen], "dict": {"noise": gen}}[held]

    def forward(self, h):
        gen = (self.gen if self.held == "attribute" else self.gen[0] if self.held == "list"
               else self.gen["noise"])
        return torch.tanh(self.l(h + 0.5 * torch.randn(h.shape, generator=gen)))


def _stages(gen, held="attribute"):
    torch.manual_seed(0)
    closure_gen = torch.Generator().manual_seed(7)
    return [nn.Linear(16, D), _Noisy(gen, held), _Noisy(gen, held),
            lambda h: h * torch.rand(h.shape, generator=closure_gen), _Noisy(gen, held), nn.Linear(D, 5)], closure_gen


def _step(fns, x, y):
    h = x
    for fn in fns:
        h = fn(h)
    return F.cross_entropy(h, y)


@pytest.mark.parametrize("wrapper,held", [("sequential", "attribute"), ("auto", "attribute"),
                                          ("sequential", "list"), ("sequential", "dict")])
def test_a_recomputed_stage_draws_what_its_forward_drew(wrapper, held):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(512, 16, generator=g), torch.randint(0, 5, (512,), generator=g)
    gen = torch.Generator().manual_seed(3)
    fns, closure_gen = _stages(gen, held)
    if wrapper == "sequential":
        modules = nn.ModuleList([f for f in fns if isinstance(f, nn.Module)])
        w = te.CheckpointedSequential(fns, budget="100%", backend="cpu", profile_passes=1, modules=[modules])
        params, run = list(modules.parameters()), lambda: F.cross_entropy(w(x), y)
        ref_fns = fns
    else:
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.ModuleList([f for f in fns if isinstance(f, nn.Module)])

            def forward(self, x, y):
                h = x
                for m in self.body:
                    h = m(h)
                return F.cross_entropy(h, y)
        model = Net()
        w = te.auto_checkpoint(model, "100%", backend="cpu", profile_passes=1)
        params, run = list(model.parameters()), lambda: w(x, y)
        ref_fns = list(model.body)
    before = (gen.get_state().clone(), closure_gen.get_state().clone())
    w.prepare(*((x,) if wrapper == "sequential" else (x, y)))
    assert torch.equal(gen.get_state(), before[0]) and torch.equal(closure_gen.get_state(), before[1])
    executor = w if wrapper == "sequential" else w.executor
    executor.replan(executor.min_budget_bytes)
    for p in params:
        p.grad = None
    run().backward()
    assert sum(executor._last.recomputed) > 0
    after = (gen.get_state().clone(), closure_gen.get_state().clone())
    grads = [p.grad.clone() for p in params]
    # plain autograd from the same generator states, on the same parameters
    gen.set_state(before[0])
    closure_gen.set_state(before[1])
    for p in params:
        p.grad = None
    _step(ref_fns, x, y).backward()
    for g1, p in zip(grads, params):
        torch.testing.assert_close(g1, p.grad, rtol=0, atol=0)
    assert torch.equal(gen.get_state(), after[0]) and torch.equal(closure_gen.get_state(), after[1])


# ---------------------------------------------------------------------------- generators the wrappers did not see
# (review rv21d, 2026-11-29: a global a module's forward names, a plain object's attribute, a forward hook's closure;
# bench/repros/rv21d_seq_global_generator_unseen.py, rv21d_seq_generator_in_plain_object_unseen.py,
# rv21d_hook_closure_generator_unseen.py)
from torch_exec import _util as U  # noqa: E402

GLOBAL_GEN = torch.Generator().manual_seed(11)
HELPER_GEN = torch.Generator().manual_seed(5)


def _helper_noise(shape):
    """A global generator named by a helper function, not by the forward: still not seen."""
    return torch.randn(shape, generator=HELPER_GEN)


class _Sampler:
    """A plain object holding a generator (a noise schedule, a config)."""

    def __init__(self, gen):
        self.g = gen

    def noise(self, shape):
        return torch.randn(shape, generator=self.g)


class _Held(nn.Module):
    """Linear, tanh, + noise from a generator held ``where``: "global" (named in forward), "object" (self.sampler.g),
    "hook" (a forward hook's closure on ``self.l``), "helper" (a helper function's global)."""

    def __init__(self, where, gen=None):
        super().__init__()
        self.l, self.where = nn.Linear(D, D), where
        if where == "object":
            self.sampler = _Sampler(gen)
        if where == "hook":
            self.l.register_forward_hook(lambda m, i, o: o + 0.3 * torch.randn(o.shape, generator=gen))

    def forward(self, h):
        z = self.l(h)
        if self.where == "global":
            z = z + 0.5 * torch.randn(z.shape, generator=GLOBAL_GEN)
        elif self.where == "object":
            z = z + 0.5 * self.sampler.noise(z.shape)
        elif self.where == "helper":
            z = z + 0.5 * _helper_noise(z.shape)
        return torch.tanh(z)


def _found(gen, *modules, fns=()):
    return any(g is gen for g in U.generators_of(list(modules), fns))


def test_generators_of_follows_forwards_globals_plain_objects_and_hooks():
    gen = torch.Generator()
    assert _found(GLOBAL_GEN, nn.Sequential(_Held("global")))
    assert _found(gen, nn.Sequential(_Held("object", gen)))
    assert _found(gen, nn.Sequential(_Held("hook", gen)))
    pre = nn.Linear(D, D)
    pre.register_forward_pre_hook(lambda m, i: (i[0] + torch.randn(i[0].shape, generator=gen),))
    assert _found(gen, nn.Sequential(pre))
    inst = nn.Linear(D, D)
    inst.forward = lambda x: nn.Linear.forward(inst, x) + torch.randn(x.shape, generator=gen)  # set on the instance
    assert _found(gen, inst)
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda m, i, o: o + torch.randn(o.shape, generator=gen) if isinstance(m, nn.Linear) else o)
    try:
        assert _found(gen, nn.Linear(D, D))
    finally:
        handle.remove()
    assert not _found(HELPER_GEN, _Held("helper"))  # a helper function's global: the check refuses it (below)


def test_generators_of_stays_within_its_limits():
    gen = torch.Generator()

    class Box:
        def __init__(self, value):
            self.value = value
    m = nn.Linear(D, D)
    m.deep = Box(Box(Box(Box(Box(gen)))))  # six levels down: past _REACH_DEPTH
    m.wide = [Box(None) for _ in range(U._REACH_ITEMS)] + [gen]  # past _REACH_ITEMS
    assert not _found(gen, m)
    m.deep = Box(Box(gen))
    assert _found(gen, m)
    m.cycle = Box(None)
    m.cycle.value = m.cycle  # each object looked at once
    assert _found(gen, m)


def _least_bytes(make, x):
    from gpusolve.errors import InfeasibleBudgetError
    with pytest.raises(InfeasibleBudgetError) as info:
        make(1)(x)
    return info.value.min_bytes


@pytest.mark.parametrize("wrapper", ["sequential", "auto"])
@pytest.mark.parametrize("where", ["global", "object", "hook"])
def test_a_generator_reached_from_a_forward_a_plain_object_or_a_hook_is_replayed(wrapper, where):
    gen = torch.Generator()
    torch.manual_seed(0)
    base = nn.Sequential(*[_Held(where, gen) for _ in range(6)])
    x = torch.randn(512, 4, D, generator=torch.Generator().manual_seed(1))

    def make(budget, model=None):
        model = copy.deepcopy(base) if model is None else model
        if wrapper == "sequential":
            return te.CheckpointedSequential(model, budget=budget, backend="cpu", profile_passes=1)
        return te.auto_checkpoint(model, budget, backend="cpu", profile_passes=1)

    def step(model, run, seed):
        GLOBAL_GEN.manual_seed(seed)
        gen.manual_seed(seed)
        loss = run(x).pow(2).mean()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()], (GLOBAL_GEN.get_state(), gen.get_state())

    model, ref = copy.deepcopy(base), copy.deepcopy(base)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # auto_checkpoint's on the hooks, CPU timing
        run = make(_least_bytes(make, x), model)
        for seed in (3, 4):
            model.zero_grad(set_to_none=True)
            ref.zero_grad(set_to_none=True)
            got, want = step(model, run, seed), step(ref, ref, seed)
            torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
            for a, b in zip(got[1], want[1]):
                torch.testing.assert_close(a, b, rtol=0, atol=0)
            assert all(torch.equal(a, b) for a, b in zip(got[2], want[2]))
    executor = run if wrapper == "sequential" else run.executor
    assert sum(executor._last.recomputed) > 0


class _Replaced(nn.Module):
    def __init__(self, gen):
        super().__init__()
        self.l, self.gen = nn.Linear(D, D), gen

    def forward(self, h):
        return torch.tanh(self.l(h) + 0.5 * torch.randn(h.shape, generator=self.gen))


def _replaced_each_step(block, wrapper, put, steps, profiles=None):
    """Six ``block(generator)`` stages under ``wrapper`` ("sequential", "export" or "blocks") at 1.1 x their least
    budget, and a plain copy; at each of ``steps`` steps ``put(block, gen)`` gives every block of both a new generator
    (seeded with the step): the losses, gradients and the generators' end states must be equal. The wrapper;
    ``profiles`` (the fixture's count) is counted from the steps on."""
    if wrapper == "export" and not export_takes_generators():
        pytest.skip("this torch's export takes no torch.Generator (torch 2.11): auto_checkpoint takes the block fallback")
    torch.manual_seed(0)
    base = nn.Sequential(*[block(torch.Generator().manual_seed(1)) for _ in range(6)])
    x = torch.randn(512, 4, D, generator=torch.Generator().manual_seed(1))

    def make(budget, model=None):
        model = copy.deepcopy(base) if model is None else model
        if wrapper == "sequential":
            return te.CheckpointedSequential(model, budget=budget, backend="cpu", profile_passes=1)
        return te.auto_checkpoint(model, budget, backend="cpu", capture=wrapper, profile_passes=1)

    model, ref = copy.deepcopy(base), copy.deepcopy(base)
    run = make(_least_bytes(make, x), model)
    if profiles is not None:
        profiles[0] = 0
    for step in range(steps):
        outs = []
        for m, r in ((model, run), (ref, ref)):
            gen = torch.Generator().manual_seed(100 * step)
            for stage in m:
                put(stage, gen)
            m.zero_grad(set_to_none=True)
            loss = r(x).pow(2).mean()
            loss.backward()
            outs.append((loss.detach(), [p.grad.clone() for p in m.parameters()], gen.get_state()))
        (got, want) = outs
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
        for a, b in zip(got[1], want[1]):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        assert torch.equal(got[2], want[2])
    executor = run if wrapper == "sequential" else run.executor
    assert sum(executor._last.recomputed) > 0
    return run


@pytest.mark.parametrize("wrapper", ["sequential", "export", "blocks"])
def test_a_generator_the_loop_replaces_between_steps_is_replayed(wrapper):
    # the generators were found once per signature, and export kept the first one as a constant (review rv21d,
    # bench/repros/rv21d_generator_replaced_between_steps.py): the signature keys a module's generator attributes
    run = _replaced_each_step(_Replaced, wrapper, lambda block, gen: setattr(block, "gen", gen), 2)
    if wrapper == "sequential":  # looked up at each call, not keyed: a signature per step re-profiled at every step
        assert len(run._entries) == 1  # (review rv21r: bench/repros/rv21r_seq_new_generator_each_step_reprofiles.py)


def test_the_block_fallback_refuses_a_generator_it_cannot_record_naming_the_draws():
    # it was refused as "uses a block's output for more than the next block" (review rv21d,
    # bench/repros/rv21d_blocks_unseen_generator_refused_wrong_cause.py)
    torch.manual_seed(0)
    model = nn.Sequential(*[_Held("helper") for _ in range(4)])
    with pytest.raises(te.CaptureError, match=r"draws random numbers from a generator auto_checkpoint cannot record"):
        te.auto_checkpoint(model, "60%", backend="cpu", capture="blocks")(torch.randn(8, 4, D))


noise_g = torch.Generator()  # a global whose name a module uses as an attribute name only


class _AttributeNamedLikeAGlobal(nn.Module):
    def __init__(self):
        super().__init__()
        self.l, self.noise_g = nn.Linear(D, D), torch.Generator()

    def forward(self, h):
        return self.l(h) + torch.randn(h.shape, generator=self.noise_g)


def test_a_global_named_like_an_attribute_the_forward_reads_is_not_recorded():
    # co_names holds attribute names too: the global was recorded in every stage, and a CPU budget that had fitted
    # no longer did (bench/repros/rv7_rev_generator_in_container.py, 40 % -> 46.6 %)
    m = _AttributeNamedLikeAGlobal()
    found = U.generators_of([m])
    assert len(found) == 1 and found[0] is m.noise_g


# ---------------------------------------------------------------------------- Note [Draws found at the first run]
class _DropPath(nn.Module):
    """timm's DropPath: its rate a plain float the loop sets, which no signature keys."""

    def __init__(self):
        super().__init__()
        self.drop_prob = 0.0

    def forward(self, x):
        if self.drop_prob == 0.0 or not self.training:
            return x
        keep = 1 - self.drop_prob
        return x * x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep) / keep


class _Block(nn.Module):
    def __init__(self, way="rate", gen=None):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)
        self.way, self.gen = way, gen
        self.drop_path = _DropPath()

    def forward(self, h):
        z = torch.tanh(self.a(h))
        if self.way == "data" and z.abs().mean() > 0.5:  # noise only where the activations are large
            z = z + 0.5 * torch.randn(z.shape)
        if self.way == "generator":
            z = z + 0.5 * torch.randn(z.shape, generator=self.gen)
        return h + self.drop_path(self.b(z))


_X = torch.randn(8, 4, D, generator=torch.Generator().manual_seed(1))


def _train(model, run, steps=3, rate=True):
    """Losses, gradients and torch's RNG state after each step; ``rate``: the drop rate raised from 0 (0, 0.1,
    0.2)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    torch.manual_seed(123)
    out = []
    for step in range(steps):
        for m in model.modules():
            if isinstance(m, _DropPath) and rate:
                m.drop_prob = 0.1 * step
        loss = run(_X * (1 + step)).pow(2).mean()
        loss.backward()
        out.append((loss.item(), [p.grad.clone() for p in model.parameters()], torch.get_rng_state()))
        opt.step()
        opt.zero_grad()
    return out


def _as_plain(got, plain):
    for (la, ga, ra), (lb, gb, rb) in zip(plain, got, strict=True):
        assert la == lb
        for a, b in zip(ga, gb, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        assert torch.equal(ra, rb)


@pytest.mark.parametrize("way", ["rate", "data"])
def test_a_stage_found_drawing_at_a_later_call_is_replayed(way):
    """A stage the profile saw draw nothing (a drop rate raised from 0, a draw the data decides) is recorded at the
    first run where it draws: every step trains as plain autograd, and a DrawsFoundWarning names the stages once (a
    review: rv21d_seq_drop_rate_attribute_from_zero_not_replayed.py, rv21d_seq_data_dependent_draw_not_replayed.py)."""
    import copy
    import warnings
    torch.manual_seed(0)
    base = nn.Sequential(*[_Block(way) for _ in range(8)])
    ref = copy.deepcopy(base)
    plain = _train(ref, ref, rate=way == "rate")
    model = copy.deepcopy(base)
    w = te.CheckpointedSequential(model, budget="80%", backend="cpu", profile_passes=1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = _train(model, w, rate=way == "rate")
    assert sum(w._last.recomputed) > 0
    _as_plain(got, plain)
    found = [m for m in seen if issubclass(m.category, te.DrawsFoundWarning)]
    assert found and all("drew random numbers" in str(m.message) for m in found)
    if way == "rate":  # every block draws from step 1 on: each recomputed stage is marked
        assert all(w._last.rng[s] for s in range(1, w._last.chain.n + 1) if w._last.recomputed[s])


def test_a_join_stage_found_drawing_is_replayed_in_plain_autograds_order():
    """rv21d_join_live_stage_draws_not_replayed.py: the join records the stages found drawing and runs its forward
    phase branch by branch where that fits, so that their draws follow plain autograd's order."""
    import copy
    import warnings

    from torch_exec.join import CheckpointedJoin

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.out = nn.Linear(D, 1)

        def forward(self, a, b):
            return self.out(a * b).pow(2).mean()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.t1 = nn.Sequential(*[_Block() for _ in range(5)])
            self.t2 = nn.Sequential(*[_Block() for _ in range(5)])
            self.head = Head()

        def forward(self, a, b):
            return self.head(self.t1(a), self.t2(b))

    x2 = torch.randn(8, 4, D, generator=torch.Generator().manual_seed(2))

    def train(model, run):
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        torch.manual_seed(123)
        out = []
        for step in range(3):
            for m in model.modules():
                if isinstance(m, _DropPath):
                    m.drop_prob = 0.1 * step
            loss = run(_X * (1 + step), x2 * (1 + step))
            loss.backward()
            out.append((loss.item(), [p.grad.clone() for p in model.parameters()], torch.get_rng_state()))
            opt.step()
            opt.zero_grad()
        return out
    torch.manual_seed(0)
    base = Net()
    ref = copy.deepcopy(base)
    plain = train(ref, ref)
    model = copy.deepcopy(base)
    join = CheckpointedJoin([model.t1, model.t2], model.head, budget="75%", backend="cpu", profile_passes=1,
                            profile_warmup=0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = train(model, join)
    _as_plain(got, plain)
    assert any(issubclass(m.category, te.DrawsFoundWarning) for m in seen)


def test_a_record_keeps_the_generators_the_stage_advanced():
    """RngState.advanced: the record of a run holds the generators it moved, only."""
    from torch_exec import _util as U
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    before = U.RngState.capture([], (g1, g2))
    torch.randn(3, generator=g2)
    record = before.advanced(U.RngState.capture([], (g1, g2)))
    assert record.cpu is None and record.generators == (g2,) and record.nbytes("cpu") == g2.get_state().numel()
    assert U.RngState.capture([], (g1,)).advanced(U.RngState.capture([], (g1,))) is None
    torch.rand(1)
    record = U.RngState.capture([]).advanced(U.RngState.capture([]))
    assert record is None
    before = U.RngState.capture([])
    torch.rand(1)
    assert before.advanced(U.RngState.capture([])).cpu is before.cpu


def test_a_generator_per_block_costs_what_a_shared_one_does():
    """rv21d_seq_every_generator_recorded_per_stage.py: each stage records the generator it draws from, not every
    generator of the model: the least budget with a generator per block is the shared generator's."""
    from gpusolve import InfeasibleBudgetError
    least = {}
    for way in ("shared", "per block"):
        shared = torch.Generator().manual_seed(1)
        torch.manual_seed(0)
        model = nn.Sequential(*[_Block("generator", shared if way == "shared" else torch.Generator().manual_seed(i))
                                for i in range(8)])
        with pytest.raises(InfeasibleBudgetError) as err:
            te.CheckpointedSequential(model, budget="10%", backend="cpu", profile_passes=1)(_X)
        least[way] = err.value.min_bytes
    assert least["per block"] == least["shared"]


class _HostDraw(nn.Module):
    def __init__(self, kind, later=False):
        super().__init__()
        self.l = nn.Linear(D, D)
        self.kind, self.later = kind, later

    def forward(self, h):
        import random

        import numpy as np
        z = self.l(h)
        if self.later and z.abs().mean() < 0.5:  # draws at later calls only (larger inputs)
            return h + z
        if self.kind == "random":
            return h if random.random() < 0.3 else h + z
        return h + z + torch.from_numpy(np.random.randn(*z.shape).astype("float32"))


@pytest.mark.parametrize("kind", ["random", "numpy"])
def test_python_and_numpy_draws_are_refused_when_profiled(kind):
    """Note [Python's and NumPy's generators]: the profiler names the stage and the fix; the generators are left as
    they were (rv21d_seq_python_numpy_random_not_refused.py)."""
    import random

    import numpy as np
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D, D), _HostDraw(kind), nn.Linear(D, D), nn.Linear(D, D))
    state = (random.getstate(), np.random.get_state()[1].copy())
    with pytest.raises(te.CaptureError, match=r"stage 2's forward \(_HostDraw\) draws from .*draw with torch instead"):
        te.CheckpointedSequential(model, budget="1GiB", backend="cpu", profile_passes=1)(_X)
    assert random.getstate() == state[0] and np.array_equal(np.random.get_state()[1], state[1])


@pytest.mark.parametrize("kind", ["random", "numpy"])
def test_python_and_numpy_draws_at_a_later_call_are_refused(kind):
    """A stage that draws from Python's or NumPy's generator only at a later call is refused at that call, when the
    plan recomputes (rv21d_auto_python_random_on_later_call_unrefused.py)."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(D, D), nn.Tanh()) if i % 2 else _HostDraw(kind, later=True)
                            for i in range(8)])
    w = te.CheckpointedSequential(model, budget="60%", backend="cpu", profile_passes=1)
    w(_X * 0.01).sum().backward()
    assert sum(w._last.recomputed) > 0
    with pytest.raises(te.CaptureError, match="a stage's forward at this call draws from .*draw with torch instead"):
        w(_X * 50)


class _DrawsFrom(nn.Module):
    """Draws from its first ``draws`` generators of ``gens`` (a plain int the loop sets, which no signature keys)."""

    def __init__(self, gens):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)
        self.gens, self.draws = gens, 0

    def forward(self, h):
        z = torch.tanh(self.a(h))
        for g in self.gens[:self.draws]:
            z = z + 0.5 * torch.randn(z.shape, generator=g)
        return h + self.b(z)


def test_every_stage_found_drawing_grows_the_replay_copy_the_plan_reserves():
    """executor.learn_draws: a second stage found drawing, whose record is larger than the first's (two generators
    against one), grows the copy fork_rng takes while the largest record is replayed; the reserve was that of the first
    stage found only (the copy counted once, for the first). Gradients as plain autograd's."""
    from torch_exec import _util as U
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    torch.manual_seed(0)
    base = nn.Sequential(*[_DrawsFrom([g1, g2]) for _ in range(8)])
    model, ref = copy.deepcopy(base), copy.deepcopy(base)
    w = te.CheckpointedSequential(model, budget="70%", backend="cpu", profile_passes=1)
    w(_X).pow(2).mean().backward()  # profiled drawing nothing
    entry = w._last
    assert not any(entry.rng[1:]) and entry.rng_reserve == 0
    members = entry.plain_chain.provenance["members"]
    recomputed = [s for s in range(1, entry.chain.n + 1) if entry.recomputed[s] and len(members[s - 1]) == 1]
    assert len(recomputed) >= 2, "the test needs two recomputed stages of one block each"
    first, second = int(members[recomputed[0] - 1][0]), int(members[recomputed[1] - 1][0])
    for m in (model, ref):  # the earlier stage draws from one generator, the later from two
        m[first].draws, m[second].draws = 1, 2
    for m in (model, ref):
        m.zero_grad(set_to_none=True)
    states = (g1.get_state(), g2.get_state())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", te.DrawsFoundWarning)
        w(_X).pow(2).mean().backward()
    g1.set_state(states[0])
    g2.set_state(states[1])
    ref(_X).pow(2).mean().backward()
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=0)
    n = U.RngState.capture([], (g1,)).nbytes("cpu") - U.RngState.capture([]).nbytes("cpu")  # one state's bytes
    # the records (n and 2 n) and the copy a replay of the larger forks: the default generator's state and 2 n
    assert entry.rng_reserve == n + 2 * n + (n + 2 * n)


class _Holder:
    """A plain object holding a generator (a sampler, a config)."""

    def __init__(self, g):
        self.g = g


class _ReplacedIn(nn.Module):
    """Draws from a generator held in a list (``self.gens[0]``) or a plain object's attribute (``self.sampler.g``)."""

    def __init__(self, gen, where):
        super().__init__()
        self.l, self.where = nn.Linear(D, D), where
        if where == "list":
            self.gens = [gen]
        else:
            self.sampler = _Holder(gen)

    def gen(self):
        return self.gens[0] if self.where == "list" else self.sampler.g

    def put(self, g):
        if self.where == "list":
            self.gens[0] = g
        else:
            self.sampler.g = g

    def forward(self, h):
        return torch.tanh(self.l(h) + 0.5 * torch.randn(h.shape, generator=self.gen()))


@pytest.mark.parametrize("wrapper", ["sequential", "export", "blocks"])
@pytest.mark.parametrize("where", ["list", "object"])
def test_a_generator_replaced_inside_a_container_is_replayed_with_one_profile(wrapper, where, profiles):
    """The loop replaces the generator inside a list or a plain object (``self.gens[0] = new``): it was not followed,
    gradients 0.09-0.11 off plain autograd's (review rv21r, bench/repros/rv21r_seq_generator_in_list_replaced_unseen.py),
    and a direct attribute's replacement re-profiled CheckpointedSequential at every step (rv21r_seq_new_generator_each_
    step_reprofiles.py). Each call looks the generators up where profiling found them (U.GeneratorSites): one
    profile for CheckpointedSequential, whose stages run live; a captured graph, which holds the generator as a
    constant, is captured again."""
    run = _replaced_each_step(lambda gen: _ReplacedIn(gen, where), wrapper, lambda block, gen: block.put(gen), 3, profiles)
    if wrapper == "sequential":
        assert profiles[0] <= 1 and len(run._entries) == 1
    elif wrapper == "blocks":  # runs the modules live: one capture, one profile (review rv22b:
        # bench/repros/rv22b_auto_blocks_new_generator_each_step_reprofiles.py, a capture and a profile per step)
        assert profiles[0] <= 1 and len(run._captures) == 1
    else:  # an exported graph holds the generator: captured again at each replacement, the capture replaced
        assert profiles[0] == 3 and len(run._captures) == 1
