"""min_peak_tables and least_peak_tables after Note [One set of least-peak recurrences] (gpusolve/dp/minpeak.py:
the Tape and Checkpoint k candidates and the tie order moved into one PeakRecurrences that both fills use) against
the tree before the move, table by table, exactly (np.array_equal, dtypes too), and their run times side by side.

Before: ``gpusolve`` of commit BASE (default 7b0ae3d, the parent of the move), extracted with ``git archive`` into a
temporary directory as the package ``gpusolve_before`` (the package imports itself relatively only). After: the tree
this file is in (or GS_ROOT). Cases: every bundled profile (links: none, 12GB/s with 0.01 ms latency, useless) and
random small chains (N = 1..12, multi_tape True and False, dyadic or free times, some stages not swappable; links:
none, a random real one, a free one, a useless one). Also printed, not judged: whether least_peak_tables with
nothing swappable gives min_peak_tables on both planes (the two fills' agreement on recompute only).

Timing: the bundled profile with the most stages, old and new alternated, median of REPEATS; printed as ratios
(new / old) with the medians. Exits 1 on any difference between old and new.

    python bench/repros/rv14_minpeak_shared_check.py [--base COMMIT] [--chains 200] [--repeats 5] [--no-timing]
"""
from __future__ import annotations

import argparse
import importlib
import io
import math
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(os.environ.get("GS_ROOT", str(Path(__file__).resolve().parents[2])))
sys.path.insert(0, str(ROOT))

import gpusolve  # noqa: E402
from gpusolve import Chain, profiles  # noqa: E402
from gpusolve.dp import minpeak as new_minpeak  # noqa: E402
from gpusolve.offload import dp as new_offload  # noqa: E402
from gpusolve.offload.link import Link  # noqa: E402


def load_before(base: str, where: Path):
    """(minpeak, offload.dp) modules of ``gpusolve`` at commit ``base``, as the package ``gpusolve_before``."""
    blob = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", base, "gpusolve"], check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(where, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    (where / "gpusolve").rename(where / "gpusolve_before")
    sys.path.insert(0, str(where))
    return (importlib.import_module("gpusolve_before.dp.minpeak"),
            importlib.import_module("gpusolve_before.offload.dp"))


def random_chain(rng: np.random.Generator, n: int, multi_tape: bool) -> Chain:
    """Small integer sizes with zeros (ties of peaks), times dyadic half the time (ties of times), tape
    released before the backward on about half the stages, some outputs not swappable."""
    def sizes(high, zeros=0.15):
        v = rng.integers(0, high, n)
        v[rng.random(n) < zeros] = 0
        return v

    def times(scale):
        return rng.integers(0, 9, n) / 4 * scale if dyadic else rng.random(n) * scale

    dyadic = rng.random() < 0.5
    tape = sizes(20) + sizes(20)
    released = np.where(rng.random(n) < 0.5, rng.integers(0, tape + 1), 0)
    provenance = {}
    if rng.random() < 0.5:
        provenance["shared_storage"] = [bool(x) for x in rng.random(n) < 0.3]
    if rng.random() < 0.3:
        provenance["device_only"] = [bool(x) for x in rng.random(n) < 0.3]
    return Chain(t_fwd=times(1.0), t_fwd_nograd=times(1.0), t_bwd=times(2.0), act_bytes=sizes(20),
                 grad_bytes=sizes(20), tape_bytes=tape, bwd_tape_bytes=tape - released,
                 fwd_nograd_extra=sizes(5, 0.5), fwd_grad_extra=sizes(5, 0.5), bwd_extra=sizes(5, 0.5),
                 input_bytes=int(rng.integers(0, 20)),
                 reserved_bytes=int(rng.integers(0, 20)) if rng.random() < 0.5 else 0,
                 multi_tape=multi_tape, provenance=provenance)


def random_link(rng) -> Link:
    if rng.random() < 0.5:  # dyadic: exact float sums, so ties between swaps and the rest happen
        return Link(float(rng.choice([1, 2, 4, 8, 16, 64, math.inf])), float(rng.choice([1, 2, 4, 8, 16, 64])),
                    float(rng.choice([0.0, 0.25, 1.0])))
    return Link(float(rng.uniform(1, 80)), float(rng.uniform(1, 80)), float(rng.uniform(0, 0.3)))


def without_swaps(chain: Chain) -> Chain:
    data = chain.to_dict()
    data["provenance"] = {**chain.provenance, "device_only": [True] * chain.n}
    return Chain.from_dict(data)


def same(old, new) -> bool:
    return len(old) == len(new) and all(a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
                                        for a, b in zip(old, new))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="7b0ae3d", help="the commit before the move (default 7b0ae3d)")
    ap.add_argument("--chains", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-timing", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old_minpeak, old_offload = load_before(args.base, Path(tmp))
        print(f"after: {Path(gpusolve.__file__).parent}; before: {args.base} ({Path(old_minpeak.__file__).parents[1]})")
        return run(args, old_minpeak, old_offload)


def run(args, old_minpeak, old_offload) -> int:
    differ: list[str] = []
    counts = {"min_peak_tables": 0, "least_peak_tables": 0}
    agree = {"checked": 0, "plane0": 0, "plane1": 0}

    def check(label: str, chain: Chain, links) -> None:
        old, new = old_minpeak.min_peak_tables(chain), new_minpeak.min_peak_tables(chain)
        counts["min_peak_tables"] += 1
        if not same(old, new):
            differ.append(f"{label}: min_peak_tables")
        for name, link in links:
            old, new = old_offload.least_peak_tables(chain, link), new_offload.least_peak_tables(chain, link)
            counts["least_peak_tables"] += 1
            if not same(old, new):
                differ.append(f"{label}: least_peak_tables, link {name}")
        if chain.n <= 40:  # informative: the combined fill with nothing swappable is recompute only's
            peak, cost, kind, choice = new_offload.least_peak_tables(without_swaps(chain))
            mp = new_minpeak.min_peak_tables(chain)
            agree["checked"] += 1
            agree["plane0"] += same(mp, (peak[0], cost[0], choice[0])) and bool(np.all(kind[0] == (choice[0] > 0)))
            agree["plane1"] += same(mp, (peak[1], cost[1], choice[1]))

    profile_links = [("none", None), ("12GB/s", Link.parse("12GB/s", latency_ms=0.01)), ("useless", Link.useless())]
    chains = {name: Chain.load(name) for name in profiles.names()}
    for name, chain in chains.items():
        check(f"profile {name} (N={chain.n})", chain, profile_links)
    rng = np.random.default_rng(20261214)
    for c in range(args.chains):
        multi_tape = c % 2 == 0
        n = int(rng.integers(1, 13))
        chain = random_chain(rng, n, multi_tape)
        links = [("none", None), ("random", random_link(rng)), ("free", Link(math.inf, math.inf)),
                 ("useless", Link.useless())]
        check(f"random chain {c} (N={n}, multi_tape={multi_tape})", chain, links)
    print(f"compared: min_peak_tables {counts['min_peak_tables']} chains ({len(chains)} profiles, "
          f"{args.chains} random), least_peak_tables {counts['least_peak_tables']} (chain, link) cases; every table "
          f"exactly (values, dtype, shape)")
    print(f"differences: {len(differ)}")
    for line in differ[:20]:
        print("  DIFFERS", line)
    print(f"(not judged) least_peak_tables with nothing swappable == min_peak_tables: plane 0 {agree['plane0']}/"
          f"{agree['checked']}, plane 1 {agree['plane1']}/{agree['checked']}")
    if not args.no_timing:
        name = max(chains, key=lambda x: chains[x].n)
        chain = chains[name]
        link = profile_links[1][1]
        cases = [("min_peak_tables", old_minpeak.min_peak_tables, new_minpeak.min_peak_tables, ()),
                 ("least_peak_tables (link none)", old_offload.least_peak_tables, new_offload.least_peak_tables, ()),
                 ("least_peak_tables (12GB/s)", old_offload.least_peak_tables, new_offload.least_peak_tables, (link,))]
        print(f"timing: {name} (N={chain.n}), old and new alternated, median of {args.repeats}")
        for label, old_f, new_f, extra in cases:
            runs = {"old": [], "new": []}
            for _ in range(args.repeats):
                for which, f in (("old", old_f), ("new", new_f)):
                    started = time.perf_counter()
                    f(chain, *extra)
                    runs[which].append(time.perf_counter() - started)
            old_s, new_s = float(np.median(runs["old"])), float(np.median(runs["new"]))
            print(f"  {label}: new/old = {new_s / old_s:.3f} (old {old_s * 1e3:.0f} ms, new {new_s * 1e3:.0f} ms)")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
