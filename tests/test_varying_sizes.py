"""Note [Sizes that vary between calls] (torch_exec/executor.py): an input signature that differs from a planned one
only in smaller sizes, within ``reuse_within`` times the elements, is planned on that one's profile (no profile of its
own); its steps train as plain autograd does and hold the budget. Larger sizes, sizes further off, another model state
or another dtype are profiled as before; ``reuse_within=None`` profiles every signature."""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
import torch_exec.executor as ex  # noqa: E402
from torch_exec import _util as U  # noqa: E402
from torch_exec.report import MemoryBudgetWarning  # noqa: E402
from _torch_helpers import DT  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import models as A  # noqa: E402  (examples/models.py)

pytestmark = pytest.mark.filterwarnings("ignore::torch_exec.CPUTimingWarning", "ignore::gpusolve.FallbackWarning")

OPTS = dict(profile_passes=1, profile_warmup=0, backend="cpu")
D = 16


def mlp(seed=0, depth=6):
    torch.manual_seed(seed)
    return nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(D, 4 * D), nn.Tanh(), nn.Linear(4 * D, D))
                           ]).to(DT)


def step(model, x):
    """One training step's input gradient (parameter gradients are left on the model)."""
    x = x.detach().clone().requires_grad_()
    model.zero_grad()
    model(x).square().mean().backward()
    return x.grad


def assert_same_training(wrapped, ref, x):
    torch.testing.assert_close(step(wrapped, x), step(ref, x), rtol=0, atol=0)
    for p, q in zip(wrapped.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)


def test_sizes_cover_compares_sizes_only():
    key = ((U.Sizes((8, 64)), torch.float32, "cpu", True), "spec", (("train", True),))
    smaller = ((U.Sizes((8, 40)), torch.float32, "cpu", True), "spec", (("train", True),))
    assert U.sizes_cover(key, key) == 1.0
    assert U.sizes_cover(key, smaller) == pytest.approx(64 / 40)
    assert U.sizes_cover(smaller, key) is None  # larger sizes are not covered
    other_dtype = ((U.Sizes((8, 40)), torch.float64, "cpu", True), "spec", (("train", True),))
    other_mode = ((U.Sizes((8, 40)), torch.float32, "cpu", True), "spec", (("train", False),))
    other_rank = ((U.Sizes((8, 40, 1)), torch.float32, "cpu", True), "spec", (("train", True),))
    plain_tuple = (((8, 40), torch.float32, "cpu", True), "spec", (("train", True),))
    for key_b in (other_dtype, other_mode, other_rank, plain_tuple):
        assert U.sizes_cover(key, key_b) is None
    assert U.Sizes((8, 64)) == (8, 64) and hash(U.Sizes((8, 64))) == hash((8, 64))  # keys as before


def test_smaller_batches_run_the_larger_ones_plan_and_train_as_plain_autograd(profiles):
    ref = mlp()
    w = te.CheckpointedSequential(copy.deepcopy(ref), budget="50%", **OPTS)
    big, smaller = torch.randn(32, D, dtype=DT), torch.randn(20, D, dtype=DT)
    assert_same_training(w, ref, big)
    planned = w.plan
    assert profiles[0] == 1 and planned.schedule != ex.store_all(w.chain)  # a plan that recomputes
    w.measure_memory(2)
    assert_same_training(w, ref, smaller)
    assert_same_training(w, ref, smaller)
    assert profiles[0] == 1  # planned on the batch-32 profile
    assert w.plan.schedule == planned.schedule and w.plan.budget_bytes == planned.budget_bytes
    assert "reuse_within" in w.plan.notes[-1] and "[32, 16]" in w.plan.notes[-1]
    records = list(w.memory_report())
    assert len(records) == 2
    for record in records:  # measured on the smaller batch: within the budget and below the larger prediction
        assert record.within_budget and record.beyond_param_grads <= record.predicted_peak
    assert len(w.plans) == 2


def test_far_smaller_larger_or_unlike_signatures_are_profiled(profiles):
    ref = mlp()
    w = te.CheckpointedSequential(copy.deepcopy(ref), budget="50%", **OPTS)
    assert_same_training(w, ref, torch.randn(32, D, dtype=DT))
    assert_same_training(w, ref, torch.randn(12, D, dtype=DT))  # 32 / 12 > reuse_within = 2
    assert profiles[0] == 2
    assert_same_training(w, ref, torch.randn(40, D, dtype=DT))  # larger
    assert profiles[0] == 3
    # 7 is within 2x of the batch-12 profile: planned on it (not on the batch-40 one, 5.7 x)
    assert_same_training(w, ref, torch.randn(7, D, dtype=DT))
    assert profiles[0] == 3 and "[12, 16]" in w.plan.notes[-1]
    # a reused signature does not chain: 4 is within 2x of the batch-7 signature, not of the batch-12 profile
    assert_same_training(w, ref, torch.randn(4, D, dtype=DT))
    assert profiles[0] == 4
    x = torch.randn(8, D, dtype=DT)  # requires_grad is part of the signature (step() asks for the input's gradient)
    w(x).square().mean().backward()
    assert profiles[0] == 5


def test_reuse_within_none_profiles_every_signature(profiles):
    ref = mlp()
    w = te.CheckpointedSequential(copy.deepcopy(ref), budget="50%", reuse_within=None, **OPTS)
    for batch in (32, 20, 31):
        assert_same_training(w, ref, torch.randn(batch, D, dtype=DT))
    assert profiles[0] == 3
    assert not any("reuse_within" in note for note in w.plan.notes)


@pytest.mark.parametrize("value", [0.5, 0, -1, float("nan"), float("inf"), True, "2x"])
def test_reuse_within_refuses_what_is_no_ratio(value):
    with pytest.raises(ValueError, match="reuse_within must be a number >= 1"):
        te.CheckpointedSequential(mlp(), budget="50%", reuse_within=value, **OPTS)
    with pytest.raises(ValueError, match="reuse_within must be a number >= 1"):
        te.auto_checkpoint(mlp(), "50%", backend="cpu", reuse_within=value)


def _lm_step(wrapped, tokens):
    torch.manual_seed(3)  # the same dropout masks for the wrapper and the reference
    wrapped.zero_grad(set_to_none=True)
    wrapped(tokens).logits.float().pow(2).mean().backward()
    return {name: p.grad.clone() for name, p in wrapped.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("capture", ["export", "blocks"])
def test_auto_checkpoint_reuses_a_longer_sequence_profile(profiles, capture):
    torch.manual_seed(0)
    model = A.gpt2(layers=3, width=32, heads=4, vocab=101, context=64)
    ref = copy.deepcopy(model)
    w = te.auto_checkpoint(model, "50%", backend="cpu", capture=capture)
    gen = torch.Generator().manual_seed(1)
    long_, short = (torch.randint(0, 101, (4, n), generator=gen) for n in (48, 30))
    _lm_step(w, long_)
    assert profiles[0] == 1 and w.capture.method == capture
    w.measure_memory(2)
    got = _lm_step(w, short)  # its capture's first step: measured too, profiling nothing (review rv22c:
    again = _lm_step(w, short)  # bench/repros/rv22c_hf_blocks_covered_step_unmeasured.py, the block fallback's was not)
    assert profiles[0] == 1, "the 30-token batch was profiled instead of planned on the 48-token profile"
    assert "reuse_within" in w.plan.notes[-1]
    want = _lm_step(ref, short)
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-6, atol=1e-7, msg=name)
        torch.testing.assert_close(again[name], want[name], rtol=1e-6, atol=1e-7, msg=name)
    _lm_step(w, short)  # records the second measured step
    records = list(w.memory_report())
    assert len(records) == 2 and all(r.within_budget for r in records), records


def test_auto_checkpoint_does_not_reuse_across_model_states(profiles):
    """A frozen layer is another model signature (its captured graph and profile differ): profiled, not reused."""
    torch.manual_seed(0)
    model = A.gpt2(layers=3, width=32, heads=4, vocab=101, context=64)
    w = te.auto_checkpoint(model, "50%", backend="cpu", capture="export")
    gen = torch.Generator().manual_seed(1)
    _lm_step(w, torch.randint(0, 101, (4, 48), generator=gen))
    model.transformer.h[0].requires_grad_(False)
    _lm_step(w, torch.randint(0, 101, (4, 40), generator=gen))
    assert profiles[0] == 2
    assert not any("reuse_within" in note for note in w.plan.notes)


def test_a_join_takes_reuse_within_and_profiles_each_signature():
    """A join network (CheckpointedJoin has no reuse): the setting neither refuses the join nor is dropped silently."""
    from torch_exec.join import CheckpointedJoin
    model, args, _, _ = A.make("siamese")
    wrapped = te.auto_checkpoint(model, "100%", reuse_within=1.5)
    wrapped.prepare(*args)
    assert isinstance(wrapped.executor, CheckpointedJoin), wrapped.capture.notes
    assert any("reuse_within does not apply to a join network" in note for note in wrapped.capture.notes)


class _SizeBranch(nn.Module):
    """Below 16 rows another path, whose tape is 8 x wider: memory that does not shrink with the sizes."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 64)

    def forward(self, x):
        if x.shape[0] < 16:
            return torch.tanh(self.a(x).repeat(1, 8)).view(x.shape[0], 8, 64).mean(1)
        return torch.tanh(self.a(x))


def test_a_covered_step_over_its_budget_profiles_every_signature_from_then_on(profiles):
    """review rv22 (bench/repros/rv22_seq_size_branch_over_budget.py): the covered plan's step went 2.4 x over at
    every step, its excess learned a few bytes at a time as the caller's turn."""
    torch.manual_seed(0)
    ref = nn.Sequential(*[_SizeBranch() for _ in range(8)])
    w = te.CheckpointedSequential(copy.deepcopy(ref), budget="60%", **OPTS)
    big, small, other = torch.randn(24, 64), torch.randn(14, 64), torch.randn(20, 64)
    assert_same_training(w, ref, big)
    w.measure_memory(3)
    with pytest.warns(MemoryBudgetWarning, match="does not shrink with the sizes"):
        assert_same_training(w, ref, small)  # planned on the 24-row profile: over its budget
        assert_same_training(w, ref, small)  # recorded at this call: the signature is profiled now
    assert profiles[0] == 2
    assert_same_training(w, ref, small)
    records = list(w.memory_report())
    assert len(records) == 3 and not records[0].within_budget
    assert all(r.within_budget for r in records[1:]), records
    assert_same_training(w, ref, other)  # covered by the 24-row profile, but reuse is off from now on
    assert profiles[0] == 3 and not any("reuse_within" in note for note in w.plan.notes)


def test_a_covered_signatures_last_profile_plans_it_in_another_wrapper(profiles):
    """review rv22 (bench/repros/rv22_seq_last_profile_covered_refused.py): prepare(profile=) refused it."""
    ref = mlp()
    w = te.CheckpointedSequential(copy.deepcopy(ref), budget="50%", **OPTS)
    assert_same_training(w, ref, torch.randn(32, D, dtype=DT))
    small = torch.randn(24, D, dtype=DT)
    assert_same_training(w, ref, small)
    saved = w.last_profile
    assert saved["args"]["input_shapes"] == [[32, D]] and profiles[0] == 1
    other = te.CheckpointedSequential(copy.deepcopy(ref), budget="50%", **OPTS)
    plan = other.prepare(small.detach().clone().requires_grad_(), profile=saved)
    assert profiles[0] == 1 and plan.schedule == w.plan.schedule and "reuse_within" in plan.notes[-1]
    assert_same_training(other, ref, small)
    with pytest.raises(ValueError, match="input shapes"):  # further off than reuse_within: refused as before
        other.prepare(torch.randn(8, D, dtype=DT, requires_grad=True), profile=saved)
    with pytest.raises(ValueError, match="input shapes"):  # larger: refused as before
        other.prepare(torch.randn(40, D, dtype=DT, requires_grad=True), profile=saved)


class _JoinsAtEightRows(nn.Module):
    """Two towers meeting at the loss from 8 rows on; below, one tower: a join capture beside chain captures."""

    def __init__(self):
        super().__init__()
        self.t1 = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(D, D), nn.Tanh())])
        self.t2 = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(D, D), nn.Tanh())])

    def forward(self, a, b):
        if a.shape[0] >= 8:
            return (self.t1(a) - self.t2(b)).square().mean()
        return (self.t1(a) - b).square().mean()


def test_a_chain_capture_beside_a_join_capture_trains(profiles):
    """review rv22 (bench/repros/rv22_auto_join_sibling_sizes_key_error.py): the search read a join entry's
    sizes_key (AttributeError)."""
    from torch_exec.join import CheckpointedJoin
    torch.manual_seed(0)
    model = _JoinsAtEightRows()
    ref = copy.deepcopy(model)
    w = te.auto_checkpoint(model, "60%", backend="cpu")
    a, b = torch.randn(8, 16, D), torch.randn(8, 16, D)
    w(a, b).backward()
    assert isinstance(w.executor, CheckpointedJoin)
    model.zero_grad(set_to_none=True)
    w(a[:6], b[:6]).backward()
    assert not isinstance(w.executor, CheckpointedJoin)  # a chain, profiled: the join's entries serve none
    ref(a[:6], b[:6]).backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        assert (p.grad is None) == (q.grad is None)
        if p.grad is not None:
            torch.testing.assert_close(p.grad, q.grad)


def test_an_encoder_decoder_whose_lengths_shrink_unevenly_is_cut_where_its_cover_was(profiles):
    """review rv22c (bench/repros/rv22c_hf_encdec_export_never_covered.py): an export's cuts follow the bytes each
    operation allocates, which moved with the encoder's and the decoder's lengths: the 28 x 20 call was cut elsewhere
    than the 32 x 24 one, its stages named otherwise, and profiled. It is now cut at the covering capture's cuts."""
    transformers = pytest.importorskip("transformers")
    transformers.utils.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = transformers.BartForConditionalGeneration(transformers.BartConfig(
        vocab_size=101, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=1,
        bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)).train()
    ref = copy.deepcopy(model)
    w = te.auto_checkpoint(model, "50%", backend="cpu", capture="export")
    gen = torch.Generator().manual_seed(0)
    grads = []
    for enc, dec in ((32, 24), (28, 20)):
        batch = dict(input_ids=torch.randint(3, 101, (4, enc), generator=gen),
                     decoder_input_ids=torch.randint(3, 101, (4, dec), generator=gen))
        batch["labels"] = batch["decoder_input_ids"]
        for m in (w, ref):
            torch.manual_seed(1)  # the same dropout masks
            m.zero_grad(set_to_none=True)
            m(**batch).loss.backward()
        grads.append([(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters(), strict=True)])
    first, second = (cap.executor for cap in w._captures.values())
    assert first.names == second.names
    assert profiles[0] == 1 and any("reuse_within" in note for note in second.plan.notes), second.plan.notes
    for a, b in grads[-1]:
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
