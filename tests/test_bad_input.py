"""Bad input gets one clear error naming the value and the fix, and leaves nothing half done (from a review
of the CLI and the API with bad values: each case failed before, with a traceback, a hang, a truncated file,
a changed model or a message naming the wrong thing)."""
from __future__ import annotations

import copy
import json
import warnings

import numpy as np
import pytest

from gpusolve import Chain, FallbackWarning, InfeasibleBudgetError, parse_bytes, solve
from gpusolve.cli import main

MAX_BYTES = 1 << 50  # gpusolve.units.MAX_BYTES (checked below), a literal so that this file runs on older code

RESNET = "resnet50_b128"


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def error_line(capsys, *argv) -> str:
    """The CLI's one error line for ``argv`` (exit 2, nothing else on stderr)."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, (out, err)
    lines = [line for line in err.splitlines() if not line.startswith("gpusolve: note:")]
    assert len(lines) == 1 and lines[0].startswith("gpusolve: error: "), err
    return lines[0]


# ---------------------------------------------------------------------------- sizes and chains

def test_numpy_numbers_are_sizes():
    chain = Chain.load(RESNET)
    budget = chain.tape_bytes.sum() // 2  # np.int64: was refused as "not a number of bytes"
    assert isinstance(budget, np.integer)
    assert parse_bytes(budget, "budget") == int(budget)
    assert parse_bytes(np.float32(3.5)) == 3
    assert solve(chain, budget, backend="cpu").budget_bytes == int(budget)
    with pytest.raises(ValueError, match="must be a number of bytes"):
        parse_bytes(np.bool_(True))


def test_whole_floats_read_in_every_byte_field_of_a_chain_file():
    """input_grad_bytes 1024.0 was refused ("it must be a whole number of bytes") where input_bytes and
    reserved_bytes 1024.0 loaded (bench/repros/rv10_solver_chain_file_float_input_grad.py)."""
    data = Chain.uniform(3).to_dict()
    for key in ("input_bytes", "input_grad_bytes", "reserved_bytes"):
        chain = Chain.from_dict(dict(data, **{key: 1024.0}))
        assert getattr(chain, key) == 1024 and isinstance(getattr(chain, key), int)
    with pytest.raises(ValueError, match="input_grad_bytes = 1024.5 is not a whole number of bytes"):
        Chain.from_dict(dict(data, input_grad_bytes=1024.5))


def test_a_zero_least_budget_is_named_as_such():
    # sizes that are not all 0 but never held at once: "its sizes are all 0" was false
    # (bench/repros/rv10_solver_zero_budget_note_sizes.py)
    zero = [0] * 3
    chain = Chain(t_fwd=[1] * 3, t_fwd_nograd=[1] * 3, t_bwd=[1] * 3, act_bytes=[5] * 3, grad_bytes=zero,
                  tape_bytes=zero, fwd_nograd_extra=zero, fwd_grad_extra=zero, bwd_extra=zero, input_bytes=7,
                  input_grad_bytes=0)
    plan = solve(chain, 0, backend="cpu")
    assert plan.feasible and any("whose least budget is 0 B" in note for note in plan.notes)
    with pytest.raises(ValueError, match=r"its least budget is 0 B\), but no bucket \(1\) divides it"):
        solve(chain, 0, backend="cpu", bucket=1)


@pytest.mark.parametrize("value", ["1e308GiB", "1e30", 1e300, MAX_BYTES + 1, "2048TiB"])
def test_sizes_beyond_any_device_are_refused(value):
    with pytest.raises(ValueError, match=r"is more than 2\^50 bytes \(1 PiB\)"):
        parse_bytes(value, "budget")
    assert parse_bytes(MAX_BYTES) == MAX_BYTES
    from gpusolve.units import MAX_BYTES as rule
    assert rule == MAX_BYTES


def test_chains_beyond_any_device_are_refused():
    with pytest.raises(ValueError, match=r"stage 2 \(stage2\): act_bytes = .*at most 2\^50 bytes"):
        Chain(**{**_fields(3), "act_bytes": [1, 10**30, 1]})
    with pytest.raises(ValueError, match=r"sizes add up to .* more than 2\^50"):
        Chain(**{**_fields(3), "tape_bytes": [MAX_BYTES // 2] * 3})
    with pytest.raises(ValueError, match=r"t_fwd = 1e\+308.*at most 1e\+15 ms"):
        Chain(**{**_fields(3), "t_fwd": [1.0, 1e308, 1e308]})  # their sum overflowed to inf in the DP


def _fields(n):
    return dict(t_fwd=[1.0] * n, t_fwd_nograd=[1.0] * n, t_bwd=[2.0] * n, act_bytes=[8] * n, grad_bytes=[8] * n,
                tape_bytes=[16] * n, fwd_nograd_extra=[0] * n, fwd_grad_extra=[0] * n, bwd_extra=[0] * n)


def _profile():
    from gpusolve.profiles import resolve
    return json.loads(resolve(RESNET).read_text())


def _stage(key, value):
    def edit(d):
        d["stages"][3][key] = value
    return edit


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.__setitem__("input_bytes", float("inf")), r"input_bytes = inf is not a whole number of bytes"),
    (lambda d: d.__setitem__("input_bytes", None), r"input_bytes = None is not a whole number of bytes"),
    (lambda d: d.__setitem__("input_bytes", "abc"), r"input_bytes = 'abc' is not a whole number of bytes"),
    (lambda d: d.__setitem__("input_requires_grad", "no"), r"input_requires_grad = 'no' must be true or false"),
    (lambda d: d.__setitem__("drops_checked", 1), r"drops_checked = 1 must be true or false"),
    (lambda d: d["stages"].__setitem__(3, 5), r"stage 4 is 5, not an object with the fields name, t_fwd"),
    (_stage("x", 10**30), r"stage 4 \(maxpool\): x = 10+ bytes is more than 2\^50"),
    (_stage("t_fwd", 1e308), r"stage 4 \(maxpool\): t_fwd = 1e\+308 ms is more than 1e\+15 ms"),
    (_stage("x", True), r"stage 4 \(maxpool\): x = True is not a finite number"),
    (_stage("out_saved_bytes", "x"), r"out_saved_bytes = 'x' is not a whole number of bytes between 0 and 2\^50"),
    (_stage("saved_bytes", -10), r"saved_bytes = -10 is not a whole number of bytes between 0 and 2\^50"),
    (_stage("held_nbytes", -10), r"held_nbytes = -10 is not a whole number of bytes"),
    (_stage("bwd_delta", "x"), r"bwd_delta = 'x' is not a whole number of bytes between -2\^50 and 2\^50"),
    (_stage("rng", "yes"), r"rng = 'yes' must be true or false"),
])
def test_profile_fields_are_checked(edit, message):
    data = _profile()
    edit(data)
    with pytest.raises(ValueError, match=message):
        Chain.from_profile(data)


def test_profile_fields_that_may_be_null_or_negative_still_read():
    data = _profile()
    data["stages"][3]["bwd_peak"] = -10**6  # the bundled vgg16_b64 has such readings: read as 0
    data["stages"][3]["bwd_delta"] = None
    data["stages"][3]["bwd_peak"] = None
    Chain.from_profile(data)


@pytest.mark.parametrize("cases, message", [
    ('"x"', r"'cases' must be a list of objects"),
    ("[5]", r"'cases' must be a list of objects"),
    ('[{"alpha_f": "abc", "alpha_b": [1, 1, 1], "beta_f": [1, 1, 1], "beta_b": [1, 1, 1], "budgets": [1]}]',
     r"case 1 \(\?\): could not convert string to float"),
    ('[{"alpha_f": [1, 1, 1], "alpha_b": [1, 1, 1], "beta_f": [1, 1, 1], "beta_b": [1, 1, 1], "budgets": [1e300]}]',
     r"case 1 \(\?\): budget 1e\+300 is more than 2\^50"),
    ('[{"alpha_f": [1, 1, 1]}]', r"case 1 lacks field 'alpha_b'"),
    # before: numpy's "Unable to allocate 120. GiB", naming no case (a smaller one would have been filled)
    ('[{"alpha_f": [1, 1, 1], "alpha_b": [1, 1, 1], "beta_f": [1, 1, 1], "beta_b": [1, 1, 1], "budgets": ["5GiB"],'
     ' "name": "big"}]', r"case 1 \(big\): budget 5368709120 needs a table of .* give budgets in the thesis's units"),
])
def test_thesis_files_are_checked(tmp_path, capsys, cases, message):
    path = tmp_path / "cases.json"
    path.write_text('{"format": "thesis-reference/1", "cases": ' + cases + "}")
    assert pytest.importorskip("re").search(message, error_line(capsys, "thesis", str(path)))


# ---------------------------------------------------------------------------- the CLI

@pytest.mark.parametrize("budget", ["1e308GiB", "1e300", "1e20"])
def test_cli_huge_budgets_are_one_line(capsys, budget):
    assert "more than 2^50 bytes" in error_line(capsys, "solve", RESNET, "--budget", budget, "--backend", "cpu")


def test_cli_images_are_never_half_written(tmp_path, capsys, monkeypatch):
    from matplotlib.figure import Figure
    into_dir = error_line(capsys, "curve", RESNET, "--backend", "cpu", "--out", f"{tmp_path}/")
    assert "is a directory; give a file name in it" in into_dir
    assert not (tmp_path.parent / f"{tmp_path.name}.png").exists()  # was written beside the folder
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert "is a file, not a folder" in error_line(capsys, "curve", RESNET, "--out", f"{a_file}/c.png")
    written = tmp_path / "ok.svg"
    assert run_cli(capsys, "curve", RESNET, "--backend", "cpu", "--out", str(written))[0] == 0
    plain = tmp_path / "plain"
    plain.write_text("")
    assert written.stat().st_mode == plain.stat().st_mode  # as any file is made, not a temporary's 0600
    written.unlink(), plain.unlink()
    out = tmp_path / "c.pdf"
    out.write_bytes(b"the old image")

    def short_write(self, fname, **kwargs):  # a disk that fills half way through the image
        with open(fname, "wb") as f:
            f.write(b"%PDF-1.4 trunc")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(Figure, "savefig", short_write)
    line = error_line(capsys, "curve", RESNET, "--backend", "cpu", "--out", str(out))
    assert f"could not write {out}" in line and "No space left on device" in line
    assert out.read_bytes() == b"the old image"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pdf", "file"]  # no temporary left
    deep = tmp_path / "new" / "sub" / "c.pdf"  # folders made for a write that fails go again (before: left)
    assert f"could not write {deep}" in error_line(capsys, "curve", RESNET, "--backend", "cpu", "--out", str(deep))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pdf", "file"]


def test_cli_curve_errors_name_their_option(capsys, tmp_path):
    line = error_line(capsys, "curve", RESNET, "--max-budget", "1", "--backend", "cpu")
    assert "max budget 1 B is below the chain's least feasible budget" in line and "--max-budget" in line
    # a bucket too coarse for the table's own curve: the plans at the grid budgets are drawn (the least-peak
    # plan at the minimum among them); before, "too coarse for a curve"
    code, out, err = run_cli(capsys, "curve", RESNET, "--bucket", "1GiB", "--max-budget", "3GiB", "--backend", "cpu",
                             "--out", str(tmp_path / "c.png"))
    assert code == 0 and "optimal points" in out and (tmp_path / "c.png").exists(), (out, err)
    line = error_line(capsys, "solve", RESNET, "--budget", "5GiB", "--bucket", "1MiB", "--backend", "exact")
    assert "the exact backend has no buckets, but bucket 1048576 was given" in line
    assert "bucket '0.5' is a fraction of a byte" in error_line(capsys, "solve", RESNET, "--budget", "5GiB",
                                                          "--bucket", "0.5", "--backend", "cpu")
    line = error_line(capsys, "solve", RESNET, "--budget", "35%", "--offload", "--bandwidth", "12")
    assert "'12GB/s' or '12e6/ms'" in line


def test_cli_join_help_example_runs(capsys):
    code, out, _ = run_cli(capsys, "join", "--help")
    assert code == 0
    example = out.split("e.g. gpusolve ", 1)[1].split(";")[0].split()
    assert example[example.index("--budget") + 1] == "50%"


def test_cuda_unavailable_names_the_remedy(capsys):
    from gpusolve.errors import BackendUnavailableError
    from gpusolve.solve import _pick_backend
    try:
        _pick_backend("cuda", [])
    except BackendUnavailableError:
        pass
    else:
        pytest.skip("CUDA runs here")
    code, out, err = run_cli(capsys, "demo", "--backend", "cuda", "--out", "/tmp/never-written.png")
    assert code == 2 and "solve on the CPU instead" in err and "--backend cpu/auto" in err
    assert out == ""  # nothing printed before the error (the demo's header was)


# ---------------------------------------------------------------------------- the torch wrappers

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import torch_exec  # noqa: E402


def _bn_mlp():
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.BatchNorm1d(16), nn.ReLU()) for _ in range(4)],
                         nn.Linear(16, 1))


class _Untouchable(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        raise AssertionError("the model ran: a bad setting was found only after capturing it")


@pytest.mark.parametrize("max_stages", [-1, 0, 1, 2.5, True])
def test_auto_checkpoint_max_stages(max_stages):
    with pytest.raises(ValueError, match=rf"max_stages={max_stages!r}: give a whole number of at least 2"):
        torch_exec.auto_checkpoint(_Untouchable(), "50%", max_stages=max_stages, sample=(torch.randn(2, 4),))


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(backend="gpu"), ValueError, r"backend 'gpu' is not one of 'auto', 'cpu', 'cuda', 'exact'"),
    (dict(bucket="0.5"), ValueError, r"bucket '0.5' is a fraction of a byte"),
    (dict(bucket="lots"), ValueError, r"bucket 'lots' is not a size"),
    (dict(device="cuda"), TypeError, r"auto_checkpoint got unexpected keyword argument\(s\) 'device'"),
])
def test_auto_checkpoint_settings_fail_before_the_model_runs(kwargs, error, message):
    with pytest.raises(error, match=message):
        torch_exec.auto_checkpoint(_Untouchable(), "50%", sample=(torch.randn(2, 4),), **kwargs)


def test_meta_tensors_are_refused():
    model = _bn_mlp().to("meta")
    with pytest.raises(ValueError, match=r"auto_checkpoint: input 0 is on the meta device"):
        torch_exec.auto_checkpoint(model, "50%", sample=(torch.randn(8, 16, device="meta"),))
    with pytest.raises(ValueError, match=r"CheckpointedSequential: input 0 is on the meta device"):
        torch_exec.CheckpointedSequential(_bn_mlp().to("meta"), budget="50%").prepare(torch.randn(8, 16, device="meta"))
    with pytest.raises(ValueError, match=r"parameter \S*0\.0\.weight is on the meta device"):
        torch_exec.CheckpointedSequential(_bn_mlp().to("meta"), budget="50%").prepare(torch.randn(8, 16))


def test_a_failed_first_call_leaves_the_model_as_it_was():
    model = _bn_mlp()
    before = copy.deepcopy(model.state_dict())
    rng = torch.get_rng_state()
    wrapped = torch_exec.auto_checkpoint(model, "1%")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InfeasibleBudgetError):
            wrapped(torch.randn(8, 16, generator=torch.Generator().manual_seed(1)))
    for key, value in model.state_dict().items():  # num_batches_tracked went 0 -> 1, the statistics moved
        assert torch.equal(value, before[key]), key
    assert torch.equal(torch.get_rng_state(), rng)


def test_a_failed_replan_keeps_the_budget_and_every_plan():
    torch.manual_seed(0)
    stages = nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(6)])
    cs = torch_exec.CheckpointedSequential(stages, budget="80%")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cs.prepare(torch.randn(4, 16))
        cs.prepare(torch.randn(64, 16))
        plans = dict(cs.plans)
        with pytest.raises(InfeasibleBudgetError):
            cs.replan(budget=2000)  # feasible for the small batch only: it was re-planned, the other refused
        assert cs.budget == "80%"
        assert cs.plans == plans  # the same plan objects, none re-planned
        wrapped = torch_exec.auto_checkpoint(_bn_mlp(), "80%")
        wrapped.prepare(torch.randn(4, 16))
        wrapped.prepare(torch.randn(64, 16))
        before = [cap.executor.plan for cap in wrapped._captures.values()]
        with pytest.raises(InfeasibleBudgetError):
            wrapped.replan(budget=3000)
        assert wrapped.budget == "80%"
        assert [cap.executor.plan for cap in wrapped._captures.values()] == before
        assert all(cap.executor.budget == "80%" for cap in wrapped._captures.values())


@pytest.mark.parametrize("key,value,message", [
    ("input_bytes", None, "input_bytes = None is not a whole number of bytes"),
    ("reserved_bytes", "abc", "reserved_bytes = 'abc' is not a whole number of bytes"),
    ("names", 5, "names = 5 is not a list of strings"),
    ("t_fwd", {"a": 1}, "t_fwd = {'a': 1} is not a list of numbers"),
    ("act_bytes", "abc", "act_bytes = abc is not a list of numbers"),
    ("provenance", [1], "provenance = [1] is not an object"),
    ("multi_tape", "no", "multi_tape = 'no' must be true or false"),
    ("t_bwd", "nan", "is not a list of numbers")])
def test_a_malformed_chain_file_gets_one_line_naming_the_file_and_field(capsys, tmp_path, key, value, message):
    # a review: a traceback (TypeError, AttributeError) or a line naming neither file nor field; "no" read as True
    data = Chain.load(RESNET).to_dict()
    data[key] = value
    path = tmp_path / "chain.json"
    path.write_text(json.dumps(data))
    line = error_line(capsys, "solve", str(path), "--budget", "5GiB", "--backend", "cpu")
    assert str(path) in line and message in line, line


@pytest.mark.parametrize("key,value,message", [("name", None, "stage 3: name = None is not a string"),
                                               ("x", 1.5, "stage 3 (relu): x = 1.5 is not a whole number of bytes")])
def test_a_malformed_profile_stage_gets_one_line(capsys, tmp_path, key, value, message):
    from gpusolve.profiles import resolve
    data = json.loads(resolve(RESNET).read_text())
    data["stages"][2][key] = value
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    assert message in error_line(capsys, "solve", str(path), "--budget", "5GiB", "--backend", "cpu")


def test_the_command_line_notes_a_profiles_estimate(capsys, tmp_path):
    # a review: the ProfileWarning of a missing backward time was dropped by the command line
    from gpusolve.profiles import resolve
    data = json.loads(resolve(RESNET).read_text())
    data["stages"][2]["t_bwd"] = None
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    code, out, err = run_cli(capsys, "solve", str(path), "--budget", "5GiB", "--backend", "cpu", "--json")
    assert code == 0 and json.loads(out)["feasible"]
    assert err.startswith("gpusolve: note: ") and "stage 3 (relu): t_bwd is missing" in err, err


def test_small_command_line_slips(capsys):
    # a review: a negative bucket was told "0 bytes or more" (0 is refused too); an empty profile argument read
    # as the current folder ("is a directory")
    assert "bucket '-1' is negative: a bucket must be at least 1 byte" in error_line(
        capsys, "solve", RESNET, "--budget", "5GiB", "--bucket", "-1", "--backend", "cpu")
    assert "the profile argument is empty" in error_line(capsys, "solve", "", "--budget", "5GiB")


def test_a_chain_file_names_the_stage_with_a_fraction_and_the_field_of_another_length(capsys, tmp_path):
    # a review (bench/repros/rv11_docs_chain_file_*): a fraction at stage 16 was told with the first 8 values, all
    # whole; t_fwd one value short blamed t_fwd_nograd (the stage count was t_fwd's length)
    data = Chain.load(RESNET).to_dict()
    data["act_bytes"][15] = 1000.5
    path = tmp_path / "fraction.json"
    path.write_text(json.dumps(data))
    assert "field 'act_bytes' must hold whole bytes: stage 16 has 1000.5" in error_line(
        capsys, "solve", str(path), "--budget", "5GiB", "--backend", "cpu")
    data = Chain.load(RESNET).to_dict()
    n = len(data["t_fwd"])
    data["t_fwd"] = data["t_fwd"][:-1]
    path = tmp_path / "short.json"
    path.write_text(json.dumps(data))
    assert f"field 't_fwd' has {n - 1} values but the chain has {n} stages" in error_line(
        capsys, "solve", str(path), "--budget", "5GiB", "--backend", "cpu")


@pytest.mark.parametrize("value,meant", [("5Gb", "5GB"), ("5gb", "5GB"), ("64Kb", "64KB"), ("1.5Mib", "1.5MiB"),
                                         ("100b", "100B")])
def test_a_lowercase_b_reads_as_bits_in_sizes_as_in_rates(capsys, value, meant):
    # a review (bench/repros/rv11_docs_budget_bits_unit_read_as_bytes.py): '--bandwidth 12Gb/s' was refused as bits
    # while '--budget 5Gb' solved at 5e9 bytes
    with pytest.raises(ValueError, match=rf"a lowercase b reads as bits, and sizes are bytes; give '{meant}'"):
        parse_bytes(value, "budget")
    assert f"give '{meant}' for bytes" in error_line(capsys, "solve", RESNET, "--budget", value, "--backend", "cpu")
    assert parse_bytes(meant) > 0


@pytest.mark.parametrize("argv,example", [
    (["curve", "vgg16_b64", "--offload"], "gpusolve curve vgg16_b64 --offload --bandwidth 12GB/s"),
    (["compare", "vgg16_b64", "--budget", "90%", "--offload"],
     "gpusolve compare vgg16_b64 --budget 90% --offload --bandwidth 12GB/s"),
    (["solve", "vgg16_b64", "--budget", "50%", "--latency", "1ms"],
     "gpusolve solve vgg16_b64 --budget 50% --offload --bandwidth 12GB/s --latency 1ms")])
def test_the_offload_flags_errors_complete_the_users_own_command(capsys, tmp_path, argv, example):
    # a review (bench/repros/rv11_docs_offload_hint_other_command.py): every such error ended with a fixed
    # 'gpusolve solve resnet50_b128 --budget 35% ...', another command (curve takes no --budget) and profile
    if argv[0] == "curve":
        argv = argv + ["--out", str(tmp_path / "c.png")]
    line = error_line(capsys, *argv)
    assert example in line and "resnet50_b128" not in line, line


def test_the_offload_example_keeps_the_users_link_flags_and_quotes_the_path(capsys, tmp_path):
    # a review (bench/repros/rv11_diff_offload_example_drops_h2d.py, rv11_diff_chain_file_empty_t_fwd.py)
    line = error_line(capsys, "solve", "vgg16_b64", "--budget", "50%", "--h2d-bandwidth", "9GB/s")
    assert "--offload --bandwidth 12GB/s --h2d-bandwidth 9GB/s" in line, line
    folder = tmp_path / "my profiles"
    folder.mkdir()
    path = folder / "c.json"
    path.write_text(json.dumps(Chain.load(RESNET).to_dict()))
    line = error_line(capsys, "solve", str(path), "--budget", "50%", "--latency", "1ms")
    assert f"gpusolve solve '{path}' --budget 50% --offload" in line, line
    data = Chain.load(RESNET).to_dict()
    data["t_fwd"] = []
    path.write_text(json.dumps(data))
    assert "field 't_fwd' has 0 values but the chain has" in error_line(capsys, "solve", str(path), "--budget", "5GiB")


# ---------------------------------------------------------------------------- a review of settings' types (rv18)
# Each case was taken before: a string flag read as true (multi_tape="no" solved the thesis's case 1 at budget 8 to
# 21.0, the other cost model's, not 55.0), a setting checked by the constructor and not by replan, a raw error from
# deep inside, a fraction of a byte rounded down (bench/repros/rv18_input_*.py).

def _three_stages(**kwargs) -> Chain:
    return Chain(t_fwd=[1.0] * 3, t_fwd_nograd=[1.0] * 3, t_bwd=[2.0] * 3, act_bytes=[10] * 3, grad_bytes=[10] * 3,
                 tape_bytes=[10] * 3, fwd_nograd_extra=[0] * 3, fwd_grad_extra=[0] * 3, bwd_extra=[0] * 3, **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(multi_tape="no"), r"multi_tape = 'no' must be true or false"),
    (dict(multi_tape="False"), r"multi_tape = 'False' must be true or false"),
    (dict(provenance="x"), r"provenance = x is not an object"),
    (dict(names="abc"), r"names = 'abc' is not a list of stage names"),
])
def test_a_chains_flags_are_checked_when_it_is_made(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _three_stages(**kwargs)
    chain = _three_stages(multi_tape=np.False_, names=("a", "b", "c"))
    assert chain.multi_tape is False and chain.names == ["a", "b", "c"]
    assert Chain.from_dict(chain.to_dict()).multi_tape is False  # what it writes reads back


def test_a_profile_bwd_peak_far_below_zero_is_named_as_such():
    # bwd_peak may be negative (the bundled profiles' are, read as 0); -1e18 was reported "more than 2^50"
    stage = dict(name="s", t_fwd=1.0, t_fwd_nograd=1.0, t_bwd=2.0, x=8, x_nbytes=8, xbar=8, fwd_peak_nograd=8,
                 fwd_peak_grad=8, bwd_peak=-1e18)
    with pytest.raises(ValueError, match=r"bwd_peak = -1e\+18 bytes is less than -2\^50"):
        Chain.from_profile({"format": "measured-chain/1", "stages": [stage]})


def test_option_types_are_named():
    chain = _three_stages()
    with pytest.raises(TypeError, match=r"strict must be True or False, got 'False'"):
        solve(chain, 10, strict="False")
    with pytest.raises(TypeError, match=r"progress must be True or False, or None"):
        solve(chain, 100, progress="yes")
    with pytest.raises(ValueError, match=r"bucket 1.5 is a fraction of a byte"):
        solve(chain, 100, bucket=1.5)
    from gpusolve.simulate import simulate
    with pytest.raises(TypeError, match=r"schedule\[0\] = 1 is not a gpusolve.schedule.Op"):
        simulate(chain, [1, 2, 3])
    from gpusolve.offload import solve_offload
    with pytest.raises(TypeError, match=r"strict must be True or False, got 'x'"):
        solve_offload(chain, 100, "12GB/s", strict="x")


def test_a_joins_turn_and_options_are_checked():
    from gpusolve.join import Turn, solve_join
    branches = [_three_stages(), _three_stages()]
    with pytest.raises(ValueError, match=r"frees_inputs = 'no' must be True or False"):
        solve_join(branches, Turn(frees_inputs="no"), 1000)
    with pytest.raises(ValueError, match=r"tape_bytes = 1152921504606846976; .* at most 2\^50"):
        solve_join(branches, Turn(tape_bytes=2 ** 60), 1000)
    with pytest.raises(TypeError, match=r"progress must be a function progress\(rows\) or None, got 5"):
        solve_join(branches, Turn(), 1000, progress=5)
    with pytest.raises(TypeError, match=r"baselines must be True or False"):
        solve_join(branches, Turn(), 1000, baselines="no")


@pytest.mark.parametrize("cases, message", [
    ('[{"alpha_f": [1, 1, 1], "alpha_b": [1, 1, 1], "beta_f": [1, Infinity, 1], "beta_b": [1, 1, 1], "budgets": [5]}]',
     r"case 1 \(\?\): beta_f\[1\] = inf: every thesis cost and size must be finite and >= 0"),
    ('[{"alpha_f": [NaN, 1, 1], "alpha_b": [1, 1, 1], "beta_f": [1, 1, 1], "beta_b": [1, 1, 1], "budgets": [5]}]',
     r"case 1 \(\?\): alpha_f\[0\] = nan"),  # an entry the model never reads: the file is malformed all the same
    ('[{"alpha_f": [1, 1, 1], "alpha_b": [1, 1, 1], "beta_f": [1, 1, 1], "beta_b": [1, 1, 1], "budgets": [5.5]}]',
     r"case 1 \(\?\): budget 5.5 is a fraction of a byte"),
])
def test_thesis_entries_are_finite_and_budgets_whole(tmp_path, capsys, cases, message):
    path = tmp_path / "cases.json"
    path.write_text('{"format": "thesis-reference/1", "cases": ' + cases + "}")
    assert pytest.importorskip("re").search(message, error_line(capsys, "thesis", str(path)))


def test_cli_sizes_are_whole_bytes(capsys):
    line = error_line(capsys, "join", "vgg16_b64", "resnet50_b128", "--budget", "90%", "--turn-bytes", "1.5",
                      "--backend", "cpu")
    assert "--turn-bytes '1.5' is a fraction of a byte" in line, line


def test_wrapper_settings_of_the_wrong_type_are_refused():
    with pytest.raises(TypeError, match=r"modules=5: give an nn.Module or a list of them"):
        torch_exec.CheckpointedSequential(_bn_mlp(), budget="50%", modules=5)
    with pytest.raises(TypeError, match=r"profile_isolated must be True or False, or None"):
        torch_exec.CheckpointedSequential(_bn_mlp(), budget="50%", profile_isolated="x")
    with pytest.raises(TypeError, match=r"join must be True or False, got 'no'"):
        torch_exec.auto_checkpoint(_Untouchable(), "50%", join="no")


def test_replan_checks_what_the_constructor_checks():
    cs = torch_exec.CheckpointedSequential(_bn_mlp(), budget="80%", backend="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cs.prepare(torch.randn(8, 16))
    plan = cs.plan
    with pytest.raises(TypeError, match=r"schedule_fn must be a function chain -> schedule \(or None\), got 5"):
        cs.replan(schedule_fn=5)
    assert cs.schedule_fn is None and cs.plan is plan
    wrapped = torch_exec.auto_checkpoint(_bn_mlp(), "80%", backend="cpu")
    with pytest.raises(TypeError, match=r"replan got unexpected keyword argument\(s\) 'foo'"):
        wrapped.replan(foo=1)
    with pytest.raises(TypeError, match=r"schedule_fn must be a function"):
        wrapped.replan(schedule_fn=5)
    calls = []

    def store_all(chain):
        calls.append(chain.n)
        from gpusolve.schedule import policy_to_schedule, segments_policy
        return policy_to_schedule(segments_policy([], chain.n), 0, chain.n)
    wrapped.replan(schedule_fn=store_all)  # before any capture: kept for the signatures captured later
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapped(torch.randn(8, 16)).sum().backward()
    assert calls


def test_a_model_that_needs_no_gradient_runs_as_under_no_grad():
    """Every parameter frozen and an input without requires_grad, in grad mode (features read without
    torch.no_grad()): no backward comes, so the wrappers run the model plainly, as under no_grad, instead of
    profiling a training step and refusing the budget with a message about unsaved boundaries."""
    model = _bn_mlp().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    x = torch.randn(8, 16)
    expected = model(x)
    for wrapped in (torch_exec.CheckpointedSequential(model, budget="60%", backend="cpu"),
                    torch_exec.auto_checkpoint(model, "60%", backend="cpu")):
        out = wrapped(x)
        assert torch.equal(out, expected) and not out.requires_grad
    assert not wrapped._captures  # nothing captured, nothing profiled
    scale = torch.ones(16, requires_grad=True)  # a leaf requiring grad that is no parameter: said, not hidden

    class Scaled(nn.Module):
        def forward(self, t):
            return t * scale
    hidden = torch_exec.CheckpointedSequential(nn.Sequential(Scaled(), *model), budget="60%", backend="cpu")
    with pytest.warns(FallbackWarning, match=r"but its output requires grad .* register such tensors as nn.Parameter"):
        out = hidden(x)
    out.sum().backward()
    assert torch.equal(scale.grad, torch.autograd.grad(model(x * scale).sum(), scale)[0])  # plain autograd's
    model[0][0].weight.requires_grad_(True)  # one trainable parameter: a training step again, planned
    cs = torch_exec.CheckpointedSequential(model, budget="100%", backend="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cs(x).sum().backward()
    assert cs.plan is not None and model[0][0].weight.grad is not None


def test_a_model_that_needs_no_gradient_runs_plainly_with_functions_and_as_a_join():
    """The same with a plain function among the stages (it reaches no tensor) and through CheckpointedJoin: both were
    profiled and refused with the budget message (review rv19: bench/repros/rv19_diff_callable_stage_frozen_no_grad.py,
    rv19_diff_join_frozen_no_grad.py). A leaf requiring grad that a callable reaches is a gradient to come."""
    from torch_exec import _util as U
    model = _bn_mlp().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    x = torch.randn(8, 16)
    stages = [*model[:2], torch.tanh, *model[2:]]
    expected = x
    for stage in stages:
        expected = stage(expected)
    seq = torch_exec.CheckpointedSequential(stages, budget="60%", backend="cpu")
    out = seq(x)
    assert torch.equal(out, expected) and not out.requires_grad and not seq._entries
    join = torch_exec.CheckpointedJoin([list(model[:3]), list(model[:3])], lambda a, b: (a * b).mean(), budget="60%",
                                       backend="cpu")
    out = join(x, 2 * x)
    assert torch.equal(out, (model[:3](x) * model[:3](2 * x)).mean()) and not out.requires_grad and not join._entries
    scale = torch.ones(16)
    assert U.nothing_requires_grad(x, model, [lambda t: t * scale])
    scale.requires_grad_(True)  # reached by the callable only: a backward may come
    assert not U.nothing_requires_grad(x, model, [lambda t: t * scale])
    assert U.nothing_requires_grad(x, model, [nn.Identity()])


@pytest.mark.parametrize("setting, error", [
    ({"schedule_fn": 5}, "schedule_fn must be a function"), ({"profile_isolated": "yes"}, "profile_isolated must be"),
    ({"profile_passes": 0}, "profile_passes must be a whole number >= 1"),
    ({"preserve_rng_state": "no"}, "preserve_rng_state must be True or False"),
    ({"measure_steps": -1}, "measure_steps must be a whole number >= 0"),
    ({"offload": "bogus"}, "bandwidth 'bogus' is not a rate"), ({"offload": True}, "offload must be None"),
    ({"offload": "12GB/s", "backend": "exact"}, "has no 'exact' backend"), ({"modules": 3}, "modules=3: give"),
    ({"network": 5}, "network must be a name"), ({"caller_keeps": "all"}, "caller_keeps='all': give")])
def test_auto_checkpoint_checks_the_executor_settings_when_made(setting, error):
    """As CheckpointedSequential does: they failed at the first call, after the capture (review rv19; offload, modules
    and network: rv20)."""
    with pytest.raises((TypeError, ValueError), match=error):
        torch_exec.auto_checkpoint(_bn_mlp(), "50%", **setting)


def test_a_budget_below_the_floor_names_the_least_budget():
    """Below what the step reaches outside the stages (``floor_bytes``: auto_checkpoint's code before its blocks), the
    error named that floor, and a budget raised to it was refused again (review rv19d: bench/repros/
    rv19d_hf_floor_error_names_wrong_least.py): it names the least budget, the stages' own where that is higher."""
    cs = torch_exec.CheckpointedSequential(_bn_mlp(), budget="1GiB", backend="cpu")
    cs.floor_bytes = 1000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cs.prepare(torch.randn(8, 16))
    least = cs.min_budget_bytes
    assert least > cs.floor_bytes
    with pytest.raises(InfeasibleBudgetError, match=rf"raise the budget to at least {least} B") as info:
        cs.replan(budget=cs.floor_bytes - 1)
    assert info.value.min_bytes == least
    cs.replan(budget=least)  # the named budget fits


def test_a_malformed_profile_given_to_prepare_is_one_error():
    stages = _bn_mlp()
    cs = torch_exec.CheckpointedSequential(stages, budget="80%", backend="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        profile = torch_exec.profile_dict(stages, torch.randn(8, 16), passes=1, warmup=0)
    for edit, message in (
            (lambda p: p["stages"].__setitem__(1, None), r"prepare\(profile=...\): .*stage 2 is None, not an object"),
            (lambda p: p["stages"][1].pop("name"), r"prepare\(profile=...\): .*stage 2 lacks field 'name'"),
            (lambda p: p.__setitem__("args", "x"), r"prepare\(profile=...\): args = 'x' is not an object"),
            (lambda p: p["stages"].pop(), r"the profile has 4 stages, this module 5"),
            (lambda p: p["stages"][2].__setitem__("name", "other"), r"stage 3 is 'other' in the profile, '2' here")):
        bad = copy.deepcopy(profile)
        edit(bad)
        with pytest.raises(ValueError, match=message):
            cs.prepare(torch.randn(8, 16), profile=bad)
    assert not cs._entries
