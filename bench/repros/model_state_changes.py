"""The model's own state changed after the first call (a review, 2026-11-27): parameters unfrozen (gradual
unfreezing) and the training mode switched on the model rather than the wrapper. Before, the first call's
profile, plan and captured graph were reused: the step went over its budget, or gave no gradients or the
other mode's loss, without a word. ``U.module_state_key`` is part of every input signature now."""
import copy

from _setup import te, torch  # the tree under test: GS_ROOT
from torch import nn

from torch_exec.meter import measure_peak  # noqa: E402

# 1. CheckpointedSequential, 8 x (Linear 256, Tanh), profiled with all but the last layer frozen, budget its
#    least budget then; every layer unfrozen, one step measured.
torch.manual_seed(0)
model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.Tanh()) for _ in range(8)])
x = torch.randn(64, 256)
for p in list(model.parameters())[:-2]:
    p.requires_grad_(False)
probe = te.CheckpointedSequential(model, budget=None)
probe.prepare(x)
wrapped = te.CheckpointedSequential(model, budget=probe.min_budget_bytes)
wrapped(x).sum().backward()
for p in model.parameters():
    p.requires_grad_(True)
    p.grad = torch.zeros_like(p)


def step():
    wrapped(x).sum().backward()


try:
    step()
    _, reading = measure_peak(step)
    print(f"unfrozen CheckpointedSequential: budget {wrapped.plan.budget_bytes} B, measured {reading.peak} B "
          f"({'over' if reading.peak > wrapped.plan.budget_bytes else 'held'}), plans {len(wrapped.plans)}")
except Exception as exc:  # noqa: BLE001
    print(f"unfrozen CheckpointedSequential: {type(exc).__name__}: {str(exc).splitlines()[0]}")


# 2. auto_checkpoint on a 4-block MLP with its first half frozen, then unfrozen: gradients of the unfrozen half.
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.1)) for _ in range(4))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x.square().mean()


torch.manual_seed(0)
net = Net()
x = torch.randn(32, 64)
for p in net.blocks[:2].parameters():
    p.requires_grad_(False)
auto = te.auto_checkpoint(net, "90%")
auto(x).backward()
for p in net.parameters():
    p.requires_grad_(True)
net.zero_grad(set_to_none=True)
auto(x).backward()
missing = [n for n, p in net.named_parameters() if p.grad is None]
print(f"unfrozen auto_checkpoint: {len(missing)} of {len(list(net.parameters()))} parameters without a gradient")

# 3. auto_checkpoint captured in eval mode, then net.train() on the model: does dropout run?
torch.manual_seed(0)
net = Net().eval()
auto = te.auto_checkpoint(net, "90%", sample=(x,))
net.train()
reference = copy.deepcopy(net)
torch.manual_seed(1)
loss = auto(x)
torch.manual_seed(1)
want = reference(x)
print(f"model.train() after an eval capture: loss {loss.item():.6f}, plain autograd in train mode {want.item():.6f} "
      f"({'equal' if torch.equal(loss, want) else 'differ'})")
