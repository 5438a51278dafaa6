"""A model whose forward uses ``torch.vmap`` (and, second case, forward-mode AD) (a small ensemble of weight matrices applied to the hidden state, as
model-ensembling and per-head code does): 3 residual blocks (Linear 32 -> 64, tanh, Linear 64 -> 32), then
``x = x + torch.vmap(lambda w: torch.tanh(x @ w))(self.w).mean(0)`` with ``self.w`` an ``nn.Parameter`` of shape
(3, 32, 32), then 3 more blocks; input 4 x 16 x 32; ``auto_checkpoint(model, "100%", backend="cpu")`` (the same at
"50%" and "60%"), one step. Plain autograd trains it.

Observed (CPU, torch 2.13): torch.export captures it ("captured with torch.export: 30 operations carry gradient, 9
valid cuts, 10 stages kept"); the first call's profiling then raises, from inside the executor (auto.py __call__ ->
executor.py _entry -> _build -> profiler.py profile_dict -> nograd_pass -> auto.py forward of a stage), functorch's
"RuntimeError: Either your tensor may have escaped from inside a function being vmapped and this is a user error
(see https://pytorch.org/functorch/stable/ux_limitations.html), or there is an internal functorch error in
`gen_vmap_plumbing` ...", raised at the stage's ``aten.matmul(add_2, _add_batch_dim)``.

Cause: the exported graph carries vmap as stateful calls (``_vmap_increment_nesting(3, 'error')``, ``_add_batch_dim``,
the ops, ``_remove_batch_dim``, ``_vmap_decrement_nesting()``). torch_exec/auto.py puts the two nesting calls, which
make no tensor, in the capture's ``prologue`` (run before the chain: it reads ``lazy_load_decompositions();
_vmap_increment_nesting(3, 'error'); _vmap_decrement_nesting(); return (x, ...)``), and ``_add_batch_dim(w, 0, 1)``,
``matmul``, ``tanh`` and ``_remove_batch_dim(tanh_3, 1, 3, 0)`` in stage 6 (``capture.stages[6]``), which then runs at
no vmap level: functorch refuses the batched tensor.

The same with forward-mode AD in the forward (a Jacobian-vector-product regulariser: 4 blocks, then ``with
fwAD.dual_level(): y = fwAD.unpack_dual(torch.tanh(fwAD.make_dual(x, ones_like(x)))).tangent``, ``return x + 0.1 *
y``): the first call raises "RuntimeError: Trying to access a forward AD level with an invalid index. This index was
either not created or is already deleted." from a stage's forward (auto.py line 435) at "100%" and "60%"; the
prologue holds ``_enter_dual_level()`` and ``_exit_dual_level(level = 0)``, stage 7 ``_make_dual(add_3, ones_like,
level = 0)``, ``tanh``, ``_unpack_dual(tanh_4, level = 0)``.

Expected: the step trains as plain autograd (a vmap region, from ``_vmap_increment_nesting`` to
``_vmap_decrement_nesting``, kept inside one stage and not hoisted), or ONE clear error (a CaptureError naming torch.vmap
(or forward AD) and the fix: capture="blocks" or the manual route) before any profiling. Exits 1 while the wrapper's step raises an
error other than CaptureError, or trains with gradients off plain autograd's.

Run: GS_ROOT=<tree> python bench/repros/rv20a_auto_vmap_region_cut.py   (~5 s)"""
import copy
import sys

from _setup import nn, te, torch
from gpusolve import InfeasibleBudgetError

D = 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

    def forward(self, x):
        return x + self.b(torch.tanh(self.a(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.ModuleList(Block() for _ in range(3))
        self.w = nn.Parameter(torch.randn(3, D, D) / D ** 0.5)
        self.n = nn.ModuleList(Block() for _ in range(3))

    def forward(self, x):
        for block in self.l:
            x = block(x)
        x = x + torch.vmap(lambda w: torch.tanh(x @ w))(self.w).mean(0)
        for block in self.n:
            x = block(x)
        return x


torch.manual_seed(0)
base = Net()
x = torch.randn(4, 16, D, generator=torch.Generator().manual_seed(0))
ref = copy.deepcopy(base)
ref(x).pow(2).mean().backward()

bad = False
for budget in ("100%", "60%"):
    model = copy.deepcopy(base)
    wrapped = te.auto_checkpoint(model, budget, backend="cpu")
    try:
        wrapped(x).pow(2).mean().backward()
    except (te.CaptureError, InfeasibleBudgetError) as err:  # one clear refusal is fine
        print(f"{budget}: refused with {type(err).__name__}: {str(err)[:160]}")
        continue
    except Exception as err:  # noqa: BLE001
        bad = True
        print(f"{budget}: the first step raised {type(err).__name__}: {str(err).splitlines()[0][:170]} "
              f"(capture: {wrapped.capture.notes if wrapped.capture is not None else None})")
        continue
    off = [n for (n, p), q in zip(ref.named_parameters(), model.parameters())
           if not torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-6)]
    print(f"{budget}: trained; gradients off plain autograd's: {off or 'none'}")
    bad |= bool(off)



class JVP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.ModuleList(Block() for _ in range(4))

    def forward(self, x):
        import torch.autograd.forward_ad as fwAD
        for block in self.l:
            x = block(x)
        with fwAD.dual_level():
            y = fwAD.unpack_dual(torch.tanh(fwAD.make_dual(x, torch.ones_like(x)))).tangent
        return x + 0.1 * y


torch.manual_seed(0)
base = JVP()
ref = copy.deepcopy(base)
ref(x).pow(2).mean().backward()
for budget in ("100%", "60%"):
    model = copy.deepcopy(base)
    wrapped = te.auto_checkpoint(model, budget, backend="cpu")
    try:
        wrapped(x).pow(2).mean().backward()
    except (te.CaptureError, InfeasibleBudgetError) as err:  # one clear refusal is fine
        print(f"forward AD, {budget}: refused with {type(err).__name__}: {str(err)[:160]}")
        continue
    except Exception as err:  # noqa: BLE001
        bad = True
        print(f"forward AD, {budget}: the first step raised {type(err).__name__}: {str(err).splitlines()[0][:170]}")
        continue
    off = [n for (n, p), q in zip(ref.named_parameters(), model.parameters())
           if not torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-6)]
    print(f"forward AD, {budget}: trained; gradients off plain autograd's: {off or 'none'}")
    bad |= bool(off)

print("BUG: a model using torch.vmap or forward-mode AD fails inside the executor's profiling" if bad else "ok")
sys.exit(1 if bad else 0)
