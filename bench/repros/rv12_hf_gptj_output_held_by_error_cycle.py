"""transformers' GPTJForCausalLM at a tiny random configuration (2 layers, width 32, 2 x 16 tokens), trained as
README says for a loop that keeps only the loss: ``auto_checkpoint(model, "60%", backend="cpu",
caller_keeps="loss")``, ``out = wrapped(**batch); loss = out.loss; del out; loss.backward()``.

Observed (CPU, torch 2.13, transformers 5.24): the first backward warns "MemoryBudgetWarning: the caller held
storage(s) [1] of the model's output through the backward, which caller_keeps='loss' counts as dropped", and the
second call raises "InfeasibleBudgetError: ... the backwards since showed more of the model's output to count (the
caller holds output storage(s) [1] through the backward ...) ... or drop the output before the backward (keep only
the loss)". The caller did drop it. CodeGenForCausalLM gets the same warning (its budget still fits, so it goes on,
planning for logits nobody holds).

Cause: the first call's logits stay alive after ``del out`` in a reference cycle, not in the caller's hands: with a
gc.collect() before the backward they are freed and nothing is said. In torch_exec/executor.py
``CheckpointedSequential._plan_entry`` catches one face's ``InfeasibleBudgetError`` (Note [Two groupings of unsaved
boundaries]) into the local list ``errors``: the error's traceback holds ``_plan_entry``'s frame, whose ``errors``
holds the error (a cycle), and that frame's callers up to ``auto.py: _call_scheduled``, whose locals hold the model's
outputs. So the logits live until the garbage collector runs, the check at the end of the backward
(``learn_output_holds``) sees them alive and blames the caller, and the step really holds them (unplanned bytes).

Expected: no warning and no error for a caller that keeps only the loss; the logits freed at ``del out`` as plain
autograd frees them. E.g. in ``_plan_entry`` keep a fresh error, ``errors.append(InfeasibleBudgetError(str(err),
err.min_bytes))`` (checked: this repro then exits 0; ``err.with_traceback(None)`` is not enough, as the error's
``__context__``, the solver's error re-raised ``from None`` in ``_plan_grouping``, holds that frame and its callers
too); in general, no caught exception kept in a local of a frame that is on the stack of a call. Exits 1 while the output outlives
``del out`` or the caller is blamed."""
import sys
import warnings
import weakref

try:  # a torchvision built for another torch breaks transformers' imports; these models need none of it
    import torchvision  # noqa: F401
except Exception:  # noqa: BLE001
    for _name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[_name]
    sys.modules["torchvision"] = None

import transformers
from gpusolve.errors import InfeasibleBudgetError

from _setup import te, torch  # the tree under test: GS_ROOT
from torch_exec.report import MemoryBudgetWarning

torch.manual_seed(0)
model = transformers.GPTJForCausalLM(transformers.GPTJConfig(
    vocab_size=97, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64, bos_token_id=1, eos_token_id=2)).train()
g = torch.Generator().manual_seed(5)
ids = torch.randint(3, 97, (2, 16), generator=g)
batch = dict(input_ids=ids, labels=ids, use_cache=False)
wrapped = te.auto_checkpoint(model, "60%", backend="cpu", caller_keeps="loss")

bad = False
for step in range(3):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MemoryBudgetWarning)
        try:
            out = wrapped(**batch)
        except InfeasibleBudgetError as err:
            print(f"step {step}: InfeasibleBudgetError: {str(err)[:330]}")
            bad = True
            break
        loss = out.loss
        logits = weakref.ref(out.logits)
        del out  # the caller keeps only the loss
        alive = logits() is not None
        loss.backward()
        del loss
    blamed = [str(w.message) for w in caught if issubclass(w.category, MemoryBudgetWarning)]
    print(f"step {step}: logits alive after `del out`: {alive}; "
          + (f"MemoryBudgetWarning: {blamed[0][:200]}" if blamed else "no warning"))
    bad |= alive or bool(blamed)
print("BUG: the wrapper keeps the first calls' outputs alive in a reference cycle and blames the caller" if bad
      else "ok")
sys.exit(1 if bad else 0)
