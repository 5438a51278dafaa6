"""transformers' decoders whose call keeps a key/value cache (a ``DynamicCache``) while training:

(a) GraniteMoeForCausalLM at a tiny random configuration (2 layers, width 32, 4 experts, top-2), called as usual
    (``input_ids``, ``labels``), ``auto_checkpoint(model, "60%", backend="cpu", caller_keeps="loss")``. Its config
    has ``use_cache=True`` and its ``forward`` takes ``use_cache`` through ``**kwargs`` (so do 33 other classes of
    transformers 5.24: GraniteMoe{Shared,Hybrid,SWA}, Llava, InternVL, Qwen3-VL(-MoE), Qwen3.5(-MoE), Glm4v(-MoE),
    Blip(2), InstructBlip, OpenAIGPT, XLM, Flaubert, SwitchTransformers, ...);
(b) Qwen3ForCausalLM (2 layers, width 32) called with ``use_cache=True`` (README: use_cache is turned off
    "unless you pass use_cache");
(c) GraniteMoeForCausalLM as (a) with ``output_router_logits=True``.

Observed (CPU, torch 2.13, transformers 5.24):
  (a), (b): torch.export fails ("Found <class 'transformers.cache_utils.DynamicCache'> in output, which is not a
  known type"), a warning says the blocks 'model.layers' are used instead, and the first step raises, from inside
  the profiler (torch_exec/profiler.py metered_plain_step): "RuntimeError: Trying to backward through the graph a
  second time ...". Every block run appends its keys and values to the one cache object of the call
  (``cache.update``), so the profiler's second run of a block attends over the first run's keys too (graph freed,
  sequence doubled). The same model with ``use_cache=False`` passed is captured by export and trains with plain
  autograd's gradients.
  (c): refused with "CaptureError: auto_checkpoint: forward hooks on the blocks model.layers.0, model.layers.1 cannot
  run as in plain autograd under the block fallback ... Return what the hook takes from the model's forward
  instead, hook a module inside the block ...": the hooks are transformers' own output recorders (installed by the
  wrapper's probe run, utils/output_capturing.py), the remedy is not one the user can apply, and the real reason
  (export refused the cache; pass use_cache=False) is not named, though README says an error names both reasons.

Cause: torch_exec/auto.py ``_training_kwargs`` turns ``use_cache`` off only when ``forward``'s signature names
``use_cache``; a model that takes it through ``**kwargs`` keeps its cache. And a cache the blocks mutate is not
refused under the block fallback, where the profiler and the schedule run each block several times per call.
(c) the block-hook refusal (``_refuse_block_hooks``) replaces export's reason instead of adding to it.

Expected: (a) trains (``use_cache=False`` passed when ``config.use_cache`` is set and ``forward`` takes
``**kwargs``, as transformers' own gradient checkpointing does); (b) either trains with use_cache off or is refused
with a CaptureError naming the key/value cache and ``use_cache=False``; never an autograd error from the profiler;
(c) a CaptureError that names export's reason (the cache) beside the blocks'. Exits 1 while any of these fails."""
import copy
import sys
import warnings

try:  # a torchvision built for another torch breaks transformers' imports; these models need none of it
    import torchvision  # noqa: F401
except Exception:  # noqa: BLE001
    for _name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[_name]
    sys.modules["torchvision"] = None

import transformers

from _setup import te, torch  # the tree under test: GS_ROOT

SIZE = dict(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64)
g = torch.Generator().manual_seed(5)
ids = torch.randint(3, 97, (2, 16), generator=g)


def granite(**extra):
    return transformers.GraniteMoeForCausalLM(transformers.GraniteMoeConfig(
        **SIZE, num_local_experts=4, num_experts_per_tok=2, **extra))


def qwen3():
    return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**SIZE, head_dim=8))


def one_step(make, **kwargs):
    """(outcome, message): 'ok' with plain autograd's loss and gradients, 'wrong', 'refused' or 'crashed'."""
    torch.manual_seed(0)
    model = make().train()
    plain = copy.deepcopy(model)
    wrapped = te.auto_checkpoint(model, "60%", backend="cpu", caller_keeps="loss")
    batch = dict(input_ids=ids, labels=ids, **kwargs)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loss = wrapped(**batch).loss
            loss.backward()
    except te.CaptureError as err:
        return "refused", str(err)
    except Exception as err:  # noqa: BLE001
        return "crashed", f"{type(err).__name__}: {err}"
    ref = plain(**batch).loss
    ref.backward()
    diff = max((a.grad - b.grad).abs().max().item() for a, b in zip(model.parameters(), plain.parameters())
               if b.grad is not None)
    ok = torch.equal(loss.detach(), ref.detach()) and diff <= 1e-6
    return ("ok" if ok else "wrong"), f"{wrapped.capture.method}; loss {loss.item():.6f} vs {ref.item():.6f}, " \
                                      f"largest gradient difference {diff:.2e}"


bad = False
outcome, msg = one_step(granite, use_cache=False)
print(f"GraniteMoE, use_cache=False passed: {outcome}: {msg[:200]}")

outcome, msg = one_step(granite)
print(f"(a) GraniteMoE as called usually: {outcome}: {msg[:300]}")
bad |= outcome != "ok"

outcome, msg = one_step(qwen3, use_cache=True)
print(f"(b) Qwen3, use_cache=True: {outcome}: {msg[:300]}")
bad |= not (outcome == "ok" or (outcome == "refused" and "use_cache" in msg))

outcome, msg = one_step(lambda: granite(output_router_logits=True))
print(f"(c) GraniteMoE, output_router_logits=True: {outcome}: {msg[:400]}")
bad |= outcome == "crashed" or outcome == "wrong" or (outcome == "refused" and "cache" not in msg.lower())

print("BUG: a key/value cache kept while training sends the model to the block fallback, which crashes or is "
      "refused without the reason" if bad else "ok")
sys.exit(1 if bad else 0)
