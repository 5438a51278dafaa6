"""CheckpointedSequential with one plain-function stage (here ``torch.tanh``: no parameter, no tensor in a closure)
called in grad mode where nothing needs a gradient (every parameter frozen, the input without requires_grad) is
profiled and refused with the InfeasibleBudgetError that review rv18 found (bench/repros/
rv18_input_frozen_no_grad_infeasible.py: "budget ... is below plain autograd's measured peak ...; raise the budget to at
least ...; ... a boundary where no backward saves the tensor is merged ..."), whose cause and remedy are wrong. Session
18's fix (torch_exec/executor.py CheckpointedSequential.forward: ``if self._modules_only and
U.nothing_requires_grad(flat, self)``) applies only where every stage is an nn.Module, "a callable stage may reach a
leaf that requires grad"; but the wrapper knows what its callables reach (U.stage_state(self._fns, self._extras): the
extra modules and the tensors their closures hold; a callable reaching other parameters is refused when the wrapper
is built), and a function such as torch.tanh or F.relu reaches nothing. The same stages with torch.tanh as an
nn.Tanh() module run plainly.
Expected: the call runs plainly (output equal to the plain model's, requiring no grad). Observed: InfeasibleBudgetError
after a profile (CPU, batch 64, width 64).
Review rv19 of the session 17-18 diff. Run: GS_ROOT=<tree> python rv19_diff_callable_stage_frozen_no_grad.py"""
import sys
import warnings

from _rv18 import mlp  # the tree under test: GS_ROOT
from _setup import nn, te, torch

warnings.simplefilter("ignore")
torch.set_num_threads(1)


def stages(function: bool) -> list:
    m = mlp(64, 256)
    for p in m.parameters():
        p.requires_grad_(False)
    out = list(m)
    out.insert(3, torch.tanh if function else nn.Tanh())
    return out


def main() -> int:
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    h = x
    for s in stages(True):
        h = s(h)
    bad = False
    for function in (False, True):
        kind = "torch.tanh (a function)" if function else "nn.Tanh() (a module)"
        w = te.CheckpointedSequential(stages(function), budget="60%", backend="cpu", profile_passes=1,
                                      profile_warmup=0)
        try:
            out = w(x)
        except Exception as err:  # noqa: BLE001 (the bug: a refusal)
            print(f"stage 4 {kind}: {type(err).__name__}: {str(err)[:300]}")
            bad |= function
            continue
        same = torch.equal(out, h)
        print(f"stage 4 {kind}: ran, output requires_grad {out.requires_grad}, equal to the plain model's: {same}")
        bad |= not same or out.requires_grad
    print("BUG: a frozen call refused because one stage is a function" if bad else "ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
