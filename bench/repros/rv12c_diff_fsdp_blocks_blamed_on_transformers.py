"""The block fallback's hook check (torch_exec/auto.py _refuse_block_hooks) now refuses blocks sharded with FSDP2
(``fully_shard``), naming "transformers records the outputs of the blocks ... (output_hidden_states,
output_attentions or output_router_logits asked for them)": the model has no transformers in it and asked for
nothing. The function's docstring says "FSDP2's own hooks (``fully_shard``: gathering a block's parameters for
each run) are kept"; 8d78b68 let them through (``hooked`` leaves FSDPModule blocks out).

Here: a ModuleList of 4 x (Linear(64), Tanh), each block fully_shard-ed on a 1-rank gloo CPU mesh (FSDP2 puts a
forward pre-hook and a forward hook on each), handed to _refuse_block_hooks as the chosen blocks. (At 8d78b68 the
block fallback went on and crashed further on, on the CPU, cloning the sharded parameters: this repro checks the
refusal's cause only.)
Cause: torch_exec/auto.py _refuse_block_hooks: ``recorded`` lists every block with any forward hook, FSDP blocks
included, where ``hooked`` leaves FSDPModule blocks out; ``recorded and not hooked`` then reads FSDP's hooks as
transformers' output recorders.
Expected: no CaptureError naming transformers' output recorders for FSDP's own hooks (``recorded`` built from
the hooks _users_hooks leaves out, on blocks that are not FSDPModule). Exits 1 while that error is raised."""
import os
import sys
import types

from _setup import nn, te, torch  # noqa: F401 - the tree under test: GS_ROOT
import torch.distributed as dist
from torch_exec import auto

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29647")
dist.init_process_group("gloo", rank=0, world_size=1)
try:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (1,))
    layers = nn.ModuleList(nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(4))
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    print("hooks per block (pre, post):", [(len(b._forward_pre_hooks), len(b._forward_hooks)) for b in layers])
    try:
        auto._refuse_block_hooks(types.SimpleNamespace(name="layers", blocks=list(layers)))
        bad = False
        print("ok: FSDP2's own hooks are kept")
    except te.CaptureError as err:
        print(f"CaptureError: {str(err)[:200]}...")
        bad = "transformers records" in str(err)
        print("BUG: FSDP2's hooks are refused as transformers' output recorders" if bad else "refused otherwise")
finally:
    dist.destroy_process_group()
sys.exit(1 if bad else 0)
