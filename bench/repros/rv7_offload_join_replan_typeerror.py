"""auto_checkpoint(model, budget).replan(offload="12GB/s") on a model captured as a join network (two towers into one
loss) fails with a bare Python TypeError naming an internal class, and nothing says what to do (a review,
2026-11-28).

AutoCheckpointed.replan (torch_exec/auto.py) forwards every keyword to each capture's executor; a join capture's
executor is a CheckpointedJoin, whose replan is _PlannedModule.replan (torch_exec/executor.py) without an offload
parameter. The same model made with auto_checkpoint(model, "60%", offload="12GB/s") works: _join_setting sees that
CheckpointedJoin takes no offload and cuts the join as one chain (its capture note says so).

Observed (two 5-block Linear(64)+Tanh towers, concatenated, a linear head and cross-entropy; batch 32; budget
"60%"; CPU): the first call captures a CheckpointedJoin (export); replan(offload="12GB/s") raises
    TypeError: _PlannedModule.replan() got an unexpected keyword argument 'offload'
Expected: either the replan applies (the join re-captured as one chain, as at construction) or a ValueError that
names the fix (a join network is not offloaded: make the wrapper with offload= so that it is cut as one chain,
or pass join=False). Exits 1 while the bare TypeError shows."""
import sys

from _setup import F, nn, te, torch


class Towers(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(5)])
        self.b = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(5)])
        self.head = nn.Linear(128, 10)

    def forward(self, x1, x2, y):
        return F.cross_entropy(self.head(torch.cat([self.a(x1), self.b(x2)], 1)), y)


torch.manual_seed(0)
x1, x2, y = torch.randn(32, 64), torch.randn(32, 64), torch.randint(0, 10, (32,))
w = te.auto_checkpoint(Towers(), "60%", backend="cpu")
w(x1, x2, y).backward()
print(f"captured as {type(w.executor).__name__} ({w.capture.method})")
bad = 0
try:
    w.replan(offload="12GB/s")
    print(f"replan(offload='12GB/s'): now {type(w.executor).__name__}, offload={getattr(w.executor, 'offload', None)!r}")
except TypeError as err:
    print(f"replan(offload='12GB/s') raised TypeError: {err}")
    bad = "unexpected keyword" in str(err)
except ValueError as err:
    print(f"replan(offload='12GB/s') raised ValueError: {err}")
    bad = "offload" not in str(err)
made = te.auto_checkpoint(Towers(), "60%", backend="cpu", offload="12GB/s")
made(x1, x2, y).backward()
print(f"made with offload='12GB/s' instead: {type(made.executor).__name__}; note: "
      f"{[n for n in made.capture.notes if 'join' in n][:1]}")
print("BUG" if bad else "ok")
sys.exit(1 if bad else 0)
