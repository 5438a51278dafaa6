"""rv21r: a mixture-of-experts stage routed Mixtral's way (top-k, ``torch.where(mask)``) is now refused.

Setup: CheckpointedSequential(budget="90%") and auto_checkpoint(budget="90%") over Linear+Tanh, MoE, Linear+Tanh,
MoE, Linear+Tanh (D=32, 16 tokens); the MoE is the routing of HF's MixtralSparseMoeBlock: a softmax gate, top-2,
``idx, tok = torch.where(one_hot(...)[e])`` per expert, ``out.index_add(0, tok, expert(x[tok]) * w)``.

Observed (CPU, s21_r): DataDependentShapeError "stage 2 (1) runs aten.nonzero.default ..." at the first call of
CheckpointedSequential, and "stage 2 (2:/1) runs aten.nonzero.default ..." under auto_checkpoint.  At 83aea4b both trained.  The routing's total
is fixed by top-k (tokens x k rows over the experts): a plain step of 4 such layers (D=64, 256 tokens, 4 experts
of Linear-GELU-Linear) measured a peak of 6 300 936 B on a random batch (first-layer rows per expert 111, 134,
139, 128) and 6 298 644 B on a batch pushed to one expert (256, 1, 0, 255): the sizes that follow the data do
not move the step's memory.  HF transformers 5.24's MixtralForCausalLM (3 layers, hidden 32, 4 experts, top-2,
attention mask with padding) with ``config._experts_implementation = "eager"`` under auto_checkpoint(budget="90%"):
refused at s21_r ("stage 1 (1:model/layers/0) runs aten.nonzero.default at .../modeling_mixtral.py:79"), trained at
83aea4b; with the config's default experts implementation it trained at both.

Cause: torch_exec/profiler.py ``_size_follows_values`` / ``_refuse_sizes_from_values`` (Note [Sizes that follow
the data]) refuse any stage that runs an op tagged ``dynamic_output_shape`` (nonzero here), whatever the sizes
add up to.

Expected: MoE routing trains as before (a refusal only where a batch can make the chain larger, or a warning /
an opt-out such as ``allow_data_dependent=True``).  Exits 1 while either wrapper refuses.
"""
import _setup  # noqa: F401  (the tree under test: GS_ROOT, before torch_exec is imported)
import sys, warnings
import torch, torch.nn as nn, torch.nn.functional as F
torch.set_num_threads(1)
import torch_exec as te
warnings.simplefilter("ignore")
D, E = 32, 4


class MoE(nn.Module):
    def __init__(s, k=2):
        super().__init__()
        s.g, s.k = nn.Linear(D, E), k
        s.ex = nn.ModuleList(nn.Linear(D, D) for _ in range(E))

    def forward(s, x):
        w, idx = torch.topk(F.softmax(s.g(x), -1), s.k)
        out = torch.zeros_like(x)
        m = F.one_hot(idx, num_classes=E).permute(2, 1, 0)
        for e, ex in enumerate(s.ex):
            i, t = torch.where(m[e])
            out = out.index_add(0, t, ex(x[t]) * w[t, i, None])
        return out


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Sequential(nn.Linear(D, D), nn.Tanh()), MoE(), nn.Sequential(nn.Linear(D, D), nn.Tanh()),
                         MoE(), nn.Sequential(nn.Linear(D, D), nn.Tanh()))


x = torch.randn(16, D)
bad = 0
for name, wrap in (("CheckpointedSequential", te.CheckpointedSequential), ("auto_checkpoint", te.auto_checkpoint)):
    try:
        wrap(net(), budget="90%")(x).sum().backward()
        print(f"{name}: trained")
    except Exception as e:  # noqa: BLE001
        print(f"{name}: refused: {type(e).__name__}: {str(e)[:140]}...")
        bad += 1
sys.exit(1 if bad else 0)
