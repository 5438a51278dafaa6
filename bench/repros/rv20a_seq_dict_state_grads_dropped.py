"""``CheckpointedSequential`` over stages that pass their state as a dict (``{"h": tensor}``, as hand-written pipelines
passing named features do) or as a nested tuple (``((h, h2), tag)``): 5 residual stages (Linear 32 -> 64, tanh,
Linear 64 -> 32) each reading the previous stage's state and returning the same structure, a last stage returning the
tensor; input 4 x 16 x 32, loss ``out.pow(2).mean()``; budgets "100%", "60%" and "50%"; against the same stages run by
plain autograd.

Observed (CPU, torch 2.13), dict state: at "100%" (plain autograd's plan) the gradients equal plain autograd's; at
"60%" (plan fwd_nograd(1, keep), fwd_nograd(2), fwd_nograd(3, keep), fwd_nograd(4), fwd_tape(5), bwd(5), ...) and at
"50%" the loss equals plain autograd's (1.537419080734253) but 16 of the 20 parameter tensors (every stage's but the
last block's) get no gradient at all (``.grad`` None), without an error or a warning; the measured step reads 49168 B
beyond parameter gradients against a 98304 B budget (no backward ran through the first four stages).
Nested tuple state ``((y, y * 0.5), torch.zeros(()))``: at "100%" equal; at "60%" the loss equals (3.459192991256714)
and 20 of 20 parameter tensors get no gradient; "50%" is below its least budget (98324 B) and raises, as it should.

Cause: torch_exec/_util.py ``tensors(state)`` and ``map_state(fn, state)`` (so ``detach`` and ``make_leaf``) see a tensor
or a flat tuple/list of tensors and skip anything else: a dict (or a tuple inside a tuple) passes through a boundary
with no tensor found, so a checkpoint's stage input is not made a leaf that requires grad, no gradient is handed to
the stage before, and the executor's segment backwards stop at the boundary. docs/pytorch.md says a stage takes "the
previous stage's output (a tensor or a tuple of tensors)", but another structure is not refused.

Expected: gradients equal plain autograd's (walk states with torch.utils._pytree, as auto_checkpoint does for outputs),
or ONE clear error at the first call naming the state's type and what stages may pass (a tensor or a flat tuple of
tensors). Exits 1 while a checkpointed step leaves a parameter's gradient None (or off) where plain autograd's is set.

Run: GS_ROOT=<tree> python bench/repros/rv20a_seq_dict_state_grads_dropped.py   (~5 s)"""
import sys

from _setup import nn, te, torch

D = 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

    def forward(self, x):
        return x + self.b(torch.tanh(self.a(x)))


class DictStage(nn.Module):
    def __init__(self):
        super().__init__()
        self.b = Block()

    def forward(self, state):
        x = state["h"] if isinstance(state, dict) else state
        return {"h": self.b(x)}


class NestedStage(nn.Module):
    def __init__(self):
        super().__init__()
        self.b = Block()

    def forward(self, state):
        x = state[0][0] if isinstance(state, tuple) else state
        y = self.b(x)
        return ((y, y * 0.5), torch.zeros(()))


class Last(nn.Module):
    def forward(self, state):
        return state["h"] if isinstance(state, dict) else state[0][0] + state[0][1]


def make(stage):
    torch.manual_seed(0)
    return nn.Sequential(*[stage() for _ in range(5)], Last())


x = torch.randn(4, 16, D, generator=torch.Generator().manual_seed(0))
bad = False
for name, stage in (("dict", DictStage), ("nested tuple", NestedStage)):
    ref = make(stage)
    l1 = ref(x).pow(2).mean()
    l1.backward()
    for budget in ("100%", "60%", "50%"):
        mod = make(stage)
        wrapped = te.CheckpointedSequential(mod, budget=budget, backend="cpu")
        try:
            l2 = wrapped(x).pow(2).mean()
            l2.backward()
        except Exception as err:  # noqa: BLE001  (a clear refusal is fine)
            print(f"{name} state at {budget}: raised {type(err).__name__}: {str(err)[:150]}")
            continue
        missing = [n for (n, p), q in zip(ref.named_parameters(), mod.parameters()) if p.grad is not None and q.grad is None]
        off = [n for (n, p), q in zip(ref.named_parameters(), mod.parameters())
               if p.grad is not None and q.grad is not None and not torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-6)]
        print(f"{name} state at {budget}: loss {l2.item()!r} (plain {l1.item()!r}); no gradient: {len(missing)} of "
              f"{len(list(mod.parameters()))} parameter tensors; off: {len(off)}")
        bad |= bool(missing or off)

print("BUG: a dict (or nested tuple) state silently loses the gradients of every stage before a checkpoint" if bad
      else "ok")
sys.exit(1 if bad else 0)
