"""torch_exec.split.gpt2_hf_stages: transformers' GPT2LMHeadModel as a chain of its own modules."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import torch_exec as te  # noqa: E402
from gpusolve.schedule import segments_policy  # noqa: E402
from torch_exec.split import gpt2_hf_stages  # noqa: E402


def _model(attention="sdpa"):
    from transformers.utils import logging
    logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=3, n_embd=32, n_head=4, vocab_size=97, n_positions=24,
                                     attn_implementation=attention)
    return transformers.GPT2LMHeadModel(config)


def test_stages_compute_the_models_loss_and_gradients_bit_for_bit():
    model = _model().train()  # dropout on: the same draws in the same order
    reference = copy.deepcopy(model)
    ids = torch.randint(0, 97, (2, 24))
    stages = gpt2_hf_stages(model, ids)
    assert len(stages) == 3 + 2
    torch.manual_seed(1)
    loss = stages(ids)
    torch.manual_seed(1)
    ref = reference(ids, labels=ids, use_cache=False).loss
    assert torch.equal(loss, ref)
    loss.backward()
    ref.backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.equal(p.grad, q.grad), name


def test_the_chain_trains_like_the_model_while_recomputing():
    model = _model().train()
    reference = copy.deepcopy(model)
    ids = torch.randint(0, 97, (2, 24))
    wrapped = te.CheckpointedSequential(gpt2_hf_stages(model, ids), budget="1GiB", backend="cpu", profile_passes=1,
                                        schedule_fn=lambda chain: segments_policy([2], chain.n))
    torch.manual_seed(1)
    wrapped(ids).backward()
    torch.manual_seed(1)
    reference(ids, labels=ids, use_cache=False).loss.backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.equal(p.grad, q.grad), name


def test_eager_attention_is_refused():
    with pytest.raises(ValueError, match="attn_implementation='sdpa'"):
        gpt2_hf_stages(_model("eager"), torch.zeros(1, 4, dtype=torch.long))
