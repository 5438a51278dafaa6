"""A weight two stages read (a language model's tied input embedding and output head), measured on the CPU.

    python bench/shared_leaves.py [--out bench/results] [--name shared_leaves_cpu]

Plain autograd's one backward sums the tied weight's two gradients in a buffer the size of the weight,
from the head's backward to the embedding's; no stage's profile charges it (Note [Shared leaves split
tape runs] in torch_exec/executor.py, Note [Gradients summed across stages] in
gpusolve/offload/compare.py). The model is ``examples/models.py``'s ``tied_lm`` (float64, a 2 048 000 B
tied weight that outweighs a block's tape), run

- by :class:`torch_exec.CheckpointedSequential` at 100 / 95 / 80 / 60 % of plain autograd's measured
  peak: the plan's predicted and measured peaks, whether it ran as plain autograd;
- the same with the head reaching the weight otherwise (:data:`HEADS`): through a list attribute (no
  registered submodule: only the autograd graph shows it reads the weight) and as a plain callable closing
  over the weight (the profiler's stand-ins for the modules' parameters do not replace it);
- by the offloading paper's plan at its least budget (:class:`torch_exec.paper_offload.PaperOffloadRunner`),
  with the model's head and with the closure;
- and transformers' GPT-2 (``examples/models.py``'s ``gpt2``, its head tied to the input embedding) under
  ``auto_checkpoint`` at 80 %, the loop keeping only its loss (skipped without transformers).

Peaks are the CPU allocator's events (:func:`torch_exec.meter.measure_peak`), one step after a warm one,
parameter gradients allocated first. Run against an older checkout (the script and examples/models.py
copied there) it records what that code did: ``--name shared_leaves_cpu_before``.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import torch  # noqa: E402

import models  # noqa: E402  (examples/models.py)
import torch_exec as te  # noqa: E402
from bench._common import record_header, write_cpu_record  # noqa: E402
from gpusolve.offload.compare import paper_least_bytes  # noqa: E402
from gpusolve.offload.link import Link  # noqa: E402
from torch_exec.meter import measure_peak  # noqa: E402
from torch_exec.paper_offload import PaperOffloadRunner  # noqa: E402

PERCENTS = (100, 95, 80, 60)
LINK = "1GB/s"  # the paper's model needs a rate; peaks do not depend on it
SIZES = dict(vocab=2000, width=128, hidden=2048, blocks=6, tokens=32)
GPT2 = dict(layers=4, width=64, heads=2, vocab=8000, context=32)  # its tied weight: 8000 x 64 float32, 2 048 000 B


def model():
    return models.tied_lm(**SIZES).double()


class ListHead(torch.nn.Module):
    """The tied head reaching the embedding through a list attribute: not a registered submodule."""

    def __init__(self, embedding, targets):
        super().__init__()
        self.embedding = [embedding]
        self.register_buffer("targets", targets)

    def forward(self, h):
        return torch.nn.functional.cross_entropy(h @ self.embedding[0].weight.T, self.targets)


def list_head():
    """(the model, its stages, the modules beside them): :func:`model` with its head a :class:`ListHead`."""
    base = model()
    net = torch.nn.Sequential(*base[:-1], ListHead(base[0], base[-1].targets))
    return net, net, []


def closure_head():
    """(the model, its stages, the modules beside them): :func:`model`'s stages with the head a plain callable
    over the embedding's weight itself (the model's parameters, for the plain run's gradients)."""
    net = model()
    weight, targets = net[0].weight, net[-1].targets
    return net, list(net[:-1]) + [lambda h: torch.nn.functional.cross_entropy(h @ weight.T, targets)], [net]


def plain_head():
    net = model()
    return net, net, []


# head variant -> (model, stages, modules) maker and the budgets its executor rows are run at
HEADS = {"model's head": (plain_head, PERCENTS), "head via a list": (list_head, (95, 80)),
         "head via a closure": (closure_head, (100, 80))}


IDS = torch.randint(0, SIZES["vocab"], (SIZES["tokens"],), generator=torch.Generator().manual_seed(1))


def step_peak(run, net) -> int:
    """Peak bytes of one step of ``run`` after a warm one, ``net``'s gradients allocated first."""
    def zero():
        for p in net.parameters():
            p.grad = torch.zeros_like(p)
    zero()
    run(IDS).backward()
    zero()
    _, reading = measure_peak(lambda: run(IDS).backward())
    return reading.peak


def wrapper(make, budget):
    """(the model, a CheckpointedSequential over ``make()``'s stages at ``budget``)."""
    net, stages, modules = make()
    return net, te.CheckpointedSequential(stages, budget=budget, backend="cpu", profile_passes=1, modules=modules)


def executor_rows(plain_peak: int) -> list[dict]:
    return [executor_row(head, make, percent, plain_peak) for head, (make, percents) in HEADS.items()
            for percent in percents]


def executor_row(head, make, percent, plain_peak) -> dict:
    net, wrapped = wrapper(make, f"{percent}%")
    peak = step_peak(wrapped, net)
    plan, entry = wrapped.plan, wrapped._last
    return {"runner": f"CheckpointedSequential, {head}", "budget": f"{percent} %", "budget_bytes": plan.budget_bytes,
            "predicted_peak_bytes": plan.predicted_peak_bytes, "measured_peak_bytes": peak,
            "fits": peak <= plan.budget_bytes, "plain_autograd": bool(entry.plain),
            "breaks": sorted(s for _, s in getattr(entry, "breaks", ())), "plain_measured_bytes": plain_peak}


def gpt2_run():
    """(the ``auto_checkpoint`` wrapper, the model, the measured peak of a step) of transformers' GPT-2 (tied
    head) at 80 %, the loop keeping only the loss (tests/test_shared_leaves.py runs it too)."""
    from torch_exec.auto import auto_checkpoint
    net = models.gpt2(**GPT2)
    ids = torch.randint(0, GPT2["vocab"], (1, GPT2["context"]), generator=torch.Generator().manual_seed(0))
    wrapped = auto_checkpoint(net, "80%", backend="cpu", sample={"input_ids": ids, "labels": ids}, profile_passes=1,
                              capture="export", caller_keeps="loss")

    def step():
        wrapped(input_ids=ids, labels=ids).loss.backward()
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    step()
    _, reading = measure_peak(step)
    return wrapped, net, reading.peak


def gpt2_row() -> dict | None:
    """:func:`gpt2_run` as a row; None without transformers."""
    import importlib.util
    if importlib.util.find_spec("transformers") is None:
        return None
    wrapped, _, peak = gpt2_run()
    plan, entry = wrapped.plan, wrapped.capture.executor._last
    return {"runner": "auto_checkpoint(GPT-2, caller_keeps='loss')", "budget": "80 %", "budget_bytes": plan.budget_bytes,
            "predicted_peak_bytes": plan.predicted_peak_bytes, "measured_peak_bytes": peak,
            "fits": peak <= plan.budget_bytes, "plain_autograd": bool(entry.plain),
            "breaks": sorted(s for _, s in getattr(entry, "breaks", ()))}


def paper_row(head: str) -> dict:
    """The paper's plan at its least budget, made as this checkout makes it."""
    net, wrapped = wrapper(HEADS[head][0], None)
    link = Link.parse(LINK)
    try:
        from torch_exec.paper_offload import planning_instance
        chain = planning_instance(wrapped, IDS)
        if isinstance(chain, tuple):  # a checkout before the chain carried its shared leaves
            chain, shared = chain
        else:
            shared = chain.shared_grads()
        least = paper_least_bytes(chain, link, True, shared)
    except ImportError:  # an older checkout: the profiled chain, nothing shared
        wrapped.prepare(IDS)
        least, shared = paper_least_bytes(wrapped._last.plain_chain, link), []
    runner = PaperOffloadRunner.of(wrapped, IDS, least, link)
    peak = step_peak(runner, net)
    plan = runner.plan
    return {"runner": f"PaperOffloadRunner, {head}", "budget": "least", "budget_bytes": plan.budget_bytes,
            "predicted_peak_bytes": plan.predicted_peak_bytes, "measured_peak_bytes": peak,
            "fits": peak <= plan.budget_bytes, "plain_autograd": True, "moved_tapes": list(plan.decisions),
            "shared_grads": [list(g) for g in shared]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--name", default="shared_leaves_cpu", help="file name of the results without suffix")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", te.CPUTimingWarning)
    plain = model()
    plain_peak = step_peak(plain, plain)
    rows = executor_rows(plain_peak) + [paper_row(head) for head in ("model's head", "head via a closure")]
    rows += [row for row in [gpt2_row()] if row is not None]
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / args.name
    record = write_cpu_record(out, "shared_leaves.py", argv, rows, sizes=SIZES, plain_measured_bytes=plain_peak)
    lines = record_header(record, "A tied weight: plans measured on the CPU",
                          f"`examples/models.py`'s `tied_lm({', '.join(f'{k}={v}' for k, v in SIZES.items())})` in "
                          f"float64 (tied weight 2 048 000 B); plain autograd's measured peak {plain_peak} B. Peaks: "
                          "the CPU allocator's events, one step after a warm one, parameter gradients allocated first.")
    lines += ["| runner | budget | budget bytes | ran as plain autograd | tape runs split before | predicted peak | "
              "measured peak | measured - predicted | fits |", "| --- | --- | ---: | :---: | --- | ---: | ---: | ---: | :---: |"]
    for r in rows:
        split = ", ".join(map(str, r.get("breaks", []))) or "-"
        lines.append(f"| {r['runner']} | {r['budget']} | {r['budget_bytes']} | {'yes' if r['plain_autograd'] else 'no'} | "
                     f"{split} | {r['predicted_peak_bytes']} | {r['measured_peak_bytes']} | "
                     f"{r['measured_peak_bytes'] - r['predicted_peak_bytes']:+d} | {'yes' if r['fits'] else 'NO'} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    for line in lines[-len(rows):]:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
