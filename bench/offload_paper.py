"""[O]'s experiments (Beaumont, Eyraud-Dubois, Shilova, hal-02316266, §6) on our bundled profiles.

Model: gpusolve.offload.paper (Note [Mapping a gpusolve chain onto the paper's model]); B = 12.2 GB/s,
[O]'s V100-PCIE GPU->RAM figure (not measured here; our profiles are H100 times). For each profile and
memory M_GPU from the minimum to run (0 %) to M_peak (100 %), every 10 %: LB (Prop. 3), GREEDY,
DYNPROG with S = 500 (published) and S = 2000, VDNN, and Theorem 2's fractional optimum. DYNPROG's
makespan is the integral no-wait simulation of Algorithm 1's decisions (as [O] defines DYNPROG); the
DP's own value is recorded too. Ratio = makespan / LB. Each of [O]'s claims is judged held / not held.

    python bench/offload_paper.py [--out bench/results]
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import command_line, cpu_description  # noqa: E402
from gpusolve import Chain  # noqa: E402
from gpusolve.offload.paper import (B_V100_BYTES_PER_MS, OffloadChain, StateBudgetExceeded, dynprog,  # noqa: E402
                                    fractional_optimum, greedy, lower_bound, m_min, m_peak, simulate, vdnn)

PROFILES = ["resnet50_b128", "densenet121_b64", "densenet121_fine_b32", "vgg16_b64"]
PERCENTS = list(range(0, 101, 10))
S_FINE = 2000
VDNN_MAX_THRESHOLDS = 64
DP_MAX_SECONDS = 60.0


def num(v):
    return None if v is None or not math.isfinite(v) else float(v)


def run_profile(name):
    ch = Chain.load(name)
    base = OffloadChain.from_chain(ch, B=B_V100_BYTES_PER_MS)
    lo, hi = float(m_min(base)), float(m_peak(base))
    rows = []
    for pct in PERCENTS:
        c = base.with_memory(lo + pct / 100 * (hi - lo))
        lb = float(lower_bound(c))
        row = {"percent": pct, "M_GPU_bytes": float(c.M), "LB_ms": lb}
        t = time.perf_counter()
        g = simulate(c, greedy(c))
        row["greedy_ms"], row["greedy_s"] = num(g.makespan), time.perf_counter() - t
        row["greedy_offloaded"] = len(greedy(c))
        for label, S in (("dp500", 500), (f"dp{S_FINE}", S_FINE)):
            try:
                d = dynprog(c, S, max_seconds=DP_MAX_SECONDS)
                sim = simulate(c, d.decisions).makespan if d.decisions is not None else math.inf
                row[label] = {"makespan_ms": num(sim), "dp_value_ms": num(d.value), "states": d.states,
                              "seconds": d.seconds, "offloaded": None if d.decisions is None else len(d.decisions)}
            except StateBudgetExceeded as err:
                row[label] = {"makespan_ms": None, "error": str(err)}
        t = time.perf_counter()
        v, dv = vdnn(c, max_thresholds=VDNN_MAX_THRESHOLDS)
        row["vdnn_ms"], row["vdnn_s"] = num(v), time.perf_counter() - t
        f = fractional_optimum(c)
        row["fractional_ms"] = num(f.makespan)
        for key, val in (("greedy", row["greedy_ms"]), ("dp500", row["dp500"]["makespan_ms"]),
                         (f"dp{S_FINE}", row[f"dp{S_FINE}"]["makespan_ms"]), ("vdnn", row["vdnn_ms"]),
                         ("fractional", row["fractional_ms"])):
            row[f"ratio_{key}"] = None if val is None else val / lb
        rows.append(row)
        print(f"{name} {pct:3d}%: LB {lb:8.2f} greedy {row['ratio_greedy']} dp500 {row['ratio_dp500']} "
              f"vdnn {row['ratio_vdnn']}", flush=True)
    return {"profile": name, "ops": base.L + 1, "stages_text": ch.stages_text(), "M_min_bytes": lo, "M_peak_bytes": hi,
            "compute_ms": float(sum(base.uF) + sum(base.uB)), "rows": rows}


def claims(results):
    out = []
    ratios = [(r["profile"], row["percent"], k, row[f"ratio_{k}"]) for r in results for row in r["rows"]
              for k in ("greedy", "dp500", f"dp{S_FINE}", "vdnn", "fractional") if row[f"ratio_{k}"] is not None]
    worst = min(ratios, key=lambda t: t[3])
    out.append({"claim": "ratio makespan / LB >= 1 everywhere", "held": worst[3] >= 1 - 1e-9,
                "evidence": f"smallest ratio {worst[3]:.6f} ({worst[0]}, {worst[1]} %, {worst[2]}) over {len(ratios)} points"})
    for algo in ("greedy", "dp500"):
        n = wins = low_n = low_wins = 0
        for r in results:
            for row in r["rows"]:
                a, v = row[f"ratio_{algo}"], row["ratio_vdnn"]
                if row["percent"] in (0, 100) or a is None:
                    continue
                vv = math.inf if v is None else v
                n += 1
                wins += a <= vv + 1e-9
                if row["percent"] <= 30:
                    low_n += 1
                    low_wins += a < vv - 1e-9
        out.append({"claim": f"{algo.upper()} <= VDNN in most cases (10-90 %)", "held": wins > n / 2,
                    "evidence": f"{wins} of {n} points"})
        out.append({"claim": f"{algo.upper()} clearly < VDNN at low memory (10-30 %)", "held": low_wins >= 0.8 * low_n,
                    "evidence": f"strictly better at {low_wins} of {low_n} points"})
    fine = next(r for r in results if r["profile"] == "densenet121_fine_b32")
    for key in ("dp500", f"dp{S_FINE}"):
        vals = [row[f"ratio_{key}"] for row in fine["rows"] if row[f"ratio_{key}"] is not None]
        missing = sum(row[f"ratio_{key}"] is None for row in fine["rows"])
        out.append({"claim": f"DYNPROG ({key}) <= 1.3 x LB on the deepest chain (ours: densenet121_fine_b32, "
                             f"{fine['ops']} ops; not DenseNet-161/169/201)",
                    "held": bool(vals) and max(vals) <= 1.3 and missing == 0,
                    "evidence": f"max ratio {max(vals):.4f} over {len(vals)} points, {missing} without a DP result"})
    return out


def write_md(doc, path):
    lines = ["# [O] offloading baselines on our profiles", "",
             f"- device: {doc['device']}", f"- date: {doc['date']}", f"- command: `{doc['command']}`",
             f"- B = {doc['B_GBps']} GB/s ([O]'s measured V100-PCIE GPU->RAM figure, assumed, not measured here); "
             f"profiles are H100 measurements ({doc['note_profiles']})",
             f"- DYNPROG = integral no-wait simulation of Algorithm 1's decisions; VDNN with at most "
             f"{VDNN_MAX_THRESHOLDS} thresholds (quantiles) per point", f"- total time {doc['seconds']:.1f} s", ""]
    lines += ["## Claims", "", "| claim | held | evidence |", "| --- | --- | --- |"]
    for c in doc["claims"]:
        lines.append(f"| {c['claim']} | {'held' if c['held'] else 'NOT held'} | {c['evidence']} |")
    for r in doc["results"]:
        lines += ["", f"## {r['profile']} ({r['ops']} ops; {r['stages_text']})", "",
                  f"M_min {r['M_min_bytes'] / 1e9:.3f} GB, M_peak {r['M_peak_bytes'] / 1e9:.3f} GB, compute {r['compute_ms']:.2f} ms", "",
                  "| % | M_GPU GB | LB ms | GREEDY | DP S=500 | DP S=2000 | VDNN | fractional (Thm 2) | DP500 value/LB | DP500 states, s |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

        def f(v):
            return "inf" if v is None else f"{v:.4f}"
        for row in r["rows"]:
            d5 = row["dp500"]
            dv = d5.get("dp_value_ms")
            lines.append(f"| {row['percent']} | {row['M_GPU_bytes'] / 1e9:.3f} | {row['LB_ms']:.2f} | {f(row['ratio_greedy'])} | "
                         f"{f(row['ratio_dp500'])} | {f(row[f'ratio_dp{S_FINE}'])} | {f(row['ratio_vdnn'])} | "
                         f"{f(row['ratio_fractional'])} | {f(None if dv is None else dv / row['LB_ms'])} | "
                         f"{d5.get('states')}, {d5.get('seconds', 0):.2f} |")
    path.write_text("\n".join(lines) + "\n")


def plot(doc, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for ax, r in zip(axes.flat, doc["results"], strict=False):
        xs = [row["percent"] for row in r["rows"]]
        for key, label in (("greedy", "GREEDY"), ("dp500", "DYNPROG S=500"), (f"dp{S_FINE}", f"DYNPROG S={S_FINE}"),
                           ("vdnn", "VDNN"), ("fractional", "fractional (Thm 2)")):
            ys = [math.nan if row[f"ratio_{key}"] is None else row[f"ratio_{key}"] for row in r["rows"]]
            ax.plot(xs, ys, marker="o", ms=3, label=label)
        ax.set_title(f"{r['profile']} ({r['ops']} ops)")
        ax.set_xlabel("memory: 0 % = M_min, 100 % = M_peak")
        ax.set_ylabel("makespan / LB")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"[O] baselines, B = 12.2 GB/s, {doc['date']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    out = Path(args.out)
    t0 = time.perf_counter()
    results = [run_profile(n) for n in PROFILES]
    doc = {"device": f"CPU only: {cpu_description()}, {platform.platform()}",
           "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "command": command_line("offload_paper.py"),
           "B_GBps": 12.2, "S": [500, S_FINE], "vdnn_max_thresholds": VDNN_MAX_THRESHOLDS,
           "note_profiles": "gpusolve/profiles/README.md: H100, PyTorch 2.11, float32",
           "results": results}
    doc["claims"] = claims(results)
    doc["seconds"] = time.perf_counter() - t0
    (out / "offload_paper.json").write_text(json.dumps(doc, indent=1))
    write_md(doc, out / "offload_paper.md")
    plot(doc, out / "offload_paper.png")
    for c in doc["claims"]:
        print(("HELD    " if c["held"] else "NOT HELD"), c["claim"], "--", c["evidence"])
    print(f"total {doc['seconds']:.1f} s")


if __name__ == "__main__":
    main()
