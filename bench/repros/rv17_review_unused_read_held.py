"""Over-count (review rv17b of Note [Leaves summed stage by stage] in torch_exec/profiler.py): a stage reads the tied
embedding weight three times, once on a tuple output that no later stage uses (its node never runs in the backward).
The whole pass counted 3 edges for that stage, 2 parts arrive, so the stage's sum stays in LeafReaders.pending until
flush() after the whole backward: a leaf held across the earlier stages' readings (bwd_delta of the stage +leaf), which
no executor call holds (its stage call sums the 2 parts and adds them into .grad): 0.835 x measured / predicted at the
least budget. Control: the same model with the unused output not reading the weight (exact). Exits 1 where a backward
reading differs between the two (u gets no gradient, so none may). What stays at 0.835 is u itself (512 000 B, the
tuple output the next stage drops beside the tensor it passes on: the partial-boundary over-count of Note [Storages a
stage drops] in gpusolve/chain.py).
Fixed (session 17): a stage's sums go into .grad when its backward ends (the profiler's boundary hook,
LeafReaders.stage_done), whether or not every read's node ran.
Run: GS_ROOT=<tree> python rv17_review_unused_read_held.py"""
import sys
import warnings

from _setup import te, torch  # the tree under test: GS_ROOT
import torch.nn.functional as F  # noqa: E402,N812
from torch import nn  # noqa: E402

from torch_exec.executor import plain_peak_bytes  # noqa: E402
from torch_exec.meter import measure_peak  # noqa: E402

warnings.simplefilter("ignore")
torch.set_num_threads(1)

V, D, T = 4000, 64, 32
g = torch.Generator().manual_seed(0)
IDS = torch.randint(0, V, (T,), generator=g)
TGT = torch.randint(0, V, (T,), generator=g)


class Emb(nn.Module):
    def __init__(s, E): super().__init__(); s.E = E
    def forward(s, ids): return s.E(ids)


class Blk(nn.Module):
    def __init__(s): super().__init__(); s.fc = nn.Linear(D, D)
    def forward(s, h): return torch.tanh(s.fc(h))


class Side(nn.Module):  # reads W twice on the output used, and (unused=True) once on u, which the next stage drops
    def __init__(s, E, unused): super().__init__(); s.E, s.unused = E, unused
    def forward(s, h):
        W = s.E.weight
        a = torch.softmax(h @ W.T, -1) @ W
        u = h @ W.T if s.unused else h[:, :1] * 1.0
        return torch.tanh(h + a), u


class Drop(nn.Module):
    def forward(s, q): return q[0]


class Head(nn.Module):
    def __init__(s, E): super().__init__(); s.E = E
    def forward(s, h): return F.cross_entropy(h @ s.E.weight.T, TGT)


def make(unused):
    torch.manual_seed(0)
    E = nn.Embedding(V, D)
    return nn.Sequential(Emb(E), Blk(), Side(E, unused), Drop(), Blk(), Blk(), Head(E))


def at_least(unused):
    """(the profile's backward readings per stage, measured / predicted at the least budget)."""
    probe = te.CheckpointedSequential(make(unused), budget="1TiB", backend="cpu", profile_passes=1, profile_warmup=0)
    probe.prepare(IDS)
    least, plain = probe.min_budget_bytes, plain_peak_bytes(probe._last)
    net = make(unused)
    w = te.CheckpointedSequential(net, budget=least, backend="cpu", profile_passes=1, profile_warmup=0)
    for p in net.parameters():
        p.grad = torch.zeros_like(p)

    def step():
        w(IDS).backward()
    step()
    step()
    _, r = measure_peak(step)
    pred = w.plan.predicted_peak_bytes
    prof = probe._last.profile
    readings = [(st["bwd_peak"], st["bwd_delta"]) for st in prof["stages"]]
    print(f"unused read={unused}: shared_leaves {prof['shared_leaves']} split_leaves {prof.get('split_leaves')}\n"
          f"  backward readings (peak, delta) {readings}\n"
          f"  least {least} B, plain {plain} B, predicted {pred} B, measured {r.peak} B, measured / predicted "
          f"{r.peak / pred:.3f}", flush=True)
    return readings, r.peak / pred


def main() -> int:
    (unused, ratio), (used, _) = at_least(True), at_least(False)
    held = unused != used  # u gets no gradient: no backward reading may change with what it read
    print("over-count: the unused read's stage held its sum" if held else
          f"ok (measured / predicted {ratio:.3f}: u itself, dropped by the next stage beside a tensor it passes on, is "
          f"counted in the stage's output, the partial-boundary over-count of Note [Storages a stage drops])")
    return 1 if held else 0


if __name__ == "__main__":
    sys.exit(main())
