"""Small helpers shared by the benchmark scripts (not part of the package)."""
from __future__ import annotations

import os
import platform
import re
import sys


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what the platform module knows."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_description() -> str:
    """``<model> (<n> logical CPUs)``: how results files name a CPU machine."""
    return f"{cpu_model()} ({os.cpu_count()} logical CPUs)"


def command_line(script: str, argv=None) -> str:
    """``python bench/<script> <arguments>``: how results files record the command that made them
    (``argv``, or the process's own arguments when None)."""
    return " ".join(["python", f"bench/{script}", *(sys.argv[1:] if argv is None else argv)])


def write_cpu_record(out, script: str, argv, rows: list, **fields) -> dict:
    """The record of a CPU run (device, date, command, torch's version, ``fields``, ``rows``) written to
    ``out`` with the suffix ``.json``; returned for the ``.md`` beside it."""
    import datetime
    import json
    from pathlib import Path

    import torch
    record = {"device": cpu_description(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "command": command_line(script, argv), "torch": torch.__version__, **fields, "rows": rows}
    Path(out).with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def record_header(record: dict, title: str, what: str) -> list[str]:
    """The first lines of a results ``.md``: its title, the device, torch, date and command of
    ``record`` (:func:`write_cpu_record`), then ``what`` the run measured."""
    return [f"# {title}", "", f"Device: {record['device']}; torch {record['torch']}, 1 thread; date {record['date']}.",
            f"Command: `{record['command']}`. {what}", ""]


def number_list(convert):
    """An argparse ``type`` for a comma-separated list of ``convert`` (int, float) values: a bad list is
    refused by argparse, naming the option (``argument --fractions: 'abc' is not ...``)."""
    import argparse

    def parse(text: str) -> list:
        try:
            values = [convert(part) for part in text.split(",") if part.strip()]
        except ValueError:
            values = []
        if not values:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of {convert.__name__} values "
                                             f"(e.g. {convert(1)},{convert(2)})")
        return values
    parse.__name__ = f"{convert.__name__} list"
    return parse


def slug(text: str) -> str:
    """``text`` (a device name) as part of a results file name: lower case, every run of characters
    other than a-z and 0-9 one ``_``, none at either end."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


# torchvision's networks at sizes a CPU runs in minutes (batch, image side): bench/fidelity.py, bench/auto_models.py
TORCHVISION_CPU_SIZES = {"densenet121": (4, 64), "resnet50": (8, 96), "vgg16": (4, 96)}


def torchvision_models():
    """``torchvision.models``, or ImportError saying in one line why torchvision does not load (PyPI's
    torchvision beside a CPU-only torch raises RuntimeError: ``operator torchvision::nms does not exist``)."""
    try:
        from torchvision import models
    except Exception as err:
        raise ImportError(f"torchvision does not load ({type(err).__name__}: {str(err).splitlines()[0]}); install "
                          f"the torchvision built for your torch") from None
    return models


def measured_steps(wrapped, step, least: int, plain: int, fractions=(0.0, 0.5)) -> list[dict]:
    """One step (``step()``: the wrapper's forward and backward) measured by the CPU meter at each budget a
    fraction f of the way from ``least`` to ``plain`` (parameter gradients allocated, one step before):
    per fraction its budget, the plan's prediction, the measured peak and whether it held."""
    import torch

    from torch_exec.meter import measure_peak
    out = []
    for f in fractions:
        wrapped.replan(int(least + f * (plain - least)))
        for p in wrapped.parameters():
            p.grad = torch.zeros_like(p)
        step()
        _, reading = measure_peak(step)
        plan = wrapped.plan
        out.append(dict(fraction=f, budget_bytes=plan.budget_bytes, predicted_peak_bytes=plan.predicted_peak_bytes,
                        measured_peak_bytes=reading.peak, within_budget=reading.peak <= plan.budget_bytes))
    return out


def steps_cells(steps: list[dict]) -> list[str]:
    """A results table's cells for :func:`measured_steps`: ``measured / budget`` per fraction, then held
    (``yes`` or ``NO``)."""
    return [f"{s['measured_peak_bytes']} / {s['budget_bytes']}" for s in steps] + [
        "yes" if all(s["within_budget"] for s in steps) else "NO"]


def unfused_profile_or_exit(parser, path):
    """``Chain.from_profile(path, fuse_aliasing=False)`` (every measured stage a stage), or the script's
    one-line error and exit 2 when the profile is missing or malformed."""
    from gpusolve import Chain
    try:
        return Chain.from_profile(path, fuse_aliasing=False)
    except (OSError, ValueError, KeyError) as err:
        parser.exit(2, f"{parser.prog}: profile {path}: {err}\n")


class SavedRows(list):
    """A list of result rows that calls ``save()`` after each row is appended: a benchmark killed at its time
    limit (bench/gpu_session.py's steps) keeps every row it measured."""

    def __init__(self, save):
        super().__init__()
        self.save = save

    def append(self, row) -> None:
        super().append(row)
        self.save()
