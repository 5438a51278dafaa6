"""Overrun (review rv17 of Note [A leaf read twice in one stage] in gpusolve/chain.py): a stage reads a tied weight
twice, first (in forward order) as ``t @ weight`` (MmBackward0: a fresh part) and then through ``nn.Linear``
(TBackward0: a view part), while earlier and later stages read it as ``t @ weight`` (fresh parts). The backward makes
the view part first; torch's InputBuffer::accumulate tries to add in place only into the part already in the buffer
(old_var), so a view first means ``old + new`` is made beside both although the second part is fresh. An intermediate
version's measured charge (``split_sum_bytes``, since removed) and the chain's bound only added the sum where *both*
first parts cannot be added in place: the stage was charged ~1 leaf where the executor's call holds 2 above its
reading. Before 84fd581 (2 leaves charged) the plan held its budget. Run: GS_ROOT=<tree> python
rv17_review_view_part_first.py ; exits 1 on an overrun (> 64 B over budget or prediction).
Fixed (session 17): the engine's rule (the buffer, the first part, decides) is followed, and the whole pass now sums
shared leaves stage by stage (Note [Leaves summed stage by stage]): the executor's own calls are read as they run;
the least budget is plain autograd's, 542 728 B, measured 542 728 B."""
import sys
import warnings

from _drops import least_and_plain, planned, torch  # the tree under test: GS_ROOT
from torch import nn  # noqa: E402

from torch_exec.meter import measure_peak  # noqa: E402

warnings.simplefilter("ignore")
torch.set_num_threads(1)

W, B = 256, 4  # the weight (256 KiB) outweighs the activations


def engine_demo() -> None:
    """Plain autograd, one leaf read twice: the view part made first costs a third leaf, the fresh one first doesn't."""
    w = torch.randn(W, W, requires_grad=True)
    w.grad = torch.zeros_like(w)
    x = torch.randn(B, W)
    for name, f in (("fresh part first", lambda: (x @ w.t()).sum() + (x @ w).sum()),
                    ("view part first ", lambda: (x @ w).sum() + (x @ w.t()).sum())):
        f().backward()
        _, r = measure_peak(lambda: f().backward())
        print(f"plain autograd, {name}: backward peak {r.peak / (W * W * 4):.2f} x the leaf")


def make():
    torch.manual_seed(0)
    fc = nn.Linear(W, W)

    class Mat(nn.Module):  # t @ weight + bias: a fresh weight part
        def __init__(self):
            super().__init__()
            self.fc = fc

        def forward(self, t):
            return torch.tanh(t @ self.fc.weight + self.fc.bias)

    class Mixed(Mat):  # t @ weight (fresh part, made last in the backward), then the Linear (view part, made first)
        def forward(self, t):
            return torch.tanh(self.fc(torch.tanh(t @ self.fc.weight)))

    class Loss(nn.Module):
        def forward(self, t):
            return t.square().mean()
    return nn.Sequential(Mat(), Mixed(), Mat(), Loss())


def main() -> int:
    engine_demo()
    x = torch.randn(B, W, generator=torch.Generator().manual_seed(0))
    least, plain, entry = least_and_plain(make, x)
    data = entry.profile
    print("shared_leaves", [{k: v for k, v in i.items() if k != "summed"} for i in data["shared_leaves"]],
          "split_leaves", data.get("split_leaves"))
    print(f"least budget {least} B, plain autograd {plain} B")
    bad = False
    for budget in sorted({least, (least + plain) // 2}):
        w, (peak,) = planned(make, x, [x], budget=budget)
        pred = w.plan.predicted_peak_bytes
        over = peak > budget + 64 or peak > pred + 64
        bad |= over
        print(f"budget {budget} predicted {pred} measured {peak} (measured - budget {peak - budget:+d} B, "
              f"measured / predicted {peak / pred:.3f}){'  OVER' if over else ''}")
    print("overrun: the view part made first is summed beside both" if bad else "ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
