"""A model whose forward keeps a Python counter on itself and derives a schedule from it (a warm-up factor, a
Gumbel-softmax temperature annealed per call, a quantiser's observer steps): ``if self.training: self.calls += 1;
alpha = min(1, self.calls / 4)``, then 6 residual blocks (Linear 32 -> 64, tanh, Linear 64 -> 32) each scaled by
``0.5 + 0.5 * alpha``; input 4 x 16 x 32, loss ``out.pow(2).mean()``, SGD, 5 steps; ``auto_checkpoint(model, budget,
backend="cpu")`` at "100%" and "60%", against the same model trained by plain autograd.

Observed (CPU, torch 2.13), the same at both budgets, no error and no warning:
  step 0: loss 0.0705420 against plain autograd's 0.0121217: the captured graph computes alpha from calls = 2 (plain
    autograd with calls = 2 gives 0.07054204493761063), one more than the calls made;
  after every step ``model.calls`` is 1 (plain autograd: 1, 2, 3, 4, 5): the forward's own update never runs again;
  step 4: loss 0.0702822 against 1.4970797 (plain autograd's alpha reached 1 at step 3).

Cause: torch.export fixes what the Python read (Note [What a captured graph fixes] in torch_exec/auto.py) and keeps
no Python side effect: ``self.calls += 1`` runs only while capturing. The probe (Note [Probing the model],
``_probe_model``) refuses Python's ``random`` and tensors stored on modules, and puts back tensor attributes, but does
not see a scalar attribute the forward writes: the capture ran the forward once more than the step (calls = 2 in the
graph), the attribute was left at 1, and since the counter never moves again the input signature (which keys scalar
attributes, ``captured_state_key``) never changes and the graph runs on with alpha = 0.5.

Expected: plain autograd's losses, or ONE clear CaptureError naming the attribute the forward writes
(``Counter.calls``) and the fix (keep it as a buffer, or update it in the training loop; or capture="blocks", which
runs the model's code at each step). Exits 1 while the wrapper trains with another loss than plain autograd's without
an error.

Run: GS_ROOT=<tree> python bench/repros/rv20a_auto_forward_counter_attribute_frozen.py   (~8 s)"""
import sys

from _setup import nn, te, torch

D = 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

    def forward(self, x):
        return x + self.b(torch.tanh(self.a(x)))


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.ModuleList(Block() for _ in range(6))
        self.calls = 0

    def forward(self, x):
        if self.training:
            self.calls += 1
        alpha = min(1.0, self.calls / 4)
        for block in self.l:
            x = block(x) * (0.5 + 0.5 * alpha)
        return x


def train(budget):
    torch.manual_seed(0)
    model = Counter()
    run = model if budget is None else te.auto_checkpoint(model, budget, backend="cpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, calls = [], []
    for step in range(5):
        x = torch.randn(4, 16, D, generator=torch.Generator().manual_seed(step))
        try:
            loss = run(x).pow(2).mean()
        except te.CaptureError as err:
            return f"refused: {str(err)[:150]}", None
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(round(loss.item(), 7))
        calls.append(model.calls)
    return losses, calls


plain_losses, plain_calls = train(None)
print(f"plain autograd: losses {plain_losses}, model.calls after each step {plain_calls}")
bad = False
for budget in ("100%", "60%"):
    losses, calls = train(budget)
    print(f"{budget}: losses {losses}, model.calls after each step {calls}")
    if calls is not None:
        bad |= any(abs(a - b) > 1e-5 * abs(a) for a, b in zip(plain_losses, losses))

print("BUG: a counter the forward keeps on the module is frozen in the captured graph, silently" if bad else "ok")
sys.exit(1 if bad else 0)
