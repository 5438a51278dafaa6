"""Note [A wrapper inside another's step] (torch_exec/profiler.py, new) says a wrapper used inside another
("a wrapped model inside a wrapped model") runs plainly while the outer profiles it or runs its step
(runs_as_a_stage: profiling() or a_wrapper_step()). auto_checkpoint's first call also runs the model in its
probe (_probe_forward) and block checks, which are neither: a CheckpointedSequential inside the model (here
its head, after a ModuleList of blocks with data-dependent control flow) runs as a wrapper there, profiles
itself (backward passes inside the probe's forward) and the model is refused with a false diagnosis: "the
model's forward differentiates itself (torch.autograd.grad or .backward() inside forward) ... cut it by
hand" -- the user's model has no such call. Also when the inner wrapper was prepared first.
Expected: the probe and checks count as the outer's work (inner runs plainly), and the model trains."""
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT

D = 64


class Blk(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

    def forward(self, h):
        return torch.tanh(self.b(torch.relu(self.a(h)))) + h


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(16, D)
        self.blocks = nn.ModuleList(Blk() for _ in range(6))
        self.head = te.CheckpointedSequential(nn.Sequential(nn.Linear(D, D), nn.Tanh(), nn.Linear(D, D), nn.Tanh(),
                                                            nn.Linear(D, 5)), budget="100%", backend="cpu")

    def forward(self, x):
        h = self.inp(x)
        for b in self.blocks:
            if h.abs().max().item() < 1e6:  # data-dependent control flow: the block fallback
                h = b(h)
        return self.head(h)


bad = False
for prepared in (False, True):
    torch.manual_seed(0)
    model = Net()
    x, y = torch.randn(64, 16), torch.randint(0, 5, (64,))
    if prepared:
        model.head.prepare(torch.randn(64, D))
    w = te.auto_checkpoint(model, "60%", backend="cpu")
    try:
        F.cross_entropy(w(x), y).backward()
        print(f"inner prepared first: {prepared}: step ok ({w.capture.notes[0][:60]})")
    except te.CaptureError as err:
        print(f"inner prepared first: {prepared}: CaptureError: {str(err)[:170]}")
        bad = True
print("BUG: a wrapper inside an auto_checkpoint'ed model is refused as differentiating itself" if bad else "ok")
sys.exit(1 if bad else 0)
