"""memory_report()'s "param grads" column in the usual loop (forward, backward, optimizer.step(),
optimizer.zero_grad()) (a review, 2026-11-27): a step is recorded when the next one starts (or when the
report is read), after zero_grad() has set the gradients to None, so every step but the last reads 0 B
of parameter gradients allocated, though each step allocated all of them."""
from _setup import F, nn, torch
from torch_exec.join import CheckpointedJoin

torch.manual_seed(0)
D, B = 128, 64
tower = lambda depth: [nn.Sequential(nn.Linear(D, D), nn.ReLU()) for _ in range(depth)]  # noqa: E731
join = CheckpointedJoin([tower(6), tower(4)], lambda a, b: F.cross_entropy(a @ b.T, torch.arange(B)), budget="70%")
x1, x2 = torch.randn(B, D), torch.randn(B, D)
optimizer = torch.optim.SGD(join.parameters(), lr=0.01)
join.prepare(x1, x2)
join.measure_memory(3)
for _ in range(3):
    join(x1, x2).backward()
    optimizer.step()
    optimizer.zero_grad()  # set_to_none=True, PyTorch's default
grad_bytes = sum(p.numel() * p.element_size() for p in join.parameters())
print(f"the step sets {grad_bytes} B of parameter gradients each time")
print(join.memory_report())
