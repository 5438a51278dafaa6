"""What seeing hand-put hooks on parameters' AccumulateGrad nodes would cost (Note [Hooks on the accumulator node]
in torch_exec/_util.py): a node's Python post hooks live in one dict that only a registration's handle reaches, so
finding them means registering a hook on every parameter's node (and removing it), which leaves a Python post hook
on each node for good. Measured here on 300 Linear(8, 8) layers (600 parameters), 1 thread: a plain step's
backward without and with such emptied hooks on every node (medians of 30 steps), and the registration itself.

    python bench/repros/rv14_node_hook_cost.py   # prints one line; bench/results/node_hook_cost_cpu.md records it
"""
import time

import torch

torch.set_num_threads(1)
torch.manual_seed(0)
layers = [torch.nn.Linear(8, 8) for _ in range(300)]
params = [p for layer in layers for p in layer.parameters()]
x = torch.randn(2, 8)


def step():
    h = x
    for layer in layers:
        h = layer(h)
    h.sum().backward()


def median_step() -> float:
    for _ in range(5):
        step()
    times = []
    for _ in range(30):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]


def find_dicts() -> list:
    found = []
    for p in params:
        node = p.view_as(p).grad_fn.next_functions[0][0]
        handle = node.register_hook(lambda *args: None)
        found.append((node, handle.hooks_dict_ref()))
        handle.remove()
    return found


plain = median_step()
kept = find_dicts()  # the nodes held: the emptied hooks stay on them
hooked = median_step()
started = time.perf_counter()
find_dicts()
finding = (time.perf_counter() - started) / len(params)
print(f"{len(params)} parameters: step {plain * 1e3:.2f} ms, with an emptied Python post hook on every node "
      f"{hooked * 1e3:.2f} ms (+{(hooked - plain) / len(params) * 1e6:.2f} us per parameter); finding a node's dict "
      f"{finding * 1e6:.2f} us per parameter")
