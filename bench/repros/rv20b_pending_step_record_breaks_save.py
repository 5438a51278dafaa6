"""A checkpoint of the whole wrapper made right after a measured step, before ``memory_report()`` is read:
``model.measure_memory(1)`` (on a GPU the first 3 steps are measured anyway, docs/pytorch.md), a step, then
``torch.save(model, f)`` (or ``pickle.dumps(model)``). CheckpointedSequential(nn.Sequential MLP, budget="50%") (also
with ``offload="1GB/s"``), auto_checkpoint of the same MLP with its loss inside, and auto_checkpoint of a two-tower
model captured as a join; 8 Linear(64, 64) + Tanh with a BatchNorm1d and a Dropout, batch 32.

Observed (CPU, torch 2.13): torch.save(model) right after the measured step raises AttributeError "Can't pickle local
object '_ScheduleFunction.forward.<locals>.<lambda>'" for CheckpointedSequential, its offload form and auto_checkpoint
(pickle.dumps the same); after ``model.memory_report()`` the same save succeeds. The join capture saves.

Cause: torch_exec/report.py ``StepMeter``: a measured step's record is completed lazily (at ``memory_report()`` or the
next step), and until then ``StepMeter._turn`` holds ``[step, mark, None, learn]`` where ``learn`` is the lambda
that ``_ScheduleFunction.forward`` (torch_exec/executor.py) passes to ``meter.turn_start`` (``lambda *reading:
learn_from_step(entry, *reading)``); pickle cannot save a local function. (``copy.deepcopy`` copies the pending step
into the copy, the lambda by reference, still bound to the original's plan entry.)

Expected: a wrapper saves whatever its meter holds: e.g. the wrapper's ``__getstate__`` completes the pending record
first or leaves the meter's pending step out, and the callback is a picklable bound method or partial rather than a
lambda. Exits 1 while a save right after a measured step raises.

Run: python bench/repros/rv20b_pending_step_record_breaks_save.py   (~8 s)"""
import io
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT

D = 64


def mlp(L=8, out=10, drop=True):
    layers = []
    for i in range(L):
        layers += [nn.Linear(D, D)] + ([nn.BatchNorm1d(D)] if i == 1 else []) + [nn.Tanh()]
        if drop and i == 2:
            layers.append(nn.Dropout(0.1))
    return nn.Sequential(*layers, nn.Linear(D, out))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = mlp()

    def forward(self, x, y):
        return F.cross_entropy(self.body(x), y)


class TwoTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.ta, self.tb = mlp(7, D, drop=False), mlp(7, D, drop=False)

    def forward(self, a, b):
        return ((self.ta(a) - self.tb(b)) ** 2).mean()


g = torch.Generator().manual_seed(0)
x, x2, y = torch.randn(32, D, generator=g), torch.randn(32, D, generator=g), torch.randint(0, 10, (32,), generator=g)


def build(kind):
    torch.manual_seed(0)
    if kind == "auto_checkpoint":
        return te.auto_checkpoint(Net(), "50%", backend="cpu"), lambda m: m(x, y)
    if kind == "auto_checkpoint join":
        return te.auto_checkpoint(TwoTower(), "50%", backend="cpu"), lambda m: m(x, x2)
    extra = {"offload": "1GB/s"} if "offload" in kind else {}
    return (te.CheckpointedSequential(mlp(), budget="50%", backend="cpu", **extra),
            lambda m: F.cross_entropy(m(x), y))


def measured_step(model, loss_of):
    model.measure_memory(1)
    torch.manual_seed(2)
    loss_of(model).backward()


bad = False
for kind in ("CheckpointedSequential", "offload='1GB/s'", "auto_checkpoint", "auto_checkpoint join"):
    model, loss_of = build(kind)
    loss_of(model).backward()  # the first step profiles and plans
    measured_step(model, loss_of)
    try:
        torch.save(model, io.BytesIO())
        saved = "saved"
    except Exception as exc:  # noqa: BLE001
        saved = f"{type(exc).__name__}: {exc}"
        bad = True
        model.memory_report()
        try:
            torch.save(model, io.BytesIO())
            saved += "; after memory_report(): saved"
        except Exception as exc2:  # noqa: BLE001
            saved += f"; after memory_report(): {type(exc2).__name__}"
    print(f"{kind}: torch.save right after a measured step: {saved}")

print("DEFECT: a pending step record breaks saving the wrapper" if bad else "ok: the wrapper saves")
sys.exit(1 if bad else 0)
