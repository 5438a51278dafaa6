"""Train a small CNN on synthetic data under a memory budget with gpusolve's optimal checkpointing.

    python examples/train.py --budget 6MiB                      # CPU, built-in small CNN
    python examples/train.py --model resnet18 --batch 64 --size 224 --budget 2GiB --device cuda

The model is a torchvision model cut into stages (``--model resnet18`` etc., needs torchvision) or a
built-in small CNN (``--model small``, the default). The loss is the chain's last stage. The first
step profiles the stages and solves the plan (printed); later steps reuse it.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections import OrderedDict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import torch_exec as te  # noqa: E402
from gpusolve import InfeasibleBudgetError, format_bytes, store_all_peak_bytes  # noqa: E402
from torch_exec.split import CrossEntropyStage, split_model  # noqa: E402


def small_cnn(classes: int, width: int = 16) -> nn.Sequential:
    layers, c_in = [], 3
    for i, c_out in enumerate((width, width, 2 * width, 2 * width, 4 * width)):
        layers += [(f"conv{i}", nn.Conv2d(c_in, c_out, 3, padding=1)), (f"bn{i}", nn.BatchNorm2d(c_out)),
                   (f"relu{i}", nn.ReLU(inplace=True))]
        if i % 2 == 1:
            layers.append((f"pool{i}", nn.MaxPool2d(2)))
        c_in = c_out
    layers += [("avgpool", nn.AdaptiveAvgPool2d(1)), ("flatten", nn.Flatten()), ("dropout", nn.Dropout(0.1)),
               ("fc", nn.Linear(c_in, classes))]
    return nn.Sequential(OrderedDict(layers))


def build(name: str, classes: int) -> nn.Sequential:
    if name == "small":
        return small_cnn(classes)
    try:
        from torchvision import models
    except Exception as err:
        raise SystemExit(f"--model {name} needs torchvision ({type(err).__name__}: {err}); use --model small") from None
    return split_model(getattr(models, name)(weights=None, num_classes=classes))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small", help="small (built in) or a torchvision model name")
    parser.add_argument("--budget", default="6MiB", help="activation memory budget, e.g. 24MiB, 2GiB; 'none' = plain")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=32, help="image side")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--backend", default="auto", help="solver backend: auto, cpu, cuda")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    device = torch.device(args.device)
    targets = torch.zeros(args.batch, dtype=torch.long, device=device)
    stages = build(args.model, args.classes)
    stages.add_module("loss", CrossEntropyStage(targets))
    stages.to(device)
    budget = None if args.budget.lower() == "none" else args.budget
    model = te.CheckpointedSequential(stages, budget=budget, backend=args.backend)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # Synthetic data: class-dependent means, so the loss goes down.
    centers = torch.randn(args.classes, 3, 1, 1, device=device)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", te.CPUTimingWarning)
        x0 = torch.randn(args.batch, 3, args.size, args.size, device=device)
        if budget is not None:
            started = time.perf_counter()
            try:
                model.prepare(x0)
            except InfeasibleBudgetError as err:
                raise SystemExit(f"error: {err}") from None
            print(f"profiled and solved in {time.perf_counter() - started:.2f} s: {model.chain.summary()}")
            print(model.plan.summary())
            print(f"store-all would need {format_bytes(store_all_peak_bytes(model.chain))} (model)")

    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency of gpusolve
        def tqdm(it, **_):
            return it
    bar = tqdm(range(args.steps), desc="train", unit="step")
    for _ in bar:
        labels = torch.randint(0, args.classes, (args.batch,), device=device)
        x = centers[labels] + torch.randn(args.batch, 3, args.size, args.size, device=device)
        targets.copy_(labels)
        opt.zero_grad(set_to_none=True)
        loss = model(x)
        loss.backward()
        opt.step()
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(loss=f"{loss.item():.3f}")
    if device.type == "cuda":
        print(f"peak allocated: {format_bytes(torch.cuda.max_memory_allocated(device))}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
