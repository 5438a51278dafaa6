"""What the rv18 repros (bad input) share: the tree under test (``GS_ROOT``, as ``_setup`` reads it), a small MLP
and a four-stage chain."""
from _setup import ROOT, nn, torch  # noqa: F401  (ROOT: the repros read the tree's data files)

from gpusolve import Chain  # noqa: E402


def mlp(width: int = 16, hidden: int = 32) -> nn.Sequential:
    """Six (Linear, Tanh, Linear, Tanh) blocks and a Linear head, seeded."""
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, hidden), nn.Tanh(), nn.Linear(hidden, width), nn.Tanh())
                           for _ in range(6)], nn.Linear(width, 4))


def chain4() -> Chain:
    """Four equal stages: 1 ms forward, 2 ms backward, 1000 B activations, 2000 B tapes."""
    n = 4
    return Chain(t_fwd=[1.0] * n, t_fwd_nograd=[1.0] * n, t_bwd=[2.0] * n, act_bytes=[1000] * n,
                 grad_bytes=[1000] * n, tape_bytes=[2000] * n, fwd_nograd_extra=[0] * n, fwd_grad_extra=[0] * n,
                 bwd_extra=[0] * n)
