"""auto_checkpoint on join networks (CPU): the join capture (``join=True``, :class:`torch_exec.join.CheckpointedJoin`)
against the same model cut as one chain (``join=False``, :class:`torch_exec.CheckpointedSequential`).

    python bench/auto_join.py [--models two_tower,siamese,triplet] [--out bench/results/auto_join_cpu]

Models (``examples/models.py``, random weights, train mode) at one CPU size: ``TwoTower(width=16, dim=64)``
(a ResNet image tower and a GPT-2-block text tower meeting at CLIP's contrastive loss), ``TwoTowerTyped`` (a
BERT-style text tower taking token-type ids too, the larger tower: 6 blocks of width 64 over 64 tokens,
images 32 x 32; ``--models two_tower_typed``), ``Siamese(width=16,
dim=64)`` (one encoder with BatchNorm and dropout on both images of each pair, a contrastive loss) and
``Triplet(width=16, dim=64)`` (one encoder on anchor, positive and negative, a triplet loss); images
3 x 64 x 64, batch 32 (``SIZES``).

For each model, both captures are made on their own copy of the model (``copy.deepcopy`` of the same
initial model), profiled and solved (``prepare``). The byte budgets are the SAME for both captures:
100 / 70 / 50 / 35 % of plain autograd's step peak as the join capture measured it when profiling
(``CheckpointedJoin.plain_peak_bytes_for``), and each capture's own least feasible budget
(``executor.min_budget_bytes``); a capture whose least budget is above a budget is not run there
("infeasible"). At each budget and capture: the plan's predicted step time against its own
store-all time (``plan.predicted_time_ms / plan.store_all_time_ms - 1``, both from that capture's
CPU profile), its predicted peak, and one measured step (``measure_memory(1)``: the CPU allocator's
events from the start of the forward to the end of the backward, parameter gradients allocated as
zeros before the step, so "beyond parameter gradients" is exact). The step's loss and parameter
gradients are compared with plain autograd's on another copy of the model (``torch.manual_seed(SEED)``
before each forward, gradients allocated as zeros before each backward): the loss must be equal and
every gradient within ``GRAD_TOL``.

Errors other than ``InfeasibleBudgetError`` are recorded in the row with their traceback (and printed),
not hidden; so are warnings other than the CPU profiler's timing warning. CPU times are perf_counter
times of one thread (``torch.set_num_threads(1)``): the predicted overheads compare schedules on this
machine's profile, not wall-clock steps on an accelerator.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import sys
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import models  # noqa: E402
import torch_exec as te  # noqa: E402
from bench._common import command_line, cpu_description  # noqa: E402
from gpusolve.errors import InfeasibleBudgetError  # noqa: E402
from gpusolve.join.bytesim import store_all_join_peak_bytes  # noqa: E402
from torch_exec.executor import reference_peak_bytes  # noqa: E402

DEFAULT_MODELS = "two_tower,siamese,triplet"
PERCENTS = (100, 70, 50, 35)     # of the join capture's measured plain-autograd peak
SEED = 1                         # torch.manual_seed before every measured forward (wrapped and plain)
GRAD_TOL = 1e-5                  # largest |gradient - plain autograd's| accepted
BACKEND = "cpu"                  # the solver backend (NumPy) for both captures
# (width, dim, batch, image side) of every model
SIZES = {"two_tower": (16, 64, 32, 64), "two_tower_typed": (16, 64, 32, 32), "siamese": (16, 64, 32, 64),
         "triplet": (16, 64, 32, 64)}
CAPTURES = (("join", True), ("chain", False))
QUIET = ("CPUTimingWarning",)    # expected on the CPU (bench conventions): not recorded per row


def make(name: str):
    """(model, args, loss_of, description, reversed_loss) of one model at ``SIZES[name]``, seeded.
    ``reversed_loss(model, args)``: the model's loss with its branches run in reversed order (plain autograd),
    or None: where a join plan draws random numbers in another branch order (Note [Draw order]), it tells
    whether that order is the whole difference from plain autograd."""
    reversed_loss = None
    width, dim, batch, side = SIZES[name]
    torch.manual_seed(0)
    if name == "two_tower":
        model = models.TwoTower(width=width, dim=dim)
        ids = torch.randint(0, 97, (batch, 24))
        mask = torch.ones(batch, 24, dtype=torch.long)
        mask[:, 20:] = 0
        args = (torch.randn(batch, 3, side, side), ids, mask)
        text = (f"TwoTower(width={width}, dim={dim}): images {batch} x 3 x {side} x {side}, "
                f"{batch} x 24 token ids (4 padded)")
    elif name == "two_tower_typed":  # the text tower the larger one: 6 blocks of width 64 over 64 tokens
        model = models.TwoTowerTyped(width=width, dim=dim, text_width=64, text_layers=6)
        ids = torch.randint(0, 97, (batch, 64))
        mask = torch.ones(batch, 64, dtype=torch.long)
        mask[:, 56:] = 0
        args = (torch.randn(batch, 3, side, side), ids, torch.randint(0, 2, (batch, 64)), mask)
        text = (f"TwoTowerTyped(width={width}, dim={dim}, text_width=64, text_layers=6): images {batch} x 3 x {side} "
                f"x {side}, {batch} x 64 token ids and token-type ids (8 padded)")
    elif name == "siamese":
        model = models.Siamese(width=width, dim=dim)
        same = (torch.arange(batch) % 2).float()
        args = (torch.randn(batch, 3, side, side), torch.randn(batch, 3, side, side), same)
        text = f"Siamese(width={width}, dim={dim}): 2 x {batch} x 3 x {side} x {side} images, pair labels"
        reversed_loss = siamese_reversed_loss
    elif name == "triplet":
        model = models.Triplet(width=width, dim=dim)
        args = tuple(torch.randn(batch, 3, side, side) for _ in range(3))
        text = f"Triplet(width={width}, dim={dim}): 3 x {batch} x 3 x {side} x {side} images"
    else:
        raise SystemExit(f"unknown model {name!r}; one of {', '.join(SIZES)}")
    model.train()
    return model, args, (lambda out: out), text, reversed_loss


def siamese_reversed_loss(model, args):
    """Siamese.forward with encoder(x2) run before encoder(x1) (:func:`make`'s ``reversed_loss``)."""
    x1, x2, same = args
    e2 = model.encoder(x2)
    d = F.pairwise_distance(model.encoder(x1), e2)
    return (same * d.pow(2) + (1 - same) * F.relu(model.margin - d).pow(2)).mean()


def zero_grads(module: torch.nn.Module) -> None:
    """Every trainable parameter's gradient allocated and zero (so a step allocates none)."""
    for p in module.parameters():
        if p.requires_grad:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            else:
                p.grad.zero_()


def plain_step(plain, args, loss_of):
    """Plain autograd's step on ``plain``: (loss, {name: gradient})."""
    zero_grads(plain)
    torch.manual_seed(SEED)
    loss = loss_of(plain(*args))
    loss.backward()
    return loss.detach().clone(), {n: None if p.grad is None else p.grad.clone() for n, p in plain.named_parameters()}


def buffer_diff(model: torch.nn.Module, plain: torch.nn.Module) -> float:
    """Largest |buffer difference| after one step each from the same state (BatchNorm running statistics and
    ``num_batches_tracked``): Note [Draw order] in torch_exec/join.py."""
    ours, theirs = dict(model.named_buffers()), dict(plain.named_buffers())
    if set(ours) != set(theirs):
        return float("inf")
    return max([(ours[n].double() - theirs[n].double()).abs().max().item() for n in ours], default=0.0)


def kept_warnings(caught) -> list[str]:
    return [f"{w.category.__name__}: {w.message}" for w in caught if w.category.__name__ not in QUIET]


def capture_info(kind: str, wrapped, join_plain_peak: int | None) -> dict:
    """How the model was captured: stages, least budget, plain peak."""
    cap, ex = wrapped.capture, wrapped.executor
    entry = ex._last
    info = {"executor": type(ex).__name__, "notes": list(cap.notes), "min_budget_bytes": int(ex.min_budget_bytes)}
    if cap.branches is not None:
        info["branch_stages"] = [len(b) for b in cap.branches]
        info["branch_labels"] = [[s.label for s in b] for b in cap.branches]
        info["branch_solver_stages"] = [int(b.chain.n) for b in entry.branches]  # after fusing aliasing stages
        info["head"] = cap.head.label
        info["store_all_model_peak_bytes"] = int(store_all_join_peak_bytes(entry.net))
        info["own_plain_peak_bytes"] = int(ex.plain_peak_bytes_for(entry))
        info["own_plain_peak_what"] = "CheckpointedJoin.plain_peak_bytes_for (measured when profiling)"
    else:
        info["branch_stages"] = None
        info["chain_stages"] = len(cap.stages)
        info["chain_labels"] = [s.label for s in cap.stages]
        info["chain_solver_stages"] = int(ex.chain.n)
        peak, what = reference_peak_bytes(entry)
        info["own_plain_peak_bytes"] = int(peak)
        info["own_plain_peak_what"] = f"reference_peak_bytes: {what}"
    info["held_bytes"] = int(entry.held_bytes)
    if join_plain_peak is not None:
        info["min_budget_pct_of_join_plain_peak"] = 100 * info["min_budget_bytes"] / join_plain_peak
    info["min_budget_pct_of_own_plain_peak"] = 100 * info["min_budget_bytes"] / info["own_plain_peak_bytes"]
    return info


def run_budget(wrapped, model, plain, args, loss_of, budget: int, min_bytes: int, reversed_loss=None) -> dict:
    """One capture at one byte budget: the plan, one measured step and its gradient check."""
    row: dict = {"budget_bytes": budget}
    if budget < min_bytes:
        row.update(status="infeasible", why=f"below this capture's least budget {min_bytes} B")
        return row
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            wrapped.replan(budget=budget)
        except InfeasibleBudgetError as err:
            row.update(status="infeasible", why=str(err), err_min_bytes=getattr(err, "min_bytes", None))
            return row
        except Exception as err:  # noqa: BLE001 - recorded, never hidden
            row.update(status="error", where="replan", error=f"{type(err).__name__}: {err}",
                       traceback=traceback.format_exc())
            return row
        plan = wrapped.plan
        row.update(predicted_time_ms=plan.predicted_time_ms, store_all_time_ms=plan.store_all_time_ms,
                   overhead=plan.predicted_time_ms / plan.store_all_time_ms - 1,
                   predicted_peak_bytes=int(plan.predicted_peak_bytes), plan_budget_bytes=int(plan.budget_bytes),
                   plan_notes=list(plan.notes), decided_by=getattr(plan, "decided_by", None))
        try:
            plain.load_state_dict(model.state_dict())  # same buffers (BatchNorm statistics) before both steps
            zero_grads(model)
            torch.manual_seed(SEED)
            wrapped.measure_memory(1)
            start = time.perf_counter()
            out = wrapped(*args)
            loss = loss_of(out)
            del out
            loss.backward()
            row["measured_step_s"] = time.perf_counter() - start  # under the CPU meter: not a timing
            record = wrapped.memory_report()[-1]
        except Exception as err:  # noqa: BLE001 - recorded, never hidden
            row.update(status="error", where="step", error=f"{type(err).__name__}: {err}",
                       traceback=traceback.format_exc(), warnings=kept_warnings(caught))
            return row
        row["warnings"] = kept_warnings(caught)
    row.update(status="ok", record=record.to_dict(), measured_peak_bytes=int(record.measured_peak),
               param_grad_bytes_allocated=int(record.param_grad_bytes_allocated),
               beyond_param_grads=int(record.beyond_param_grads),
               measured_over_predicted=record.beyond_param_grads / plan.predicted_peak_bytes,
               within_budget=bool(record.beyond_param_grads <= budget))
    ref_loss, ref_grads = plain_step(plain, args, loss_of)
    grads = {n: p.grad for n, p in model.named_parameters()}
    if set(grads) != set(ref_grads) or any((grads[n] is None) != (ref_grads[n] is None) for n in ref_grads):
        diff = float("inf")  # a parameter got a gradient in one model only
    else:
        diff = max([(grads[n] - g).abs().max().item() for n, g in ref_grads.items() if g is not None], default=0.0)
    row["buffer_max_abs_diff"] = buffer_diff(model, plain)
    row.update(loss=loss.item(), plain_loss=ref_loss.item(), loss_equal=bool(torch.equal(loss.detach(), ref_loss)),
               grad_max_abs_diff=diff)
    row["grad_ok"] = row["loss_equal"] and diff <= GRAD_TOL
    if not row["grad_ok"] and reversed_loss is not None:  # is the branch order the whole difference?
        zero_grads(plain)
        torch.manual_seed(SEED)
        rev = reversed_loss(plain, args)
        rev.backward()
        row["reversed_loss_equal"] = bool(torch.equal(loss.detach(), rev.detach()))
        row["reversed_grad_max_abs_diff"] = max((grads[n] - p.grad).abs().max().item()
                                                for n, p in plain.named_parameters() if p.grad is not None)
    return row


def run_model(name: str) -> dict:
    model, args, loss_of, text, reversed_loss = make(name)
    plain = copy.deepcopy(model)
    wrapped, infos = {}, {}
    for kind, join in CAPTURES:
        m = copy.deepcopy(model)
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            w = te.auto_checkpoint(m, "100%", backend=BACKEND, join=join)
            w.prepare(*args)
        wrapped[kind] = (w, m)
        infos[kind] = {"prepare_s": time.perf_counter() - start, "prepare_warnings": kept_warnings(caught)}
    join_entry = wrapped["join"][0].executor._last
    if wrapped["join"][0].capture.branches is None:
        raise SystemExit(f"{name}: join=True did not capture a join network: {wrapped['join'][0].capture.notes}")
    peak = int(wrapped["join"][0].executor.plain_peak_bytes_for(join_entry))
    for kind, _ in CAPTURES:
        infos[kind].update(capture_info(kind, wrapped[kind][0], peak))
        i = infos[kind]
        stages = (f"branches {i['branch_stages']} (solver {i['branch_solver_stages']})" if i["branch_stages"]
                  else f"{i['chain_stages']} (solver {i['chain_solver_stages']})")
        print(f"{name:10s} {kind:5s} stages {stages}; least {i['min_budget_bytes']} B "
              f"({i['min_budget_pct_of_join_plain_peak']:.1f} % of the join's plain peak {peak} B); own plain peak "
              f"{i['own_plain_peak_bytes']} B; prepare {i['prepare_s']:.1f} s", flush=True)
    budgets: list[tuple[str, int]] = [(f"{p} %", int(p * peak // 100)) for p in PERCENTS]
    for kind, _ in CAPTURES:
        budgets.append((f"{kind} least", infos[kind]["min_budget_bytes"]))
    merged: dict[int, list[str]] = {}
    for label, b in budgets:
        merged.setdefault(b, []).append(label)
    rows = []
    for b, labels in sorted(merged.items(), key=lambda kv: -kv[0]):
        label = " = ".join(labels)
        for kind, _ in CAPTURES:
            w, m = wrapped[kind]
            r = run_budget(w, m, plain, args, loss_of, b, infos[kind]["min_budget_bytes"], reversed_loss)
            r.update(model=name, capture=kind, budget_label=label, budget_pct_of_join_plain_peak=100 * b / peak)
            rows.append(r)
            print_row(r)
    size = dict(zip(("width", "dim", "batch", "image_side"), SIZES[name], strict=True))
    return {"model": name, "config": text, "size": size,
            "join_plain_peak_bytes": peak, "captures": infos, "rows": rows, "summary": summary(name, infos, rows, peak)}


def print_row(r: dict) -> None:
    head = f"{r['model']:10s} {r['capture']:5s} {r['budget_label']:24s} {r['budget_bytes']:10d}"
    if r["status"] == "infeasible":
        print(f"{head} infeasible", flush=True)
    elif r["status"] == "error":
        print(f"{head} ERROR in {r['where']}: {r['error']}\n{r['traceback']}", flush=True)
    else:
        print(f"{head} overhead {100 * r['overhead']:+6.1f} % predicted {r['predicted_peak_bytes']:10d} beyond-grads "
              f"{r['beyond_param_grads']:10d} ratio {r['measured_over_predicted']:.3f} held {r['within_budget']} "
              f"loss equal {r['loss_equal']} grad diff {r['grad_max_abs_diff']:.2e} "
              f"buffer diff {r['buffer_max_abs_diff']:.2e}"
              + (f" warnings {r['warnings']}" if r["warnings"] else ""), flush=True)


def summary(name: str, infos: dict, rows: list[dict], peak: int) -> dict:
    out = {}
    for kind, _ in CAPTURES:
        at50 = next(r for r in rows if r["capture"] == kind and "50 %" in r["budget_label"].split(" = "))
        out[kind] = {"min_budget_bytes": infos[kind]["min_budget_bytes"],
                     "min_budget_pct": infos[kind]["min_budget_pct_of_join_plain_peak"],
                     "overhead_at_50pct": at50.get("overhead") if at50["status"] == "ok" else at50["status"]}

    def oh(v):
        return f"{100 * v:+.1f} %" if isinstance(v, float) else v
    c, j = out["chain"], out["join"]
    out["line"] = (f"{name}: least budget chain {c['min_budget_bytes']} B ({c['min_budget_pct']:.1f} %) vs join "
                   f"{j['min_budget_bytes']} B ({j['min_budget_pct']:.1f} %) of the join's plain peak {peak} B; "
                   f"predicted overhead at 50 %: chain {oh(c['overhead_at_50pct'])} vs join "
                   f"{oh(j['overhead_at_50pct'])}")
    return out


def problems(results: list[dict]) -> list[str]:
    """Every error, budget exceeded and gradient mismatch, one line each."""
    out = []
    for res in results:
        for r in res["rows"]:
            where = f"{r['model']} {r['capture']} at {r['budget_label']} ({r['budget_bytes']} B)"
            if r["status"] == "error":
                out.append(f"{where}: {r['error']} (in {r['where']}; traceback below and in the JSON)")
            elif r["status"] == "ok":
                if not r["within_budget"]:
                    out.append(f"{where}: measured {r['beyond_param_grads']} B beyond parameter gradients, over the "
                               f"budget")
                if not r["grad_ok"]:
                    out.append(f"{where}: loss equal {r['loss_equal']}, largest gradient difference "
                               f"{r['grad_max_abs_diff']:.3g} (tolerance {GRAD_TOL:g})" + reversed_note(r))
    return out


def reversed_note(r: dict) -> str:
    if "reversed_loss_equal" not in r:
        return ""
    return (f"; against plain autograd with the branches run in reversed order: loss equal {r['reversed_loss_equal']}, "
            f"largest gradient difference {r['reversed_grad_max_abs_diff']:.3g}")


def markdown(record: dict) -> str:
    lines = ["# auto_checkpoint on join networks: join capture vs one chain (CPU)", "",
             f"- device: {record['device']}; torch {record['torch']}, {record['threads']} thread",
             f"- date: {record['date']}",
             f"- command: `{record['command']}` ({record['wall_s']:.0f} s)",
             (f"- solver backend `{BACKEND}`; *join* = `auto_checkpoint(model, budget, join=True)` "
             "(CheckpointedJoin: each branch a chain of stages, meeting at a head); *chain* = the same model with "
             "`join=False` (CheckpointedSequential over the whole graph cut as one chain)"),
             ("- budgets: the SAME bytes for both captures: 100 / 70 / 50 / 35 % of plain autograd's step peak as "
             "the **join** capture measured it when profiling (`CheckpointedJoin.plain_peak_bytes_for`), and each "
             "capture's own least feasible budget (`executor.min_budget_bytes`); a capture whose least budget is "
             "above a budget is not run there (*infeasible*)"),
             ("- *overhead*: predicted step time over the capture's own store-all time, "
             "`plan.predicted_time_ms / plan.store_all_time_ms - 1`, from that capture's CPU profile (perf_counter, "
             "1 thread; each capture is profiled separately, so their store-all times differ by CPU timing noise)"),
             ("- *measured*: the CPU allocator's peak of one step (forward, backward; `measure_memory(1)`, "
             "`memory_report()[-1]`), parameter gradients allocated as zeros before it, so *beyond grads* is the "
             "step's peak; *ok* = beyond grads <= budget"),
             (f"- gradients: the step's loss and parameter gradients against plain autograd on a copy of the model, "
             f"`torch.manual_seed({SEED})` before each forward: *loss eq* = bitwise equal loss, *max dgrad* = largest "
             f"|gradient difference| (tolerance {GRAD_TOL:g}); *max dbuffer* = largest |buffer difference| (BatchNorm "
             f"running statistics) after that one step from the same state (not a pass/fail criterion: Note [Draw "
             f"order] in torch_exec/join.py)"),
             ("- plans are solved on CPU-timed profiles, so they can differ between runs of this script: which budgets "
              "give a plan that interleaves the branches' forward stages (JoinOrderWarning, Note [Draw order]) can "
              "change from one run to the next"), ""]
    issues = problems(record["results"])
    lines += ["**Problems:** none (no error, every measured step within its budget, every gradient within tolerance)."
              if not issues else "**Problems:**", *[f"- {p}" for p in issues], ""]
    for res in record["results"]:
        for r in res["rows"]:
            if r["status"] == "error":
                where = f"{r['model']} {r['capture']} at {r['budget_label']} ({r['budget_bytes']} B)"
                lines += [f"Traceback of {where}:", "", "```text", r["traceback"].rstrip(), "```", ""]
    lines += ["## Summary", "", *[f"- {res['summary']['line']}" for res in record["results"]], ""]
    for res in record["results"]:
        peak = res["join_plain_peak_bytes"]
        lines += [f"## {res['model']}", "", (f"{res['config']}. Join capture's measured plain-autograd peak: "
                  f"**{peak} B** (the 100 %)."), "",
                  ("| capture | stages captured | solver stages | least budget B | % of join plain peak | own plain "
                  "peak B | least % of own | prepare s |"),
                  "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
        for kind, _ in CAPTURES:
            i = res["captures"][kind]
            if i["branch_stages"]:
                captured = " + ".join(str(n) for n in i["branch_stages"]) + " (per branch) + head"
                solver = " + ".join(str(n) for n in i["branch_solver_stages"])
            else:
                captured, solver = f"{i['chain_stages']} (one chain)", str(i["chain_solver_stages"])
            lines.append(f"| {kind} | {captured} | {solver} | {i['min_budget_bytes']} | "
                         f"{i['min_budget_pct_of_join_plain_peak']:.1f} % | {i['own_plain_peak_bytes']} | "
                         f"{i['min_budget_pct_of_own_plain_peak']:.1f} % | {i['prepare_s']:.1f} |")
        j = res["captures"]["join"]
        lines += ["", (f"Join head: `{j['head']}`; the join's byte model's store-all peak: "
                       f"{j['store_all_model_peak_bytes']} B "
                       f"({100 * j['store_all_model_peak_bytes'] / peak:.1f} % of the measured plain peak).")]
        chain_labels = res["captures"]["chain"]["chain_labels"]
        lines += ["", "Chain stages (join=False): " + ", ".join(f"`{s}`" for s in chain_labels) + ".", ""]
        lines += [("| budget | B | % | capture | overhead | predicted B | measured beyond grads B | measured/predicted "
                  "| ok | loss | loss eq | max dgrad | max dbuffer | notes |"),
                  "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: | ---: | --- |"]
        # notes: the plan's own notes (what decided it), then warnings the step raised
        for r in res["rows"]:
            head = (f"| {r['budget_label']} | {r['budget_bytes']} | {r['budget_pct_of_join_plain_peak']:.1f} | "
                    f"{r['capture']} |")
            if r["status"] == "infeasible":
                lines.append(f"{head} infeasible | | | | | | | | | {r['why'][:120]} |")
            elif r["status"] == "error":
                lines.append(f"{head} **ERROR** | | | | | | | | | {r['where']}: {r['error'][:200]} |")
            else:
                extra = [w for w in r["warnings"] if not any(n in w for n in r["plan_notes"])]
                by = [f"decided by: {r['decided_by']}"] if r["decided_by"] else []
                notes = ("; ".join(by + r["plan_notes"] + extra) + reversed_note(r)).replace("|", "/")
                loss = f"{r['loss']:.7g}" + ("" if r["loss_equal"] else f" (plain {r['plain_loss']:.7g})")
                lines.append(f"{head} {100 * r['overhead']:+.1f} % | {r['predicted_peak_bytes']} | "
                             f"{r['beyond_param_grads']} | {r['measured_over_predicted']:.3f} | "
                             f"{'yes' if r['within_budget'] else '**NO**'} | {loss} | "
                             f"{'yes' if r['loss_equal'] else '**NO**'} | {r['grad_max_abs_diff']:.2e}"
                             f"{'' if r['grad_max_abs_diff'] <= GRAD_TOL else ' **>tol**'} | "
                             f"{r['buffer_max_abs_diff']:.2e} | {notes} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS, help=f"comma list of {', '.join(SIZES)}")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "auto_join_cpu"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    results = [run_model(name) for name in args.models.split(",")]
    record = {"device": cpu_description(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "command": command_line("auto_join.py", argv), "torch": torch.__version__, "threads": 1,
              "backend": BACKEND, "seed": SEED, "grad_tol": GRAD_TOL, "percents": list(PERCENTS),
              "budget_reference": "percentages of the join capture's measured plain-autograd peak, the same bytes "
                                  "for both captures",
              "wall_s": time.perf_counter() - start, "results": results, "problems": problems(results)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(record))
    print()
    for res in results:
        print(res["summary"]["line"])
    for p in record["problems"]:
        print("PROBLEM:", p)
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')} ({record['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
