"""Review rv16 (older than commit 9405ab7): a stage whose dropped input sits in a reference cycle (freed only by
Python's gc). The profiler runs its memory pass with gc disabled, so the drop check (Note [Drops measured]) rightly
sees the storage alive and calls nothing dropped; but the cost model frees a_{s-1} after a no-grad run of stage s,
and in the executor the cycle keeps the no-grad run's p until a gc pass, so a plan that runs stage 3 without grad
and later stages with tape goes over the budget (+104 856 B), whether planning frees drops or holds them. CPU. Exits 1
on a step over its budget (> 64 B). Run: GS_ROOT=<tree> python rv16_review_gc_cycle_drop.py

Open (session 16): it fails with the drops held too (the executor's own runs keep the storage). Exits 1.
"""
import sys

from _drops import B, W, Keep, Lin, Loss, Make, Merge, check, torch
from torch import nn  # noqa: E402


class CycleDrop(Lin):  # (a, p) -> (tanh(fc(a)), a): p dropped, but left in a reference cycle
    def forward(self, q):
        box = [q[1]]
        box.append(box)
        return torch.tanh(self.fc(q[0])), q[0]


def make():
    torch.manual_seed(0)
    return nn.Sequential(Lin(), Make(), CycleDrop(), Keep(), Merge(), Lin(), Loss())


def main() -> int:
    x = torch.randn(B, W, generator=torch.Generator().manual_seed(0))
    bad = check(make, x, [x] * 3, (0.3, 0.5))
    print("BUG: a step over its budget: a storage in a reference cycle outlives the no-grad run" if bad else "ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
