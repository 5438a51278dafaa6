"""Values the readers accept silently where they refuse their siblings: a measured-chain/1 profile's required
sizes may be fractional (x = 1.5 is read, and turns an in-place stage (x = 0) into a stage of its own: 22
stages instead of 21), while the optional sizes (held_nbytes, saved_bytes, ...) must be whole bytes; and a
gpusolve-chain/1 file's "multi_tape": "no" reads as True (bool of a non-empty string)."""
import copy
import json
import os
import tempfile
import sys
from pathlib import Path

from _setup import ROOT  # the tree under test: GS_ROOT
from gpusolve import Chain

d = tempfile.mkdtemp()
profile = json.loads((Path(ROOT) / "gpusolve" / "profiles" / "resnet50_b128.json").read_text())
bad = 0
for key, value in (("x", 1.5), ("held_nbytes", 1.5)):
    p = copy.deepcopy(profile)
    p["stages"][2][key] = value
    path = os.path.join(d, f"{key}.json")
    Path(path).write_text(json.dumps(p))
    try:
        c = Chain.load(path)
        print(f"stage 3 {key} = {value}: accepted, {c.n} stages (the profile unchanged gives 21)")
        bad += 1
    except ValueError as err:
        print(f"stage 3 {key} = {value}: refused: {err}")
c = Chain.load("resnet50_b128").to_dict()
c["multi_tape"] = "no"
path = os.path.join(d, "chain.json")
Path(path).write_text(json.dumps(c))
try:
    mt = Chain.load(path).multi_tape
    print(f'gpusolve-chain/1 "multi_tape": "no" -> multi_tape = {mt}')
    bad += mt is True
except ValueError as err:
    print(f'gpusolve-chain/1 "multi_tape": "no": refused: {err}')
sys.exit(1 if bad else 0)
