"""Where a measured step of rv20a's two models reaches its peak (Note [The caller's turn] in
torch_exec/executor.py; bench/repros/rv20a_caller_turn_learns_excess_not_shortfall.py), for diagnosis: one step of ``auto_checkpoint`` on each (gradients
allocated before it, as the plans count them) with a meter mark after every op of the schedule
(``torch_exec.opclock``), against the chain's count of the same op (``gpusolve.simulate``, the level after it); the
level the forward left and the peak of the caller's code after it (the loss and its backward); and, from the allocator
events of ``torch.profiler``, the operator that allocated the step's peak byte. Then four measured steps
(``measure_memory``): predicted and measured peaks, and what the first step taught (``caller_turn``, ``caller_reserve``).

Run: GS_ROOT=<tree> python bench/caller_turn_trace.py   (~15 s on a CPU)"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "repros"))
from _setup import te, torch  # noqa: E402
import gpusolve  # noqa: E402
from gpusolve.simulate import simulate  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402
from torch_exec import opclock  # noqa: E402
from torch_exec.meter import MemoryMeter  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from models import ConvResidual, SpectralResidual  # noqa: E402


D = 32


SN = SpectralResidual


def conv_cl():
    return ConvResidual().to(memory_format=torch.channels_last)


def sn_input(step):
    return torch.randn(4, 16, D, generator=torch.Generator().manual_seed(0))


def img_input(step):
    return torch.randn(2, 16, 12, 12, generator=torch.Generator().manual_seed(step)).contiguous(
        memory_format=torch.channels_last)


def least_budget(make, inputs):
    """1.1 x the least budget the "1%" InfeasibleBudgetError names (as rv20a)."""
    torch.manual_seed(0)
    probe = te.auto_checkpoint(make(), "1%", backend="cpu")
    try:
        probe(inputs(0)).pow(2).mean().backward()
    except gpusolve.InfeasibleBudgetError as err:
        return int(err.min_bytes * 1.1)
    raise SystemExit("1% did not raise")


class _MemClock(opclock.OpClock):
    """An OpClock that takes a meter mark at each program's start and after each op."""

    def __init__(self, meter):
        super().__init__("cpu")
        self.meter, self.log = meter, []

    def begin(self):
        self.log.append((None, self.meter.mark()))
        return super().begin()

    def mark(self, program, code, stage, branch):
        self.log.append(((code, stage), self.meter.mark()))


def _loss(y):
    return y.pow(2).mean()


def traced_step(wrapped, x) -> dict:
    with MemoryMeter("cpu") as meter:
        first = meter.mark()
        with _MemClock(meter) as clock:
            y = wrapped(x)
            returned = meter.mark()
            _loss(y).backward()
        end = meter.mark()
        del y
    entry = wrapped.executor._last
    held = simulate(entry.chain, entry.plan.schedule, trace=True).memory_trace
    ops = [(op, m) for op, m in clock.log if op is not None]
    diffs = [meter.between(first, m).delta - counted for (_, m), counted in zip(ops, held, strict=True)]
    backward_start = [m for op, m in clock.log if op is None][1]
    turn = meter.between(returned, backward_start)
    return dict(step_peak=meter.between(first, end).peak, predicted=entry.plan.predicted_peak_bytes,
                forward_left=meter.between(first, returned).delta, turn_peak=turn.peak,
                backward_starts_at=meter.between(first, backward_start).delta,
                ops_at_or_below_count=all(d <= 0 for d in diffs), most_above_count=max(diffs))


def peak_operator(wrapped, x) -> str:
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _loss(wrapped(x)).backward()
    events = list(prof.profiler.kineto_results.events())
    ops = [(e.start_ns(), e.start_ns() + e.duration_ns(), e.name()) for e in events if e.name() != "[memory]"]
    level, peak, at = 0, 0, None
    for t, nbytes in sorted((e.start_ns(), int(e.nbytes())) for e in events if e.name() == "[memory]"):
        level += nbytes
        if level > peak:
            peak, at = level, (t, nbytes)
    stack = [name for start, stop, name in ops if start <= at[0] <= stop]
    return f"{' > '.join(stack[-3:])} (+{at[1]} B)"


def main() -> int:
    warnings.simplefilter("ignore")
    cases = (("spectral_norm", SN, sn_input, "50%"), ("channels_last", conv_cl, img_input, None))
    for name, make, inputs, budget in cases:
        if budget is None:
            budget = least_budget(make, inputs)
        # one step traced (gradients allocated: each new gradient is a stage's transient, as the plans count it)
        torch.manual_seed(0)
        model = make()
        wrapped = te.auto_checkpoint(model, budget, backend="cpu")
        _loss(wrapped(inputs(0))).backward()
        x = inputs(0)
        out_bytes = wrapped(x).numel() * 4
        found = traced_step(wrapped, x)
        print(f"{name} at {budget}: output {out_bytes} B; first plan: " + ", ".join(f"{k} {v}" for k, v in found.items()))
        print(f"  the step's peak byte was allocated in {peak_operator(wrapped, x)}")
        # four measured steps from a fresh wrapper (gradients set during the step, as a loop does)
        torch.manual_seed(0)
        model = make()
        wrapped = te.auto_checkpoint(model, budget, backend="cpu")
        wrapped.measure_memory(4)
        for step in range(4):
            try:
                _loss(wrapped(inputs(step))).backward()
            except gpusolve.InfeasibleBudgetError as err:
                print(f"  step {step + 1} raised: {str(err)[:160]}")
                break
            model.zero_grad(set_to_none=True)
        entry = wrapped.executor._last
        print("  measured: " + "; ".join(f"step {r.step} predicted {r.predicted_peak}, measured {r.beyond_param_grads} "
                                         f"({r.beyond_param_grads - r.budget:+d} B vs budget {r.budget})"
                                         for r in wrapped.memory_report()))
        print(f"  learned: caller_turn {getattr(entry, 'caller_turn', None)} B, caller_reserve {entry.caller_reserve} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
