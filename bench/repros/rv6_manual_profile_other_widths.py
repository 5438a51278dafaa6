"""prepare(x, profile=data) with the profile of another network that has the same input and as many stages
(an nn.Sequential's names are '0', '1', ...: a 64-wide MLP's profile for the same MLP 512 wide inside) is
accepted without a word: "90%" resolves against the narrow network's plain peak (93312 B), and the measured
step goes 16.9x over that budget. rv5_manual_profile_other_shapes named this case ("or of another network with
as many stages (other widths) ... The profile records ... param_bytes"), but its second case changed the
input width, so the input-shape check made by the fix (torch_exec/executor.py, _check_profile_input: input
shapes, dtype, input_requires_grad) refuses it while the case described stays open. The profile's param_bytes
(69160 B) is not the wrapper's (3305512 B), nor are its stages' output sizes (x_nbytes) what the stages make.
Expected: refused at prepare() naming the mismatch (param_bytes, or a per-stage parameter count), as for
another input shape. Exits 1 while it is accepted."""
import sys

from _setup import F, nn, te, torch  # the tree under test: GS_ROOT


def net(H):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, H), nn.Tanh(), nn.Linear(H, H), nn.Tanh(), nn.Linear(H, H), nn.Tanh(),
                         nn.Linear(H, H), nn.Tanh(), nn.Linear(H, 10))


x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
data = te.profile_dict(net(64), x)
w = te.CheckpointedSequential(net(512), budget="90%", backend="cpu")
try:
    plan = w.prepare(x, profile=data)
except ValueError as exc:
    print(f"refused: {exc}")
    sys.exit(0)
print(f"64-wide network's profile for the 512-wide one: accepted; budget 90% -> {plan.budget_bytes} B, predicted "
      f"{plan.predicted_peak_bytes} B, min_budget_bytes {w.min_budget_bytes} B; profile param_bytes "
      f"{data['param_bytes']} B, the wrapper's parameters {sum(p.numel() * p.element_size() for p in w.parameters())} B")
w.measure_memory(1)
F.cross_entropy(w(x), y).backward()
r = w.memory_report()[-1]
print(f"measured step: {r.beyond_param_grads} B beyond parameter gradients = {r.beyond_param_grads / r.budget:.1f} x "
      f"the budget")
own = te.CheckpointedSequential(net(512), budget="90%", backend="cpu")
print(f"the 512-wide network's own profile: 90% -> {own.prepare(x).budget_bytes} B")
sys.exit(1)
