"""Random chains of stages whose tuple states pass tensors on (forks, merges, swaps, picks): does the
measured step peak hold the budget? (CPU; the allocator's events measure every peak.)

    python bench/tuple_fuzz.py --seeds 0:40                 # recompute only, 5 budgets per model
    python bench/tuple_fuzz.py --seeds 200:240 --offload    # offloading over a free link, 4 budgets
    python bench/tuple_fuzz.py --seeds 0:40 --views          # cat stages too: gradient slices handed on
    python bench/tuple_fuzz.py --seeds 0:40 --view-tuples    # tuples of views of one storage too
    python bench/tuple_fuzz.py --seeds 0:40 --tied --weighted-merges  # a shared Linear read twice in one stage

Each model is an ``nn.Sequential`` of stages drawn from a small vocabulary: some make new tensors,
some pass one of their inputs on untouched, some alias (pick or swap the parts of a pair), some
save what they read and some do not. These are the cases of Note [Outputs passed through] in
``gpusolve/chain.py``, drawn at random; a review of that note wrote the first version. Budgets run
from the least feasible one towards plain autograd's measured peak (with ``--offload``: from the
combined class's least budget towards the model's store-all peak, over a link that costs nothing,
so the solver offloads wherever it saves memory). ``--hold`` keeps the model's output, a pair
(loss, last state), through the backward as a caller would; ``--drop`` returns the same pair and
drops the state before the backward, the wrapper told so (``caller_keeps="loss"``: the plans reserve
nothing of the state, Note [The caller holds a_N] in ``torch_exec/executor.py``). ``--tied`` has every
weighted stage read one shared Linear, whose gradient plain autograd sums across stages (Note [Shared
leaves split tape runs] in ``torch_exec/executor.py``), at a batch where that weight outweighs a tensor of
the state.

Writes ``<out>.json`` (every run) and ``<out>.md`` (a summary), with device, date and command.
"""
from __future__ import annotations

import argparse
import datetime
import json
import random
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
from bench._common import cpu_description  # noqa: E402
from gpusolve import store_all_peak_bytes  # noqa: E402
from gpusolve.exact_peak import exact_peak  # noqa: E402
from gpusolve.schedule import count_recomputations  # noqa: E402
from gpusolve.offload import Link  # noqa: E402
from gpusolve.offload.dp import min_offload_bytes  # noqa: E402
from torch_exec.executor import plain_peak_bytes  # noqa: E402
from torch_exec.meter import measure_peak  # noqa: E402

WIDTH, BATCH = 64, 512
TIED_BATCH = 16  # --tied: the shared weight (16 KB) then outweighs a tensor of the state (4 KB)
FREE = Link(float("inf"), float("inf"))


class _Stage(nn.Module):
    """A stage of arity (inputs, outputs): 1 is a tensor, 2 a pair."""

    arity = (1, 1)
    weighted = False

    def __init__(self):
        super().__init__()
        if self.weighted:
            self.fc = nn.Linear(WIDTH, WIDTH)


class Lin(_Stage):        # t -> tanh(fc(t)): saves its input and output
    weighted = True

    def forward(self, t):
        return torch.tanh(self.fc(t))


class LinNoAct(_Stage):   # t -> fc(t): its output saved by nobody
    weighted = True

    def forward(self, t):
        return self.fc(t)


class Scale(_Stage):      # t -> 2t: saves nothing
    def forward(self, t):
        return t * 2.0


class Fork(_Stage):       # t -> (fc(t), t): passes t on, saves it
    arity, weighted = (1, 2), True

    def forward(self, t):
        return self.fc(t), t


class ForkFree(_Stage):   # t -> (3t, t): passes t on, saves nothing
    arity = (1, 2)

    def forward(self, t):
        return t * 3.0, t


class Keep(_Stage):       # (a, b) -> (tanh(fc(a)), b)
    arity, weighted = (2, 2), True

    def forward(self, p):
        return torch.tanh(self.fc(p[0])), p[1]


class KeepFree(_Stage):   # (a, b) -> (a / 2, b)
    arity = (2, 2)

    def forward(self, p):
        return p[0] * 0.5, p[1]


class Flip(_Stage):       # (a, b) -> (b, a): aliases
    arity = (2, 2)

    def forward(self, p):
        return p[1], p[0]


class First(_Stage):      # (a, b) -> a: aliases, drops b
    arity = (2, 1)

    def forward(self, p):
        return p[0]


class Second(_Stage):     # (a, b) -> b: aliases, drops a
    arity = (2, 1)

    def forward(self, p):
        return p[1]


def fit(a, b, always: bool = False):
    """``a`` and ``b`` cut to the rows they share (a view stage may halve one): unchanged where they agree, unless
    ``always`` (a slice of all the rows is a view too, whose backward makes a gradient of the whole)."""
    if a.shape[0] == b.shape[0] and not always:
        return a, b
    n = min(a.shape[0], b.shape[0])
    return a[:n], b[:n]


class Merge(_Stage):      # (a, b) -> tanh(a + b)
    arity = (2, 1)

    def forward(self, p):
        a, b = fit(*p)
        return torch.tanh(a + b)


class MulMerge(_Stage):   # (a, b) -> a * b: saves both
    arity = (2, 1)

    def forward(self, p):
        a, b = fit(*p)
        return a * b


class Loss(_Stage):
    def forward(self, t):
        return t.square().mean()


class LossKeep(_Stage):   # t -> (loss, t): the caller may hold t
    def forward(self, t):
        return t.square().mean(), t


class CatFc(_Stage):      # (a, b) -> fc2(cat(a, fc(b))): a's gradient is a slice of the cat's (a DenseNet layer)
    arity, weighted = (2, 1), True

    def __init__(self):
        super().__init__()
        self.fc2 = nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, p):
        a, b = fit(*p)
        return self.fc2(torch.cat([a, self.fc(b)], -1))


class CatPass(CatFc):     # (a, b) -> (fc2(cat(a, fc(b))), a): passes a on too
    arity = (2, 2)

    def forward(self, p):
        return super().forward(p), p[0]


class DupView(_Stage):    # t -> (y, y[:h]), y = fc(t): a new tensor and a view of it
    arity, weighted = (1, 2), True

    def forward(self, t):
        y = self.fc(t)
        return y, y[: max(1, y.shape[0] // 2)]


class SplitIn(_Stage):    # t -> (t[:h], t[h:]): two views of the input's storage
    arity = (1, 2)

    def forward(self, t):
        h = max(1, t.shape[0] // 2)
        return t[:h], t[h:]


class CatChunk(_Stage):   # (a, b) -> (c[:n], c[n:]), c = cat(a[:n], b[:n]): two views of one new storage
    arity = (2, 2)

    def forward(self, p):
        a, b = fit(*p, always=True)
        c = torch.cat([a, b], 0)
        return c[: a.shape[0]], c[a.shape[0]:]


class AddMerge(_Stage):   # (a, b) -> a[:n] + b[:n]: saves nothing
    arity = (2, 1)

    def forward(self, p):
        a, b = fit(*p, always=True)
        return a + b


class MergeFc(_Stage):    # (a, b) -> tanh(fc(a + b)): reads its Linear on a pair (fused with a fork saving neither)
    arity, weighted = (2, 1), True

    def forward(self, p):
        a, b = fit(*p)
        return torch.tanh(self.fc(a + b))


class TwiceFc(_Stage):    # (a, b) -> tanh(fc(a) + fc(b)): reads its Linear twice
    arity, weighted = (2, 1), True

    def forward(self, p):
        a, b = fit(*p)
        return torch.tanh(self.fc(a) + self.fc(b))


class MatLinear(nn.Module):  # --fresh-grads: t @ weight + bias, whose weight gradient is a fresh tensor (MmBackward0),
    # where nn.Linear's is a view (TBackward0): autograd adds two such parts in place (Note [A leaf read twice in one
    # stage] in gpusolve/chain.py)
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(WIDTH, WIDTH) / WIDTH ** 0.5)
        self.bias = nn.Parameter(torch.zeros(WIDTH))

    def forward(self, t):
        return t @ self.weight + self.bias


KINDS = (Lin, LinNoAct, Scale, Fork, ForkFree, Keep, KeepFree, Flip, First, Second, Merge, MulMerge)
VIEW_KINDS = (CatFc, CatPass)
"""Drawn too with ``--views``: stages whose backward hands a slice of a larger gradient to a tensor of their
input (Note [Segment inputs] in torch_exec/executor.py)."""
WEIGHTED_MERGE_KINDS = (MergeFc, TwiceFc)
"""Drawn too with ``--weighted-merges``: merges that read their Linear on both parts of a pair; with ``--tied`` one
stage reads the shared weight twice in one backward call (Note [A leaf read twice in one stage] in
gpusolve/chain.py)."""
VIEW_TUPLE_KINDS = (DupView, SplitIn, CatChunk, AddMerge)
"""Drawn too with ``--view-tuples``: tuples whose tensors are views of one storage, whose gradients are ready one
by one (Note [Gradients ready one by one] in gpusolve/chain.py)."""


def kinds(seed: int, stages: int, hold: bool, views: bool = False, view_tuples: bool = False,
          weighted_merges: bool = False) -> list[type]:
    """The stage kinds of model ``seed``: a Lin, then random kinds whose arities chain, ending on a
    tensor, then the loss. ``views``: :data:`VIEW_KINDS` are drawn too; ``view_tuples``: :data:`VIEW_TUPLE_KINDS`;
    ``weighted_merges``: :data:`WEIGHTED_MERGE_KINDS`."""
    rng = random.Random(seed)
    out, arity = [Lin], 1
    vocabulary = (KINDS + (VIEW_KINDS if views else ()) + (VIEW_TUPLE_KINDS if view_tuples else ())
                  + (WEIGHTED_MERGE_KINDS if weighted_merges else ()))
    while len(out) < stages or arity != 1:
        fits = [k for k in vocabulary if k.arity[0] == arity]
        if len(out) >= stages:
            fits = [k for k in fits if k.arity[1] == 1] or fits
        out.append(rng.choice(fits))
        arity = out[-1].arity[1]
    return out + [LossKeep if hold else Loss]


def _step(model, x, drop: bool = False):
    out = model(x)
    loss = out[0] if isinstance(out, tuple) else out
    if drop:
        del out  # the caller keeps the loss only
        loss.backward()
        return
    loss.backward()
    del out  # held through the backward, as a caller holds it


def run(seed: int, args) -> dict:
    stage_kinds = kinds(seed, args.stages, args.hold or args.drop, args.views, args.view_tuples, args.weighted_merges)

    def make():
        torch.manual_seed(seed)
        model = nn.Sequential(*[k() for k in stage_kinds])
        if args.fresh_grads:
            for stage in model:
                if getattr(stage, "weighted", False):
                    stage.fc = MatLinear()
        if args.tied:  # one Linear for every weighted stage (Note [Shared leaves split tape runs])
            weighted = [stage for stage in model if getattr(stage, "weighted", False)]
            for stage in weighted[1:]:
                stage.fc = weighted[0].fc
        return model
    x = torch.randn(TIED_BATCH if args.tied else BATCH, WIDTH, generator=torch.Generator().manual_seed(seed))
    offload = FREE if args.offload else None
    keeps = "loss" if args.drop else "output"
    probe = te.CheckpointedSequential(make(), budget="1TiB", backend="cpu", profile_passes=1, profile_warmup=0,
                                      offload=offload, caller_keeps=keeps)
    probe.prepare(x)
    entry = probe._last
    if args.offload:
        lo, hi = min_offload_bytes(entry.exec_chain), store_all_peak_bytes(entry.exec_chain)
        budgets = [int(lo + f * (hi - lo)) for f in (0.0, 0.15, 0.3, 0.5)]
    else:
        lo, hi = probe.min_budget_bytes, plain_peak_bytes(entry)
        budgets = sorted({int(lo + f * (hi - lo)) for f in (0.0, 0.25, 0.5, 0.8, 1.0)})
    runs = []
    for budget in budgets:
        model = make()
        wrapped = te.CheckpointedSequential(model, budget=budget, backend="cpu", profile_passes=1, profile_warmup=0,
                                            offload=offload, caller_keeps=keeps)
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        _step(wrapped, x, args.drop)  # profiles, solves, warms; learns which outputs get a gradient
        _step(wrapped, x, args.drop)  # re-plans for those (Note [Outputs without a gradient]): on the CPU a
        # plan's host copies are allocator memory, so the step that allocates them is not the one measured
        _, reading = measure_peak(_step, wrapped, x, args.drop)
        plan, face = wrapped.plan, wrapped._last
        # the storage-exact peak of the plan run (Note [Storage-exact peaks]); plain autograd's plan predicts
        # its measured peak, which stays
        plain = face.chain is face.plain_chain
        exact = plan.predicted_peak_bytes if plain else exact_peak(face.chain, plan.schedule, link=offload).peak_bytes
        runs.append({"budget_bytes": budget, "predicted_peak_bytes": plan.predicted_peak_bytes,
                     "exact_peak_bytes": exact, "plain": plain,
                     "measured_peak_bytes": reading.peak, "within_budget": reading.peak <= budget,
                     "swaps": int(getattr(plan, "swaps", 0)), "overhead": plan.overhead,
                     "recomputations": count_recomputations(plan.schedule)})
    chain = entry.plain_chain
    return {"seed": seed, "kinds": [k.__name__ for k in stage_kinds], "members": chain.provenance["members"],
            "shared_storage": chain.provenance.get("shared_storage"), "runs": runs}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0:40", help="first:last (exclusive) model seeds (default 0:40)")
    parser.add_argument("--stages", type=int, default=10, help="stages drawn before the loss (default 10)")
    parser.add_argument("--offload", action="store_true", help="plans that offload over a free link")
    parser.add_argument("--hold", action="store_true", help="the model returns (loss, state), held by the caller")
    parser.add_argument("--drop", action="store_true",
                        help="the model returns (loss, state), the caller drops the state before the backward")
    parser.add_argument("--views", action="store_true",
                        help="draw stages whose backward hands a slice of a larger gradient on (VIEW_KINDS) too")
    parser.add_argument("--view-tuples", action="store_true",
                        help="draw stages whose tuples hold views of one storage (VIEW_TUPLE_KINDS) too")
    parser.add_argument("--weighted-merges", action="store_true",
                        help="draw merges that read their Linear on both parts of a pair (WEIGHTED_MERGE_KINDS) too")
    parser.add_argument("--fresh-grads", action="store_true",
                        help="weighted stages read t @ weight + bias (MatLinear), whose weight gradient autograd adds "
                             "in place, not nn.Linear")
    parser.add_argument("--tied", action="store_true",
                        help="every weighted stage reads one shared Linear (its gradient summed across stages)")
    parser.add_argument("--model-plans", action="store_true",
                        help="plan to the model's peak, not the storage-exact one (Note [Planning to the exact peak] in "
                             "gpusolve/exact_peak.py): CheckpointedSequential.plan_exact_peak = False")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "tuple_fuzz_cpu"))
    args = parser.parse_args(argv)
    te.CheckpointedSequential.plan_exact_peak = not args.model_plans
    try:
        first, last = (int(v) for v in args.seeds.split(":"))
    except ValueError:
        parser.error(f"--seeds {args.seeds!r}: give first:last, e.g. 0:40")
    if args.hold and args.drop:
        parser.error("--hold and --drop exclude each other: the caller holds the state or drops it")
    if args.stages < 1 or last <= first:
        parser.error("--stages must be at least 1 and --seeds a non-empty range")
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    models = []
    for seed in range(first, last):
        models.append(run(seed, args))
        worst = max(r["measured_peak_bytes"] - r["budget_bytes"] for r in models[-1]["runs"])
        print(f"seed {seed}: {len(models[-1]['runs'])} budgets, worst measured - budget {worst:+d} B", flush=True)
    runs = [r for m in models for r in m["runs"]]
    over = [(m["seed"], r) for m in models for r in m["runs"] if not r["within_budget"]]
    ratios = [r["measured_peak_bytes"] / r["predicted_peak_bytes"] for r in runs]
    command = "python bench/tuple_fuzz.py " + " ".join(argv if argv is not None else sys.argv[1:])
    record = {"device": cpu_description(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "command": command.strip(), "torch": torch.__version__, "models": models}
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    lines = [f"# Random tuple-passing chains: measured peak against the budget ({'offloading' if args.offload else 'recompute only'}, CPU)",
             "", f"Device: {record['device']}; torch {torch.__version__}, 1 thread; date {record['date']}.",
             f"Command: `{record['command']}` (module docstring of `bench/tuple_fuzz.py`).", "",
             f"- models: {len(models)} ({args.stages} drawn stages each, then the loss"
             f"{', output held through the backward' if args.hold else ''}"
             f"{', the state dropped before the backward' if args.drop else ''}"
             f"{', cat stages drawn too (--views)' if args.views else ''}"
             f"{', tuples of views of one storage drawn too (--view-tuples)' if args.view_tuples else ''}"
             f"{', merges reading their Linear on both parts (--weighted-merges)' if args.weighted_merges else ''}"
             f"{', one Linear shared by every weighted stage (--tied)' if args.tied else ''}"
             f"{', t @ weight + bias for each Linear (--fresh-grads)' if args.fresh_grads else ''}); runs: {len(runs)}",
             f"- budgets held: {len(runs) - len(over)} of {len(runs)}",
             f"- measured / predicted: {min(ratios):.4f} - {max(ratios):.4f}"]
    if args.offload:
        lines.append(f"- runs whose plan offloads: {sum(r['swaps'] > 0 for r in runs)}")
    # Note [Storage-exact peaks] in gpusolve/exact_peak.py: the plan's peak with each storage counted once
    exact = [r["measured_peak_bytes"] / r["exact_peak_bytes"] for r in runs]
    under = [(m["seed"], r) for m in models for r in m["runs"] if r["exact_peak_bytes"] < r["measured_peak_bytes"]]
    lines += [f"- measured / exact (storage-exact peak, gpusolve/exact_peak.py): {min(exact):.4f} - {max(exact):.4f}; "
              f"equal in {sum(r['exact_peak_bytes'] == r['measured_peak_bytes'] for r in runs)}, within 2 % in "
              f"{sum(v >= 0.98 for v in exact)}, below 0.95 in {sum(v < 0.95 for v in exact)} "
              f"(measured / predicted below 0.95 in {sum(v < 0.95 for v in ratios)}); exact below measured in "
              f"{len(under)}",
              f"- plans {'to the model' if args.model_plans else 'to the storage-exact peak'}: mean predicted overhead "
              f"{sum(r['overhead'] for r in runs) / len(runs):+.2%}, recomputations {sum(r['recomputations'] for r in runs)}"]
    for seed, r in under:
        lines.append(f"- **exact below measured**: seed {seed}, budget {r['budget_bytes']} B, exact "
                     f"{r['exact_peak_bytes']} B, measured {r['measured_peak_bytes']} B")
    for seed, r in over:
        lines.append(f"- **over**: seed {seed}, budget {r['budget_bytes']} B, measured {r['measured_peak_bytes']} B")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[5:]))
    return 0 if not over else 1


if __name__ == "__main__":
    sys.exit(main())
