"""3457bac inserted Note [Hooks on a leaf several segments read] into the MIDDLE of a sentence of
torch_exec/executor.py's module docstring: the FWD_TAPE(s) bullet now reads "Its input is a fresh segment
input made from a_{s-1} (Note [Hooks on a leaf several segments read] / A parameter two stages ... / Note
[Segment inputs]), or, when the op before it was FWD_TAPE(s-1), ...": the IR's description is cut in two and
the new Note sits inside a parenthesis of another, under the list of ops (help(torch_exec.executor) shows it
so). Expected: the bullet whole ("made from a_{s-1} (Note [Segment inputs]), or, ...") and the Note with the
others, below the op list."""
import sys

from _setup import ROOT  # noqa: F401  (the tree under test: GS_ROOT)
import torch_exec.executor as ex

doc = ex.__doc__
start = doc.index("- ``FWD_TAPE(s)``")
bullet = doc[start:doc.index("- ``BWD(s)``", start)]
print(bullet[:420])
whole = "a_{s-1} (Note [Segment inputs]), or, when the op before it" in " ".join(bullet.split())
print("...\nthe FWD_TAPE bullet is whole:", whole, "| a Note inside it:", "Note [Hooks on a leaf" in bullet)
sys.exit(0 if whole and "Note [Hooks on a leaf" not in bullet else 1)
