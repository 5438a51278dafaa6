"""CheckpointedSequential(seq, ...) names the wrapped nn.Sequential's tensors 'stages.<i>.<name>' in its
state_dict: a checkpoint saved from the wrapper does not load into the plain nn.Sequential (and one saved
from the plain model does not load into the wrapper), unlike auto_checkpoint, whose names are the model's.
Where some stages are plain callables (torch.relu), '<i>' counts only the module stages, so even stripping
the prefix gives other indices than the list's."""
from _setup import nn, te, torch  # the tree under test: GS_ROOT

torch.manual_seed(0)
seq = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
wrapped = te.CheckpointedSequential(seq, budget="100%", backend="cpu")
print(f"nn.Sequential keys: {list(seq.state_dict())[:3]} ...")
print(f"wrapper keys:       {list(wrapped.state_dict())[:3]} ...")
for what, dst, src in (("wrapper's checkpoint into the plain nn.Sequential", nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8),
                                                                                               nn.ReLU(), nn.Linear(8, 2)),
                        wrapped.state_dict()),
                       ("plain checkpoint into the wrapper", wrapped, seq.state_dict())):
    try:
        dst.load_state_dict(src)
        print(f"{what}: loaded")
    except RuntimeError as exc:
        print(f"{what}: RuntimeError: {' '.join(str(exc).split())[:150]}...")
stages = [nn.Linear(8, 8), torch.relu, nn.Linear(8, 2)]
print(f"stages [Linear, torch.relu, Linear] -> keys {list(te.CheckpointedSequential(stages, budget='100%').state_dict())} "
      f"(the second Linear is stage 2)")
