"""transformers' Wav2Vec2ForCTC at a tiny random configuration (2 layers, width 32, conv_dim (16, 16), layerdrop 0,
4 clips of 800 samples, CTC labels), wrapped with ``auto_checkpoint(model, budget, backend="cpu", caller_keeps="loss")``.
torch.export cannot capture it (its LayerDrop test ``torch.rand([]) < layerdrop`` is data-dependent), so it runs
through the block fallback (chain = the 2 blocks of 'wav2vec2.encoder.layers'; the conv feature extractor,
positional conv, head and CTC loss are "the rest of the model"). The wrapper's own step meter
(``measure_memory(1)``, parameter gradients allocated as zeros before the step) reports the step OVER its budget
and over the prediction, and warns MemoryBudgetWarning, while the same step measured from its start
(torch_exec.meter.MemoryMeter around the whole call + backward) is within both.

Observed (CPU, torch 2.13, transformers 5.24), budget = the least budget + 8192 B (2726344 B; "60%" behaves the same:
2732088 B): predicted 2718152 B; wrapper meter 2748488 B (measured_peak 2300488 + held_before 448000; 2735684 B when
measured steps follow one another), +22144 B over the budget, +30336 B over the prediction; the same step measured
from its start: 2708040 B (18304 B within the budget, 0.996 x the prediction). Gradients equal plain autograd's bit for bit.

Cause: under the block fallback the step's meter (report.StepMeter.begin, from CheckpointedSequential's forward)
starts when the first block is called, in the middle of the model's forward. The CPU meter is a torch.profiler
session, which does not record the free of a block allocated before it started ("Memory block of unknown size
was allocated before the profiling started, profiler results will not include the deallocation event"). Tensors
the code before the blocks made and that are freed inside the window (likely wav2vec2's positional-conv output, 40448 B, a local of
Wav2Vec2Encoder.forward freed when it returns after the blocks; per-op marks through torch_exec.opclock show the
whole difference, 27644 B, appearing between the chain's forward and its backward, i.e. in the code after the
blocks) stay counted for the rest of the step, and held_before adds the bytes at the chain's start on top.
A 3-line check (below, ``unseen``) shows the meter mechanism: a tensor made before the meter and deleted inside it,
then an allocation of the same size, reads +40000 B where the level did not change.

Expected: the step meter's figure equals the step's real peak (e.g. start the meter at the wrapper's call, as the
export path does, and take the code before the blocks from that reading instead of adding held_before; or count
frees of blocks allocated before the meter started), so that a step within its budget is not reported over it.
Exits 1 while the wrapper's meter reports a step over its budget that the whole-step meter measures within it."""
import sys

import transformers

from _setup import te, torch  # the tree under test: GS_ROOT
from torch_exec.meter import MemoryMeter

# the mechanism: a free of a block allocated before the meter started is not seen
a = torch.empty(10000)
with MemoryMeter("cpu") as mt:
    m0 = mt.mark()
    del a
    c = torch.empty(10000)
    m1 = mt.mark()
unseen = mt.between(m0, m1).delta
print(f"meter: del of a 40000 B tensor made before it, then a new 40000 B tensor: level change read {unseen} B (true: 0)")

torch.manual_seed(0)
config = transformers.Wav2Vec2Config(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                                     num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, pad_token_id=0,
                                     mask_time_prob=0.0, ctc_zero_infinity=True, layerdrop=0.0)
model = transformers.Wav2Vec2ForCTC(config).train()
g = torch.Generator().manual_seed(3)
kw = dict(input_values=torch.randn(4, 800, generator=g), labels=torch.randint(3, 64, (4, 6), generator=g))
w = te.auto_checkpoint(model, "100%", backend="cpu", caller_keeps="loss")
w.prepare(**kw)
print(f"capture: {w.capture.method}; {w.capture.notes[0][:110]}...")
for p in w.parameters():
    p.grad = torch.zeros_like(p)  # parameter gradients outside the measurement
false_alarms = 0
for budget in [w.min_budget_bytes + 8192, "60%"]:
    w.replan(budget)
    for _ in range(2):
        w.measure_memory(1)
        w(**kw).loss.backward()
        r = w.memory_report()[-1]
        with MemoryMeter("cpu") as whole:  # the same step, measured from its start
            w(**kw).loss.backward()
        real = whole.total.peak
        print(f"budget {r.budget} B, predicted {r.predicted_peak} B: wrapper meter {r.beyond_param_grads} B "
              f"({r.beyond_param_grads - r.budget:+d} vs budget, within {r.within_budget}); whole step from its start "
              f"{real} B ({real - r.budget:+d} vs budget, {real / r.predicted_peak:.3f} x prediction)")
        false_alarms += (not r.within_budget) and real <= r.budget
print(f"BUG: {false_alarms} steps reported over budget that are within it" if false_alarms else "ok")
sys.exit(1 if false_alarms else 0)
