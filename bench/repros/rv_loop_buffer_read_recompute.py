"""A module that updates a buffer in its forward and then reads it (spectral_norm's power iteration on _u/_v;
an EMA normaliser) gets the wrong activations when the plan recomputes its stage: the re-run works on clones of
the buffers as they are *after* the step's forward (U.scratch_buffers clones the current values), so it updates
them a second time and computes with those. The buffers end the step right (the clones are dropped), the
gradients do not. At plain autograd's peak (no recomputation) they are equal."""
import copy

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT
from torch.nn.utils import parametrizations


class EMACenter(nn.Module):
    """x - running mean of x, the mean updated first (as spectral_norm updates u, v before using them)."""

    def __init__(self, D):
        super().__init__()
        self.register_buffer("mean", torch.zeros(D))

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                self.mean.mul_(0.5).add_(x.mean(0), alpha=0.5)
        return x - self.mean


def blocks(kind, D=128, L=6):
    torch.manual_seed(0)
    out = []
    for _ in range(L):
        lin = nn.Linear(D, D)
        if kind == "spectral_norm":
            out += [parametrizations.spectral_norm(lin), nn.Tanh()]
        else:
            out += [lin, EMACenter(D), nn.Tanh()]
    return out


class Net(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.body = nn.Sequential(*blocks(kind))
        self.head = nn.Linear(128, 10)

    def forward(self, x, y):
        return F.cross_entropy(self.head(self.body(x)), y)


def rel_grad_diff(a, b):
    worst = max((p.grad - q.grad).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))
    return worst, worst / max(q.grad.abs().max().item() for q in b.parameters())


def buffer_diff(a, b):
    return max((u - v).abs().max().item() for u, v in zip(a.buffers(), b.buffers()))


torch.manual_seed(0)  # the same data every run
x = torch.randn(64, 128) * 3; y = torch.randint(0, 10, (64,))
for kind in ("spectral_norm", "EMACenter"):
    for wrapper in ("auto_checkpoint", "CheckpointedSequential"):
        for where in ("100%", "least"):
            net = Net(kind); ref = copy.deepcopy(net)
            if wrapper == "auto_checkpoint":
                w = te.auto_checkpoint(net, "100%", backend="cpu"); w.prepare(x, y)
                least = w.executor.min_budget_bytes
                run, want = (lambda: w(x, y)), (lambda: ref(x, y))
            else:
                w = te.CheckpointedSequential(net.body, budget="100%", backend="cpu"); w.prepare(x)
                least = w.min_budget_bytes
                run = lambda: F.cross_entropy(net.head(w(x)), y)  # noqa: E731
                want = lambda: F.cross_entropy(ref.head(ref.body(x)), y)  # noqa: E731
            if where == "least":
                w.replan(least)
            loss = run(); loss.backward(); ref_loss = want(); ref_loss.backward()
            absd, reld = rel_grad_diff(net, ref)
            print(f"{kind:13s} {wrapper:22s} budget {where:5s} ({w.plan.budget_bytes} B, "
                  f"{sum(op.kind.name == 'FWD_NOGRAD' for op in w.plan.schedule)} no-grad forwards): loss diff "
                  f"{(loss - ref_loss).abs().item():.3g}, max abs grad diff {absd:.3g} ({reld:.2%} of the largest "
                  f"gradient), buffers diff {buffer_diff(net, ref):.3g}")
