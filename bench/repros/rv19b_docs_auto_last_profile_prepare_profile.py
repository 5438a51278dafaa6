"""docs/pytorch.md (commit c793a1b) says: "The profile the latest plan was made from is `model.last_profile` (on
`auto_checkpoint`'s wrapper too; ...): `torch_exec.save_profile(model.last_profile, "planned.json")` writes it, for
`prepare(sample, profile=...)` in another process or for the command line", and AutoCheckpointed.last_profile's
commit names "prepare(profile=...) in another process" among its uses. auto_checkpoint's wrapper has no such
argument: AutoCheckpointed.prepare(*args, **kwargs) (torch_exec/auto.py) hands ``profile=`` to the model as one of
its keyword arguments, so the wrapper's profile cannot be planned from in another process that way; the user gets
the model's own TypeError ("Sequential.forward() got an unexpected keyword argument 'profile'"), or, for a model
whose forward takes **kwargs, a capture with a string argument that ignores the profile. A review, rv19b.

Expected: either the wrapper's prepare takes ``profile=`` (planning its latest capture from it), or the docs say the
round trip is CheckpointedSequential's only (the wrapper's profile: for the command line). Exits 1 while
``wrapped.prepare(x, profile=saved)`` is refused or ignored.

Resolved in the docs (docs/pytorch.md: the wrapper's prepare passes every argument to the model; its profile is for
the command line): exits 0 where they say so.
Run: GS_ROOT=<tree> python bench/repros/rv19b_docs_auto_last_profile_prepare_profile.py
"""
import os
import sys
import tempfile

from pathlib import Path

from _setup import ROOT, nn, te, torch  # the tree under test: GS_ROOT


def model():
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(6)])


x = torch.randn(16, 32)
wrapped = te.auto_checkpoint(model(), "80%", backend="cpu", profile_passes=1, profile_warmup=0)
wrapped(x).sum().backward()
if not hasattr(wrapped, "last_profile") or wrapped.last_profile is None:
    print("no last_profile on the wrapper (the tree before c793a1b): nothing to check")
    sys.exit(0)
path = os.path.join(tempfile.mkdtemp(), "planned.json")
te.save_profile(wrapped.last_profile, path)
other = te.auto_checkpoint(model(), "80%", backend="cpu")
try:
    plan = other.prepare(x, profile=path)
except Exception as err:  # noqa: BLE001
    print(f"auto_checkpoint(...).prepare(x, profile='planned.json'): {type(err).__name__}: {str(err)[:150]}")
    docs = (Path(ROOT) / "docs" / "pytorch.md").read_text() if (Path(ROOT) / "docs" / "pytorch.md").exists() else ""
    if "its `prepare` passes every argument to the model" in " ".join(docs.split()):
        print("the docs say the wrapper's prepare takes no profile= (its profile is for the command line): ok")
        sys.exit(0)
    print("BUG: the docs' round trip of model.last_profile does not exist for auto_checkpoint's wrapper")
    sys.exit(1)
same = plan is not None and plan.schedule == wrapped.plan.schedule
print(f"prepare(x, profile=...) ran; the same plan as the profiled wrapper's: {same}")
sys.exit(0 if same else 1)
