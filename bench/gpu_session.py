"""The GPU work of issues 7, 10 and 11 in a few long device calls, each inside the 10-minute limit.

A session is lent a GPU by chance and for 30 device minutes (a machine's start included), so the work is
cut into stages of about 9 minutes, in the order of what matters most; each call runs one stage on a
fresh machine and writes everything under ``--out`` (the device tool's ``$OUT``):

- ``stageN.log``: every step's output as it runs (it comes back even if the call is killed);
- ``stageN_summary.json``: per step its command, exit code, seconds, or why it was skipped;
- ``stageN_results.tar.gz``: the result files (JSON, Markdown, ncu reports, plots) of the stage.

Stages (``--list`` prints the steps and their time limits):

1. correctness: ``pytest -m gpu``, every kernel under ``compute-sanitizer`` (memcheck, racecheck) on
   small instances (``bench/gpu_sanitize.py``), the host link (``torch_exec.offload.measure_link``) and
   what it makes of offloading (``bench/offload_curves.py --link-json``: whether wider copy windows,
   Note [Any-window bound], can pay on this machine);
2. solver: ``bench/solver_speed.py`` (cuda, cpu, rotor-c; M = 1024 ... 65536), ``ncu`` on ``dp_bulk``
   and ``dp_diag`` (densenet121_fine_b32, M = 8192), ``bench/bucket_study.py``, ``bench/join_speed.py``;
3. executor: ``bench/executor.py`` on DenseNet-121 and ResNet-50, ``bench/offload_executor.py``;
4. executor, the rest: ``bench/executor.py`` on VGG-16 and GPT-2, ``bench/fidelity.py`` on the GPU.

Each step has a time limit; a step that cannot start with at least its minimum before the stage's
``--seconds`` run out is skipped (and says so), so the call ends before the device tool kills it.
Every stage starts with ``pip install --no-deps --no-build-isolation -e .`` (a fresh machine is bare).
Rotor's C DP needs the ``rockmate==2.0.0`` sdist, which the device cannot download: fetch it here into
the git-ignored ``.whl/`` and carry that folder::

    python3 -m pip download rockmate==2.0.0 --no-deps --no-binary :all: -d .whl
    # device tool: run(command="python3 bench/gpu_session.py --stage 1 --out $OUT", carry=[".whl"])

Without it the solver stage runs cuda and cpu only, and its log says so. ``--dry-run`` prints each
step's command without running it. Nothing here decides a figure: the bench scripts record theirs
(device, date, command) and the results still have to be read and copied to ``bench/results/``.
Back here, ``python bench/profile_reference.py <the profile_*.json of stages 3-4> --name
profile_reference_<gpu>`` puts ``torch_exec``'s own profiles beside their whole-chain references (the
bundled DenseNet profiles' summed no-grad forward is 25-30 % above theirs: is ours?).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROCKMATE_SDIST = ROOT / ".whl" / "rockmate-2.0.0.tar.gz"
ROTOR_CACHE_DIR = "gpusolve-bench/rotor"  # under XDG_CACHE_HOME, as bench/solver_speed.py reads it


@dataclass(frozen=True)
class Step:
    name: str
    stage: int
    limit_s: int      # killed after this
    min_s: int        # skipped unless this much of the stage is left
    command: str      # bash; {R} = the stage's results folder, {PY} = the interpreter, {backends} solver_speed's

    def render(self, results: Path, backends: str) -> str:
        return self.command.format(R=shlex.quote(str(results)), PY=shlex.quote(sys.executable), backends=backends)


INSTALL = "{PY} -m pip install -q --no-deps --no-build-isolation -e . && {PY} -c 'import gpusolve, torch_exec'"
ENV = ("nvidia-smi; {PY} -c 'import sys, torch, cupy, numpy; print(sys.version); print(\"torch\", torch.__version__, "
       "torch.version.cuda, torch.cuda.get_device_name(0)); print(\"cupy\", cupy.__version__, "
       "cupy.cuda.runtime.runtimeGetVersion()); print(\"numpy\", numpy.__version__)'; nproc; free -g")
SANITIZE = "compute-sanitizer --tool {tool} --print-limit 20 --error-exitcode 3 {{PY}} bench/gpu_sanitize.py"
LINK = ("{PY} -c 'import json, torch_exec.offload as o; r = o.measure_link(); print(json.dumps(r, indent=1))' "
        "| tee {R}/link_measured.json")
NCU_SOLVE = ("from gpusolve import Chain, solve; from gpusolve.simulate import store_all_peak_bytes as p; "
             "c = Chain.load(\"densenet121_fine_b32\", fuse_aliasing=False); b = p(c) // 2; "
             "print(solve(c, b, bucket=-(-b // 8192), backend=\"cuda\").summary())")


def ncu(kernel: str, skip: int, count: int = 3) -> str:
    """ncu on ``count`` launches of ``kernel`` after ``skip`` of them, in the solve of the issue's reference
    instance (densenet121_fine_b32 unfused, half the store-all peak, M = 8192); clocks left alone
    (the device's METHOD.md); the report as a file and as text."""
    rep = "{R}/ncu_" + kernel
    return (f"ncu --clock-control none --section SpeedOfLight --section Occupancy --section MemoryWorkloadAnalysis "
            f"-k {kernel} --launch-skip {skip} --launch-count {count} -o {rep} -f {{PY}} -c '{NCU_SOLVE}' "
            f"&& ncu --import {rep}.ncu-rep --page details > {rep}.txt; head -c 12000 {rep}.txt")


STEPS = [
    Step("env", 1, 60, 10, ENV),
    Step("install", 1, 120, 30, INSTALL),
    Step("link", 1, 60, 20, LINK),
    Step("offload-bound", 1, 90, 30, "{PY} bench/offload_curves.py --link-json {R}/link_measured.json "
                                     "--profiles resnet50_b128,densenet121_b64 --out {R}"),
    Step("pytest-gpu", 1, 330, 120,
         "{PY} -m pytest -m gpu -q -rfEs -p no:cacheprovider --junitxml={R}/pytest_gpu.xml 2>&1 "
         "| tee {R}/pytest_gpu.txt; exit ${{PIPESTATUS[0]}}"),
    Step("sanitize-memcheck", 1, 90, 40, SANITIZE.format(tool="memcheck")),
    Step("sanitize-racecheck", 1, 120, 40, SANITIZE.format(tool="racecheck")),

    Step("install", 2, 120, 30, INSTALL),
    Step("solver-speed", 2, 300, 120,
         "{PY} bench/solver_speed.py --backends {backends} --buckets 1024,4096,8192,16384,65536 --max-seconds 10 "
         "--out {R}"),
    Step("ncu-bulk", 2, 100, 50, ncu("dp_bulk", skip=10)),
    Step("ncu-diag", 2, 100, 50, ncu("dp_diag", skip=100)),
    Step("bucket-study", 2, 120, 40, "{PY} bench/bucket_study.py --backend cuda --out {R}"),
    Step("join-speed", 2, 90, 40, "{PY} bench/join_speed.py --buckets 256,1024,4096 --repeats 2 --out {R}"),

    Step("install", 3, 120, 30, INSTALL),
    Step("executor-densenet121", 3, 200, 90, "{PY} bench/executor.py --networks densenet121 --out {R}/densenet121"),
    Step("executor-resnet50", 3, 170, 90, "{PY} bench/executor.py --networks resnet50 --out {R}/resnet50"),
    Step("offload-executor", 3, 200, 90, "{PY} bench/offload_executor.py --out {R}"),

    Step("install", 4, 120, 30, INSTALL),
    Step("executor-vgg16", 4, 170, 90, "{PY} bench/executor.py --networks vgg16 --out {R}/vgg16"),
    Step("executor-gpt2", 4, 170, 90, "{PY} bench/executor.py --networks gpt2 --out {R}/gpt2"),
    Step("fidelity-gpu", 4, 200, 90, "{PY} bench/fidelity.py --device cuda --no-sequential --out {R}"),
]


def stage_steps(stage: int) -> list[Step]:
    return [s for s in STEPS if s.stage == stage]


def prepare_rotor(env: dict) -> str:
    """Backends for solver_speed: rotor-c only with the carried sdist (the device has no internet)."""
    if not ROCKMATE_SDIST.exists():
        return "cuda,cpu"
    cache = Path(env["XDG_CACHE_HOME"]) / ROTOR_CACHE_DIR
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROCKMATE_SDIST, cache / ROCKMATE_SDIST.name)
    return "cuda,cpu,rotor-c"


def run_stage(stage: int, out: Path, seconds: float, dry_run: bool, only: set[str] | None) -> int:
    started = time.monotonic()
    results = out / f"stage{stage}_results"
    results.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", XDG_CACHE_HOME="/tmp/gpu_session_cache")
    backends = prepare_rotor(env)
    summary = {"stage": stage, "seconds_allowed": seconds, "steps": []}
    log_path = out / f"stage{stage}.log"
    failed = 0
    with open(log_path, "a", buffering=1) as log:
        def say(text: str) -> None:
            print(text, flush=True)
            log.write(text + "\n")

        if backends == "cuda,cpu" and any(s.name == "solver-speed" for s in stage_steps(stage)):
            say(f"note: {ROCKMATE_SDIST.relative_to(ROOT)} not carried: solver-speed runs without rotor-c "
                f"(module docstring says how to bring it)")
        for step in stage_steps(stage):
            if only and step.name not in only and step.name != "install":
                continue
            command = step.render(results, backends)
            left = seconds - (time.monotonic() - started)
            record = {"name": step.name, "command": command, "limit_s": step.limit_s}
            if left < step.min_s:
                record["skipped"] = f"{left:.0f} s left of the stage, the step needs at least {step.min_s} s"
                say(f"=== {step.name}: SKIPPED ({record['skipped']})")
                summary["steps"].append(record)
                continue
            limit = int(min(step.limit_s, left))
            say(f"=== {step.name} (limit {limit} s): {command}")
            if dry_run:
                summary["steps"].append(record | {"dry_run": True})
                continue
            clock = time.monotonic()
            # its own process group: a timeout kills the whole pipeline (pytest | tee, ncu's child), not
            # only bash, so nothing goes on using the GPU during the next step
            proc = subprocess.Popen(["bash", "-o", "pipefail", "-c", command], cwd=ROOT, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                rc = "timeout"
            record.update(rc=rc, seconds=round(time.monotonic() - clock, 1))
            failed += rc != 0
            say(f"=== {step.name}: rc {rc} in {record['seconds']} s")
            summary["steps"].append(record)
        summary["seconds"] = round(time.monotonic() - started, 1)
        (out / f"stage{stage}_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        archive = out / f"stage{stage}_results.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(results, arcname=results.name)
        shutil.rmtree(results)  # only the archive travels back (the tool returns at most 8 files)
        say(f"=== stage {stage}: {failed} step(s) failed; {archive.name}, {log_path.name}, "
            f"stage{stage}_summary.json written in {summary['seconds']} s")
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", type=int, choices=sorted({s.stage for s in STEPS}))
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")),
                        help="where the log, summary and results archive go (default $OUT, else ./out)")
    parser.add_argument("--seconds", type=float, default=540.0,
                        help="time the stage may take; steps that cannot get their minimum are skipped "
                             "(default 540: inside the device tool's 600 s per call)")
    parser.add_argument("--steps", default="", help="comma list: run only these steps of the stage (and install)")
    parser.add_argument("--list", action="store_true", help="print the stages' steps and exit")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    if args.list:
        for s in STEPS:
            print(f"stage {s.stage}  {s.name:<22} limit {s.limit_s:>4} s  min {s.min_s:>4} s")
        print("total limits: " + ", ".join(f"stage {n} {sum(s.limit_s for s in stage_steps(n))} s"
                                            for n in sorted({s.stage for s in STEPS})))
        return 0
    if args.stage is None:
        parser.error("give --stage N (or --list)")
    only = {s for s in args.steps.split(",") if s} or None
    unknown = (only or set()) - {s.name for s in stage_steps(args.stage)}
    if unknown:
        parser.error(f"stage {args.stage} has no step(s) {sorted(unknown)}: see --list")
    args.out.mkdir(parents=True, exist_ok=True)
    return run_stage(args.stage, args.out, args.seconds, args.dry_run, only)


if __name__ == "__main__":
    sys.exit(main())
