"""A BERT linear probe (embeddings and encoder frozen; a review, 2026-11-27): the chain model's least budget
against plain autograd's measured peak, and what "100%" and "99%" do, with each caller_keeps."""
from _setup import te, torch  # the tree under test: GS_ROOT

import transformers as T  # noqa: E402

for keeps in ("loss", "output"):
    torch.manual_seed(0)
    model = T.BertForSequenceClassification(T.BertConfig(
        vocab_size=1000, hidden_size=128, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, num_labels=3)).train()
    for p in [*model.bert.encoder.parameters(), *model.bert.embeddings.parameters()]:
        p.requires_grad_(False)
    batch = dict(input_ids=torch.randint(0, 1000, (2, 32)), labels=torch.tensor([0, 2]))
    wrapped = te.auto_checkpoint(model, "100%", caller_keeps=keeps)
    for budget in ("100%", "99%"):
        try:
            wrapped.replan(budget) if wrapped.executor is not None else wrapped.prepare(**batch)
            print(f"caller_keeps={keeps} {budget}: planned within {wrapped.plan.budget_bytes} B; "
                  f"{wrapped.plan.notes[-1]}")
        except Exception as exc:  # noqa: BLE001
            print(f"caller_keeps={keeps} {budget}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
