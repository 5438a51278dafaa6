"""A profile of the README's own manual-route example (`torch_exec.profile(stages, x, path="my_profile.json")`,
a 16 MiB step) plotted with `gpusolve curve my_profile.json`: the x axis is always in GiB
(gpusolve/plot.py: `/ GIB` and `set_xlabel("... (GiB)")`), so its ticks read 0.010 ... 0.015 GiB, and
`gpusolve solve my_profile.json` prints "tape 0.01 GiB" (gpusolve/chain.py, Chain.summary: `/ 2**30 ... GiB`)
beside "peak 16.04 MiB" on the next line (format_bytes). The plot's title and the summary name the profile
"chain" (torch_exec/profiler.py writes `"network": network or "chain"`), not my_profile. The same holds for
`curve --offload` (gpusolve/offload/compare.py, plot_offload_curves). Expected: the unit follows the sizes,
as format_bytes does for every other figure (MiB here), and the file's name where the profile has none."""
import os
import subprocess
import sys
import tempfile

from _setup import ROOT, nn, te, torch  # the tree under test: GS_ROOT

import gpusolve.plot as plot  # noqa: E402
from gpusolve import Chain  # noqa: E402

d = tempfile.mkdtemp()
stages = nn.Sequential(
    nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
    nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
    nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(inplace=True),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
)
x = torch.randn(16, 3, 32, 32)
path = os.path.join(d, "my_profile.json")
te.profile(stages, x, path=path)

r = subprocess.run([sys.executable, "-m", "gpusolve.cli", "solve", path, "--budget", "100%"], capture_output=True,
                   text=True, env=dict(os.environ, PYTHONPATH=ROOT), cwd=d)
print("gpusolve solve my_profile.json --budget 100%:")
print("  " + "\n  ".join(r.stdout.strip().splitlines()[:3]))

seen = {}
saved = plot.save_figure


def capture(fig, out, **kw):
    ax = fig.axes[0]
    fig.canvas.draw()
    seen["xlabel"] = ax.get_xlabel()
    seen["ticks"] = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    seen["title"] = ax.get_title()
    return saved(fig, out, **kw)


plot.save_figure = capture
plot.plot_curve(plot.curve_data(Chain.load(path), backend="cpu"), os.path.join(d, "curve.png"))
print(f"curve: x label {seen['xlabel']!r}, ticks {seen['ticks']}")
print(f"curve: title {seen['title']!r}")
tiny_ticks = "GiB" in seen["xlabel"] and all(float(t.replace("\u2212", "-")) < 0.1 for t in seen["ticks"])
tiny_summary = "tape 0.01 GiB" in r.stdout or "tape 0.00 GiB" in r.stdout
sys.exit(1 if tiny_ticks or tiny_summary else 0)
