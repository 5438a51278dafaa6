"""Join networks on real profiles: the byte-model join DP (:func:`gpusolve.join.solve.solve_join`)
against store-all, split budget and EQUIV-CHAIN, at 100/70/50/35 % of the join's store-all peak and
at the join DP's minimum.

Networks (every branch ends at its embedding; the loss is the turn):

* ``siamese_resnet50`` - two branches, each the bundled H100 profile ``resnet50_b128`` without its
  ``loss`` stage (shared weights do not change activation memory), meeting at a contrastive loss.
* ``two_tower_cpu`` - CPU-measured two-tower: an image tower (a small ResNet, ``examples/models.py``)
  and a text tower (a small transformer, same file) profiled on this machine with ``torch_exec``
  (``bench/profiles/two_tower_cpu_*.json``, measured once, ``--reprofile`` to measure again); the
  turn (a CLIP-style contrastive loss) measured on the CPU too.
* ``two_tower_h100_synthetic`` - a synthetic pairing of two H100 profiles: ``resnet50_b128`` and
  ``densenet121_b64`` (without their ``loss`` stages; their batches differ, 128 and 64: the pairing
  exercises a heterogeneous join on measured stages, it is not a trained model).

The turn of the H100 networks (rule ``TURN_RULE``): time = the sum of the dropped ``loss`` stages'
measured t_fwd and t_bwd (a contrastive loss runs one cross-entropy per direction); bytes:
``tape_bytes`` = both branch outputs (the normalised copies the loss saves) + a similarity matrix
B1 x B2 x 4 bytes, ``bwd_extra`` = the similarity matrix's gradient (B1 x B2 x 4 bytes); the output
gradients themselves are counted by the join model.

    python bench/join_networks.py [--out bench/results] [--reprofile] [--networks a,b]

Writes join_networks.json, join_networks.md and join_networks_<network>.png into --out.
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import command_line, cpu_description  # noqa: E402  (same folder)

from gpusolve.chain import PER_STAGE_PROVENANCE, Chain  # noqa: E402
from gpusolve.join.baselines import equiv_chain, split_budget, store_all  # noqa: E402
from gpusolve.join.bytesim import simulate_join, store_all_join_peak_bytes  # noqa: E402
from gpusolve.join.dp import min_peak_join  # noqa: E402
from gpusolve.join.network import JoinNet, Turn  # noqa: E402
from gpusolve.join.solve import DEFAULT_JOIN_BUCKETS, solve_join  # noqa: E402

PROFILE_DIR = ROOT / "bench" / "profiles"
FRACTIONS = (1.0, 0.70, 0.50, 0.35)
FINE_BUCKETS = 4096          # a second, finer bucket (budget / 4096) for a bucket-sensitivity check
CHAIN_FIELDS = ("t_fwd", "t_fwd_nograd", "t_bwd", "act_bytes", "grad_bytes", "tape_bytes", "fwd_nograd_extra",
                "fwd_grad_extra", "bwd_extra", "bwd_tape_bytes")
TURN_RULE = ("H100 networks: t_fwd/t_bwd = sums of the dropped 'loss' stages' measured t_fwd/t_bwd; tape_bytes = "
             "out bytes of both branch outputs + B1*B2*4 (similarity matrix); fwd_extra = 0; bwd_extra = B1*B2*4 "
             "(its gradient). CPU network: measured (see two_tower_cpu_turn.json).")
METHODS = ("optimum", "store-all", "split budget", "EQUIV-CHAIN")
COLORS = {"optimum": "tab:red", "store-all": "tab:gray", "split budget": "tab:blue", "EQUIV-CHAIN": "tab:green"}

# CPU two-tower sizes (small enough to profile in about a minute on 2 cores)
CPU_BATCH = 32
CPU_EMBED = 128
IMAGE_SIZE = 128
IMAGE_WIDTH = 24
TEXT_VOCAB, TEXT_WIDTH, TEXT_HEADS, TEXT_LAYERS, TEXT_LEN = 1000, 128, 4, 6, 64
TURN_REPEATS = 30


# ---------------------------------------------------------------------------- branches
def without_loss(chain: Chain) -> tuple[Chain, dict]:
    """``chain`` without its last stage (the bundled profiles end with the cross-entropy ``loss``):
    the branch ends at the head's output. Returns the branch and the dropped stage's figures."""
    if chain.names[-1] != "loss":
        raise ValueError(f"expected a last stage named 'loss', got {chain.names[-1]!r}")
    n = chain.n - 1
    dropped = {"name": chain.names[-1], "t_fwd": float(chain.t_fwd[-1]), "t_bwd": float(chain.t_bwd[-1])}
    branch = Chain(**{f: getattr(chain, f)[:n] for f in CHAIN_FIELDS}, input_bytes=chain.input_bytes,
                   input_grad_bytes=chain.input_grad_bytes, names=chain.names[:n], multi_tape=chain.multi_tape,
                   provenance={k: v[:n] if k in PER_STAGE_PROVENANCE else v for k, v in chain.provenance.items()}
                   | {"dropped_last_stage": "loss"})
    return branch, dropped


def rule_turn(branches, dropped, batches, name) -> tuple[Turn, dict]:
    outs = [int(b.act_bytes[-1]) for b in branches]
    sim = batches[0] * batches[1] * 4
    turn = Turn(t_fwd=sum(d["t_fwd"] for d in dropped), t_bwd=sum(d["t_bwd"] for d in dropped),
                tape_bytes=sum(outs) + sim, fwd_extra=0, bwd_extra=sim, name=name)
    return turn, {"rule": TURN_RULE.split(". CPU")[0], "branch_output_bytes": outs, "similarity_bytes": sim}


def h100_networks() -> dict:
    r50, d_r50 = without_loss(Chain.load("resnet50_b128"))
    d121, d_d121 = without_loss(Chain.load("densenet121_b64"))
    out = {}
    turn, info = rule_turn([r50, r50], [d_r50, d_r50], (128, 128), "contrastive")
    out["siamese_resnet50"] = dict(branches=[r50, r50], turn=turn, turn_info=info,
                                   source="bundled H100 profiles: resnet50_b128 x 2 (loss stage dropped)")
    turn, info = rule_turn([r50, d121], [d_r50, d_d121], (128, 64), "contrastive")
    out["two_tower_h100_synthetic"] = dict(
        branches=[r50, d121], turn=turn, turn_info=info,
        source="SYNTHETIC pairing of bundled H100 profiles resnet50_b128 (batch 128) and densenet121_b64 "
               "(batch 64), loss stages dropped")
    return out


# ---------------------------------------------------------------------------- CPU two-tower
def _towers():
    import torch
    from torch import nn

    import models as ex

    class BnRelu(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.bn1, self.relu = m.bn1, m.relu

        def forward(self, x):
            return self.relu(self.bn1(x))

    class ImageHead(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.avgpool, self.fc = m.avgpool, m.fc

        def forward(self, x):
            return self.fc(torch.flatten(self.avgpool(x), 1))

    class Embed(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.wte, self.wpe = m.wte, m.wpe

        def forward(self, ids):
            return self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))[None]

    class TextHead(nn.Module):
        def __init__(self, m, dim):
            super().__init__()
            self.ln, self.proj = m.ln, nn.Linear(m.ln.normalized_shape[0], dim, bias=False)

        def forward(self, x):
            return self.proj(self.ln(x).mean(1))

    torch.manual_seed(0)
    image = ex.ResNet(width=IMAGE_WIDTH, classes=CPU_EMBED)
    image_stages = nn.Sequential(image.conv1, BnRelu(image), image.maxpool, *image.layer1, *image.layer2,
                                 ImageHead(image))
    image_names = ["conv1", "bn1+relu", "maxpool", "layer1.0", "layer1.1", "layer2.0", "layer2.1", "head"]
    text = ex.Transformer(vocab=TEXT_VOCAB, width=TEXT_WIDTH, heads=TEXT_HEADS, layers=TEXT_LAYERS, context=TEXT_LEN)
    text_stages = nn.Sequential(Embed(text), *text.blocks, TextHead(text, CPU_EMBED))
    text_names = ["embed"] + [f"block{i}" for i in range(TEXT_LAYERS)] + ["head"]
    x = torch.randn(CPU_BATCH, 3, IMAGE_SIZE, IMAGE_SIZE)
    ids = torch.randint(0, TEXT_VOCAB, (CPU_BATCH, TEXT_LEN))
    return (image_stages, x, image_names), (text_stages, ids, text_names)


def clip_loss(a, b):
    import torch
    import torch.nn.functional as F
    logits = F.normalize(a, dim=1) @ F.normalize(b, dim=1).T / 0.07
    target = torch.arange(a.shape[0])
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2


def measure_turn(batch: int, dim: int) -> dict:
    """The contrastive loss on two (batch, dim) outputs on the CPU: median forward and backward times
    (ms) and the allocator's bytes (forward peak, held after forward = tape, backward peak)."""
    import torch

    from torch_exec.meter import MemoryMeter
    a = torch.randn(batch, dim, requires_grad=True)
    b = torch.randn(batch, dim, requires_grad=True)
    fwd, bwd = [], []
    for rep in range(TURN_REPEATS + 3):
        a.grad = b.grad = None
        t0 = time.perf_counter()
        loss = clip_loss(a, b)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        if rep >= 3:
            fwd.append(1e3 * (t1 - t0))
            bwd.append(1e3 * (t2 - t1))
        del loss
    a.grad = b.grad = None
    with MemoryMeter("cpu") as meter:
        m0 = meter.mark()
        loss = clip_loss(a, b)
        m1 = meter.mark()
        loss.backward()
        m2 = meter.mark()
        del loss
    f, bk = meter.between(m0, m1), meter.between(m1, m2)
    grads = 2 * batch * dim * 4
    tape = int(f.delta)
    bwd_total = tape + int(bk.peak)
    return {"t_fwd_ms": statistics.median(fwd), "t_bwd_ms": statistics.median(bwd), "repeats": TURN_REPEATS,
            "fwd_peak_bytes": int(f.peak), "held_after_fwd_bytes": tape, "bwd_peak_above_start_bytes": bwd_total,
            "output_grad_bytes": grads,
            "turn": {"t_fwd": statistics.median(fwd), "t_bwd": statistics.median(bwd), "tape_bytes": tape,
                     "fwd_extra": max(0, int(f.peak) - tape), "bwd_extra": max(0, bwd_total - tape - grads)},
            "mapping": "tape_bytes = bytes held after the loss forward; fwd_extra = forward peak - tape; "
                       "bwd_extra = backward peak (above the bytes before the forward) - tape - both output gradients",
            "rule_for_comparison": {"tape_bytes": grads + batch * batch * 4, "bwd_extra": batch * batch * 4}}


def profile_cpu_two_tower(label: str) -> None:
    """Measure the two towers and the turn on this CPU; write bench/profiles/two_tower_cpu_*.json."""
    import torch

    from torch_exec.profiler import profile_dict
    torch.set_num_threads(1)
    PROFILE_DIR.mkdir(parents=True, exist_ok=True)
    (image, x, image_names), (text, ids, text_names) = _towers()
    for name, (stages, sample, names) in {"image": (image, x, image_names), "text": (text, ids, text_names)}.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            started = time.perf_counter()
            data = profile_dict(stages, sample, passes=5, network=f"two_tower_cpu_{name}", names=names)
        data["label"] = label
        data["args"] |= {"batch": CPU_BATCH, "embed_dim": CPU_EMBED}
        (PROFILE_DIR / f"two_tower_cpu_{name}.json").write_text(json.dumps(data, indent=1) + "\n")
        print(f"profiled {name} tower: {len(names)} stages in {time.perf_counter() - started:.1f} s", flush=True)
    turn = measure_turn(CPU_BATCH, CPU_EMBED)
    turn |= {"label": label, "loss": "CLIP-style: cross-entropy both ways over normalize(a) @ normalize(b).T / 0.07",
             "batch": CPU_BATCH, "embed_dim": CPU_EMBED, "threads": 1, "torch": torch.__version__}
    (PROFILE_DIR / "two_tower_cpu_turn.json").write_text(json.dumps(turn, indent=1) + "\n")


def cpu_network() -> dict:
    image = Chain.load(str(PROFILE_DIR / "two_tower_cpu_image.json"))
    text = Chain.load(str(PROFILE_DIR / "two_tower_cpu_text.json"))
    turn_data = json.loads((PROFILE_DIR / "two_tower_cpu_turn.json").read_text())
    t = turn_data["turn"]
    turn = Turn(t_fwd=float(t["t_fwd"]), t_bwd=float(t["t_bwd"]), tape_bytes=int(t["tape_bytes"]),
                fwd_extra=int(t["fwd_extra"]), bwd_extra=int(t["bwd_extra"]), name="contrastive")
    label = json.loads((PROFILE_DIR / "two_tower_cpu_image.json").read_text()).get("label", "")
    return {"two_tower_cpu": dict(branches=[image, text], turn=turn,
                                  turn_info={"rule": "measured on the CPU (bench/profiles/two_tower_cpu_turn.json)",
                                             **{k: turn_data[k] for k in ("t_fwd_ms", "t_bwd_ms", "fwd_peak_bytes",
                                                                           "held_after_fwd_bytes",
                                                                           "bwd_peak_above_start_bytes",
                                                                           "rule_for_comparison")}},
                                  source=f"{label}: image tower (ResNet, examples/models.py, width {IMAGE_WIDTH}, "
                                         f"batch {CPU_BATCH} x 3 x {IMAGE_SIZE} x {IMAGE_SIZE}) and text tower "
                                         f"(Transformer, {TEXT_LAYERS} blocks, width {TEXT_WIDTH}, batch {CPU_BATCH} x "
                                         f"{TEXT_LEN} tokens), both to a {CPU_EMBED}-dim embedding")}


# ---------------------------------------------------------------------------- benchmark
def checked(net: JoinNet, name: str, schedule, budget: int, time_ms: float, peak: int) -> dict:
    """Re-simulate ``schedule`` with :func:`simulate_join`: its peak must fit ``budget`` and match."""
    sim = simulate_join(net, schedule)
    assert sim.peak_bytes <= budget, f"{name}: simulated peak {sim.peak_bytes} B > budget {budget} B"
    assert sim.peak_bytes == peak and abs(sim.time_ms - time_ms) <= 1e-9 * max(1.0, time_ms), \
        f"{name}: re-simulation {sim.time_ms} ms / {sim.peak_bytes} B differs from {time_ms} ms / {peak} B"
    return {"time_ms": sim.time_ms, "peak_bytes": sim.peak_bytes}


def _row(method, time_ms, peak, feasible, store_time, detail, budget, net, schedule):
    row = {"method": method, "feasible": bool(feasible), "time_ms": None, "overhead_pct": None, "peak_bytes": None,
           "detail": detail}
    if feasible:
        checked(net, method, schedule, budget, time_ms, peak)
        row |= {"time_ms": float(time_ms), "overhead_pct": 100 * (time_ms / store_time - 1), "peak_bytes": int(peak),
                "resimulated_peak_le_budget": True}
    return row


def at_budget(net: JoinNet, branches, turn, budget: int, bucket: int | None, store_time: float) -> dict:
    """Every method at one budget and one bucket (None: choose_join_bucket's default)."""
    plan = solve_join(branches, turn, budget, bucket=bucket, strict=False)
    dp_only = solve_join(branches, turn, budget, bucket=plan.bucket_bytes, strict=False, baselines=False)
    bucket_bytes = plan.bucket_bytes
    rows = [_row("optimum", plan.predicted_time_ms, plan.predicted_peak_bytes, plan.feasible, store_time,
                 plan.decided_by, budget, net, plan.schedule),
            _row("join DP alone", dp_only.predicted_time_ms, dp_only.predicted_peak_bytes, dp_only.feasible,
                 store_time, dp_only.decided_by, budget, net, dp_only.schedule)]
    for method, base in (("store-all", store_all(net, budget)), ("split budget", split_budget(net, budget, bucket_bytes)),
                         ("EQUIV-CHAIN", equiv_chain(net, budget, bucket_bytes))):
        rows.append(_row(method, base.time_ms, base.peak_bytes, base.feasible, store_time, base.detail, budget, net,
                         base.schedule))
    best = min((r["time_ms"] for r in rows[2:] if r["feasible"]), default=None)
    dp_time = rows[1]["time_ms"]
    return {"bucket_bytes": bucket_bytes, "buckets": plan.buckets, "rows": rows,
            "solve_seconds": plan.solve_seconds, "dp_only_solve_seconds": dp_only.solve_seconds,
            "dp_only_timings": {k: float(v) for k, v in dp_only.timings.items()}, "notes": list(plan.notes),
            "optimum_le_every_feasible_baseline": best is None or rows[0]["time_ms"] <= best + 1e-9,
            "dp_alone_le_every_feasible_baseline": best is None or (dp_time is not None and dp_time <= best + 1e-9)}


def run_network(name: str, spec: dict, fine: bool) -> dict:
    branches, turn = spec["branches"], spec["turn"]
    net = JoinNet(branches, turn)
    peak = store_all_join_peak_bytes(net)
    store_time = net.store_all_time_ms()
    clock = time.perf_counter()
    least = min_peak_join(net).min_bytes
    min_seconds = time.perf_counter() - clock
    budgets = [(f"{int(round(100 * f))} %", f, int(f * peak)) for f in FRACTIONS]
    budgets.append(("join DP minimum", least / peak, least))
    points = []
    for label, fraction, budget in budgets:
        point = {"budget": label, "fraction": fraction, "budget_bytes": budget,
                 "default_bucket": at_budget(net, branches, turn, budget, None, store_time)}
        if fine:
            point["fine_bucket"] = at_budget(net, branches, turn, budget, max(1, budget // FINE_BUCKETS), store_time)
        points.append(point)
        d = point["default_bucket"]
        print(f"{name:26s} {label:16s} " + "  ".join(
            f"{r['method']}={'-' if r['time_ms'] is None else format(r['overhead_pct'], '+.1f') + '%'}"
            for r in d["rows"]) + f"  solve {d['dp_only_solve_seconds']:.2f}s", flush=True)
    return {"network": name, "source": spec["source"], "k": net.k, "lengths": list(net.lengths),
            "branch_stage_names": [list(b.names) for b in branches],
            "turn": {"t_fwd_ms": turn.t_fwd, "t_bwd_ms": turn.t_bwd, "tape_bytes": turn.tape_bytes,
                     "fwd_extra": turn.fwd_extra, "bwd_extra": turn.bwd_extra, **spec["turn_info"]},
            "store_all_peak_bytes": peak, "store_all_time_ms": store_time, "min_feasible_bytes": least,
            "min_feasible_seconds": min_seconds, "points": points}


# ---------------------------------------------------------------------------- outputs
def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for method in METHODS:
        xs, ys = [], []
        for p in result["points"]:
            row = next(r for r in p["default_bucket"]["rows"] if r["method"] == method)
            if row["feasible"]:
                xs.append(100 * p["fraction"])
                ys.append(row["overhead_pct"])
        order = np.argsort(xs)
        style = dict(marker="o", color=COLORS[method], label=method)
        if method == "optimum":
            style |= dict(linewidth=2.2, zorder=5)
        elif method == "store-all":  # one point (100 %), drawn over the optimum's
            style |= dict(marker="s", markersize=9, markerfacecolor="none", markeredgewidth=1.5, zorder=6)
        else:
            style |= dict(linestyle="--", linewidth=1.2, markersize=4)
        ax.plot(np.asarray(xs)[order], np.asarray(ys)[order], **style)
    low = 100 * result["min_feasible_bytes"] / result["store_all_peak_bytes"]
    ax.axvline(low, color="black", linewidth=0.8, linestyle=":", label=f"join DP minimum ({low:.1f} %)")
    ax.set_xlabel("budget (% of the join's store-all peak)")
    ax.set_ylabel("overhead over store-all time (%)")
    ax.set_title(f"{result['network']}: simulated step, bucket = budget / {DEFAULT_JOIN_BUCKETS}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _fmt_row(r):
    if not r["feasible"]:
        return "infeasible"
    return f"{r['time_ms']:.2f} ({r['overhead_pct']:+.1f} %)"


def markdown(data: dict) -> str:
    m = data["meta"]
    lines = ["# Join networks on real profiles: join DP vs baselines", "",
             f"- device: {m['device']} (the solver runs on the CPU; the times below are the *simulated* step "
             f"times of each schedule on the profiles' measured stage times, not wall-clock runs)",
             f"- date: {m['date']}", f"- command: `{m['command']}`", f"- torch {m['torch']}, numpy {m['numpy']}",
             f"- bucket: `choose_join_bucket` default, budget / {DEFAULT_JOIN_BUCKETS} (same bucket for the join DP, "
             f"split budget and EQUIV-CHAIN); a second run at budget / {FINE_BUCKETS} checks bucket sensitivity",
             f"- turn: {TURN_RULE}",
             "- join DP backend: cpu (NumPy); *join DP solve s* = wall-clock seconds of "
             "`solve_join(..., baselines=False)` on this CPU (table fill, recovery, exact-byte check)",
             "- every feasible schedule below was re-simulated by `simulate_join` and its peak asserted <= budget",
             "- *optimum* = `solve_join` (join DP plus its exact-byte candidates: store-all and the baselines, "
             "Note [Join candidates]); *join DP alone* = `solve_join(..., baselines=False)` (the DP's policy, "
             "store-all the only other candidate)", ""]
    for res in data["networks"]:
        lines += [f"## {res['network']}", "", f"{res['source']}.", "",
                  f"Branches: {res['lengths']} stages; store-all peak {res['store_all_peak_bytes'] / 2**20:.1f} MiB "
                  f"({res['store_all_peak_bytes']} B), store-all time {res['store_all_time_ms']:.2f} ms; join DP "
                  f"minimum {res['min_feasible_bytes'] / 2**20:.1f} MiB "
                  f"({100 * res['min_feasible_bytes'] / res['store_all_peak_bytes']:.1f} % of store-all). Turn: "
                  f"{res['turn']['t_fwd_ms'] + res['turn']['t_bwd_ms']:.3f} ms, tape {res['turn']['tape_bytes']} B, "
                  f"bwd_extra {res['turn']['bwd_extra']} B.", "",
                  "| budget | MiB | bucket | optimum ms (overhead) | decided by | join DP alone | store-all | "
                  "split budget | EQUIV-CHAIN | join DP solve s (CPU) |",
                  "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
        for p in res["points"]:
            d = p["default_bucket"]
            r = {row["method"]: row for row in d["rows"]}
            lines.append(f"| {p['budget']} | {p['budget_bytes'] / 2**20:.1f} | {d['bucket_bytes']} B | "
                         f"{_fmt_row(r['optimum'])} | {r['optimum']['detail']} | {_fmt_row(r['join DP alone'])} | "
                         f"{_fmt_row(r['store-all'])} | {_fmt_row(r['split budget'])} | {_fmt_row(r['EQUIV-CHAIN'])} | "
                         f"{d['dp_only_solve_seconds']:.2f} |")
        if any("fine_bucket" in p for p in res["points"]):
            lines += ["", f"Finer bucket (budget / {FINE_BUCKETS}):", "",
                      "| budget | bucket | optimum | join DP alone | split budget | EQUIV-CHAIN | join DP solve s |",
                      "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
            for p in res["points"]:
                d = p["fine_bucket"]
                r = {row["method"]: row for row in d["rows"]}
                lines.append(f"| {p['budget']} | {d['bucket_bytes']} B | {_fmt_row(r['optimum'])} | "
                             f"{_fmt_row(r['join DP alone'])} | {_fmt_row(r['split budget'])} | "
                             f"{_fmt_row(r['EQUIV-CHAIN'])} | {d['dp_only_solve_seconds']:.2f} |")
        lines += ["", f"![{res['network']}](join_networks_{res['network']}.png)", ""]
    lines += ["## Checks", ""] + [f"- {c}" for c in data["checks"]] + [""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--networks", default="siamese_resnet50,two_tower_cpu,two_tower_h100_synthetic")
    parser.add_argument("--reprofile", action="store_true", help="measure the CPU two-tower profiles again")
    parser.add_argument("--no-fine", action="store_true", help=f"skip the budget / {FINE_BUCKETS} bucket run")
    parser.add_argument("--profile-only", action="store_true", help="only (re)measure the CPU profiles")
    args = parser.parse_args(argv)
    today = datetime.date.today().isoformat()
    label = f"CPU-measured, {today}, {cpu_description()}"
    if args.profile_only or args.reprofile or not (PROFILE_DIR / "two_tower_cpu_turn.json").exists():
        profile_cpu_two_tower(label)
        if args.profile_only:
            return 0
    started = time.perf_counter()
    specs = h100_networks() | cpu_network()
    wanted = [n.strip() for n in args.networks.split(",") if n.strip()]
    results = [run_network(name, specs[name], not args.no_fine) for name in wanted]
    checks = []
    for res in results:
        for p in res["points"]:
            for key in ("default_bucket", "fine_bucket"):
                d = p.get(key)
                if d is None:
                    continue
                where = f"{res['network']} at {p['budget']} ({key.replace('_', ' ')} {d['bucket_bytes']} B)"
                if not d["optimum_le_every_feasible_baseline"]:
                    checks.append(f"FAILED: optimum slower than a feasible baseline: {where}")
                if not d["dp_alone_le_every_feasible_baseline"]:
                    r = {row["method"]: row for row in d["rows"]}
                    beaten = [f"{m} {r[m]['time_ms']:.3f} ms" for m in ("store-all", "split budget", "EQUIV-CHAIN")
                              if r[m]["feasible"] and (r["join DP alone"]["time_ms"] is None
                                                       or r[m]["time_ms"] < r["join DP alone"]["time_ms"] - 1e-9)]
                    dp = r["join DP alone"]
                    checks.append(f"join DP alone ({'infeasible' if dp['time_ms'] is None else format(dp['time_ms'], '.3f') + ' ms'}) "
                                  f"slower than {', '.join(beaten)}: {where}; the optimum ({r['optimum']['detail']}) "
                                  f"takes the faster one")
    if not any(c.startswith("FAILED") for c in checks):
        checks.insert(0, "optimum <= every feasible baseline at every budget and bucket: held")
    if not any(c.startswith("join DP alone") for c in checks):
        checks.insert(1, "join DP alone <= every feasible baseline at every budget and bucket: held")
    import torch
    meta = {"device": "CPU: " + cpu_description(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "command": command_line("join_networks.py", argv),
            "torch": torch.__version__, "numpy": np.__version__, "default_buckets": DEFAULT_JOIN_BUCKETS,
            "fine_buckets": None if args.no_fine else FINE_BUCKETS, "turn_rule": TURN_RULE, "join_dp_backend": "cpu",
            "run_seconds": time.perf_counter() - started}
    data = {"meta": meta, "networks": results, "checks": checks}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "join_networks.json").write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
    (out / "join_networks.md").write_text(markdown(data))
    for res in results:
        plot(res, out / f"join_networks_{res['network']}.png")
    print("\n".join(checks))
    print(f"wrote {out / 'join_networks.json'}, .md and {len(results)} plots in {meta['run_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
