"""Review rv16 of Note [Drops measured] (torch_exec/profiler.py): the profiler checks once, in the memory pass's
plain step, that each storage a stage drops is gone once the stage ran. A forward hook that keeps the stage's input
on some calls only (activation logging every k-th call; here k = 2) is not holding it on that one call (phase 0), so
the profile said drops_checked and planning freed the storage, while in the executor's steps the hook holds it (on
every step where the stage runs twice per step: forward no-grad + recomputation; on alternate steps otherwise):
+52 444 B over the budget. Exits 1 where a measured step exceeds the user's budget or the exact peak planning used.
Run: GS_ROOT=<tree> python rv16_review_sometimes_cached_drop.py

Open (session 16): older than the drops check; it fails with the drops held too (the hook keeps the no-grad run's
input alive past the point the model frees it). Exits 1.
"""
import sys

from _drops import B, W, Keep, Lin, Loss, Make, Merge, check, torch
from torch import nn  # noqa: E402


class DropP(Lin):     # (a, p) -> (tanh(fc(a)), a): p dropped
    def forward(self, q):
        return torch.tanh(self.fc(q[0])), q[0]


def maker(phase: int):
    def make():
        torch.manual_seed(0)
        m = nn.Sequential(Lin(), Make(), DropP(), Keep(), Merge(), Lin(), Loss())
        logged, calls = {}, [0]

        def log_every_other_call(mod, inputs, output):  # activation logging every 2nd call
            calls[0] += 1
            logged["in"] = inputs[0][1] if calls[0] % 2 == phase else None
        m[2].register_forward_hook(log_every_other_call)
        return m
    return make


def main() -> int:
    x = torch.randn(B, W, generator=torch.Generator().manual_seed(0))
    bad = 0
    for phase in (0, 1):
        print(f"phase {phase}:")
        bad += check(maker(phase), x, [x] * 2, (0.8, 0.9))
    print("BUG: a step over its budget: a drop the profile saw freed, held by a hook on other calls" if bad else "ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
