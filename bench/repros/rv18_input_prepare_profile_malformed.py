"""CheckpointedSequential.prepare(x, profile=...) with a malformed measured-chain/1 profile: raw TypeError /
KeyError / AttributeError from inside prepare() (the stage-name comparison and _check_profile_input run before
the profile is validated), and a stage-list mismatch past the 4th stage shows two identical lists.
Expected: one ValueError naming the field and the fix, as Chain.from_profile gives for the same file.
Review rv18 (bad input). Run: GS_ROOT=<tree> python rv18_input_prepare_profile_malformed.py
Fixed in session 18: prepare(profile=...) reads the profile as planning does first and names the first stage that differs; exits 0."""
import copy, sys, warnings
from _rv18 import mlp  # the tree under test: GS_ROOT
warnings.simplefilter("ignore")
import torch
import torch_exec

m = mlp()
x = torch.randn(8, 16)
prof = torch_exec.profile_dict(m, x)
w = torch_exec.CheckpointedSequential(m, budget="70%", backend="cpu")

def variant(name):
    d = copy.deepcopy(prof)
    if name == "stage 2 is null": d["stages"][1] = None
    if name == "stage 2 lacks 'name'": del d["stages"][1]["name"]
    if name == "args is a string": d["args"] = "x"
    if name == "args is a list": d["args"] = [8]
    if name == "last stage dropped": d["stages"] = d["stages"][:-1]
    if name == "stages 5 and 6 swapped": d["stages"][4], d["stages"][5] = d["stages"][5], d["stages"][4]
    return d

bad = False
for name in ["stage 2 is null", "stage 2 lacks 'name'", "args is a string", "args is a list", "last stage dropped",
             "stages 5 and 6 swapped"]:
    try:
        w.prepare(x, profile=variant(name))
        print(f"{name}: accepted"); bad = True
    except ValueError as e:
        msg = str(e)
        print(f"{name}: ValueError: {msg[:200]}")
        if "are not this module's" in msg:
            shown = msg.split("the profile's stages ")[1].split("... are not")[0]
            mine = msg.split("this module's ")[1].rstrip(".")
            if shown == mine.rstrip("."):
                print("    -> the two lists shown are identical; the message does not say what differs"); bad = True
    except Exception as e:
        print(f"{name}: raw {type(e).__name__}: {e}"); bad = True
sys.exit(1 if bad else 0)
