"""transformers' Trainer keeps only the batch columns the model's forward names (inspect.signature(model.forward),
remove_unused_columns=True by default). AutoCheckpointed.forward is (*args, **kwargs), so the wrapped model's
batches lose input_ids and attention_mask: Trainer's own column filter is run here on the wrapper (its methods
called on a stand-in for the Trainer: TrainingArguments needs accelerate, not installed here)."""
import inspect
from types import SimpleNamespace

from _setup import te, torch  # the tree under test: GS_ROOT
from transformers import GPT2Config, GPT2LMHeadModel, Trainer
from transformers.data.data_collator import default_data_collator
from transformers.utils import logging as hf_logging

hf_logging.set_verbosity_error()
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=200, n_positions=64))
wrapped = te.auto_checkpoint(model, "60%", caller_keeps="loss")
features = [{"input_ids": torch.randint(0, 200, (32,)), "attention_mask": torch.ones(32, dtype=torch.long),
             "labels": torch.randint(0, 200, (32,))} for _ in range(4)]
for name, net in (("plain model", model), ("auto_checkpoint wrapper", wrapped)):
    trainer = SimpleNamespace(model=net, _signature_columns=None, label_names=[],
                              args=SimpleNamespace(remove_unused_columns=True))
    trainer._set_signature_columns_if_needed = lambda t=trainer: Trainer._set_signature_columns_if_needed(t)
    collate = Trainer._get_collator_with_removed_columns(trainer, default_data_collator, description="training")
    batch = collate(features)
    print(f"{name}: forward{str(inspect.signature(net.forward))[:40]}...; batch keys after Trainer's filter {sorted(batch)}")
    try:
        out = net(**batch)
        print(f"  step: loss {out.loss.item():.4f}")
    except Exception as exc:  # noqa: BLE001
        print(f"  step: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
