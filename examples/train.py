"""Train a model on synthetic data under a memory budget with gpusolve's optimal checkpointing.

    python examples/train.py --model resnet --budget 70%          # CPU, a torchvision-style ResNet
    python examples/train.py --model gpt2 --budget 60% --steps 5  # transformers' GPT-2 (small config)
    python examples/train.py --model tv:resnet50 --batch 64 --size 224 --budget 8GiB --device cuda

``--model``: one of the models in ``examples/models.py`` (resnet, densenet, tvdensenet, transformer, gated, gpt2)
or ``tv:<name>`` for a torchvision model (needs torchvision). The model is wrapped with ONE call,
``torch_exec.auto_checkpoint(model, budget)``, and trained as usual; the first step captures the
graph, profiles the stages and solves the plan (printed); later steps reuse it.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import models  # noqa: E402
import torch_exec as te  # noqa: E402
from gpusolve import BackendUnavailableError, InfeasibleBudgetError, format_bytes  # noqa: E402
from gpusolve.cli import attach_dash_values  # noqa: E402
from gpusolve.units import parse_budget, parse_percentage  # noqa: E402

MODELS = ("resnet", "densenet", "tvdensenet", "transformer", "gated", "gpt2")


class Parser(argparse.ArgumentParser):
    """Bad flags in one line, no usage block."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def budget_arg(text: str):
    if text.lower() == "none":
        return None
    try:
        if text.strip().endswith("%"):
            parse_percentage(text)
            return text
        return parse_budget(text, None, "budget")  # bytes; a fraction of a byte refused (the one rule)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def model_arg(text: str) -> str:
    if text in MODELS or text.startswith("tv:"):
        return text
    raise argparse.ArgumentTypeError(f"unknown model {text!r}: one of {', '.join(MODELS)} or tv:<torchvision name>")


def build(name: str, batch: int, size: int, classes: int, device):
    """(model, make_batch() -> (args, kwargs), loss_of(output, batch))."""
    if name in ("transformer", "gated", "gpt2"):
        model, args, kwargs, _ = models.make(name, batch=batch)
        vocab = model.config.vocab_size if name == "gpt2" else model.wte.num_embeddings
        key = "labels" if name == "gpt2" else "targets"
        tokens = args[0].shape[1]

        def make_batch():
            ids = torch.randint(0, vocab, (batch, tokens), device=device)
            extra = {"use_cache": False} if name == "gpt2" else {}
            return (ids,), {key: ids, **extra}

        def loss_of(out, _):
            return out.loss if name == "gpt2" else out if name == "gated" else out["loss"]
        return model, make_batch, loss_of
    if name.startswith("tv:"):
        try:
            from torchvision import models as tv
        except Exception as err:  # noqa: BLE001
            raise SystemExit(f"train.py: error: --model {name} needs torchvision ({type(err).__name__}: {err})") from None
        if not hasattr(tv, name[3:]):
            raise SystemExit(f"train.py: error: torchvision has no model {name[3:]!r}")
        model = getattr(tv, name[3:])(weights=None, num_classes=classes)
    else:
        cnn = {"resnet": models.ResNet, "densenet": models.DenseNet, "tvdensenet": models.TVDenseNet}
        if name not in cnn:
            raise SystemExit(f"train.py: error: unknown --model {name!r}; choose from {', '.join(MODELS)}")
        model = cnn[name](classes=classes)
    centers = torch.randn(classes, 3, 1, 1, device=device)  # class-dependent means: the loss goes down
    labels = {}

    def make_batch():
        labels["y"] = torch.randint(0, classes, (batch,), device=device)
        return (centers[labels["y"]] + torch.randn(batch, 3, size, size, device=device),), {}

    def loss_of(out, _):
        return F.cross_entropy(out, labels["y"])
    return model, make_batch, loss_of


def main(argv=None):
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet", type=model_arg, help=f"{', '.join(MODELS)} or tv:<name>")
    parser.add_argument("--budget", default="70%", type=budget_arg,
                        help="memory budget: bytes (8GiB, 500MB), a percentage of plain autograd's peak (50%%), or none")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=32, help="image side (image models)")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda", "exact"), help="solver backend")
    args = parser.parse_args(attach_dash_values(sys.argv[1:] if argv is None else argv, ("--budget",)))
    if args.batch < 1 or args.steps < 1 or args.size < 8:
        parser.error("--batch and --steps must be >= 1 and --size >= 8")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA device here; use --device cpu")

    torch.manual_seed(0)
    device = torch.device(args.device)
    model, make_batch, loss_of = build(args.model, args.batch, args.size, args.classes, device)
    model.to(device).train()
    model = te.auto_checkpoint(model, args.budget, backend=args.backend)  # the one call
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    warnings.simplefilter("ignore", te.CPUTimingWarning)
    batch_args, batch_kwargs = make_batch()
    if args.budget is not None:
        started = time.perf_counter()
        try:
            model.prepare(*batch_args, **batch_kwargs)
        except (InfeasibleBudgetError, BackendUnavailableError, te.CaptureError) as err:
            raise SystemExit(f"train.py: error: {err}") from None
        print(f"captured, profiled and solved in {time.perf_counter() - started:.2f} s ({model.capture.notes[0]})")
        print(model.plan.summary())

    from tqdm import tqdm
    bar = tqdm(range(args.steps), desc="train", unit="step")
    for _ in bar:
        batch_args, batch_kwargs = make_batch()
        opt.zero_grad(set_to_none=True)
        out = model(*batch_args, **batch_kwargs)
        loss = loss_of(out, batch_args)
        loss.backward()
        opt.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
    if device.type == "cuda":
        print(f"peak allocated: {format_bytes(torch.cuda.max_memory_allocated(device))}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
