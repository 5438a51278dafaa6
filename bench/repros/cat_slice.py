"""examples/models.py's ``cat_slice`` (a branch passed on unchanged to a later cat; an auxiliary head carried
to the loss) at its least budget, profiled whole and stage by stage: Note [Gradients that are views] in
gpusolve/chain.py."""
import sys
from pathlib import Path

from _setup import te, torch  # the tree under test: GS_ROOT
from torch_exec.meter import measure_peak

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import models  # noqa: E402

for repeat in (8, 128):
    for isolated in (False, True):
        x = torch.randn(4, models.CAT_SLICE["width"])
        w = te.CheckpointedSequential(models.cat_slice(repeat), budget="1TiB", backend="cpu", caller_keeps="loss",
                                      profile_isolated=isolated)
        w.prepare(x)
        least = w.min_budget_bytes
        w.replan(least)
        for p in w.parameters():
            p.grad = torch.zeros_like(p)
        step = lambda: w(x).backward()  # noqa: E731
        step()
        _, r = measure_peak(step)
        print(f"repeat {repeat}, {'stage by stage' if isolated else 'whole'}: budget {least} predicted "
              f"{w.plan.predicted_peak_bytes} measured {r.peak} ({r.peak - least:+d} B against the budget): "
              f"{'held' if r.peak <= least else 'OVER'}")
