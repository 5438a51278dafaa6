"""The GPU work of issues 7 and 11, run in priority order across the sessions that are lent a GPU.

A session lent a GPU has **15 device minutes**, the machine's start (a minute or two) included, and one
call runs at most 10 minutes; no session knows whether the next will get a GPU. So the work is a list
of steps in the order of what matters most (:data:`STEPS`), and a ledger in the repository,
``bench/results/gpu_session_ledger.json``, says which have run to their end (exit 0). Each GPU session:

1. here: ``python bench/gpu_session.py --list`` shows the steps, the ledger's and what is pending;
   bring Rotor's sdist (below) if ``solver-speed-baselines`` is pending;
2. device tool: ``run(command="python3 bench/gpu_session.py --pending --out $OUT", timeout_s=480,
   carry=[".whl"])``: the setup steps (``env``, ``install``), then the pending steps in order until
   ``--seconds`` (default 420) run out: a step that cannot get its minimum is skipped and stays
   pending, and the call ends before the tool's limit;
3. here: ``python bench/gpu_session.py --record <files_at>``: the run's results go to
   ``bench/results/gpu_runs/<date>_<device>/``, the run to the ledger (commit them);
4. a step that failed on something fixable: fix it here, then rerun it alone with the minutes left
   (``--steps NAME --seconds S``; a fresh machine, its start counted); else give the machine back.

A call leaves under ``--out`` (the device tool's ``$OUT``, at most 8 files come back):

- ``run.log``: every step's output as it runs (it comes back even if the call is killed);
- ``run_summary.json``: the device, per step its command, exit code and seconds, or why it was skipped;
- ``run_results.tar.gz``: the result files (JSON, Markdown, ncu reports, plots, profiles), archived again after
  each step with the summary, so that a call killed mid-run brings back what it finished.

Rotor's C DP (``solver-speed-baselines``'s rotor-c column) needs the ``rockmate==2.0.0`` sdist, which the device
cannot download: fetch it here into the git-ignored ``.whl/`` and carry that folder::

    python3 -m pip download rockmate==2.0.0 --no-deps --no-binary :all: -d .whl

Without it ``solver-speed-baselines`` runs the CPU backend only, and the log says so. Wheels carried in ``.whl/``
(transformers 5.24, whose BART the tests need: the machine's 5.17 draws a random number for LayerDrop at 0) are
installed by ``install`` into ``/tmp/gpu_session_site``, first on every step's ``PYTHONPATH``. ``--dry-run`` prints each
step's command without running it. Nothing here decides a figure: the bench scripts record theirs
(device, date, command); the README quotes them from the recorded files. Afterwards,
``python bench/profile_reference.py <the recorded profile_*.json> --name profile_reference_<gpu>`` puts
``torch_exec``'s own profiles beside their whole-chain references (the bundled DenseNet profiles' summed
no-grad forward is 25-30 % above theirs: is ours?).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from _common import slug  # noqa: E402

ROCKMATE_SDIST = ROOT / ".whl" / "rockmate-2.0.0.tar.gz"
ROTOR_CACHE_DIR = "gpusolve-bench/rotor"  # under XDG_CACHE_HOME, as bench/solver_speed.py reads it
LEDGER = ROOT / "bench" / "results" / "gpu_session_ledger.json"
LEDGER_FORMAT = "gpu-session-ledger/1"
RUNS = ROOT / "bench" / "results" / "gpu_runs"
SETUP = "setup"  # the item of the steps every call runs first and no ledger records


@dataclass(frozen=True)
class Step:
    name: str
    item: str         # what it measures: "7.2" is issue 7, item 2; SETUP runs in every call
    limit_s: int      # killed after this
    min_s: int        # skipped (and left pending) unless this much of the call's --seconds is left
    command: str      # bash; {R} = the results folder, {PY} = the interpreter, {baselines} solver_speed's CPU ones

    def render(self, results: Path, baselines: str) -> str:
        return self.command.format(R=shlex.quote(str(results)), PY=shlex.quote(sys.executable), baselines=baselines)


WHEEL_SITE = "/tmp/gpu_session_site"  # carried wheels (.whl/*.whl) go here, first on the steps' PYTHONPATH
# the wheels' loop grouped: a failed install of the project fails the step (a review: `...; done; true` made the
# whole step exit 0, bench/repros/rv14_review_install_exit_status.py); --upgrade: a warm machine's site dir is replaced
INSTALL = ("{PY} -m pip install -q --no-deps --no-build-isolation -e . && {PY} -c 'import gpusolve, torch_exec' && "
           f"{{{{ for w in .whl/*.whl; do [ -e \"$w\" ] || continue; {{PY}} -m pip install -q --no-deps --upgrade "
           f"--target {WHEEL_SITE} \"$w\" && echo \"carried: $w\"; done; true; }}}}")
ENV = ("nvidia-smi; {PY} -c 'import sys, torch, cupy, numpy; print(sys.version); print(\"torch\", torch.__version__, "
       "torch.version.cuda, torch.cuda.get_device_name(0)); print(\"cupy\", cupy.__version__, "
       "cupy.cuda.runtime.runtimeGetVersion()); print(\"numpy\", numpy.__version__)'; nproc; free -g")
SANITIZE = "compute-sanitizer --tool {tool} --print-limit 20 --error-exitcode 3 {{PY}} bench/gpu_sanitize.py"
LINK = ("{PY} -c 'import json, torch_exec.offload as o; r = o.measure_link(); print(json.dumps(r, indent=1))' "
        "> {R}/link_measured.json && cat {R}/link_measured.json && {PY} bench/offload_curves.py --link-json "
        "{R}/link_measured.json --profiles resnet50_b128,densenet121_b64 --out {R}")
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


# In priority order: a call runs the setup, then what is pending from the top, as time allows.
STEPS = [
    Step("env", SETUP, 60, 10, ENV),
    Step("install", SETUP, 120, 30, INSTALL),
    # issue 7 item 1: correctness first (the kernels and the executor's GPU path have never run)
    Step("pytest-gpu", "7.1", 330, 150,
         "{PY} -m pytest -m gpu -q -rfEs -p no:cacheprovider -o timeout=150 --junitxml={R}/pytest_gpu.xml 2>&1 "
         "| tee {R}/pytest_gpu.txt; exit ${{PIPESTATUS[0]}}"),
    Step("sanitize-memcheck", "7.1", 90, 40, SANITIZE.format(tool="memcheck")),
    Step("sanitize-racecheck", "7.1", 120, 40, SANITIZE.format(tool="racecheck")),
    # dp_recover now walks one policy per block in one launch (DeviceTable.prefetch): its slices checked again
    Step("sanitize-memcheck-batched-recovery", "7.1", 90, 30, SANITIZE.format(tool="memcheck")),
    # item 2: the solver's speed, and what bounds its kernels
    Step("solver-speed", "7.2", 150, 60,
         "{PY} bench/solver_speed.py --backends cuda --buckets 1024,4096,8192,16384,65536 --max-seconds 10 "
         "--tag cuda --out {R}"),
    Step("ncu-bulk", "7.2", 100, 50, ncu("dp_bulk", skip=10)),
    Step("ncu-diag", "7.2", 100, 50, ncu("dp_diag", skip=100)),
    # solver-speed times Problem.build + table + recovery; issue 7's target is the whole solve() (slack band,
    # candidates, simulation too): 55.8 ms for the former warm at M = 8192, 2026-11-26
    Step("solve-whole", "7.2", 90, 40,
         "{PY} bench/frontend_timings.py --backend cuda --buckets 1024,4096,8192 --repeats 3 --out {R}"),
    # dp_bulk is DRAM-bound (ncu, 2026-11-26): a wider band moves fewer bytes per candidate, costs registers
    # and edge work; the launch geometries measured side by side, each checked bit for bit against the default
    Step("geometry-sweep", "7.2", 120, 50, "{PY} bench/geometry_sweep.py --out {R}"),
    # items 4 and 5: the executor on torchvision's and transformers' networks, the profiler's accuracy
    Step("executor-densenet121", "7.4", 200, 90, "{PY} bench/executor.py --networks densenet121 --out {R}/densenet121"),
    Step("executor-resnet50", "7.4", 170, 90, "{PY} bench/executor.py --networks resnet50 --out {R}/resnet50"),
    Step("executor-gpt2", "7.4", 170, 90, "{PY} bench/executor.py --networks gpt2 --out {R}/gpt2"),
    Step("executor-vgg16", "7.4", 170, 90, "{PY} bench/executor.py --networks vgg16 --out {R}/vgg16"),
    # the same instances on the device machine's CPU (NumPy, Rotor's C DP): the ratios of item 2. The CPU
    # side is the slow part (the 1000-stage chain's probe took 15.6 s at M = 16 on a 2-core development
    # machine, helper-1's review), hence a step of its own after the executor's
    Step("solver-speed-baselines", "7.2", 300, 120,
         "{PY} bench/solver_speed.py --backends {baselines} --buckets 1024,4096,8192,16384,65536 --max-seconds 10 "
         "--tag baselines --out {R}"),
    # item 3: the thesis's Figure 4.2 redone
    Step("bucket-study", "7.3", 120, 40, "{PY} bench/bucket_study.py --backend cuda --out {R}"),
    # issue 11 item 5: the host link, what it makes of offloading (Note [Any-window bound]), the executor
    Step("link", "11.5", 150, 50, LINK),
    Step("offload-executor", "11.5", 200, 90, "{PY} bench/offload_executor.py --out {R}"),
    # the rest: the CPU fidelity benchmark's models on the GPU, the join DP's speed
    Step("fidelity-gpu", "7.4", 200, 90, "{PY} bench/fidelity.py --device cuda --no-sequential --out {R}"),
    Step("join-speed", "7.2", 90, 40, "{PY} bench/join_speed.py --buckets 256,1024,4096 --repeats 2 --out {R}"),
    # 2026-11-26's DenseNet-121 run measured plain autograd at 81.1 ms and the 100 % plan (same peak) at
    # 63.8 ms, medians of 5 steps: again with every step's time and plain autograd measured first and last
    Step("executor-densenet121-again", "7.4", 150, 80,
         "{PY} bench/executor.py --networks densenet121 --no-cost-models --steps 10 --out {R}/densenet121_again"),
    # DenseNet-121's combined plans measured 28-37 % above their prediction (2026-11-26); release no longer
    # waits on the host (Note [Release in stream order] in torch_exec/offload.py): again, with each step's
    # time, the host's time to queue it and the allocator's calls (bench/executor.py's Meter), and one
    # more step per plan with every op's time against the simulator's (--op-times: copies waited for, or
    # slower kernels, or an idle stream)
    Step("offload-executor-densenet121-again", "11.5", 150, 80,
         "{PY} bench/offload_executor.py --networks densenet121 --steps 7 --op-times "
         "--out {R}/offload_densenet121_again"),
    # issue 7's <= 2 % at 100 %: the first run forced the solver's schedule through the executor (+2.8 % on
    # ResNet-50, a plan recomputing a little); bench/executor.py now also measures what the wrapper itself does
    Step("executor-resnet50-again", "7.4", 120, 60,
         "{PY} bench/executor.py --networks resnet50 --no-cost-models --out {R}/resnet50_again"),
    # the CUDA join solve spent 0.55 of its 0.60 s at 4095 buckets in its candidates (2026-11-26): the
    # split-budget baseline's every-pair product, now over plateau starts; and the tables copied whole
    Step("join-speed-again", "7.2", 90, 30,
         "{PY} bench/join_speed.py --buckets 256,1024,4096,16384 --repeats 2 --out {R}/join_again"),
    # the offloading paper's own plans executed for the first time (torch_exec/paper_offload.py; the
    # DenseNet step above runs them too): its model's prediction against a measured step, beside ours
    Step("offload-executor-resnet50-paper", "11.5", 120, 60,
         "{PY} bench/offload_executor.py --networks resnet50 --steps 5 --out {R}/offload_resnet50_paper"),
    # 2026-11-28 (H200): the paper's offload-only plans measured over their budgets (17.4-196 MB; fixed since:
    # Note [Empty storages share a key] in torch_exec/paper_offload.py) and DenseNet-121's combined 50 % plan
    # 1 176 576 B over (the allocator's unsplit blocks, learned since: Note [Allocator blocks learned] in
    # torch_exec/executor.py): both networks again, every plan kind
    # Note [Planning to the exact peak] (gpusolve/exact_peak.py) is the executor's default since 2026-11-29, checked
    # against measured peaks on the CPU only: encoder-decoders whose boundaries pass storages on, on the device
    Step("exact-peak-hf-cuda", "7.4", 150, 50,
         "{PY} bench/exact_peak_hf.py --device cuda --width 256 --batch 16 --repeat 2 "
         "--json {R}/exact_peak_hf_cuda.json 2>&1 | tee {R}/exact_peak_hf_cuda.txt; exit ${{PIPESTATUS[0]}}"),
    Step("offload-executor-after-fixes", "11.5", 200, 100,
         "{PY} bench/offload_executor.py --networks densenet121 resnet50 --steps 5 --out {R}/offload_after_fixes"),
    # DenseNet-121's 50 % plan took the host 68.0 of 76.7 ms to queue (2026-11-28): the profile now records the
    # host's queueing time per stage (Note [Host time of a stage] in torch_exec/profiler.py); plans solved with
    # the larger of it and the event time (host_max) against the event times' plans, and each plan's time under
    # both models against its measured step
    Step("executor-densenet121-host", "7.4", 180, 90,
         "{PY} bench/executor.py --networks densenet121 --no-cost-models --host-max --steps 7 "
         "--out {R}/densenet121_host"),
    Step("executor-resnet50-host", "7.4", 120, 60,
         "{PY} bench/executor.py --networks resnet50 --no-cost-models --host-max --steps 5 --out {R}/resnet50_host"),
]
STEP_NAMES = {s.name for s in STEPS}


# ---------------------------------------------------------------------------- the ledger
def load_ledger(path: Path = LEDGER) -> dict:
    if not path.exists():
        return {"format": LEDGER_FORMAT, "runs": []}
    data = json.loads(path.read_text())
    if data.get("format") != LEDGER_FORMAT:
        raise ValueError(f"{path}: format is {data.get('format')!r}, expected {LEDGER_FORMAT!r}")
    return data


def done_steps(ledger: dict) -> set[str]:
    """Steps some recorded run took to their end (exit 0)."""
    return {s["name"] for run in ledger["runs"] for s in run["steps"] if s.get("rc") == 0}


def pending_steps(ledger: dict) -> list[Step]:
    done = done_steps(ledger)
    return [s for s in STEPS if s.item != SETUP and s.name not in done]


def record(folder: Path, ledger_path: Path = LEDGER, runs: Path = RUNS) -> Path:
    """Record the call whose files the device tool brought back into ``folder``: its results and log go to
    ``runs/<date>_<device>/`` and the run to the ledger. Returns that folder."""
    summary_path = folder / "run_summary.json"
    if not summary_path.exists():
        raise FileNotFoundError(f"{summary_path} does not exist: give the folder the device tool's files_at names")
    summary = json.loads(summary_path.read_text())
    ledger = load_ledger(ledger_path)
    if any(run["started"] == summary["started"] for run in ledger["runs"]):
        raise ValueError(f"the run started at {summary['started']} is in {ledger_path} already")
    target = runs / f"{summary['started'][:10]}_{slug(summary['device'])}"
    if target.exists():
        target = target.with_name(f"{target.name}_{summary['started'][11:19].replace(':', '')}")
    target.mkdir(parents=True)
    archive = folder / "run_results.tar.gz"
    if archive.exists():
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                name = Path(member.name)
                if member.isfile() and len(name.parts) > 1 and ".." not in name.parts:
                    dest = target.joinpath(*name.parts[1:])
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_bytes(tar.extractfile(member).read())
    for name in ("run.log", "run_summary.json"):
        if (folder / name).exists():
            shutil.copy(folder / name, target / name)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    ledger["runs"].append({key: summary.get(key) for key in ("started", "device", "seconds_allowed", "seconds")}
                          | {"commit": commit.strip() or None, "results": str(target.relative_to(ROOT))
                             if target.is_relative_to(ROOT) else str(target),
                             "steps": [{k: s[k] for k in ("name", "item", "rc", "seconds", "skipped") if k in s}
                                       for s in summary["steps"]]})
    ledger_path.write_text(json.dumps(ledger, indent=1) + "\n")
    return target


# ---------------------------------------------------------------------------- a call
def device_name() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout.strip().splitlines()
        return out[0] if out else "unknown device"
    except (OSError, subprocess.SubprocessError):
        return "unknown device"


def prepare_rotor(env: dict) -> str:
    """solver_speed's CPU baselines: rotor-c only with the carried sdist (the device has no internet)."""
    if not ROCKMATE_SDIST.exists():
        return "cpu"
    cache = Path(env["XDG_CACHE_HOME"]) / ROTOR_CACHE_DIR
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROCKMATE_SDIST, cache / ROCKMATE_SDIST.name)
    return "cpu,rotor-c"


def run_steps(steps: list[Step], out: Path, seconds: float, dry_run: bool) -> int:
    """Run the setup steps, then ``steps`` in order, within ``seconds``; 1 if any step failed."""
    started = time.monotonic()
    # the results are written outside $OUT and archived into it after each step: a call killed mid-run then brings
    # back the log, the summary and the archive so far, not a folder of files past the device tool's limit of 8,
    # which could leave run.log behind (a review of this script, 2026-11-28)
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="gpu_session_"))
    results = scratch / "run_results"
    results.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", XDG_CACHE_HOME="/tmp/gpu_session_cache")
    if list((ROOT / ".whl").glob("*.whl")):  # e.g. transformers 5.24 beside the machine's 5.17 (BART's tests)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (WHEEL_SITE, env.get("PYTHONPATH")) if p)
    baselines = prepare_rotor(env)
    summary = {"started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "device": device_name(),
               "seconds_allowed": seconds, "steps": []}
    log_path = out / "run.log"
    failed = 0
    with open(log_path, "a", buffering=1) as log:
        def say(text: str) -> None:
            print(text, flush=True)
            log.write(text + "\n")

        def flush() -> None:  # the summary and the archive as they stand (after every step)
            summary["seconds"] = round(time.monotonic() - started, 1)
            (out / "run_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
            with tarfile.open(out / "run_results.tar.gz", "w:gz") as tar:
                tar.add(results, arcname=results.name)

        if baselines == "cpu" and any(s.name == "solver-speed-baselines" for s in steps):
            say(f"note: {ROCKMATE_SDIST.relative_to(ROOT)} not carried: solver-speed-baselines runs without rotor-c "
                f"(the module docstring says how to bring it)")
        for step in [s for s in STEPS if s.item == SETUP] + steps:
            command = step.render(results, baselines)
            left = seconds - (time.monotonic() - started)
            entry = {"name": step.name, "item": step.item, "command": command, "limit_s": step.limit_s}
            if left < step.min_s:
                entry["skipped"] = f"{left:.0f} s left of the call, the step needs at least {step.min_s} s"
                say(f"=== {step.name}: SKIPPED ({entry['skipped']})")
                summary["steps"].append(entry)
                continue
            limit = int(min(step.limit_s, left))
            say(f"=== {step.name} (limit {limit} s): {command}")
            if dry_run:
                summary["steps"].append(entry | {"dry_run": True})
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
            entry.update(rc=rc, seconds=round(time.monotonic() - clock, 1))
            failed += rc != 0
            say(f"=== {step.name}: rc {rc} in {entry['seconds']} s")
            summary["steps"].append(entry)
            flush()
        summary["complete"] = True
        flush()
        archive = out / "run_results.tar.gz"
        shutil.rmtree(scratch)  # only the archive travels back (the tool returns at most 8 files)
        say(f"=== {failed} step(s) failed; {archive.name}, {log_path.name}, run_summary.json written in "
            f"{summary['seconds']} s")
    return 1 if failed else 0


def list_steps(ledger: dict) -> str:
    done = done_steps(ledger)
    lines = [f"{'step':<22} {'item':<6} {'limit':>6} {'min':>5}  ledger"]
    for s in STEPS:
        state = "every call" if s.item == SETUP else ("done" if s.name in done else "pending")
        lines.append(f"{s.name:<22} {s.item:<6} {s.limit_s:>5}s {s.min_s:>4}s  {state}")
    pending = pending_steps(ledger)
    lines.append(f"pending: {len(pending)} step(s), {sum(s.limit_s for s in pending)} s of limits "
                 f"(a call has --seconds, default 420, its setup included)")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--pending", action="store_true", help="run the steps the ledger does not have as done, in order")
    what.add_argument("--steps", help="comma list: run these steps (after the setup), in the list's order")
    what.add_argument("--list", action="store_true", help="print the steps and what the ledger says of each")
    what.add_argument("--record", type=Path, metavar="DIR",
                      help="record a call: DIR holds what it left under --out (the device tool's files_at)")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")),
                        help="where the log, summary and results archive go (default $OUT, else ./out)")
    parser.add_argument("--seconds", type=float, default=420.0,
                        help="time the call may take; steps that cannot get their minimum are skipped "
                             "(default 420: run it with the device tool's timeout_s=480)")
    parser.add_argument("--ledger", type=Path, default=LEDGER, help=argparse.SUPPRESS)
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    try:
        ledger = load_ledger(args.ledger)
    except (ValueError, json.JSONDecodeError) as err:
        parser.exit(2, f"gpu_session: error: {err}\n")
    if args.list:
        print(list_steps(ledger))
        return 0
    if args.record:
        try:
            target = record(args.record, args.ledger)
        except (OSError, ValueError, KeyError) as err:
            parser.exit(2, f"gpu_session: error: {err}\n")
        print(f"recorded: {target}; ledger {args.ledger}")
        print(list_steps(load_ledger(args.ledger)))
        return 0
    if args.pending:
        steps = pending_steps(ledger)
        if not steps:
            print("every step is done (the ledger says so); --steps NAME reruns one")
            return 0
    else:
        names = [n for n in args.steps.split(",") if n]
        unknown = sorted(set(names) - STEP_NAMES)
        if unknown or not names:
            parser.error(f"no step(s) {unknown}: see --list" if unknown else "--steps needs at least one name")
        steps = [s for s in STEPS if s.name in names and s.item != SETUP]
    args.out.mkdir(parents=True, exist_ok=True)
    return run_steps(steps, args.out, args.seconds, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
