"""One model: wrap at 55 %, step, compare; replan to least, step, compare; error at 1 %. Prints a JSON line."""
import copy, json, sys, time, warnings, traceback
sys.path.insert(0, "/work/main"); sys.path.insert(0, "/tmp/rv19e")
import zoo
import torch
import torch_exec as te
import gpusolve
torch.set_num_threads(1)
name = sys.argv[1]
first_budget = sys.argv[2] if len(sys.argv) > 2 else "55%"
KEEPS = sys.argv[3] if len(sys.argv) > 3 else "loss"
res = dict(model=name)
W = []


def compare(model, plain, loss, ref):
    pairs = list(zip(model.named_parameters(), plain.named_parameters()))
    diff, missing = 0.0, []
    for (n, p), (_, q) in pairs:
        if (p.grad is None) != (q.grad is None):
            missing.append(n); continue
        if p.grad is not None:
            d = (p.grad - q.grad).abs().max().item()
            tol_ok = torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-6)
            diff = max(diff, d)
            if not tol_ok:
                missing.append(n + "(diff)")
    bd = 0.0
    for (n, b), (_, c) in zip(model.named_buffers(), plain.named_buffers()):
        if b.is_floating_point():
            bd = max(bd, (b - c).abs().max().item())
    return dict(loss_equal=bool(torch.equal(loss.detach(), ref.detach())), loss=loss.item(), ref=ref.item(),
                grad_diff=diff, bad_grads=missing[:5], n_bad=len(missing), buf_diff=bd)


def step(run, kw, lf, seed):
    torch.manual_seed(seed)
    out = run(**kw)
    loss = lf(out)
    del out
    loss.backward()
    return loss


def rec_of(w):
    rep = w.memory_report()
    if not rep:
        return None
    r = rep[-1]
    return dict(budget=r.budget, predicted=r.predicted_peak, measured=r.measured_peak, beyond=r.beyond_param_grads,
                within=r.within_budget, ratio=None if not r.budget else round(r.beyond_param_grads / r.budget, 4))


try:
    model, kw, lf = zoo.MODELS[name]()
    model.train()
    plain = copy.deepcopy(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w = te.auto_checkpoint(model, first_budget, caller_keeps=KEEPS, backend="cpu")
        w.measure_memory(1)
        t0 = time.time()
        try:
            loss = step(w, kw, lf, 1)
        except gpusolve.InfeasibleBudgetError as err:
            res["first_error"] = f"Infeasible: {str(err)[:600]}"
            res["first_s"] = round(time.time() - t0, 1)
            # try 100 %
            w.replan("100%")
            w.measure_memory(1)
            t0 = time.time()
            loss = step(w, kw, lf, 1)
            first_budget = "100%"
        res["first_s"] = round(time.time() - t0, 1)
        ref = step(plain, kw, lf, 1)
        res["method"] = w.capture.method
        res["notes"] = [n[:300] for n in w.capture.notes]
        ex = w.executor
        try:
            res["stages"] = ex.chain.n
            res["profiled"] = len(ex._last.profile["stages"])
        except Exception:
            res["stages"] = "join " + "+".join(str(len(b)) for b in w.capture.branches) + f" head" if w.capture.branches else None
            res["profiled"] = None
        res["plan1"] = dict(budget=first_budget, **compare(model, plain, loss, ref), mem=rec_of(w),
                            plan=str(getattr(w.plan, 'summary', lambda: '')())[:200])
        # second step at same budget (no capture) measured
        model.zero_grad(set_to_none=True); plain.zero_grad(set_to_none=True)
        w.measure_memory(1)
        loss = step(w, kw, lf, 2); ref = step(plain, kw, lf, 2)
        res["plan1b"] = dict(**compare(model, plain, loss, ref), mem=rec_of(w))
        least = w.min_budget_bytes
        res["least"] = least
        try:
            from torch_exec.executor import plain_peak_bytes
            res["plain_peak"] = plain_peak_bytes(ex._last)
        except Exception as e:
            res["plain_peak"] = repr(e)[:100]
        # the 1 % error
        try:
            w.replan("1%")
            res["err1"] = "no error at 1%"
        except gpusolve.InfeasibleBudgetError as err:
            res["err1"] = str(err)[:700]
            res["err1_min"] = err.min_bytes
        w.replan(least)
        model.zero_grad(set_to_none=True); plain.zero_grad(set_to_none=True)
        w.measure_memory(1)
        t0 = time.time()
        loss = step(w, kw, lf, 3); ref = step(plain, kw, lf, 3)
        res["least_s"] = round(time.time() - t0, 1)
        res["plan2"] = dict(budget=least, **compare(model, plain, loss, ref), mem=rec_of(w),
                            overhead=getattr(w.plan, "overhead", None))
        # fresh wrapper at the least budget in bytes (the one-call path), on copies
        m3 = copy.deepcopy(plain); p3 = copy.deepcopy(plain)
        m3.zero_grad(set_to_none=True); p3.zero_grad(set_to_none=True)
        w3 = te.auto_checkpoint(m3, least, caller_keeps=KEEPS, backend="cpu")
        w3.measure_memory(1)
        t0 = time.time()
        loss = step(w3, kw, lf, 4); ref = step(p3, kw, lf, 4)
        res["fresh_least_s"] = round(time.time() - t0, 1)
        res["plan3"] = dict(budget=least, **compare(m3, p3, loss, ref), mem=rec_of(w3))
    res["warnings"] = sorted({f"{c.category.__name__}: {str(c.message)[:160]}" for c in caught
                              if c.category.__name__ not in ("CPUTimingWarning", "FutureWarning", "DeprecationWarning")})
except Exception as e:
    res["error"] = f"{type(e).__name__}: {str(e)[:800]}"
    res["tb"] = traceback.format_exc()[-2500:]
print("RESULT " + json.dumps(res))
