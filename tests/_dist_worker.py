"""One rank of the 2-process gloo group that ``tests/test_distributed.py`` starts (not a test module).

``python tests/_dist_worker.py --rank R --world W --init FILE --case ddp|fsdp2 --modes M1,M2 --wrap NAME
--out FILE``: the ranks meet through a file store (``init_method="file://..."``: no port to pick, no
race for one). For each mode in turn, every rank builds the same seeded model, trains a few steps on
rank-seeded batches and checks, on this rank, the wrapped model against the same model without the
wrapper. A mismatch is recorded and the mode goes on (so that the ranks keep issuing the same
collectives); an exception ends the run (later modes are not run). ``--out`` gets, per mode, what
it saw (plans, losses) and its failures, as JSON.

``WRAPS`` names the ways to wrap a model under a memory budget: ``wrap(model, budget) -> nn.Module``,
called like ``model``. Add an entry (e.g. ``torch_exec.auto_checkpoint``) and the test parametrizes
over it.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import os
import sys
import traceback
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import torch_exec as te
from gpusolve.schedule import OpKind
from torch_exec.executor import plain_peak_bytes

warnings.filterwarnings("ignore", category=te.CPUTimingWarning)

DT = torch.float64
SOLVER = dict(backend="cpu", profile_passes=1, profile_warmup=0)

# ---------------------------------------------------------------------------- ways to wrap
WRAPS = {
    "checkpointed": lambda model, budget: te.CheckpointedSequential(model, budget=budget, **SOLVER),
    "auto": lambda model, budget: te.auto_checkpoint(model, budget, **SOLVER),
}

# ---------------------------------------------------------------------------- modes
# DDP keyword arguments per mode; "inner:<mode>" wraps only the middle of the DDP module
# (nn.Sequential(stem, wrap(body), head)): parameters upstream of the wrapper get their gradients
# after the wrapper's backward.
DDP_MODES = {
    "default": {},
    "static_graph": dict(static_graph=True),
    "gradient_as_bucket_view": dict(gradient_as_bucket_view=True),
    "find_unused_parameters": dict(find_unused_parameters=True),
    "no_broadcast_buffers": dict(broadcast_buffers=False),
    "comm_hook": {},   # default DDP with a counting all-reduce comm hook: as many all-reduces as plain DDP
    "no_sync": {},     # gradients accumulated over two micro-batches, the first under no_sync()
}
FSDP2_MODES = ("root_only", "per_stage", "per_stage_profiled_inside")


# ---------------------------------------------------------------------------- model, data, loss
def make_body(device="cpu") -> nn.Sequential:
    """A small conv net with BatchNorm (buffers DDP broadcasts) and LayerNorm; no dropout."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Tanh(),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
        nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Flatten(), nn.Linear(8 * 4 * 4, 32), nn.LayerNorm(32), nn.Tanh(),
        nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 5)).to(device=device, dtype=DT)


def make_stem_head(device="cpu"):
    torch.manual_seed(1)
    return nn.Conv2d(3, 3, 1).to(device, DT), nn.Linear(5, 5).to(device, DT)


def batch(rank: int, step: int, size: int = 4, device="cpu") -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(size, 3, 8, 8, generator=g, dtype=DT).to(device)


def loss_fn(y: torch.Tensor) -> torch.Tensor:
    """Mean over the batch (DDP then averages over ranks)."""
    w = torch.linspace(-1, 1, y.shape[1], dtype=y.dtype, device=y.device)
    return ((y * w).square().sum(1) + y.sum(1)).mean()


def pick_budget(body: nn.Module, sample: torch.Tensor, fraction: float = 0.25) -> int:
    """A budget between the least feasible one and plain autograd's peak: forces recomputation.
    Found on a copy (CPU sizes are exact, so every rank finds the same budget)."""
    probe = te.CheckpointedSequential(copy.deepcopy(body), budget="1TiB", **SOLVER)
    probe.prepare(sample)
    lo, hi = probe.min_budget_bytes, plain_peak_bytes(probe._last)
    assert lo < hi, (lo, hi)
    return int(lo + fraction * (hi - lo))


def checkpointed_in(module: nn.Module) -> list:
    """The CheckpointedSequential modules in ``module``, with those auto_checkpoint wrappers run (not
    submodules: the wrapper shares the model's own modules)."""
    out = []
    for m in module.modules():
        if isinstance(m, te.CheckpointedSequential):
            out.append(m)
        elif isinstance(m, te.AutoCheckpointed):
            out += [cap.executor for cap in m._captures.values()]
    return out


def recomputes(wrapper) -> bool:
    """The latest plan of some CheckpointedSequential in ``wrapper`` runs a stage more than once."""
    for m in checkpointed_in(wrapper):
        plan = m.plan
        if plan is None:
            continue
        fwd = sum(op.kind in (OpKind.FWD_NOGRAD, OpKind.FWD_TAPE) for op in plan.schedule)
        if fwd > m.chain.n:
            assert plan.overhead > 0, plan.overhead
            return True
    return False


def plans_of(wrapper) -> list:
    return [None if m.plan is None else " ".join(f"{op.kind.name}({op.stage})" for op in m.plan.schedule)
            for m in checkpointed_in(wrapper)]


class Checks:
    """Soft asserts: a failed check is recorded and the mode goes on, so that every rank issues the
    same collectives whatever fails (a raised assert on one rank would leave the other waiting)."""

    def __init__(self, limit: int = 8):
        self.failures: list[str] = []
        self.limit = limit

    def true(self, cond, what: str) -> None:
        if not cond and len(self.failures) < self.limit:
            self.failures.append(what)

    def close(self, actual, expected, what: str, exact: bool = True) -> None:
        tol = dict(rtol=0, atol=0) if exact else dict(rtol=1e-10, atol=1e-12)
        try:
            torch.testing.assert_close(actual, expected, **tol)
        except AssertionError as e:
            self.true(False, f"{what}: {e}")


# ---------------------------------------------------------------------------- DDP
def counting_allreduce_hook(counter: list):
    """DDP's default all-reduce as a comm hook, counting its calls (one per bucket and step) in ``counter``."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    def hook(state, bucket):
        counter[0] += 1
        return default_hooks.allreduce_hook(state, bucket)
    return hook


def ddp_case(rank: int, world: int, wrap, mode: str, checks: Checks) -> dict:
    inner = mode.startswith("inner:")
    kwargs = DDP_MODES[mode.removeprefix("inner:")]
    body = make_body()
    if inner:
        stem, head = make_stem_head()
        budget = pick_budget(body, batch(rank, 0).requires_grad_())
        wrapper = wrap(copy.deepcopy(body), budget)
        model = nn.Sequential(stem, body, head)
        wrapped = nn.Sequential(copy.deepcopy(stem), wrapper, copy.deepcopy(head))
    else:
        budget = pick_budget(body, batch(rank, 0))
        model = body
        wrapped = wrapper = wrap(copy.deepcopy(body), budget)
    checks.true(all(m.plan is None for m in checkpointed_in(wrapper)), "the wrapper was prepared before DDP")
    ref = copy.deepcopy(model)                      # one process, every rank's batch: what DDP must compute
    plain = DDP(copy.deepcopy(model), **kwargs)
    ckpt = DDP(wrapped, **kwargs)                   # the wrapper profiles inside DDP's first forward
    counters = None
    if mode.endswith("comm_hook"):
        counters = ([0], [0])
        plain.register_comm_hook(None, counting_allreduce_hook(counters[0]))
        ckpt.register_comm_hook(None, counting_allreduce_hook(counters[1]))
    opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (ref, plain, ckpt)]
    out = dict(budget=budget, steps=[])
    # Steps 0 and 1: the batch size the budget was picked for; step 2: a new one, so that the wrapper
    # profiles again inside DDP's forward after the reducer went through backward passes.
    for step, size in enumerate((4, 4, 3)):
        micro = 2 if mode.endswith("no_sync") else 1
        xs = {r: [batch(r, 10 * step + k, size) for k in range(micro)] for r in range(world)}
        for opt in opts:
            opt.zero_grad(set_to_none=step == 0)
        losses = {}
        for name, m in (("plain", plain), ("ckpt", ckpt)):
            vals = []
            for k, x in enumerate(xs[rank]):
                with m.no_sync() if k < micro - 1 else contextlib.nullcontext():
                    loss = loss_fn(m(x))
                    loss.backward()
                vals.append(loss.item())
            losses[name] = vals
        # The reference: the mean over ranks of each rank's local gradient (BatchNorm normalizes per rank).
        for r in range(world):
            for x in xs[r]:
                (loss_fn(ref(x)) / world).backward()
        rec = dict(step=step, size=size, losses=losses, recomputed=recomputes(wrapper), plans=plans_of(wrapper))
        checks.true(losses["ckpt"] == losses["plain"], f"step {step}: losses {losses}")
        for (name, p), q, s in zip(plain.module.named_parameters(), ckpt.module.parameters(), ref.parameters()):
            if q.grad is None or p.grad is None:
                checks.true(False, f"step {step}: no gradient for {name}")
                continue
            checks.close(q.grad, p.grad, f"step {step}: grad of {name}, wrapped DDP vs plain DDP")
            checks.close(p.grad, s.grad, f"step {step}: grad of {name}, plain DDP vs the mean of every rank's",
                         exact=False)
        for (name, b), c in zip(plain.module.named_buffers(), ckpt.module.buffers()):
            checks.close(c, b, f"step {step}: buffer {name}")
        if counters is not None:
            rec["comm_hook_calls"] = [c[0] for c in counters]
            checks.true(counters[0][0] == counters[1][0] > 0, f"step {step}: all-reduces (plain, wrapped) "
                                                              f"{rec['comm_hook_calls']}")
        for opt in opts:
            opt.step()
        for (name, p), q in zip(plain.module.named_parameters(), ckpt.module.parameters()):
            checks.close(q, p, f"step {step}: parameter {name} after the optimizer step")
        out["steps"].append(rec)
    checks.true(out["steps"][0]["recomputed"], "the plan did not recompute: the test would prove nothing")
    # Every rank ends with the same parameters.
    flat = torch.cat([p.detach().reshape(-1) for p in ckpt.module.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    for r, g in enumerate(gathered):
        checks.close(g, flat, f"parameters of rank {r} against this rank's")
    return out


# ---------------------------------------------------------------------------- FSDP2
def share_rank0_plans(wrap, model, budget, wrapper, sample) -> None:
    """Give every CheckpointedSequential in ``wrapper`` the plans of rank 0: rank 0 profiles a wrapped
    copy of the (unsharded) ``model`` on ``sample`` and broadcasts each instance's profile and input;
    every rank prepares its instances with them. Per-stage FSDP2 all-gathers a stage's parameters when
    it first runs in the backward, so ranks with different plans would issue mismatched collectives."""
    payload = [None]
    if dist.get_rank() == 0:
        probe = wrap(copy.deepcopy(model), budget)
        inputs = {}

        def record(i):
            def hook(mod, args):
                inputs.setdefault(i, [(tuple(a.shape), a.dtype, a.requires_grad) for a in args])
            return hook
        handles = [m.register_forward_pre_hook(record(i)) for i, m in enumerate(checkpointed_in(probe))]
        with torch.enable_grad():
            probe(sample)
        for h in handles:
            h.remove()
        payload = [[(inputs[i], m._last.profile) for i, m in enumerate(checkpointed_in(probe))]]
    dist.broadcast_object_list(payload, src=0)
    for m, (args, profile) in zip(checkpointed_in(wrapper), payload[0]):
        m.prepare(*[torch.zeros(shape, dtype=dtype, device=sample.device).requires_grad_(rg)
                    for shape, dtype, rg in args], profile=profile)


def fsdp2_case(rank: int, world: int, wrap, mode: str, checks: Checks, device: str = "cpu") -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh(device, (world,))
    model = make_body(device)
    budget = pick_budget(model, batch(rank, 0, device=device))
    if mode == "per_stage_profiled_inside":
        budget = 4 * budget  # plain autograd fits: the same (store-all) plan on every rank
    ref = copy.deepcopy(model)
    sharded = copy.deepcopy(model)
    if mode.startswith("per_stage"):
        for stage in sharded:
            if any(True for _ in stage.parameters()):
                fully_shard(stage, mesh=mesh)
    wrapper = wrap(sharded, budget)
    fully_shard(wrapper, mesh=mesh)
    if mode == "per_stage":
        share_rank0_plans(wrap, model, budget, wrapper, batch(rank, 0, device=device))
    opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (ref, wrapper)]
    out = dict(budget=budget, steps=[])
    for step in range(2):
        xs = {r: batch(r, 10 * step, 4, device) for r in range(world)}
        for opt in opts:
            opt.zero_grad()
        loss = loss_fn(wrapper(xs[rank]))
        loss.backward()
        losses = [torch.zeros((), dtype=DT, device=device) for _ in range(world)]
        dist.all_gather(losses, loss.detach())
        ref_losses = []
        for r in range(world):
            ref_loss = loss_fn(ref(xs[r]))
            (ref_loss / world).backward()
            ref_losses.append(ref_loss.item())
        rec = dict(step=step, losses=[v.item() for v in losses], ref_losses=ref_losses,
                   recomputed=recomputes(wrapper), plans=plans_of(wrapper))
        checks.close(torch.stack(losses).cpu(), torch.tensor(ref_losses, dtype=DT), f"step {step}: losses",
                     exact=False)
        for (name, p), q in zip(ref.named_parameters(), wrapper.parameters()):
            if q.grad is None:
                checks.true(False, f"step {step}: no gradient for {name}")
                continue
            g = q.grad.full_tensor() if hasattr(q.grad, "full_tensor") else q.grad
            checks.close(g.cpu(), p.grad.cpu(), f"step {step}: grad of {name}, FSDP2 vs the mean of every rank's",
                         exact=False)
        for opt in opts:
            opt.step()
        for (name, p), q in zip(ref.named_parameters(), wrapper.parameters()):
            full = q.full_tensor() if hasattr(q, "full_tensor") else q
            checks.close(full.detach().cpu(), p.detach().cpu(), f"step {step}: parameter {name} after the step",
                         exact=False)
        out["steps"].append(rec)
    plans = [None] * world
    dist.all_gather_object(plans, out["steps"][0]["plans"])
    out["same_plan_on_every_rank"] = all(p == plans[0] for p in plans)
    if mode == "per_stage_profiled_inside":
        checks.true(not out["steps"][0]["recomputed"], "expected plain autograd to fit the budget")
    else:
        checks.true(out["steps"][0]["recomputed"], "the plan did not recompute: the test would prove nothing")
    if mode == "per_stage":
        checks.true(out["same_plan_on_every_rank"], f"the ranks ran different plans: {plans}")
    return out


CASES = {"ddp": (ddp_case, DDP_MODES), "fsdp2": (fsdp2_case, FSDP2_MODES)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--init", required=True, help="file for the file:// store")
    parser.add_argument("--case", choices=sorted(CASES), required=True)
    parser.add_argument("--modes", required=True, help="comma-separated")
    parser.add_argument("--wrap", choices=sorted(WRAPS), required=True)
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds a collective may wait")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    run, known = CASES[args.case]
    modes = args.modes.split(",")
    for mode in modes:
        if mode.removeprefix("inner:") not in known:
            parser.error(f"unknown {args.case} mode {mode!r}")
    if args.device == "cuda":
        torch.cuda.set_device(args.rank % torch.cuda.device_count())
    dist.init_process_group(args.backend, init_method=f"file://{args.init}", rank=args.rank,
                            world_size=args.world, timeout=datetime.timedelta(seconds=args.timeout))
    results = {}
    status = 0
    try:
        for mode in modes:
            checks = Checks()
            kwargs = dict(device=args.device) if args.case == "fsdp2" else {}
            try:
                info = run(args.rank, args.world, WRAPS[args.wrap], mode, checks, **kwargs)
            except Exception:  # noqa: BLE001 - reported; the ranks may be out of step: stop here
                results[mode] = dict(failures=checks.failures + [traceback.format_exc()], aborted=True)
                status = 1
                break
            results[mode] = dict(failures=checks.failures, info=info)
    finally:
        with open(args.out, "w") as f:
            json.dump(results, f)
        if status == 0:
            dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
