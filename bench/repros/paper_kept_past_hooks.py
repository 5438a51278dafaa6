"""The offloading paper's plan at its least budget on MLPs whose stages keep bytes past the saved-tensor hooks:
transformers' NewGELU (three Python numbers saved as 0-dim tensors) and a Function keeping a tensor on ``ctx``
(Note [Kept past the hooks] in torch_exec/paper_offload.py)."""
import sys
from pathlib import Path

from _setup import te, torch  # the tree under test: GS_ROOT

from gpusolve.offload.compare import paper_least_bytes  # noqa: E402
from gpusolve.offload.link import Link  # noqa: E402
from torch_exec.meter import measure_peak  # noqa: E402
from torch_exec.paper_offload import PaperOffloadRunner, planning_instance  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))  # this tree's models, any GS_ROOT
from models import CtxKeep, GeluNew, activation_mlp  # noqa: E402

for act in (GeluNew, CtxKeep):
    model = activation_mlp(act)
    x = torch.randn(64, 4, dtype=torch.float64)
    wrapped = te.CheckpointedSequential(model, budget="1TiB", backend="cpu")
    link = Link.parse("1GB/s")
    least = paper_least_bytes(planning_instance(wrapped, x), link, True)
    runner = PaperOffloadRunner.of(wrapped, x, least, link)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    step = lambda: runner(x).square().mean().backward()  # noqa: E731
    step()
    _, r = measure_peak(step)
    plan = runner.plan
    print(f"{act.__name__}: paper's least budget {least}, {plan.method} moves {plan.decisions}: predicted "
          f"{plan.predicted_peak_bytes} measured {r.peak} ({r.peak - plan.predicted_peak_bytes:+d} B against the "
          f"prediction, {r.peak - least:+d} B against the budget): {'held' if r.peak <= least else 'OVER'}")
