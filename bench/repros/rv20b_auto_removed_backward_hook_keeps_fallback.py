"""auto_checkpoint(model, "50%") on a two-tower model (two MLP towers of 7 Linear layers, width 64, a BatchNorm1d in
each, meeting at an MSE loss; batch 32), captured as a join network. One step trains. Then the loop registers a full
backward hook on an inner Linear (gradient logging, ``register_full_backward_hook``), and removes it again
(``handle.remove()``) after that step, as a debugging session does.

Observed (CPU, torch 2.13): with the hook registered, the call is captured again through the block fallback (a
warning names ``BackwardHookFunction``) and raises InfeasibleBudgetError ("budget 79.7539 KiB (81668 B) is below the
minimum feasible budget 101.0156 KiB (103440 B) for this chain ... this input needs at least 63.4%"). The call
after ``handle.remove()`` raises the same error: the wrapper does not return to its join capture, which trained at that
budget before (plain autograd trains as before). The same happens with the model wrapped
as one chain (``join=False``), whose first step was captured with torch.export: with the hook and after its removal the
same InfeasibleBudgetError at every call. A hook registered and removed before any step takes it costs a new input
signature (captured, profiled and solved again, the same kind of capture), as the signature with the hook would.

Cause: torch_exec/_util.py ``_state_key`` puts every module's scalar attributes into the input signature, and
``register_full_backward_hook`` sets the module's ``_is_full_backward_hook`` to True, which torch never resets when the
hook is removed: the signature with the hook removed is the one with the hook registered, so
``AutoCheckpointed._captures`` hands back the fallback capture.

Expected: once the hook is removed, the call's signature is the original one and its capture (the join) runs again,
e.g. ``_state_key`` leaves torch's private module attributes (``_is_full_backward_hook``) out and keys on the backward
hooks registered (``_backward_hooks``, ``_backward_pre_hooks``) as it does on the forward hooks. Exits 1 while a step
after ``handle.remove()`` raises or runs another capture than the first.

Run: python bench/repros/rv20b_auto_removed_backward_hook_keeps_fallback.py   (~8 s)"""
import sys

from _setup import nn, te, torch  # the tree under test: GS_ROOT


def tower(D=64, L=7):
    layers = [nn.Linear(D, D), nn.Tanh(), nn.Linear(D, D), nn.BatchNorm1d(D), nn.Tanh()]
    layers += [m for _ in range(L - 2) for m in (nn.Linear(D, D), nn.Tanh())]
    return nn.Sequential(*layers, nn.Linear(D, 10))


class TwoTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.ta, self.tb, self.lin = tower(), tower(), nn.Linear(10, 10)

    def forward(self, a, b):
        return ((self.lin(self.ta(a)) - self.tb(b)) ** 2).mean()


g = torch.Generator().manual_seed(0)
a, b = torch.randn(32, 64, generator=g), torch.randn(32, 64, generator=g)
bad = False
for join in (True, False):
    torch.manual_seed(0)
    wrapped = te.auto_checkpoint(TwoTower(), "50%", backend="cpu", join=join)
    wrapped(a, b).backward()
    first = wrapped.capture
    what = "join capture" if join else "chain capture"
    print(f"{what}: first step trains; {first.notes[0][:90]}...")
    inner = wrapped.ta[2]
    handle = inner.register_full_backward_hook(lambda module, grad_in, grad_out: None)
    try:
        wrapped(a, b).backward()
        print(f"  with the hook: trains, {wrapped.capture.notes[0][:70]}...")
    except Exception as exc:  # noqa: BLE001
        print(f"  with the hook: {type(exc).__name__}: {str(exc)[:160]}")
    handle.remove()
    print(f"  hook removed: inner._backward_hooks {dict(inner._backward_hooks)}, "
          f"inner._is_full_backward_hook {inner._is_full_backward_hook}")
    try:
        wrapped(a, b).backward()
        same = wrapped.capture is first
        print(f"  step after remove(): trains, {'the first capture' if same else 'another capture: ' + wrapped.capture.notes[0][:90]}")
        bad |= not same
    except Exception as exc:  # noqa: BLE001
        print(f"  step after remove(): {type(exc).__name__}: {str(exc)[:200]}")
        bad = True
print("DEFECT: a removed backward hook keeps the wrapper off its capture" if bad else "ok: the first capture runs again")
sys.exit(1 if bad else 0)
