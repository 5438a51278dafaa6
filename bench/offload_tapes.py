"""Offloading a Tape's saved tensors (spec ``offload.md``, "Tapes (phase 2)"): what it could add to Swap k.

The action under study, ``TapeSwap k`` at (i, j), i + 1 < k < j (the solver does not have it):
record stage i+1 (``fwd_tape``), copy x bytes of what autograd saved for it to the host while the
no-grad forwards i+2..k run (the spec's one-level look-ahead: the child (i+1, j) starts with
Checkpoint k), free them, run (k, j) with those x bytes given to it, then copy them back while the
child's left part (i+1, k) runs recompute-only (no copy of its own competes for the one channel), and
run bwd(i+1)::

  t_fwd[i+1] + max(sfn(i+1, k), tau_d2h(x)) + C(k, j, m1 - act_b[k] + credit, 1)
             + max(tau_h2d(x), R(i+1, k, m1)) + t_bwd[i+1]          m1 = m - tape_b[i+1]
  allowed where m >= thr_tape(i, j) and m1 >= thr_ckpt(i+1, j, k); on both planes (a_i is not involved)

credit = tape_b[i+1] - ceil((tape[i+1] - x) / bucket): the buckets that leave (sizes round up). The
profiles do not say which saved tensors may move (a_{i+1} itself may be one of them, and is needed by
(k, j)'s forwards), so x is an assumption, a share of (tape - act): all of it (everything but the
output's size: the most bytes that could move), or the best of :data:`SHARES` at each state (the
candidates of every share in one fill; over a finite link moving less can hide its copies better). The
schedule is priced as the DP prices Swap k (copies start on an idle
channel; exposure = what the overlapped work does not hide); it is not simulated (the IR has no op for
saved tensors), and ``tests/test_offload_windows.py`` checks this fill against a memoised recursion.

Times are DP values (ms) on the bundled H100 profiles' measured stage times, not runs; bucket = budget
/ 1024 for every column of one row.

    python bench/offload_tapes.py [--out bench/results] [--profiles resnet50_b128,densenet121_b64]
        [--link 50GB/s] [--link-json .../link_measured.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpusolve import Chain  # noqa: E402
from gpusolve.dp.cpu import solve_table  # noqa: E402
from gpusolve.dp.problem import Problem, ceil_div  # noqa: E402
from gpusolve.offload import Link  # noqa: E402
from gpusolve.offload.dp import Block, SwapArrays, solve_tables  # noqa: E402
from gpusolve.simulate import store_all_peak_bytes  # noqa: E402
from offload_windows import run_study  # noqa: E402  (same folder: the shared command line)

SHARES = (1.0, 0.75, 0.5, 0.375, 0.25, 0.125, 0.0625)
COLUMNS = {"all": (1.0,), "best": SHARES}  # x = all of tape - act; the best share at each state


def tape_swap_candidates(problem: Problem, chain: Chain, link: Link, recompute: np.ndarray, shares=(1.0,)):
    """The ``extra`` of :func:`gpusolve.offload.dp.solve_tables` that adds TapeSwap k (module docstring)
    with x = share x (tape - act) bytes of stage s, a candidate for each of ``shares``."""
    a = chain.padded()
    dtype, big_m, offsets = problem.dtype, problem.buckets, problem.diag_offset
    tape_b, act_b = problem.tape_b.astype(np.int64), problem.act_b.astype(np.int64)
    terms = []  # per share: (credit, tau_d2h, tau_h2d, movable), per stage
    for share in shares:
        x = np.floor(np.maximum(0, a["tape_bytes"] - a["act_bytes"]) * share).astype(np.int64)
        credit = np.maximum(0, tape_b - ceil_div(a["tape_bytes"] - x, problem.bucket_bytes))
        tau_d2h = np.array([link.d2h_ms(int(v)) for v in x])
        tau_h2d = np.array([link.h2d_ms(int(v)) for v in x])
        terms.append((credit, tau_d2h, tau_h2d, (x > 0) & np.isfinite(tau_d2h) & np.isfinite(tau_h2d)))
    inf = dtype(np.inf)

    def extra(b: Block) -> None:
        if b.d < 3 or not problem.multi_tape:
            return
        s = b.i + 1  # the recorded stage
        m1 = b.m[None, :] - tape_b[s][:, None]
        tape_ok = b.m[None, :] >= problem.thr_tape(b.i, b.j)[:, None]
        left_cols = np.clip(m1, 0, big_m)
        for r in range(2, b.d):
            k = b.i + r
            right = b.t1[offsets[b.d - r] + b.start + r: offsets[b.d - r] + b.stop + r]        # (k, j)
            left = np.take_along_axis(recompute[offsets[r - 1] + b.start + 1: offsets[r - 1] + b.stop + 1],
                                      left_cols, axis=1)                                       # (i+1, k)
            sfn = problem.fwd_prefix[k] - problem.fwd_prefix[s]
            fits = tape_ok & (m1 >= problem.thr_ckpt(s, b.j, k)[:, None])
            for credit, tau_d2h, tau_h2d, movable in terms:
                if not movable[s].any():
                    continue
                head = (a["t_fwd"][s] + np.maximum(sfn, tau_d2h[s])).astype(dtype)
                cols = np.clip(m1 - act_b[k][:, None] + credit[s][:, None], 0, big_m)
                cand = head[:, None] + np.take_along_axis(right, cols, axis=1)
                cand += np.maximum(tau_h2d[s].astype(dtype)[:, None], left)
                cand += a["t_bwd"][s].astype(dtype)[:, None]
                np.copyto(cand, inf, where=~(fits & movable[s][:, None]))
                np.minimum(b.best0, cand, out=b.best0)
                np.minimum(b.best1, cand, out=b.best1)

    return extra


def row(chain: Chain, percent: int, link: Link) -> dict:
    budget = store_all_peak_bytes(chain) * percent // 100
    bucket = max(1, budget // 1024)
    problem = Problem.build(chain, bucket, budget // bucket)
    top = problem.row(0, problem.n), problem.buckets
    swap = SwapArrays.build(problem, chain, link)
    recompute = solve_table(problem)
    out = {"percent": percent, "budget_bytes": budget, "bucket_bytes": bucket, "recompute": float(recompute[top]),
           "swap_k": float(solve_tables(problem, swap)[0][top]), "tape_swap": {}}
    for column, shares in COLUMNS.items():
        extra = tape_swap_candidates(problem, chain, link, recompute, shares)
        out["tape_swap"][column] = float(solve_tables(problem, swap, extra=extra)[0][top])
    return out


def write_md(doc: dict, path: Path) -> None:
    lines = ["# Offloading a Tape's saved tensors beside Swap k (DP values, not runs)", "",
             f"- device: {doc['device']} (solvers on the CPU; DP values on the bundled H100 profiles' stage times)",
             f"- date: {doc['date']}", f"- command: `{doc['command']}`",
             "- TapeSwap k: bench/offload_tapes.py's docstring; x = a share of (tape - act) bytes of the recorded "
             "stage (an assumption: the profiles do not say which saved tensors may move): all of it, or the best "
             f"of {', '.join(map(str, SHARES))} at each state",
             "- priced as the DP prices Swap k, not simulated (the IR has no op for saved tensors)",
             "- bucket: budget / 1024; every value of a row from the same discretised problem; ms", ""]
    for block in doc["results"]:
        lines += [f"## {block['profile']}, {block['link_name']}", "",
                  "| budget | recompute only | Swap k | + TapeSwap, x = tape - act | + TapeSwap, best share |",
                  "| ---: | ---: | ---: | ---: | ---: |"]
        for r in block["rows"]:
            cells = [f"{r['tape_swap'][c]:.2f} ({r['tape_swap'][c] - r['swap_k']:+.2f})" for c in COLUMNS]
            lines.append(f"| {r['percent']} % | {r['recompute']:.2f} | {r['swap_k']:.2f} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Findings", ""] + [f"- {f}" for f in doc["findings"]]
    path.write_text("\n".join(lines) + "\n")


def findings(results: list[dict]) -> list[str]:
    out = []
    finite = [b for b in results if not b["link_name"].startswith("inf")]
    for group, name in ((finite, "on a finite link"), ([b for b in results if b not in finite], "with free copies")):
        rows = [(b, r, c) for b in group for r in b["rows"] for c in COLUMNS]
        if not rows:
            continue
        b, r, c = max(rows, key=lambda t: t[1]["swap_k"] - t[1]["tape_swap"][t[2]])
        gain = r["swap_k"] - r["tape_swap"][c]
        share = "all of tape - act" if c == "all" else "the best share at each state"
        out.append(f"largest gain of TapeSwap over Swap k {name}: {gain:.2f} ms ({100 * gain / r['swap_k']:.2f} %; "
                   f"{b['profile']}, {b['link_name']}, {r['percent']} %, x = {share}: "
                   f"{r['swap_k']:.2f} -> {r['tape_swap'][c]:.2f} ms)")
    return out


def main() -> None:
    run_study("offload_tapes.py", __doc__, lambda chain, p, link, args: row(chain, p, link),
              lambda r: f"{r['percent']} % {r['swap_k']:.2f}/{r['tape_swap']['all']:.2f}/{r['tape_swap']['best']:.2f}",
              findings, write_md)


if __name__ == "__main__":
    main()
