"""The wrappers' host (Python) cost per training step, on tiny models whose compute is negligible.

    python bench/host_overhead.py [--models mlp,blocks] [--rounds 15] [--steps 20] [--profile-steps 200]
                                  [--root PATH --root PATH ...] [--out bench/results/host_overhead_cpu]

On a GPU the kernels run asynchronously: the Python time a wrapper spends per step (its signature key, the parameter
tap, the state checks, the interpreter's per-stage work) adds to the step time wherever it exceeds the GPU's work.
Here every op is host time and the models are so small that the per-step figures are almost all Python:

- ``mlp``: ``--stages`` stages of ``nn.Sequential(nn.Linear(16, 16), nn.ReLU())``, batch 4;
- ``blocks``: ``--blocks`` pre-norm transformer-like blocks of width 32 (LayerNorm, one-head attention, a GELU MLP,
  residuals), batch 2 x 8 tokens.

Each model is trained (forward, ``.sum()`` loss, backward, ``.grad = None``) with plain autograd (``plain``),
``CheckpointedSequential`` (``seq``; the model is an ``nn.Sequential`` of the stages) and ``auto_checkpoint``
(``auto``), each at 100 % and 50 % of plain autograd's peak (``--budgets``), one thread. Variants are timed in
rounds, interleaved (each round times ``--steps`` steps of every variant of every root in turn, the roots' order
swapped every other round). Each round reads the process's CPU time (``time.process_time``: on a machine shared with
other work, the wall time of a round also counts the time others held the cores) and the wall time. The table gives
the medians of the rounds' per-step means with their spread (least and most round); ``extra`` is a variant's median
CPU time minus plain autograd's (of the same root); ``per stage`` divides it by the stages of the model
(``--stages`` or ``--blocks``). At 50 % the extra includes the recomputations' own work (``stage runs``: the plan's
forward runs of stages, against the stages once in a plain step); at 100 % the plan is plain autograd's, run by the
wrapper. With several roots, the last column pairs each root with the first round by round (median of the
per-round ratios and differences of CPU time). Then ``cProfile`` of ``--profile-steps`` steps of each wrapper variant
at 50 % gives the top functions by own time (tottime; cProfile's own cost inflates every figure).

``--root`` (repeatable): the checkout whose ``torch_exec`` and ``gpusolve`` each column runs (default: this one).
Each root runs in its own worker process (``PYTHONPATH=<root>``), and the rounds interleave the roots too, so two
versions of the code are compared side by side in one run. ``--out`` writes ``.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

VARIANTS = ("plain", "seq", "auto")


# ---------------------------------------------------------------- worker (one per root)
def _models(torch, nn, args) -> dict:
    class Block(nn.Module):
        def __init__(self, width: int = 32):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x):
            q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
            att = torch.softmax(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5, dim=-1)
            x = x + self.proj(att @ v)
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))

    made = {}
    if "mlp" in args.models:
        made["mlp"] = (lambda: nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.ReLU()) for _ in range(args.stages)]),
                       lambda: torch.randn(4, 16), args.stages)
    if "blocks" in args.models:
        made["blocks"] = (lambda: nn.Sequential(*[Block() for _ in range(args.blocks)]),
                          lambda: torch.randn(2, 8, 32), args.blocks)
    return made


def worker(args) -> None:
    import cProfile
    import io
    import pstats
    import time
    import timeit
    import warnings

    import torch
    from torch import nn

    import torch_exec as te
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    runs: dict = {}
    runs_models: dict = {}
    facts: dict = {}
    for name, (make, data, stages) in _models(torch, nn, args).items():
        torch.manual_seed(0)
        x = data()
        for variant in VARIANTS:
            for budget in (args.budgets if variant != "plain" else ["-"]):
                torch.manual_seed(0)
                model = make()
                if variant == "seq":
                    model = te.CheckpointedSequential(model, budget=budget, backend="cpu")
                elif variant == "auto":
                    model = te.auto_checkpoint(model, budget=budget, backend="cpu")

                def step(model=model, x=x):
                    model(x).sum().backward()
                    for p in model.parameters():
                        p.grad = None
                for _ in range(args.warmup):
                    step()
                key = f"{name}/{variant}/{budget}"
                runs[key] = step
                runs_models[key] = model
                plan = getattr(model, "plan", None)
                fwd = None if plan is None else sum(1 for op in plan.schedule if op.kind.value.startswith("fwd"))
                facts[key] = {"stages": stages, "stage_runs": fwd}
    parts = _parts(runs_models, te)
    print(json.dumps({"ready": facts, "parts": list(parts), "torch": torch.__version__,
                      "root": str(Path(te.__file__).resolve().parents[1])}), flush=True)
    for line in sys.stdin:
        ask = json.loads(line)
        if ask["do"] == "part":  # the least of --part-repeats means of 50 calls: the call's own cost
            fn = parts[ask["part"]]
            best = min(timeit.repeat(fn, number=50, repeat=ask["repeats"])) / 50
            print(json.dumps({"us": best * 1e6}), flush=True)
            continue
        if ask["do"] == "time":
            step = runs[ask["key"]]
            started, cpu = time.perf_counter(), time.process_time()
            for _ in range(ask["steps"]):
                step()
            print(json.dumps({"ms": (time.perf_counter() - started) / ask["steps"] * 1e3,
                              "cpu_ms": (time.process_time() - cpu) / ask["steps"] * 1e3}), flush=True)
        else:  # profile
            step = runs[ask["key"]]
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(ask["steps"]):
                step()
            prof.disable()
            stats = pstats.Stats(prof, stream=io.StringIO())
            rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:ask["top"]]
            total = sum(v[2] for v in stats.stats.values())
            print(json.dumps({"total_ms": total / ask["steps"] * 1e3, "rows": [
                {"function": _where(func), "calls_per_step": v[1] / ask["steps"], "tottime_us_per_step":
                 v[2] / ask["steps"] * 1e6, "cumtime_us_per_step": v[3] / ask["steps"] * 1e6} for func, v in rows]}),
                flush=True)


def _parts(models: dict, te) -> dict:
    """The per-call parts of a wrapper's step this bench times alone, on the 50 % wrappers: the signature key
    CheckpointedSequential computes (``module_state_key``), auto_checkpoint's (``captured_state_key`` of the model),
    and the parameter tap's list where the owner keys the state (``_tap_params`` of auto_checkpoint's executor)."""
    import torch_exec._util as U
    import torch_exec.executor as ex
    out = {}
    for key, model in models.items():
        name, variant, budget = key.split("/")
        if budget != "50%":
            continue
        if variant == "seq":
            out[f"{name}: module_state_key(seq wrapper)"] = lambda m=model: U.module_state_key(m, [])
        elif variant == "auto":
            executor = next(iter(model._captures.values())).executor
            out[f"{name}: captured_state_key(model)"] = lambda m=model: U.captured_state_key(m._model, [], m._unkeyed)
            out[f"{name}: parameter tap list (auto's executor)"] = lambda e=executor: ex._tap_params(e, None, None)
    return out


def _where(func) -> str:
    path, line, name = func
    if path == "~":
        return name
    parts = Path(path).parts
    for anchor in ("torch_exec", "gpusolve", "torch"):
        if anchor in parts:
            i = len(parts) - 1 - parts[::-1].index(anchor)
            return f"{'/'.join(parts[i:])}:{line}({name})"
    return f"{Path(path).name}:{line}({name})"


# ---------------------------------------------------------------- parent
class Worker:
    def __init__(self, root: Path, argv: list[str]):
        env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   OMP_NUM_THREADS="1")
        self.root = root
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", *argv], cwd=str(root),
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self._read()
        self.facts, self.parts, self.torch, self.imported = (ready["ready"], ready["parts"], ready["torch"],
                                                             ready["root"])

    def _read(self) -> dict:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the worker for {self.root} ended")
            if line.startswith("{"):
                return json.loads(line)

    def ask(self, **what) -> dict:
        self.proc.stdin.write(json.dumps(what) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp,blocks", type=lambda s: [m for m in s.split(",") if m])
    parser.add_argument("--stages", type=int, default=48)
    parser.add_argument("--blocks", type=int, default=16)
    parser.add_argument("--budgets", default="100%,50%", type=lambda s: [b for b in s.split(",") if b])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profile-steps", type=int, default=200)
    parser.add_argument("--part-rounds", type=int, default=9)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--root", action="append", type=Path, help="a checkout to time (repeatable)")
    parser.add_argument("--label", action="append", help="a name per --root (default: its path)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    raw = list(sys.argv[1:] if argv is None else argv)
    passed = []  # the worker's options: the model and warm-up settings
    skip = False
    for i, a in enumerate(raw):
        if skip:
            skip = False
            continue
        if a.split("=")[0] in ("--root", "--label", "--out"):
            skip = "=" not in a
            continue
        passed.append(a)
    roots = [r.resolve() for r in (args.root or [ROOT])]
    labels = args.label or [str(r) for r in roots]
    if len(labels) != len(roots):
        parser.error("give one --label per --root")
    workers = [Worker(r, passed) for r in roots]
    keys = list(workers[0].facts)
    times = {(label, key): [] for label in labels for key in keys}
    cpu = {(label, key): [] for label in labels for key in keys}
    for n in range(args.rounds):
        for key in keys:
            order = list(zip(labels, workers))
            for label, w in (order if n % 2 == 0 else order[::-1]):  # each root first in every other round
                got = w.ask(do="time", key=key, steps=args.steps)
                times[(label, key)].append(got["ms"])
                cpu[(label, key)].append(got["cpu_ms"])
    part_us = {(label, part): [] for label in labels for part in workers[0].parts}
    for n in range(args.part_rounds):
        for part in workers[0].parts:
            order = list(zip(labels, workers))
            for label, w in (order if n % 2 == 0 else order[::-1]):
                part_us[(label, part)].append(w.ask(do="part", part=part, repeats=5)["us"])
    part_rows = [{"root": label, "part": part, "least_us": min(v), "median_us": statistics.median(v)}
                 for (label, part), v in part_us.items()]
    profiles = {}
    for label, w in zip(labels, workers):
        for key in keys:
            if key.split("/")[1] != "plain" and key.endswith("/50%"):
                profiles[(label, key)] = w.ask(do="profile", key=key, steps=args.profile_steps, top=args.top)
    for w in workers:
        w.close()
    rows = []
    for label, w in zip(labels, workers):
        for key in keys:
            model, variant, budget = key.split("/")
            ms, cpu_ms = times[(label, key)], cpu[(label, key)]
            plain = statistics.median(cpu[(label, f"{model}/plain/-")])
            med = statistics.median(cpu_ms)
            facts = w.facts[key]
            row = {"root": label, "model": model, "variant": variant, "budget": budget,
                   "cpu_median_ms": med, "cpu_least_ms": min(cpu_ms), "cpu_most_ms": max(cpu_ms),
                   "wall_median_ms": statistics.median(ms), "wall_least_ms": min(ms), "wall_most_ms": max(ms),
                   "extra_ms": med - plain, "extra_us_per_stage": (med - plain) / facts["stages"] * 1e3,
                   "ratio_to_plain": med / plain, "stages": facts["stages"], "stage_runs": facts["stage_runs"],
                   "cpu_ms_rounds": cpu_ms, "wall_ms_rounds": ms}
            if label != labels[0]:  # paired with the first root, round by round (measured next to each other)
                first = cpu[(labels[0], key)]
                row["vs_first_ratio_median"] = statistics.median([a / b for a, b in zip(cpu_ms, first)])
                row["vs_first_diff_ms_median"] = statistics.median([a - b for a, b in zip(cpu_ms, first)])
            rows.append(row)
    lines = _table(rows, labels)
    lines += ["", f"Per-call parts (the least of 5 means of 50 calls, in each of {args.part_rounds} interleaved rounds: "
              f"median and least over the rounds, us):", "", "| part | " + " | ".join(labels) + " |",
              "|---|" + "---:|" * len(labels)]
    for part in workers[0].parts:
        cells = [next(f"{r['median_us']:.1f} ({r['least_us']:.1f})" for r in part_rows
                      if r["root"] == label and r["part"] == part) for label in labels]
        lines.append(f"| {part} | " + " | ".join(cells) + " |")
    print("\n".join(lines))
    if args.out:
        from _common import record_header, write_cpu_record
        record = write_cpu_record(args.out, "host_overhead.py", raw, rows, rounds=args.rounds,
                                  steps=args.steps, parts=part_rows, roots=dict(zip(labels, [w.imported for w in workers])),
                                  profiles=[{"root": k[0], "key": k[1], **v} for k, v in profiles.items()])
        md = record_header(record, "The wrappers' host cost per training step (CPU)",
                           f"Medians of {args.rounds} interleaved rounds of {args.steps} steps each, process CPU "
                           f"time and wall time (the spread: least and most round); roots: " + ", ".join(f"`{a}` = {w.imported}" for a, w in
                                                                         zip(labels, workers)) + ".")
        md += lines + ["", "## cProfile of a wrapper's step at 50 % (own time per step, top functions)", ""]
        for (label, key), prof in profiles.items():
            md += [f"### {key} ({label}): {prof['total_ms']:.3f} ms of profiled own time per step", "",
                   "| function | calls/step | tottime us/step | cumtime us/step |", "|---|---:|---:|---:|"]
            md += [f"| `{r['function']}` | {r['calls_per_step']:.1f} | {r['tottime_us_per_step']:.1f} | "
                   f"{r['cumtime_us_per_step']:.1f} |" for r in prof["rows"]]
            md.append("")
        Path(args.out).with_suffix(".md").write_text("\n".join(md) + "\n")


def _table(rows: list, labels: list) -> list[str]:
    paired = len(labels) > 1
    lines = ["| model | variant | budget | root | CPU ms/step (least-most) | wall ms/step (least-most) | x plain | "
             "extra ms/step | extra us/stage | stage runs / stages |" + (f" vs {labels[0]}, paired: ratio, ms |"
                                                                         if paired else ""),
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if paired else "")]
    for r in sorted(rows, key=lambda r: (r["model"], VARIANTS.index(r["variant"]), r["budget"], labels.index(r["root"]))):
        runs = "-" if r["stage_runs"] is None else f"{r['stage_runs']} / {r['stages']}"
        vs = (f" {r['vs_first_ratio_median']:.3f}, {r['vs_first_diff_ms_median']:+.3f} |" if "vs_first_ratio_median"
              in r else " |") if paired else ""
        lines.append(f"| {r['model']} | {r['variant']} | {r['budget']} | {r['root']} | {r['cpu_median_ms']:.3f} "
                     f"({r['cpu_least_ms']:.3f}-{r['cpu_most_ms']:.3f}) | {r['wall_median_ms']:.3f} "
                     f"({r['wall_least_ms']:.3f}-{r['wall_most_ms']:.3f}) | {r['ratio_to_plain']:.2f} | "
                     f"{r['extra_ms']:+.3f} | {r['extra_us_per_stage']:+.1f} | {runs} |{vs}")
    return lines


if __name__ == "__main__":
    main()
