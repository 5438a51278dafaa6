"""A BERT linear probe (embeddings and encoder frozen; a review, 2026-11-27): the chain model's least budget
against plain autograd's measured peak, and what "100%" and "99%" do, with each caller_keeps."""
import sys
from pathlib import Path

from _setup import te  # the tree under test: GS_ROOT

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))  # this tree's models, any GS_ROOT
from models import bert_probe  # noqa: E402

for keeps in ("loss", "output"):
    model, batch = bert_probe()
    wrapped = te.auto_checkpoint(model, "100%", caller_keeps=keeps)
    for budget in ("100%", "99%"):
        try:
            wrapped.replan(budget) if wrapped.executor is not None else wrapped.prepare(**batch)
            print(f"caller_keeps={keeps} {budget}: planned within {wrapped.plan.budget_bytes} B; "
                  f"{wrapped.plan.notes[-1]}")
        except Exception as exc:  # noqa: BLE001
            print(f"caller_keeps={keeps} {budget}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
