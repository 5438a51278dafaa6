"""transformers' tiny encoder-decoders (bench/repros/rv11_hf_encdec_tuple_state_overcount.py's Whisper and T5) under
``auto_checkpoint(model, "60%", backend="cpu", caller_keeps="loss")``: the plan's predicted peak, its storage-exact peak
(Note [Storage-exact peaks] in gpusolve/exact_peak.py) and the whole step's measured peak (a MemoryMeter around the
call and the backward, parameter gradients allocated before), each planned to the model's peak and to the exact peak
(Note [Planning to the exact peak]). Exits 1 where a step measures above its exact peak or its budget.

    PYTHONPATH=.:bench python bench/exact_peak_hf.py [--budget 60%] [--repeat 3]
    PYTHONPATH=.:bench python bench/exact_peak_hf.py --device cuda --width 256 --batch 16 --json FILE

On a GPU the tiny widths are below what the executor reserves for the allocator's blocks (1 MiB): ``--width`` and
``--batch`` scale the models (the defaults are the repro's 32 and 2). ``--json``: every row, with device and command.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "repros"))

try:  # a torchvision built for another torch breaks transformers' imports; these models need none of it
    import torchvision  # noqa: F401
except Exception:  # noqa: BLE001
    for _name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[_name]
    sys.modules["torchvision"] = None

import transformers  # noqa: E402

from _setup import te, torch  # noqa: E402
from gpusolve.exact_peak import exact_peak  # noqa: E402
from gpusolve.schedule import count_recomputations  # noqa: E402
from torch_exec.meter import MemoryMeter  # noqa: E402


def make(name, width: int = 32, batch: int = 2, device: str = "cpu"):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 97, (batch, 16), generator=g)
    if name == "t5":
        config = transformers.T5Config(vocab_size=97, d_model=width, d_ff=2 * width, num_layers=2, num_heads=4,
                                       d_kv=width // 4, decoder_start_token_id=0, dropout_rate=0.0)
        model, kw = transformers.T5ForConditionalGeneration(config).train(), dict(input_ids=ids, labels=ids)
    else:
        config = transformers.WhisperConfig(vocab_size=97, d_model=width, encoder_layers=2, decoder_layers=2,
                                            encoder_attention_heads=4, decoder_attention_heads=4,
                                            encoder_ffn_dim=2 * width, decoder_ffn_dim=2 * width, num_mel_bins=8,
                                            max_source_positions=16, max_target_positions=32, pad_token_id=0,
                                            bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
        model = transformers.WhisperForConditionalGeneration(config).train()
        kw = dict(input_features=torch.randn(batch, 8, 32, generator=g), labels=ids[:, :8])
    return model.to(device), {k: v.to(device) for k, v in kw.items()}


def measure(w, kw, device: str = "cpu") -> int:
    w(**kw).loss.backward()
    with MemoryMeter(device) as mt:
        m0 = mt.mark()
        w(**kw).loss.backward()
        m1 = mt.mark()
    return mt.between(m0, m1).peak


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", default="60%")
    parser.add_argument("--repeat", type=int, default=1, help="profiles per model and planning (plans vary with the "
                                                               "profile's times)")
    parser.add_argument("--models", default="whisper,t5")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--width", type=int, default=32, help="d_model (a multiple of 4)")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write every row here (with device, date and command)")
    args = parser.parse_args(argv)
    backend = "cpu" if args.device == "cpu" else "auto"
    over, rows = 0, []
    for name in args.models.split(","):
        for _ in range(args.repeat):
            model, kw = make(name, args.width, args.batch, args.device)
            w = te.auto_checkpoint(model, "100%", backend=backend, caller_keeps="loss")
            w.prepare(**kw)
            for p in w.parameters():
                p.grad = torch.zeros_like(p)  # parameter gradients outside the measurement
            for exact_plans in (False, True):  # Note [Planning to the exact peak]: off (the model's peak), on
                w.executor.plan_exact_peak = exact_plans  # one profile: the two plans are solved on the same times
                w.replan(args.budget)
                w(**kw).loss.backward()
                e = w.executor._last
                plan = w.plan
                whole = measure(w, kw, args.device)
                ex = exact_peak(e.chain, plan.schedule)
                over += ex.peak_bytes < whole or whole > plan.budget_bytes
                rows.append(dict(model=name, plan="exact" if exact_plans else "model", stages=e.chain.n,
                                 budget_bytes=plan.budget_bytes, predicted_peak_bytes=plan.predicted_peak_bytes,
                                 exact_peak_bytes=ex.peak_bytes, model_peak_bytes=ex.model_peak_bytes,
                                 measured_peak_bytes=whole, overhead=plan.overhead))
                print(f"{name} ({'exact' if exact_plans else 'model'} plan): {e.chain.n} stages, budget "
                      f"{plan.budget_bytes} B, predicted {plan.predicted_peak_bytes} B, exact {ex.peak_bytes} B "
                      f"(model {ex.model_peak_bytes} B), measured {whole} B = {whole / plan.budget_bytes:.3f} x the "
                      f"budget, {whole / ex.model_peak_bytes:.3f} x the model's peak, {whole / ex.peak_bytes:.3f} x "
                      f"the exact; no-grad forwards {sum(op.kind.value == 'fwd_nograd' for op in plan.schedule)}, "
                      f"recomputations {count_recomputations(plan.schedule)}, predicted overhead "
                      f"{plan.overhead:+.1%}", flush=True)
    if args.json:
        device = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
        args.json.write_text(json.dumps(dict(
            device=device, torch=torch.__version__, date=datetime.datetime.now(datetime.timezone.utc).isoformat(),
            command="python " + " ".join([sys.argv[0], *(sys.argv[1:] if argv is None else argv)]), rows=rows),
            indent=1))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
