"""What finding the model's own generators (``generators_of``, Note [Generators of the model's own] in
torch_exec/_util.py: once per input signature, at profiling) and the modules' part of the input signature
(``module_state_key``, ``captured_state_key``: every call, keying each module's generator attributes since session
21f) cost on GPT-2 small (164 modules, random weights), CPU, one thread, for each tree given, side by side.

    python bench/generators_walk_cost.py [--trees A B] [--labels a b] [--rounds 15] [--generators]
        [--out bench/results/generators_walk_cpu]

``--generators``: each of the 12 blocks holds generators of its own, one as an attribute (``block.gen``) and one in a
list (``block.noise = [g]``), and the table adds ``GeneratorSites.now()`` (session 22: what each call of a
CheckpointedSequential step looks up, Note [Generators of the model's own]; "-" for a tree without it) and the
live wrapper's per-call total, ``module_state_key`` plus ``now()``.

Each tree's ``torch_exec/_util.py`` is loaded in this one process under a name of its own, and the trees'
functions are timed in turn, round after round, on the same model object; a figure is the least over the rounds of
the mean of 50 calls (the machine is shared: the least is the cost with the least interference).
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench._common import record_header, write_cpu_record  # noqa: E402


def _load(tree: str, i: int):
    spec = importlib.util.spec_from_file_location(f"_util_tree{i}", Path(tree) / "torch_exec" / "_util.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def _ms(fn, calls: int = 50) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", nargs="+", default=[str(ROOT)])
    parser.add_argument("--labels", nargs="+", help="a name per tree for the table (default: the paths)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--generators", action="store_true", help="each block holds two generators of its own")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "generators_walk_cpu"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).train()
    blocks = list(model.transformer.h)
    if args.generators:
        for i, block in enumerate(blocks):
            block.gen, block.noise = torch.Generator().manual_seed(i), [torch.Generator().manual_seed(100 + i)]
    utils = [_load(tree, i) for i, tree in enumerate(args.trees)]
    cases = {"generators_of(model)": lambda U: U.generators_of([model]),
             "generators_of(12 blocks)": lambda U: U.generators_of(blocks),
             "module_state_key": lambda U: U.module_state_key(model),
             "captured_state_key": lambda U: U.captured_state_key(model)}
    sites = {tree: U.generator_sites([model]) for tree, U in zip(args.trees, utils) if hasattr(U, "generator_sites")}
    if args.generators:
        cases["GeneratorSites.now()"] = lambda U: sites[U.__tree__].now()
    for tree, U in zip(args.trees, utils):
        U.__tree__ = tree
    best = {(tree, case): float("inf") for tree in args.trees for case in cases}
    runs = {case: [tree for tree in args.trees if case != "GeneratorSites.now()" or tree in sites] for case in cases}
    for U, tree in zip(utils, args.trees):  # once each, unmeasured (caches)
        for case, fn in cases.items():
            if tree in runs[case]:
                fn(U)
    for _ in range(args.rounds):
        for case, fn in cases.items():
            for tree, U in zip(args.trees, utils):
                if tree in runs[case]:
                    best[tree, case] = min(best[tree, case], _ms(lambda: fn(U)))
    if args.generators:  # what a live wrapper's call spends on them: the key, and the look-up where there is one
        cases["module_state_key + now()"] = None
        for tree in args.trees:
            now = best[tree, "GeneratorSites.now()"]
            best[tree, "module_state_key + now()"] = best[tree, "module_state_key"] + (0 if now == float("inf") else now)
    labels = args.labels or args.trees
    rows = [{"tree": label, **{case: (None if best[tree, case] == float("inf") else round(best[tree, case], 4))
                               for case in cases}}
            for tree, label in zip(args.trees, labels)]
    modules = sum(1 for _ in model.modules())
    held = " (each of the 12 blocks holding two generators: an attribute and one in a list)" if args.generators else ""
    record = write_cpu_record(args.out, "generators_walk_cost.py", argv, rows, transformers=transformers.__version__,
                              model="GPT-2 small (random weights)" + held, modules=modules)
    md = record_header(record, "Finding the model's generators, and the signature's model part, per call (CPU)",
                       f"GPT-2 small ({modules} modules){held}; the least over {args.rounds} rounds of the mean of 50 "
                       f"calls, ms, the trees in turn in one process.")
    md += ["| tree | " + " | ".join(f"`{c}`" for c in cases) + " |", "|---|" + "---:|" * len(cases)]
    md += [f"| {r['tree']} | " + " | ".join("-" if r[c] is None else f"{r[c]:.3f}" for c in cases) + " |"
           for r in rows]
    Path(args.out).with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
