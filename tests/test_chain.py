"""Cost model: validation, profile reading (aliasing stages), JSON round trip, thesis mapping."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import PROFILES
from gpusolve import Chain, store_all_peak_bytes
from gpusolve.chain import allocator_bytes


def _profile(path):
    return json.loads(path.read_text())


def _tiny_profile():
    stage = dict(name="conv", t_fwd=1.0, t_bwd=2.0, t_fwd_nograd=0.9, x=1024, x_nbytes=1000, xbar=3072,
                 fwd_peak_nograd=2048, fwd_peak_grad=4096, bwd_peak=1536)
    relu = dict(name="relu", t_fwd=0.1, t_bwd=-0.001, t_fwd_nograd=0.1, x=0, x_nbytes=1000, xbar=0,
                fwd_peak_nograd=0, fwd_peak_grad=0, bwd_peak=800)
    loss = dict(name="loss", t_fwd=0.2, t_bwd=0.3, t_fwd_nograd=0.2, x=512, x_nbytes=4, xbar=1536,
                fwd_peak_nograd=512, fwd_peak_grad=1536, bwd_peak=1024)
    return {"format": "measured-chain/1", "network": "tiny", "input_bytes": 600, "stages": [stage, relu, loss]}


def test_profile_fuses_aliasing_stage_with_exact_sums_and_peaks():
    chain = Chain.from_profile(_tiny_profile())
    assert chain.n == 2 and chain.names == ["conv+relu", "loss"]
    assert chain.t_fwd[0] == pytest.approx(1.1) and chain.t_bwd[0] == pytest.approx(2.0)  # -0.001 is noise -> 0
    assert chain.act_bytes.tolist() == [1024, 512]
    assert chain.grad_bytes.tolist() == [1024, 512]       # loss gradient: 4 B rounded to the 512 B block
    assert chain.tape_bytes.tolist() == [3072, 1536]
    # no-grad peak of the group: conv 2048, then relu 0 on top of conv's 1024 -> 2048; extra = 2048 - 1024.
    assert chain.fwd_nograd_extra.tolist() == [1024, 0]
    assert chain.fwd_grad_extra.tolist() == [4096 - 3072, 0]
    # backward: worst of conv (1024 + 1536) and relu (1024 + 800) = 2560, minus grad out 1024, grad in 1024.
    assert chain.input_grad_bytes == allocator_bytes(600) == 1024
    assert chain.bwd_extra[0] == 2560 - 1024 - 1024
    assert chain.bwd_extra[1] == 0  # loss: max(0, 512 + 1024 - 512 - 1024)
    raw = Chain.from_profile(_tiny_profile(), fuse_aliasing=False)
    assert raw.n == 3 and raw.act_bytes[1] == 0


def test_noise_negative_time_clamped_but_real_negative_is_an_error():
    bad = _tiny_profile()
    bad["stages"][0]["t_bwd"] = -1.0
    with pytest.raises(ValueError, match="stage 1 \\(conv\\): t_bwd"):
        Chain.from_profile(bad)


@pytest.mark.parametrize("field,value", [("t_fwd", float("nan")), ("xbar", -5), ("x", "big")])
def test_bad_profile_values_name_stage_and_field(field, value):
    bad = _tiny_profile()
    bad["stages"][2][field] = value
    with pytest.raises(ValueError, match=f"stage 3 \\(loss\\): {field}"):
        Chain.from_profile(bad)


def test_unknown_format_and_missing_file():
    with pytest.raises(ValueError, match="format"):
        Chain.from_profile({"format": "nope", "stages": []})
    with pytest.raises(FileNotFoundError):
        Chain.load("/nonexistent/profile.json")


@pytest.mark.parametrize("field", ["t_fwd", "t_bwd", "act_bytes", "tape_bytes", "bwd_extra"])
@pytest.mark.parametrize("value", [-1, float("nan"), float("inf")])
def test_chain_validation_names_stage_and_field(field, value):
    chain = Chain.uniform(3)
    kwargs = {name: getattr(chain, name).tolist() for name in
              ("t_fwd", "t_fwd_nograd", "t_bwd", "act_bytes", "grad_bytes", "tape_bytes",
               "fwd_nograd_extra", "fwd_grad_extra", "bwd_extra")}
    kwargs[field][1] = value
    with pytest.raises(ValueError, match=f"stage 2 .*{field}"):
        Chain(**kwargs)


def test_empty_and_inconsistent_chains():
    with pytest.raises(ValueError, match="empty"):
        Chain(t_fwd=[], t_fwd_nograd=[], t_bwd=[], act_bytes=[], grad_bytes=[], tape_bytes=[],
              fwd_nograd_extra=[], fwd_grad_extra=[], bwd_extra=[])
    with pytest.raises(ValueError, match="has 2 values"):
        Chain(t_fwd=[1, 2, 3], t_fwd_nograd=[1, 2, 3], t_bwd=[1, 2], act_bytes=[1, 2, 3], grad_bytes=[1, 2, 3],
              tape_bytes=[1, 2, 3], fwd_nograd_extra=[0] * 3, fwd_grad_extra=[0] * 3, bwd_extra=[0] * 3)
    with pytest.raises(ValueError, match="whole bytes"):
        Chain.uniform(2, act_bytes=1.5)


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_json_round_trip_and_bundled_profiles(path, tmp_path):
    chain = Chain.from_profile(path)
    data = _profile(path)
    assert chain.provenance["measured_stages"] == len(data["stages"])
    assert sum(len(m) for m in chain.provenance["members"]) == len(data["stages"])
    # Fusion keeps totals: times (noise clamped) and tape bytes.
    assert chain.tape_bytes.sum() == sum(s["xbar"] for s in data["stages"])
    assert chain.t_fwd.sum() == pytest.approx(sum(max(0, s["t_fwd"]) for s in data["stages"]))
    out = tmp_path / "chain.json"
    chain.to_json(out)
    back = Chain.load(out)
    for name in ("t_fwd", "t_fwd_nograd", "t_bwd", "act_bytes", "grad_bytes", "tape_bytes",
                 "fwd_nograd_extra", "fwd_grad_extra", "bwd_extra"):
        np.testing.assert_array_equal(getattr(back, name), getattr(chain, name))
    assert back.names == chain.names and back.input_bytes == chain.input_bytes
    # The model's store-all peak is close to the measured one where outputs are all saved (ResNet).
    if "resnet" in path.stem:
        measured = data["reference"]["store_all_peak_bytes"]
        assert abs(store_all_peak_bytes(chain) - measured) / measured < 0.05


def test_from_thesis_maps_arrays():
    chain = Chain.from_thesis([0, 1, 2, 0], [5, 6, 7, 0], [3, 4, 5, 0], [1, 2, 3, 4])
    assert chain.n == 3 and not chain.multi_tape
    assert chain.t_fwd_nograd.tolist() == [1, 2, 0] and chain.t_bwd.tolist() == [5, 6, 7]
    assert chain.act_bytes.tolist() == [4, 5, 0] and chain.grad_bytes.tolist() == [2, 3, 4]
    assert chain.input_bytes == 3 and chain.input_grad_bytes == 1
    with pytest.raises(ValueError, match="same length"):
        Chain.from_thesis([0, 1], [1, 2, 3], [1, 1, 1], [1, 1, 1])
    with pytest.raises(ValueError, match="whole memory units"):
        Chain.from_thesis([0, 1, 0], [1, 2, 3], [1, 1.5, 1], [1, 1, 1])


def test_missing_backward_time_is_estimated_and_changes_no_plan():
    from gpusolve import ProfileWarning, solve
    data = json.loads(PROFILES[0].read_text())
    data["stages"][0]["t_bwd"] = None
    with pytest.warns(ProfileWarning, match="t_bwd is missing"):
        chain = Chain.from_profile(data)
    assert data["stages"][0]["t_bwd"] is None  # the caller's profile is not modified
    assert chain.t_bwd[0] == pytest.approx(2.0 * data["stages"][0]["t_fwd"])
    assert any("t_bwd is missing" in note for note in chain.provenance["notes"])
    # Any other value of that backward time: every plan's time moves by the same amount, the plan stays.
    data["stages"][0]["t_bwd"] = 1234.5
    other = Chain.from_profile(data)
    budget = int(store_all_peak_bytes(chain) * 0.5)
    a, b = solve(chain, budget, backend="cpu"), solve(other, budget, backend="cpu")
    assert a.schedule == b.schedule
    assert b.predicted_time_ms - a.predicted_time_ms == pytest.approx(1234.5 - chain.t_bwd[0], rel=1e-6)


def test_first_stage_backward_keeps_its_whole_peak_when_the_input_needs_no_gradient():
    """Hand-computed. The first stage's measured backward peak is all workspace when the chain's input
    needs no gradient (an image batch): no input gradient is made, so none may be taken out of it. (It
    was: a ResNet's first convolution under bfloat16 autocast then went 46 % over its least budget.)"""
    data = _tiny_profile()
    grads = Chain.from_profile(data)
    assert grads.input_grad_bytes == 1024 and grads.bwd_extra[0] == 2560 - 1024 - 1024
    none = Chain.from_profile(data | {"input_requires_grad": False})
    assert none.input_grad_bytes == 0
    assert none.bwd_extra[0] == 2560 - 1024       # the worst member's reading minus the output gradient only
    assert none.bwd_extra[1] == grads.bwd_extra[1]  # later stages: the gradient in is a_1's, unchanged
    for st in data["stages"]:  # composed exactly from bwd_delta: same rule
        st["bwd_delta"] = -st["xbar"]
    assert Chain.from_profile(data | {"input_requires_grad": False}).bwd_extra[0] == \
        Chain.from_profile(data).bwd_extra[0] + 1024


def _head_and_loss() -> dict:
    """Head (logits 4000 B, saved by nobody) then loss (saves only its own result): joined into one stage."""
    head = dict(name="head", t_fwd=1.0, t_fwd_nograd=0.9, t_bwd=2.0, x=4000, x_nbytes=4000, xbar=4000 + 300,
                fwd_peak_nograd=4200, fwd_peak_grad=4500, bwd_peak=700, bwd_delta=-300,
                out_saved_bytes=0, in_saved_bytes=1000)
    loss = dict(name="loss", t_fwd=0.5, t_fwd_nograd=0.4, t_bwd=0.5, x=8, x_nbytes=8, xbar=8 + 4000,
                fwd_peak_nograd=4100, fwd_peak_grad=8100, bwd_peak=4000, bwd_delta=-4000,
                out_saved_bytes=0, in_saved_bytes=0)
    return {"format": "measured-chain/1", "device": "cpu", "input_bytes": 1000, "stages": [head, loss]}


def test_stages_joined_when_no_backward_saves_the_tensor_between_them():
    """Hand-computed: head (logits 4000 B, saved by nobody) then loss (saves only its own result)."""
    data = _head_and_loss()
    chain = Chain.from_profile(data)
    assert chain.n == 1 and chain.names == ["head+loss"]
    assert chain.act_bytes[0] == 8                      # the group's output is the loss
    assert chain.tape_bytes[0] == 4300 + 4008 - 4000    # the logits are freed once the loss has run
    assert chain.fwd_nograd_extra[0] == max(4200, 4000 + 4100) - 8
    assert chain.fwd_grad_extra[0] == max(4500, 4300 + 8100) - chain.tape_bytes[0]
    # backward, last member first: loss peaks 4000 above the start, then leaves -4000; head peaks 700.
    assert chain.bwd_extra[0] == max(4000, -4000 + 700) - 1000  # minus the input's gradient
    assert chain.bwd_tape_bytes[0] == chain.tape_bytes[0] - 8   # the loss value is not saved
    # without the saved-tensor fields the stages stay apart (the bundled profiles' case)
    for st in data["stages"]:
        del st["out_saved_bytes"], st["in_saved_bytes"]
    assert Chain.from_profile(data).n == 2


def test_a_member_starts_where_the_first_gradient_of_its_output_is_ready():
    """Note [Gradients ready one by one], hand-computed on the head and loss above, the head's reading now 5000 B
    above its start. The loss's backward leaves -4000 B where the last gradient of the logits is ready; the first
    was ready 4500 B higher (``grad_ready_delta`` -4500: the head's backward began there, as with a tuple of views
    of one storage), so the head peaks at -4000 + 4500 + 5000 = 5500 above the group's start, not at 1000. The
    loss's own ``grad_ready_delta`` is the group's start: not taken off."""
    data = _head_and_loss()
    head, loss = data["stages"]
    head["bwd_peak"] = 5000
    assert Chain.from_profile(data).bwd_extra[0] == max(4000, -4000 + 5000) - 1000
    head["grad_ready_delta"], loss["grad_ready_delta"] = -4500, -700
    assert Chain.from_profile(data).bwd_extra[0] == -4000 + 4500 + 5000 - 1000
    head["grad_ready_delta"] = "x"
    with pytest.raises(ValueError, match="grad_ready_delta"):
        Chain.from_profile(data)


def test_fused_stage_whose_output_passes_on_what_an_earlier_member_made():
    """Note [Outputs passed through], hand-computed: a language model's head makes the logits (4000 B,
    saved by nobody) and its loss returns (loss, logits). The logits belong to the fused stage's output:
    in its checkpoint and its tape, gone at its backward. Without ``held_from`` (older profiles) the
    logits were freed from the tape once the loss had run, and counted nowhere."""
    head = dict(name="head", t_fwd=1.0, t_fwd_nograd=0.9, t_bwd=2.0, x=4000, x_nbytes=4000, xbar=4000 + 300,
                fwd_peak_nograd=4200, fwd_peak_grad=4500, bwd_peak=700, bwd_delta=-300,
                out_saved_bytes=0, in_saved_bytes=1000, held_from=[[1, 4000]])
    loss = dict(name="loss", t_fwd=0.5, t_fwd_nograd=0.4, t_bwd=0.5, x=8, x_nbytes=4008, xbar=8 + 2000,
                fwd_peak_nograd=2100, fwd_peak_grad=2100, bwd_peak=4000, bwd_delta=-2000,
                out_saved_bytes=0, in_saved_bytes=0, held_from=[[1, 4000], [2, 8]])
    data = {"format": "measured-chain/1", "device": "cpu", "input_bytes": 1000, "stages": [head, loss]}
    chain = Chain.from_profile(data)
    assert chain.n == 1
    assert chain.act_bytes[0] == 8 + 4000                    # loss and logits
    assert chain.tape_bytes[0] == 4300 + 2008                # nothing freed: the output holds the logits
    assert chain.bwd_tape_bytes[0] == 4300 + 2008 - 4008     # neither is saved: both go before the backward
    assert chain.fwd_nograd_extra[0] == max(4200, 4000 + 2100) - 4008
    assert chain.made_bytes(1) == 4008 and chain.provenance["made_bytes"] == [4008]
    assert chain.swappable().tolist() == [False, True]
    old = Chain.from_profile(data | {"stages": [{k: v for k, v in st.items() if k != "held_from"}
                                                for st in (head, loss)]})
    assert (old.act_bytes[0], old.tape_bytes[0]) == (8, 4300 + 2008 - 4000)


def test_fused_stage_whose_last_member_drops_what_an_earlier_member_made():
    """Hand-computed: A makes S (1000 B), B returns (S, T) with T new (500 B), C works in place on T
    and returns T alone, saving S for its backward. The output holds T only (made_bytes); a
    checkpoint counts the larger reading (the state after B); at the backward, only what the output
    holds is taken as released, so S stays counted (the output's bytes by state would drop it)."""
    base = dict(t_fwd=1.0, t_fwd_nograd=1.0, t_bwd=1.0, fwd_peak_nograd=0, fwd_peak_grad=0, bwd_peak=0,
                bwd_delta=0, out_saved_bytes=0)
    a = base | dict(name="A", x=1000, x_nbytes=1000, xbar=1000, in_saved_bytes=0, held_from=[[1, 1000]])
    b = base | dict(name="B", x=500, x_nbytes=1500, xbar=500, in_saved_bytes=0, held_from=[[1, 1000], [2, 500]])
    c = base | dict(name="C", x=0, x_nbytes=500, xbar=0, in_saved_bytes=1500, held_from=[[2, 500]])
    chain = Chain.from_profile({"format": "measured-chain/1", "device": "cpu", "input_bytes": 100,
                                "stages": [a, b, c]})
    assert chain.n == 1 and chain.names == ["A+B+C"]
    assert (chain.act_bytes[0], chain.tape_bytes[0], chain.made_bytes(1)) == (1500, 1500, 500)
    assert chain.bwd_tape_bytes[0] == 1500 - 500


def _tuple_boundary_profile():
    """A makes h (1000 B); B returns (h, g) with g new (500 B) and saves h; C reads both, saves h, drops g (saved by
    no backward) and returns (h, y) with y new (200 B). The sums count h, which B only passed on: saved."""
    base = dict(t_fwd=1.0, t_fwd_nograd=1.0, t_bwd=1.0, fwd_peak_nograd=0, fwd_peak_grad=0, bwd_peak=0, bwd_delta=0)
    a = base | dict(name="A", x=1000, x_nbytes=1000, xbar=1000, out_saved_bytes=0, in_saved_bytes=0,
                    held_from=[[1, 1000]], out_saved_from=[], in_dropped_from=[])
    b = base | dict(name="B", x=500, x_nbytes=1500, xbar=500, out_saved_bytes=1000, in_saved_bytes=1000,
                    held_from=[[1, 1000], [2, 500]], out_saved_from=[[1, 1000]], in_dropped_from=[])
    c = base | dict(name="C", x=200, x_nbytes=1200, xbar=200, out_saved_bytes=1000, in_saved_bytes=1000,
                    held_from=[[1, 1000], [3, 200]], out_saved_from=[[1, 1000]], in_dropped_from=[[2, 500]])
    return {"format": "measured-chain/1", "device": "cpu", "input_bytes": 100, "stages": [a, b, c]}


def test_tuple_boundary_read_storage_by_storage():
    """Note [Storages a stage drops], hand-computed on :func:`_tuple_boundary_profile`: the sums say B's output is
    saved (h); by storage, all B made (g) is dropped by C unsaved: B and C are one stage, g freed once C has run,
    and at the backward the stage keeps nothing it made. Kept apart, B's tape at its backward holds nothing it made
    (the sums kept g: min(500, 1000)). Without the two fields, as before."""
    data = _tuple_boundary_profile()
    chain = Chain.from_profile(data)
    assert chain.names == ["A", "B+C"] and chain.provenance["merged_unsaved"] == 1
    assert chain.tape_bytes[1] == 500 + 200 - 500               # g freed once C has run
    assert (chain.act_bytes[1], chain.made_bytes(2)) == (1200, 200)
    assert chain.bwd_tape_bytes[1] == chain.tape_bytes[1] - 200  # y: no backward saved it
    kept = Chain.from_profile(data, merge_unsaved=False)
    assert kept.n == 3 and kept.bwd_tape_bytes.tolist() == [1000 - 1000, 500 - 500, 200 - 200]
    old = {**data, "stages": [{k: v for k, v in st.items() if k not in ("out_saved_from", "in_dropped_from")}
                              for st in data["stages"]]}
    assert Chain.from_profile(old).n == 3                       # the sums: h saved, no merge
    assert Chain.from_profile(old, merge_unsaved=False).bwd_tape_bytes.tolist() == [0, 500, 200]


def test_partial_tuple_boundary_stays():
    """Where B also makes a storage C passes on, the boundary is no longer all dropped: it stays a stage (the
    dropped part is counted until B's backward: Note [Storages a stage drops])."""
    data = _tuple_boundary_profile()
    b, c = data["stages"][1], data["stages"][2]
    b.update(x=800, xbar=800, x_nbytes=1800, held_from=[[1, 1000], [2, 800]])
    c.update(x_nbytes=1500, held_from=[[1, 1000], [2, 300], [3, 200]])
    chain = Chain.from_profile(data)
    assert chain.n == 3 and chain.bwd_tape_bytes[1] == 800 - 800  # nothing B made was saved


@pytest.mark.parametrize("key", ["out_saved_from", "in_dropped_from"])
def test_malformed_storage_fields_are_named(key):
    data = _tuple_boundary_profile()
    data["stages"][1][key] = [[5, 10]]
    with pytest.raises(ValueError, match=rf"stage 2 \(B\): {key} = .* is not a list of \[stage, bytes\] pairs"):
        Chain.from_profile(data)


@pytest.mark.parametrize("bad", ["oops", [[1]], [[3, 10]], [[1, -5]], [[1.5, 10]]])
def test_malformed_held_from_is_named(bad):
    stage = dict(name="s", t_fwd=1.0, t_fwd_nograd=1.0, t_bwd=1.0, x=10, x_nbytes=10, xbar=10, fwd_peak_nograd=10,
                 fwd_peak_grad=10, bwd_peak=0, held_from=[[1, 10]])
    data = {"format": "measured-chain/1", "device": "cpu", "input_bytes": 10,
            "stages": [stage, dict(stage, name="t", held_from=bad)]}
    with pytest.raises(ValueError, match=r"stage 2 \(t\): held_from = .* is not a list of \[stage, bytes\] pairs"):
        Chain.from_profile(data)


def test_stage_whose_output_passes_on_an_earlier_stages_storage():
    """Note [Outputs passed through], hand-computed: ``widen`` makes h (1000 B; its ReLU saves it),
    ``narrow`` returns (fc(h), h), ``merge`` consumes both. A checkpoint of narrow's output holds h
    too; its tape does not count h again (narrow's input, held while that tape lives, holds it); the
    two outputs share h, so neither may be moved to the host."""
    base = dict(t_fwd=1.0, t_fwd_nograd=1.0, t_bwd=1.0, fwd_peak_nograd=0, fwd_peak_grad=0, bwd_peak=0,
                bwd_delta=0)
    widen = base | dict(name="widen", x=1000, x_nbytes=1000, xbar=1000, fwd_peak_nograd=1000, fwd_peak_grad=1000,
                        out_saved_bytes=1000, in_saved_bytes=0, held_from=[[1, 1000]])
    narrow = base | dict(name="narrow", x=100, x_nbytes=1100, xbar=100, fwd_peak_nograd=100, fwd_peak_grad=100,
                         out_saved_bytes=1000, in_saved_bytes=1000, held_from=[[1, 1000], [2, 100]])
    merge = base | dict(name="merge", x=100, x_nbytes=100, xbar=100, fwd_peak_nograd=100, fwd_peak_grad=100,
                        out_saved_bytes=100, in_saved_bytes=0, held_from=[[3, 100]])
    data = {"format": "measured-chain/1", "device": "cpu", "input_bytes": 1000, "stages": [widen, narrow, merge]}
    chain = Chain.from_profile(data)
    assert chain.n == 3
    assert chain.act_bytes.tolist() == [1000, 1100, 100]
    assert chain.tape_bytes.tolist() == [1000, 100, 100]
    assert [chain.made_bytes(s) for s in (1, 2, 3)] == [1000, 100, 100]
    cut = Chain(**{f: getattr(chain, f)[:2] for f in ("t_fwd", "t_fwd_nograd", "t_bwd", "act_bytes", "grad_bytes",
                                                      "tape_bytes", "fwd_nograd_extra", "fwd_grad_extra", "bwd_extra")},
                provenance=chain.provenance)  # derived by hand without slicing the per-stage lists
    with pytest.raises(ValueError, match="'made_bytes' has 3 entries for 2 stages"):
        cut.made_bytes(1)
    assert chain.provenance["shared_storage"] == [True, True, False]
    assert chain.swappable().tolist() == [False, False, False, True]
    # FWD_NOGRAD of narrow, dropping a_1, changes the held bytes by exactly what is made: 100
    assert chain.act_bytes[1] - chain.act_bytes[0] == 100
    # an output the executor cannot copy to the host (a sparse tensor: device_only) is never moved there
    data["stages"] = [widen | dict(held_from=[[1, 1000]]), narrow | dict(held_from=[[2, 100]]),
                      merge | dict(device_only=True)]
    chain = Chain.from_profile(data)
    assert chain.provenance["device_only"] == [False, False, True]
    assert chain.swappable().tolist() == [False, True, True, False]


# ---------------------------------------------------------------------------- bundled names, stage counts
def test_load_accepts_a_bundled_profile_name_from_any_directory(tmp_path, monkeypatch):
    from gpusolve import profiles
    monkeypatch.chdir(tmp_path)  # not the repository root: a relative gpusolve/profiles/... would not exist
    by_name = Chain.load("resnet50_b128")
    assert Chain.load("resnet50_b128.json").names == by_name.names
    assert by_name.names == Chain.load(profiles.DIRECTORY / "resnet50_b128.json").names
    assert by_name.provenance["network"] == "resnet50_b128"
    with pytest.raises(FileNotFoundError, match=r"no such file or bundled profile: 'resnet9000'.*vgg16_b64"):
        Chain.load("resnet9000")
    with pytest.raises(FileNotFoundError, match="no such file or bundled profile"):
        Chain.load("somewhere/resnet50_b128.json")  # a path with a folder is a path, never a bundled name
    with pytest.raises(ValueError, match="is a directory"):
        Chain.load(tmp_path)
    # A file that exists wins over the bundled name; the command line reads profiles by the same rule.
    Chain.uniform(3).to_json(tmp_path / "resnet50_b128")
    assert Chain.load("resnet50_b128").n == 3
    from gpusolve.cli import load_chain
    assert load_chain("resnet50_b128").n == 3 and load_chain("vgg16_b64").n == Chain.load("vgg16_b64").n


@pytest.mark.parametrize(("name", "stages", "profiled"),
                         [("vgg16_b64", 25, 40), ("resnet50_b128", 21, 22), ("densenet121_fine_b32", 363, 367)])
def test_stage_counts_before_and_after_merging(name, stages, profiled, tmp_path):
    chain = Chain.load(name)
    assert (chain.n, chain.profiled_stages) == (stages, profiled)
    merged = profiled - stages
    plural = "s" if merged > 1 else ""
    assert chain.stages_text() == f"{stages} stages ({profiled} profiled; {merged} in-place stage{plural} merged)"
    assert chain.summary().startswith(chain.stages_text() + ", forward")
    chain.to_json(tmp_path / "c.json")  # the counts travel with the chain's provenance
    assert Chain.load(tmp_path / "c.json").stages_text() == chain.stages_text()


def test_stage_counts_say_why_stages_were_merged():
    assert Chain.uniform(4).stages_text() == "4 stages" and Chain.uniform(4).profiled_stages == 4
    tiny = Chain.from_profile(_tiny_profile())
    assert tiny.stages_text() == "2 stages (3 profiled; 1 in-place stage merged)"
    assert Chain.from_profile(_tiny_profile(), fuse_aliasing=False).stages_text() == "3 stages"
    head = {"name": "head", "t_fwd": 1.0, "t_fwd_nograd": 0.9, "t_bwd": 2.0, "x": 4000, "x_nbytes": 4000,
            "xbar": 4300, "fwd_peak_nograd": 4200, "fwd_peak_grad": 4500, "bwd_peak": 700, "out_saved_bytes": 0,
            "in_saved_bytes": 1000}
    loss = {"name": "loss", "t_fwd": 0.5, "t_fwd_nograd": 0.4, "t_bwd": 0.5, "x": 8, "x_nbytes": 8, "xbar": 4008,
            "fwd_peak_nograd": 4100, "fwd_peak_grad": 8100, "bwd_peak": 4000, "out_saved_bytes": 0,
            "in_saved_bytes": 0}
    relu = loss | {"name": "relu", "x": 0, "xbar": 0}
    data = {"format": "measured-chain/1", "device": "cpu", "input_bytes": 1000, "stages": [head, loss]}
    assert Chain.from_profile(data).stages_text() == \
        "1 stage (2 profiled; 1 merged where no backward saves the tensor between)"
    both = Chain.from_profile(data | {"stages": [head, relu, loss]})
    assert both.stages_text() == \
        "1 stage (3 profiled; 2 merged: 1 in place, 1 where no backward saves the tensor between)"


def test_exact_bytes_names_the_count_once():
    from gpusolve.units import exact_bytes
    assert exact_bytes(670) == "670 B"  # was "670 B (670 B)" in the bucket hints
    assert exact_bytes(0) == "0 B"
    assert exact_bytes(3 * 2**30) == "3.0000 GiB (3221225472 B)"
    assert exact_bytes(1536) == "1.5000 KiB (1536 B)"
