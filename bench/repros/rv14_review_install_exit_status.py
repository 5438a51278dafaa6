"""Review rv14 of 831846c: bench/gpu_session.py's INSTALL ends in '; true', so the install step exits 0 whatever
happens: a failed `pip install -e .`, a failed `import gpusolve, torch_exec`, a missing interpreter, a carried wheel
pip refuses. Runs the rendered command as run_steps does (bash -o pipefail -c) in scratch folders. Exits 1 while a
failed project install or a missing interpreter leaves the step at 0 (fixed: the wheels' loop is grouped).

    python bench/repros/rv14_review_install_exit_status.py
"""
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import gpu_session as g  # noqa: E402

install = next(s for s in g.STEPS if s.name == "install")


def rc(py: str, cwd: Path, command: str | None = None) -> tuple:
    cmd = command or install.command.format(R="/tmp/unused", PY=shlex.quote(py), baselines="cpu")
    p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, capture_output=True, text=True)
    return p.returncode, (p.stdout + p.stderr).strip().splitlines()[-1][:160]


with tempfile.TemporaryDirectory() as tmp:
    empty, bad = Path(tmp, "empty"), Path(tmp, "bad")
    (empty / ".whl").mkdir(parents=True)
    (bad / ".whl").mkdir(parents=True)
    (bad / ".whl" / "broken-1.0-py3-none-any.whl").write_text("not a zip")
    failed = {"pip install -e . fails (no project)": rc(sys.executable, empty),
              "interpreter missing": rc("/nonexistent/python", empty)}
    for what, result in failed.items():
        print(f"{what + ':':38s}", result)
    cmd = g.INSTALL.format(PY=shlex.quote(sys.executable))
    loop = cmd[cmd.index("{ for w in"):].replace(g.WHEEL_SITE, str(Path(tmp, "site")))
    # a wheel pip refuses leaves the step going (the tests that need it then fail, naming it): exit 0 by design
    print(f"{'carried wheel pip refuses:':38s}", rc(sys.executable, bad, loop))
bad_steps = [what for what, (code, _) in failed.items() if code == 0]
print("BUG: the install step exits 0 where " + ", ".join(bad_steps) if bad_steps else "ok: a failed install fails the step")
sys.exit(1 if bad_steps else 0)
