"""transformers' encoder-decoders at tiny random configurations (2 + 2 layers, width 32; WhisperForConditionalGeneration
with its default config, whose dropouts are all 0, on 2 x 8 mel bins x 32 frames and 8 label tokens; T5ForConditional-
Generation with dropout_rate=0 on 2 x 16 tokens), wrapped with ``auto_checkpoint(model, "60%", backend="cpu",
caller_keeps="loss")``. torch.export captures both; an encoder output read by every decoder layer makes the capture
cut with up to 64 values across a cut (Note [Values read late]), so most stage boundaries are tuples.

Observed (CPU, torch 2.13, transformers 5.24; the counts vary a little with the plan), parameter gradients
allocated as zeros before the steps:
  Whisper, budget 155937 B (60 %): predicted 155424 B, the wrapper's meter (measure_memory) 134496 B, the whole step
  (MemoryMeter around call + backward) 134496 B: 0.865 x the prediction (0.865 x in every run). T5 (dropout 0),
  budget 223276 B: 0.841-0.905 x (the plan varies with the profile's times). BART 0.86-0.91 x, Marian 0.91 x,
  Pegasus 0.89 x at 60 % (default dropouts).
  No stage draws random numbers here (the executor reserves no RNG state), so this is not the gap README.md puts on
  "the CPU's random-number state"; with dropout on, the unused RNG reservation adds to it (T5 with dropout 0.1:
  0.865 x, 15168 B of RNG states reserved for stages the plan does not recompute). At "100%" (plain autograd) and at
  the least budget the same models measure 0.94-1.00 x.
  Op by op (the interpreter's per-op marks, torch_exec.opclock, each with an allocator mark), the model holds more
  than the step:
  - in tape runs (a stage recorded right after the stage before it): 128-14592 B at each of 12-17 boundaries per
    step. E.g. T5's first stage returns ``(dropout, pow_1)``; the next computes ``mean(pow_1)`` and drops
    ``pow_1``, which no backward saves (``pow`` saves its input), so autograd frees it, yet the model keeps it in
    stage 1's tape until stage 1's backward. Whisper: the stage after ``q_proj``/``k_proj`` turns ``linear_13``
    into a contiguous copy and drops it; its producer's out_saved_bytes (2048) is the passed-through
    ``layer_norm_5`` its linear saved;
  - at checkpoints (``fwd_nograd(keep)``): 2-4 checkpoints, 14336-28672 B per step: a checkpoint counts every
    storage it passes on (the encoder's output read by both decoder layers, and other values several stages pass
    on) though a recorded stage's output or another checkpoint already holds it (Note [Outputs passed through] in
    gpusolve/chain.py).
  At Whisper's predicted peak (one run: the backward of its last stage) they make up its 20.9 KB gap: 12288 B from
  two checkpoints, about 4.5 KB from tape runs, the rest in the backward of that segment. The plan recomputes more
  than the budget needs: replanned at 1.12 x the budget, Whisper's measured step still stays within the 60 % budget
  (153320 B) with 21 no-grad forwards instead of 25 (predicted overhead +12.0 % instead of +14.6 %); T5: +14.4 %
  instead of +16.4 %.

Cause: (1) the cost model (gpusolve/chain.py) holds a stage's output in its tape whole until the stage's backward,
unless no backward saves *any* of it (Note [Tensors no backward saves]: then the boundary is merged). With tuple
states (most cuts of an encoder-decoder, Note [Values read late]) the next stage often drops one storage of the tuple
that nobody saved while another (a passed-through hidden state, a layer-norm output a linear saved) is saved; the
profile (torch_exec/profiler.py) records ``out_saved_bytes``/``in_saved_bytes`` as sums over all storages of the
output/input, passed-through ones included, so ``_output_unsaved`` (saved == 0) never fires for them, and
``_merge_group``'s ``freed[m] = x - saved - passed`` and ``bwd_tape_bytes = tape - own + min(own, saved)`` compare
sums of different storages. (2) A checkpoint's act_bytes counts the storages it passes on, once per holder.
(3) ``executor_chain`` reserves an RNG state for every drawing stage whatever the plan recomputes. None is unsafe;
together they cost 10-16 % of the budget here.

Expected: the prediction within a few per cent of the measured step (0.98-1.00 x, as for the decoder-only models),
e.g. profile per storage of a_s whether the next stage passes it on and whether any backward saves it, and give the
dropped unsaved storages back when stage s + 1 is recorded (merge the boundary where that is all of a_s's own
storages, or carry "freed once the next stage is recorded" bytes into the DP's Tape rule); and, for what the DP
cannot express (storages shared by checkpoints, RNG states of stages the plan does not recompute), re-simulate the
plan with storage-level accounting for ``predicted_peak_bytes`` and raise the solver's budget while that exact peak
stays within the user's budget. Exits 1 while Whisper's step measures below 0.93 x its prediction with
no RNG state reserved."""
import sys

try:  # a torchvision built for another torch breaks transformers' imports; these models need none of it
    import torchvision  # noqa: F401
except Exception:  # noqa: BLE001
    for _name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[_name]
    sys.modules["torchvision"] = None

import transformers

from _setup import te, torch  # the tree under test: GS_ROOT
from gpusolve.simulate import Holdings
from torch_exec import opclock
from torch_exec.meter import MemoryMeter


def make(name):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 97, (2, 16), generator=g)
    if name == "t5":
        config = transformers.T5Config(vocab_size=97, d_model=32, d_ff=64, num_layers=2, num_heads=4, d_kv=8,
                                       decoder_start_token_id=0, dropout_rate=0.0)
        return transformers.T5ForConditionalGeneration(config).train(), dict(input_ids=ids, labels=ids)
    config = transformers.WhisperConfig(vocab_size=97, d_model=32, encoder_layers=2, decoder_layers=2,
                                        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                        decoder_ffn_dim=64, num_mel_bins=8, max_source_positions=16,
                                        max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                        decoder_start_token_id=1)
    model = transformers.WhisperForConditionalGeneration(config).train()
    return model, dict(input_features=torch.randn(2, 8, 32, generator=g), labels=ids[:, :8])


class MarkedClock(opclock.OpClock):
    """The interpreter's per-op marks, each with an allocator mark of ``meter``."""

    def __init__(self, meter):
        super().__init__("cpu")
        self.meter, self.at = meter, []

    def mark(self, program, code, stage, branch):
        self.at.append(self.meter.mark(reset_peak=False))
        super().mark(program, code, stage, branch)


ratios = {}
for name in ("whisper", "t5"):
    model, kw = make(name)
    w = te.auto_checkpoint(model, "100%", backend="cpu", caller_keeps="loss")
    w.prepare(**kw)
    for p in w.parameters():
        p.grad = torch.zeros_like(p)  # parameter gradients outside the measurement
    w.replan("60%")
    w(**kw).loss.backward()
    w.measure_memory(1)
    w(**kw).loss.backward()
    r = w.memory_report()[-1]
    e = w.executor._last
    chain, schedule = e.chain, e.plan.schedule
    drawing = sum(bool(x) for x in e.rng[1:])
    with MemoryMeter("cpu") as mt:
        m0 = mt.mark()
        with MarkedClock(mt) as clock:
            w(**kw).loss.backward()
        m1 = mt.mark()
    whole = mt.between(m0, m1).peak
    pred = w.plan.predicted_peak_bytes
    ratios[name] = (whole / pred, drawing)
    print(f"{name}: capture {w.capture.method}, {chain.n} chain stages; budget {w.plan.budget_bytes} B, "
          f"predicted {pred} B; "
          f"wrapper meter {r.beyond_param_grads} B; whole step {whole} B = {whole / pred:.3f} x the prediction; "
          f"stages drawing random numbers: {drawing}")
    # where the cost model holds more than the step: each forward op's change, modelled against measured
    arr = chain.padded()
    held = Holdings(arr, 0, grads=(chain.n,))
    level = lambda k: mt.between(m0, clock.at[k]).delta  # noqa: E731
    tape_run, checkpoint, shown = [], [], False
    for k, op in enumerate(schedule):
        change = held.apply(op, k)[1]
        if op.kind.value not in ("fwd_tape", "fwd_nograd") or k == 0:
            continue
        over = change - (level(k) - level(k - 1))
        if over <= 0:
            continue
        s = op.stage
        if op.kind.value == "fwd_tape" and s - 1 in held.tapes:
            tape_run.append(over)
            if not shown:  # the first such boundary: what the stage before returned and this one drops
                shown = True
                members = chain.provenance["members"]
                stages = {st["name"]: st for st in e.profile["stages"]}
                before = stages[members[s - 2][-1]]
                code = w.capture.stages[int(members[s - 1][0].split(":")[0]) - 1].graph_module.code.strip()
                print(f"   e.g. fwd_tape({s}) after fwd_tape({s - 1}): the model adds {int(arr['tape_bytes'][s])} B, "
                      f"the step {int(arr['tape_bytes'][s]) - over} B; stage {members[s - 2][-1]} "
                      f"made x={before['x']} B, "
                      f"out_saved_bytes={before['out_saved_bytes']} (its output holds {before['held_from']}: "
                      f"[maker, bytes]); the next stage:\n      " + "\n      ".join(code.splitlines()))
        elif op.kind.value == "fwd_nograd" and op.keep_input:
            checkpoint.append(over)
    print(f"   modelled above measured: {len(tape_run)} recorded stages after a recorded stage, {sum(tape_run)} B "
          f"(each {sorted(set(tape_run))}); {len(checkpoint)} checkpoints, {sum(checkpoint)} B")

ratio, drawing = ratios["whisper"]
bug = ratio < 0.93 and drawing == 0
print(f"BUG: Whisper's step measures {ratio:.3f} x its prediction with no RNG state reserved" if bug else "ok")
sys.exit(1 if bug else 0)
