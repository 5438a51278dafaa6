"""rv22c: under auto_checkpoint's block fallback on the CPU, ``measure_memory`` never measures a step planned on a
larger signature's profile (Note [Sizes that vary between calls]): a loop over batches of varying length checks none
of the covered steps against their budget, and ``reuse_failed`` can never fire there.

Setup: transformers' GPT2LMHeadModel (4 layers, width 32, 4 heads, vocabulary 101, 64 positions, random weights),
``auto_checkpoint(model, "50%", backend="cpu", capture=...)``; each step ``w.measure_memory(1)``, then ``out = w(
input_ids=ids, attention_mask=mask, labels=ids); out.loss.backward()`` at lengths 32 (profiled), 28, 20 and 24
(each planned on the 32-token profile), batch 4, rows padded in the mask; the records ``memory_report()`` gains.

Observed (CPU, torch 2.13, transformers 5.24): s22_hf (a1eca63): capture="blocks": 0 of 3 covered steps measured
(each asked for with measure_memory(1); memory_report holds only the first capture's records); capture="export": 3 of
3 measured, all within budget.

Cause: torch_exec/auto.py ``_run_blocks`` postpones a due step's meter on the CPU whenever the capture's executor is
``_unsettled()`` (no planned entry yet: "this call profiles"), to measure the next call of that signature from the
model's call (review rv19d: a meter started at the first block misses frees). A covered signature's first call is
unsettled too, but profiles nothing; the postponed measurement waits for a second call of the same length, which a
loop over varying lengths rarely makes. (Its ``_entry`` also withdraws the meter for a covered entry, as for one it
profiles.)

Expected: a covered signature's first call is measured when measure_memory asks (it profiles nothing, so the meter
can start at the model's call), as under export; docs/pytorch.md: "On the CPU, only the steps measure_memory() asks
for are measured". Exits 1 while a covered step asked for under capture="blocks" is not measured.

Run: GS_ROOT=<tree> python bench/repros/rv22c_hf_blocks_covered_step_unmeasured.py   (~10 s)
"""
import sys
import warnings

from _hf import te, torch, transformers  # the tree under test: GS_ROOT

warnings.simplefilter("ignore")
transformers.utils.logging.set_verbosity_error()
torch.set_num_threads(1)


def batch(length, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 101, (4, length), generator=g)
    mask = torch.ones(4, length, dtype=torch.long)
    mask[1, length - 5:] = mask[3, length - 9:] = 0  # rows padded to the batch's longest
    return dict(input_ids=ids, attention_mask=mask, labels=ids)


def run(capture):
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=4, n_embd=32, n_head=4, vocab_size=101, n_positions=64, bos_token_id=0, eos_token_id=0)).train()
    w = te.auto_checkpoint(model, "50%", backend="cpu", capture=capture)
    covered = measured = 0
    within = True
    for i, length in enumerate((32, 28, 20, 24)):
        before = len(w.memory_report() or [])
        w.measure_memory(1)
        out = w(**batch(length, i))
        out.loss.backward()
        model.zero_grad(set_to_none=True)
        report = w.memory_report() or []
        if any("planned on the profile" in note for note in w.plan.notes):
            covered += 1
            measured += len(report) > before
            within &= all(r.within_budget for r in report)
    print(f"capture={capture}: {measured} of {covered} covered steps measured (measure_memory(1) before each); "
          f"all measured within budget: {within}; captures {len(w._captures)}")
    return covered, measured


run("export")
covered, measured = run("blocks")
sys.exit(1 if measured < covered else 0)
