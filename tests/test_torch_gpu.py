"""torch_exec on a CUDA device: measured peak memory within the budget and close to the prediction.

Skipped without CUDA. Memory is ``torch.cuda.max_memory_allocated`` above the bytes allocated just
before the step (parameters, their already-allocated gradients and the input), which is what the
budget counts (everything but the chain's input).
"""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device for torch"),
              pytest.mark.filterwarnings("ignore::gpusolve.FallbackWarning")]

import torch_exec as te  # noqa: E402
from gpusolve import store_all_peak_bytes  # noqa: E402
from _torch_helpers import assert_grads_close  # noqa: E402
from _torch_helpers import cuda_net as net  # noqa: E402
from _torch_helpers import measure_cuda_step as measure_step  # noqa: E402


@pytest.fixture(scope="module")
def setup():
    targets = torch.randint(0, 10, (64,), device="cuda")
    x = torch.randn(64, 3, 64, 64, device="cuda")
    probe = te.CheckpointedSequential(net(targets), budget="64GiB", profile_passes=3)
    probe.prepare(x)
    return targets, x, probe.chain


@pytest.mark.parametrize("fraction", [1.0, 0.7, 0.5, 0.35, "min"])
def test_measured_peak_within_budget_and_prediction(setup, fraction):
    from gpusolve.dp.minpeak import min_feasible_bytes
    targets, x, chain = setup
    store_all = store_all_peak_bytes(chain)
    budget = int(1.1 * min_feasible_bytes(chain)) if fraction == "min" else int(fraction * store_all)
    model = te.CheckpointedSequential(net(targets), budget=budget)
    model.prepare(x)
    measure_step(model, x)  # warm-up: allocator, cuDNN autotuning
    for p in model.parameters():
        p.grad.zero_()
    peak = measure_step(model, x)
    predicted = model.plan.predicted_peak_bytes
    assert peak <= budget, f"measured peak {peak} B exceeds the budget {budget} B"
    assert abs(peak - predicted) <= 0.10 * predicted, f"measured {peak} B vs predicted {predicted} B"


def test_gradients_match_plain_autograd_on_gpu(setup):
    targets, x, chain = setup
    ref = net(targets)
    model = copy.deepcopy(ref)
    wrapped = te.CheckpointedSequential(model, budget=int(0.4 * store_all_peak_bytes(chain)))
    torch.manual_seed(1)
    ref(x).backward()
    torch.manual_seed(1)
    wrapped(x).backward()
    assert_grads_close(ref, model)


def test_cuda_profile_fields(setup, tmp_path):
    targets, x, _ = setup
    data = te.profile_dict(net(targets), x, passes=2)
    assert data["device"] != "cpu" and data["reference"]["store_all_peak_bytes"] > 0
    relu = [s for s in data["stages"] if s["aliases"]]
    assert relu and all(s["x"] == 0 for s in relu)
    for s in data["stages"]:
        assert s["t_fwd"] >= 0 and s["xbar"] >= 0 and s["bwd_peak"] is not None


@pytest.mark.parametrize("name", ["resnet50", "densenet121"])
def test_auto_checkpoint_torchvision_models(name):
    """torchvision's real models through the one call: gradients equal plain autograd's at half the
    measured plain peak, and the measured peak holds the resolved budget."""
    models = pytest.importorskip("torchvision.models")
    torch.manual_seed(0)
    model = getattr(models, name)(weights=None).cuda().train()
    reference = copy.deepcopy(model)
    x = torch.randn(16, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (16,), device="cuda")
    wrapped = te.auto_checkpoint(model, "50%", sample=(x,))
    assert wrapped.capture.method == "export" and wrapped.plan.feasible
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    for p in reference.parameters():
        p.grad = torch.zeros_like(p)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(1)
    nn.functional.cross_entropy(wrapped(x), y).backward()
    torch.cuda.synchronize()
    measured = torch.cuda.max_memory_allocated() - before
    torch.manual_seed(1)
    nn.functional.cross_entropy(reference(x), y).backward()
    loss_bytes = 3 * y.numel() * 1000 * 4  # the caller's loss outside the model: softmax, its gradient, logits'
    assert measured <= wrapped.plan.budget_bytes + loss_bytes, (measured, wrapped.plan.budget_bytes)
    for (key, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-4, msg=key)


def test_own_step_meter_leaves_the_callers_peak_counter(setup):
    """On CUDA the wrapper measures its first steps itself (allocator counters, reset at each mark);
    its last mark must not reset the counter, or a caller's max_memory_allocated() after the step
    reads about 0 (the measurement of every test above would be void)."""
    targets, x, chain = setup
    budget = int(0.5 * store_all_peak_bytes(chain))
    model = te.CheckpointedSequential(net(targets), budget=budget)
    model.prepare(x)
    assert model._meter.cuda_steps > 0  # the next step is metered by the wrapper
    peak = measure_step(model, x)
    assert peak >= 0.5 * model.plan.predicted_peak_bytes, f"caller read {peak} B after a metered step"
    assert peak <= budget
