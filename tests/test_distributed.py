"""CheckpointedSequential per rank under DistributedDataParallel and FSDP2, on 2 CPU processes (gloo).

The tests start 2 worker processes (``tests/_dist_worker.py``, one rank each, meeting through a file
store) once per case and way of wrapping; the workers run every mode of the case in turn (torch and
its profiler import once) and report per mode. Each mode builds the same seeded model on every rank,
trains on rank-seeded batches and checks on every rank:

- DDP: ``DDP(wrap(model, budget))`` against ``DDP(model)``: losses, all-reduced gradients and
  BatchNorm buffers equal bitwise, parameters equal after SGD steps, and the plain DDP gradients
  equal to the mean of every rank's local gradient computed in one process. The budget lies between
  the least feasible and plain autograd's peak, so the plan recomputes (checked); the wrapper
  profiles inside DDP's first forward, and again at a new batch size after backward passes.
  ``inner:<mode>``: DDP around ``nn.Sequential(stem, wrap(body), head)``, the stem's parameters
  getting their gradients after the wrapper's backward.
- FSDP2 (``fully_shard`` on a CPU device mesh): ``root_only`` shards the wrapper as one unit;
  ``per_stage`` shards each stage with parameters and then the wrapper, every rank running rank 0's
  plan; ``per_stage_profiled_inside`` profiles inside the sharded forward (a budget plain autograd
  fits). The full gradients (``DTensor.full_tensor()``) and parameters against a single-process
  reference.

``WRAP`` lists the ways to wrap a model (keys of ``_dist_worker.WRAPS``: ``wrap(model, budget)``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_dist_worker.py"
WORLD = 2
TIMEOUT_S = 240
WRAP = ["checkpointed"]
WRAP_DDP = ["checkpointed", "auto"]  # auto_checkpoint's stages are its own: per-stage FSDP does not apply

if not (dist.is_available() and dist.is_gloo_available()):
    pytest.skip("torch.distributed with the gloo backend is not available in this torch build",
                allow_module_level=True)

DDP_MODES = ["default", "static_graph", "gradient_as_bucket_view", "find_unused_parameters",
             "no_broadcast_buffers", "comm_hook", "no_sync",
             "inner:default", "inner:static_graph", "inner:gradient_as_bucket_view", "inner:no_sync"]
# Known limitation, run last (its DDP error ends the workers' run): with find_unused_parameters=True
# (and no static_graph) the wrapper routes its parameters through _ParamTap so that DDP's graph search
# finds them; the tap's second, empty call of each parameter's AccumulateGrad then reaches DDP's hook
# before DDP finished the step when parameters upstream of the wrapper still wait for their gradients:
# "Expected to mark a variable ready only once" (Note [DistributedDataParallel] in executor.py).
DDP_XFAIL = {"inner:find_unused_parameters": "DDP(find_unused_parameters=True) with parameters upstream of the "
                                             "wrapper: 'Expected to mark a variable ready only once'"}
FSDP2_MODES = ["root_only", "per_stage", "per_stage_profiled_inside"]


def launch(workdir: Path, case: str, modes: list[str], wrap: str, backend: str = "gloo",
           device: str = "cpu") -> tuple[list[dict], str]:
    """Run the worker on WORLD processes: (each rank's results by mode, the output of any rank that
    failed or ran out of time)."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        [str(HERE.parent)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    procs = []
    for rank in range(WORLD):
        cmd = [sys.executable, str(WORKER), "--rank", str(rank), "--world", str(WORLD),
               "--init", str(workdir / "store"), "--case", case, "--modes", ",".join(modes), "--wrap", wrap,
               "--backend", backend, "--device", device, "--out", str(workdir / f"rank{rank}.json")]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=TIMEOUT_S)[0])
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            outputs.append(proc.communicate()[0] + f"\n[killed after {TIMEOUT_S} s]")
    log = "\n".join(f"---- rank {rank} exited with {p.returncode}:\n{text[-6000:]}"
                    for rank, (p, text) in enumerate(zip(procs, outputs)) if p.returncode != 0)
    results = []
    for rank in range(WORLD):
        path = workdir / f"rank{rank}.json"
        results.append(json.loads(path.read_text()) if path.exists() else {})
    return results, log


@pytest.fixture(scope="module")
def run_case(tmp_path_factory):
    """``run_case(case, modes, wrap)``: launch once per (case, wrap), cached for the module."""
    cache = {}

    def run(case: str, modes: list[str], wrap: str, backend: str = "gloo", device: str = "cpu"):
        key = (case, wrap, backend, device)
        if key not in cache:
            cache[key] = launch(tmp_path_factory.mktemp(f"{case}-{wrap}-{device}"), case, modes, wrap, backend, device)
        return cache[key]
    return run


def mode_results(run_case, case, modes, wrap, mode, **where) -> list[dict]:
    """Every rank's result for ``mode``, or fail with what the ranks reported."""
    results, log = run_case(case, modes, wrap, **where)
    per_rank = [res.get(mode) for res in results]
    if any(r is None for r in per_rank):
        pytest.fail(f"mode {mode} did not run (an earlier mode ended the run, or a rank died)\n{log}", pytrace=False)
    failures = [f"rank {rank}: {f}" for rank, r in enumerate(per_rank) for f in r["failures"]]
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)
    return [r["info"] for r in per_rank]


DDP_ALL = DDP_MODES + list(DDP_XFAIL)


@pytest.mark.parametrize("wrap", WRAP_DDP)
@pytest.mark.parametrize("mode", DDP_ALL)
def test_ddp_gradients_equal_plain_ddp(run_case, mode, wrap):
    if mode in DDP_XFAIL:
        results, log = run_case("ddp", DDP_ALL, wrap)
        failures = "\n".join(f for res in results for f in res.get(mode, {}).get("failures", []))
        if "Expected to mark a variable ready only once" in failures:
            pytest.xfail(DDP_XFAIL[mode])
        if failures or any(mode not in res for res in results):
            pytest.fail(f"{mode} failed otherwise than the known limitation:\n{failures}\n{log}", pytrace=False)
        pytest.fail(f"{mode} works now: move it from DDP_XFAIL to DDP_MODES", pytrace=False)
    infos = mode_results(run_case, "ddp", DDP_ALL, wrap, mode)
    for info in infos:
        assert info["steps"][0]["recomputed"], info
    # The ranks trained on different batches (their losses differ): DDP had gradients to average.
    assert infos[0]["steps"][0]["losses"] != infos[1]["steps"][0]["losses"]


@pytest.mark.parametrize("wrap", WRAP)
@pytest.mark.parametrize("mode", FSDP2_MODES)
def test_fsdp2_gradients_on_cpu(run_case, mode, wrap):
    infos = mode_results(run_case, "fsdp2", FSDP2_MODES, wrap, mode)
    if mode == "per_stage":
        assert all(info["same_plan_on_every_rank"] for info in infos)


@pytest.mark.gpu
@pytest.mark.parametrize("wrap", WRAP)
@pytest.mark.parametrize("mode", FSDP2_MODES)
def test_fsdp2_gradients_on_cuda(run_case, mode, wrap):
    """The FSDP2 modes with NCCL, one GPU per rank (not run where this was written: no 2-GPU machine)."""
    if not dist.is_nccl_available() or torch.cuda.device_count() < WORLD:
        pytest.skip(f"needs NCCL and {WORLD} CUDA devices")
    infos = mode_results(run_case, "fsdp2", FSDP2_MODES, wrap, mode, backend="nccl", device="cuda")
    if mode == "per_stage":
        assert all(info["same_plan_on_every_rank"] for info in infos)


def test_profiling_runs_no_accumulator_hook():
    """Profiling runs on stand-ins for the parameters: no hook of their gradient accumulators fires
    (DDP's reducer hooks them in C++; a Python hook on the AccumulateGrad node stands in for it here),
    and the parameters and their ``.grad`` stay the very same objects."""
    import _dist_worker as W
    body = W.make_body()
    calls = []
    params = list(body.parameters())
    nodes = [p.view_as(p).grad_fn.next_functions[0][0] for p in params]
    handles = [node.register_hook(lambda grad_inputs, grad_outputs: calls.append(1)) for node in nodes]
    grads = [torch.full_like(p, 7.0) for p in params]
    for p, g in zip(params, grads):
        p.grad = g
    wrapper = W.WRAPS["checkpointed"](body, 10**9)
    wrapper.prepare(W.batch(0, 0))
    assert not calls, f"profiling ran {len(calls)} accumulator hook(s)"
    assert list(body.parameters()) == params and all(p.grad is g for p, g in zip(params, grads))
    assert all(bool((g == 7).all()) for g in grads)
    W.loss_fn(body(W.batch(0, 1))).backward()  # the hooks are live
    assert len(calls) == len(params)
    for h in handles:
        h.remove()


class _StemBlocksHead(torch.nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.stem = torch.nn.Linear(8, d)
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.Tanh()) for _ in range(4))
        self.head = torch.nn.Linear(d, 3)

    def forward(self, x, y):
        h = self.stem(x)
        for b in self.blocks:
            h = b(h)
        return torch.nn.functional.cross_entropy(self.head(h), y)


@pytest.mark.parametrize("capture", ["blocks", "export"])
def test_auto_checkpoints_first_call_runs_no_accumulator_hook(capture):
    """auto_checkpoint's first call (probe, capture, the block fallback's measurement of the code around the
    blocks, profiling) runs no hook of a parameter's gradient accumulator: DDP(static_graph=True) counts them
    in its first iteration. Before, the block fallback's measurement ran a backward on the stem's and head's
    real parameters: DDP then all-reduced no later step's gradients (each rank kept its own), then raised
    (bench/repros/rv5_train_ddp_static_blocks.py)."""
    import torch_exec as te
    torch.manual_seed(0)
    model = _StemBlocksHead()
    calls = []
    params = list(model.parameters())
    nodes = [p.view_as(p).grad_fn.next_functions[0][0] for p in params]
    handles = [node.register_hook(lambda grad_inputs, grad_outputs: calls.append(1)) for node in nodes]
    w = te.auto_checkpoint(model, "90%", backend="cpu", capture=capture)
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    w.prepare(x, y)
    assert w.capture.method == capture
    assert not calls, f"the first call ran {len(calls)} accumulator hook(s)"
    assert all(p.grad is None for p in params) and list(model.parameters()) == params
    w(x, y).backward()  # the hooks are live (outside a DDP forward the parameter tap calls them once more)
    assert len(calls) >= len(params)
    for h in handles:
        h.remove()


def test_a_data_parallel_model_is_refused_naming_the_order_that_works(tmp_path):
    # before: auto_checkpoint(DDP(model)) raised DDP's "Expected to have finished reduction in the prior
    # iteration ... parameters that were not used in producing loss" at the first step
    import torch_exec as te
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        with pytest.raises(TypeError, match=r"DistributedDataParallel\(auto_checkpoint\(ddp.module, budget\)"):
            te.auto_checkpoint(DDP(_StemBlocksHead()), "50%")
    finally:
        dist.destroy_process_group()
    with pytest.raises(TypeError, match=r"DistributedDataParallel\(auto_checkpoint\(model, budget\)\) instead"):
        te.auto_checkpoint(torch.nn.DataParallel(_StemBlocksHead()), "50%")


class _TiedLM(torch.nn.Module):
    """A language model whose head is tied to its input embedding (GPT-2's), small."""

    def __init__(self, vocab=50, dim=16, layers=4):
        super().__init__()
        torch.manual_seed(0)
        self.wte = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.Tanh())
                                          for _ in range(layers))

    def forward(self, ids):
        h = self.wte(ids)
        for b in self.blocks:
            h = h + b(h)
        logits = torch.nn.functional.linear(h, self.wte.weight)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())


def test_ddp_around_a_wrapper_whose_stages_share_a_parameter_is_refused(tmp_path):
    # a review: the tied weight's gradient arrives in parts (one per segment backward); DDP all-reduced the first
    # part alone and each rank kept its own rest (Note [Hooks on a leaf several segments read])
    import torch_exec as te
    from torch.nn.parallel import DistributedDataParallel as DDP
    ids = torch.randint(0, 50, (4, 12), generator=torch.Generator().manual_seed(1))
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        low = te.auto_checkpoint(_TiedLM(), "100%", backend="cpu", caller_keeps="loss", profile_passes=1)
        low.prepare(ids)
        low.replan(low.min_budget_bytes)
        assert low.executor._last.shared_params  # the tied weight, read by the first stage and the last
        with pytest.raises(RuntimeError, match=r"inside DistributedDataParallel.*no_sync\(\)"):
            DDP(low)(ids)
        plain = DDP(te.auto_checkpoint(_TiedLM(), "100%", backend="cpu", caller_keeps="loss", profile_passes=1))
        plain(ids).backward()  # one backward (plain autograd fits): DDP sees whole gradients, not refused
        low(ids).backward()  # outside DDP: runs
    finally:
        dist.destroy_process_group()
