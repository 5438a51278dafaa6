"""The seed paper's join model (gpusolve.join.paper): spec vectors, exhaustive search, closed forms, CLI.

The vectors are a copy of the spec's ``join-vectors-paper-model.json`` (tests/data/, since CI has no
shared folder); the exhaustive search (gpusolve.join.exhaustive) is an independent reference that
tries every schedule of the slot model.
"""
from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpusolve import cli
from gpusolve.join.exhaustive import exhaustive_chain, exhaustive_join, least_feasible_slots
from gpusolve.join.paper import (INF, EquivChain, JoinDP, ScheduleError, c_min, lower_bound, opt0, opt0_table, opt_bm,
                                 opt_bm_eq5, simulate, store_all_slots)

ROOT = Path(__file__).resolve().parent.parent
VECTORS = json.loads((Path(__file__).resolve().parent / "data" / "join_vectors_paper_model.json").read_text())


def _expected(value):
    return INF if value is None else float(value)


def _replay(dp: JoinDP, c: int, lengths, b=None, uf=1.0, ub=1.0, ut=1.0) -> None:
    """The DP's schedule at c is valid with c slots and its makespan is the DP's value."""
    ops = dp.schedule(c)
    want = dp.makespan(c)
    if not math.isfinite(want):
        assert ops is None
        return
    run = simulate(ops, lengths, c, b, uf, ub, ut)
    assert run.peak <= c
    assert run.makespan == pytest.approx(want)
    assert run.backwards == sum(lengths) and run.turns == 1


# ---------------------------------------------------------------------------- Theorem 1
def test_opt0_vectors():
    table = opt0_table(6, 8)
    for l, row in VECTORS["opt0_unit"].items():
        assert table[int(l), 2:9].tolist() == [float(x) for x in row], f"Opt_0({l}, 2..8)"
    assert opt0(1, 2) == INF and opt0(0, 1) == INF and opt0(0, 2) == 1.0


def test_theorem1_printed_range_is_the_erratum():
    fixed, printed = opt0_table(8, 11), opt0_table(8, 11, fixed=False)
    assert printed[1, 4] == INF and fixed[1, 4] == 3.0           # the empty range 1 <= i < 1
    assert int((fixed != printed).sum()) == 36                   # spec A.2.1: 36 wrong entries for l <= 8, c <= 11
    assert np.all(fixed <= printed)


@pytest.mark.parametrize("uf,ub", [(1, 1), (1, 2), (2, 1), (1, 3)])
def test_opt0_equals_exhaustive(uf, ub):
    table = opt0_table(5, 8, uf, ub)
    for l in range(6):
        for c in range(1, 9):
            assert table[l, c] == exhaustive_chain(l, c, uf, ub), (l, c)


# ---------------------------------------------------------------------------- eq. (5) against the vectors
@pytest.mark.parametrize("group", ["join_unit_k2", "join_unit_b", "join_unit_k3"])
def test_join_vectors(group):
    for v in VECTORS[group]:
        lengths, b = v["l"], v.get("b")
        slots = [int(c) for c in v["opt"]]
        dp = JoinDP(lengths, max(slots), b)
        for c in slots:
            want = _expected(v["opt"][str(c)])
            assert dp.makespan(c) == want, (lengths, b, c)
            assert opt_bm_eq5(lengths, c, b) == want, (lengths, b, c)
            _replay(dp, c, lengths, b)
        assert c_min(lengths, b) == v["c_min"]
        if "c_storeall" in v:
            assert store_all_slots(lengths) == v["c_storeall"]
            assert dp.makespan(v["c_storeall"]) == lower_bound(lengths)


@pytest.mark.parametrize("group", ["join_costs", "join_het_time"])
def test_cost_vectors(group):
    for v in VECTORS[group]:
        slots = [int(c) for c in v["opt"]]
        dp = JoinDP(v["l"], max(slots), None, v["uf"], v["ub"], v["ut"])
        for c in slots:
            assert dp.makespan(c) == v["opt"][str(c)], (v["l"], c)
            _replay(dp, c, v["l"], None, v["uf"], v["ub"], v["ut"])


def test_toy_instance_is_74_not_75():
    dp = JoinDP((4, 10, 12), 30)
    assert {c: dp.makespan(c) for c in range(7, 31)} == {int(c): x for c, x in VECTORS["toy_4_10_12"].items()}
    # Minimisers at c = 9: (branch of length 10, i = 8), (branch of length 12, i = 7 or 8); the text's (12, 9) is 75.
    choices = dp.choices(9)
    assert {(m, i) for m, i, x in choices if x == 74} == {(1, 8), (2, 7), (2, 8)}
    assert dict(((m, i), x) for m, i, x in choices)[(2, 9)] == 75
    run = simulate(dp.schedule(9), (4, 10, 12), 9)
    assert (run.makespan, run.peak, run.forwards) == (74, 9, 47)
    narrated = simulate(dp.schedule(9, first=(2, 9)), (4, 10, 12), 9)
    assert narrated.makespan == 75 and narrated.peak <= 9
    # the text's sub-problems
    assert opt_bm((3, 4, 10), 8, (1, 0, 0)) == 48 and opt_bm((3, 3, 4), 7, (1, 1, 0)) == 27
    assert c_min((3, 3, 4), (1, 1, 0)) == 7 and opt_bm((3, 3, 4), 6, (1, 1, 0)) == INF
    assert opt0(6, 7) == 14 and opt0(8, 9) == 18


# ---------------------------------------------------------------------------- exhaustive search
EXHAUSTIVE = [((n,), b) for n in range(6) for b in [(0,), (1,)]]
EXHAUSTIVE += [((a, d), b) for a in range(4) for d in range(a, 4) for b in [(0, 0), (1, 0), (0, 1), (1, 1)]]
EXHAUSTIVE += [((1, 1, 1), None), ((0, 1, 2), None), ((1, 2, 2), None), ((0, 2, 2), (1, 0, 0)), ((2, 2, 2), None)]


@pytest.mark.parametrize("lengths,b", EXHAUSTIVE, ids=lambda x: str(x))
def test_dp_equals_exhaustive_search(lengths, b):
    top = store_all_slots(lengths) + 1
    dp = JoinDP(lengths, top, b)
    for c in range(max(0, c_min(lengths, b) - 1), top + 1):
        assert dp.makespan(c) == exhaustive_join(lengths, c, b), (lengths, b, c)
    _replay(dp, c_min(lengths, b), lengths, b)


@pytest.mark.parametrize("seed", range(4))
def test_per_stage_times_equal_exhaustive_search(seed):
    rng = random.Random(seed)
    lengths = (rng.randint(1, 3), rng.randint(1, 3))
    uf = [[rng.randint(1, 4) for _ in range(n)] for n in lengths]
    ub = [[rng.randint(1, 4) for _ in range(n)] for n in lengths]
    ut = rng.randint(0, 3)
    top = store_all_slots(lengths)
    dp = JoinDP(lengths, top, None, uf, ub, ut)
    for c in range(c_min(lengths), top + 1):
        assert dp.makespan(c) == exhaustive_join(lengths, c, None, uf, ub, ut), (lengths, uf, ub, ut, c)
        _replay(dp, c, lengths, None, uf, ub, ut)


def test_costs_equal_exhaustive_search():
    for uf, ub, ut in [(1, 2, 1), (2, 1, 3), (3, 1, 0)]:
        dp = JoinDP((2, 3), 8, None, uf, ub, ut)
        for c in range(4, 9):
            assert dp.makespan(c) == exhaustive_join((2, 3), c, None, uf, ub, ut), (uf, ub, ut, c)


def test_literal_eq5_equals_table_dp():
    rng = random.Random(7)
    for _ in range(25):
        k = rng.choice([1, 2, 3])
        lengths = tuple(rng.randint(0, 6) for _ in range(k))
        b = tuple(rng.randint(0, 1) for _ in range(k))
        dp = JoinDP(lengths, store_all_slots(lengths) + 1, b)
        for c in range(store_all_slots(lengths) + 2):
            assert dp.makespan(c) == opt_bm_eq5(lengths, c, b), (lengths, b, c)


# ---------------------------------------------------------------------------- Lemma 4
@pytest.mark.parametrize("k", [1, 2, 3])
def test_lemma4_is_the_least_feasible_memory(k):
    top = {1: 5, 2: 3, 3: 2}[k]
    for lengths in {tuple(sorted(t)) for t in np.ndindex(*(top + 1,) * k)}:
        for b in np.ndindex(*(2,) * k):
            low = c_min(lengths, b)
            assert least_feasible_slots(lengths, b) == low, (lengths, b)
            dp = JoinDP(lengths, low, b)
            assert dp.makespan(low - 1) == INF and math.isfinite(dp.makespan(low)), (lengths, b)


# ---------------------------------------------------------------------------- section 6 closed forms
@pytest.mark.parametrize("L", [1, 2, 3, 5, 8, 10])
def test_section6_closed_forms(L):
    # c_min(CM) = 5 needs L >= 2: (1, 5) has a branch of length 1, so Lemma 4 gives L = 4 there.
    cases = [("CM", (L, 5 * L), 6 * L + 2, 5 if L > 1 else 4), ("SNN", (2 * L,) * 3, 6 * L + 3, 7),
             ("RNN", (6 * L,), 6 * L + 1, 3)]
    for name, lengths, c_opt, low in cases:
        dp = JoinDP(lengths, c_opt + 2)
        assert store_all_slots(lengths) == c_opt, name
        assert dp.makespan(c_opt) == 12 * L + 1 == dp.makespan(c_opt + 2), name       # Span*
        assert dp.makespan(c_opt - 1) > 12 * L + 1, name                             # C_opt is the least
        assert c_min(lengths) == low and dp.makespan(low - 1) == INF and math.isfinite(dp.makespan(low)), name


# ---------------------------------------------------------------------------- EQUIV-CHAIN
def test_equiv_chain_is_a_valid_join_schedule_and_never_beats_optimal():
    for L in (1, 3, 5):
        lengths = (2 * L,) * 3
        eq, opt = EquivChain(lengths, 6 * L + 3), JoinDP(lengths, 6 * L + 3)
        for c in range(7, 6 * L + 4):
            x = eq.makespan(c)
            assert x >= opt.makespan(c)
            if math.isfinite(x):
                run = simulate(eq.schedule(c), lengths, c)
                assert run.makespan == x and run.peak <= 3 * (c // 3)
        assert eq.makespan(6 * L + 3) == 12 * L + 1
    # the 4-level chain of Fig. 10a: 3 branches of length 3 with 3 level slots (9 slots)
    assert EquivChain((3, 3, 3), 9).makespan(9) == JoinDP((3,), 3, None, 3, 3, 1).makespan(3)
    with pytest.raises(ValueError, match="balanced"):
        EquivChain((10, 50), 20)


# ---------------------------------------------------------------------------- simulator and errors
def test_simulator_rejects_invalid_schedules():
    good = [("S", 0, 0), ("F", 0, 0), ("S", 1, 0), ("F", 1, 0), ("Turn",), ("Fbar", 0, 0), ("Fbar", 1, 0),
            ("Dbar", 0), ("Dbar", 1)]
    assert simulate(good, (1, 1), 4).makespan == 5
    with pytest.raises(ScheduleError, match="above c = 3"):
        simulate(good, (1, 1), 3)
    with pytest.raises(ScheduleError, match="not in memory"):
        simulate([("F", 0, 0), ("F", 1, 0), ("Turn",), ("Fbar", 0, 0)], (1, 1), 4)
    with pytest.raises(ScheduleError, match="cannot be recomputed"):
        simulate([("S", 0, 0), ("S", 0, 0), ("F", 0, 0), ("Turn",), ("Fbar", 0, 0), ("Fbar", 0, 0)], (1,), 5)
    with pytest.raises(ScheduleError, match="final memory"):
        simulate(good[:-1], (1, 1), 4)
    with pytest.raises(ScheduleError, match="turn cannot run twice"):
        simulate([("Turn",), ("Turn",)], (0,), 1)
    assert simulate(good[:-1], (1, 1), 4, b=(0, 1)).makespan == 5


def test_bad_inputs_name_the_value():
    with pytest.raises(ValueError, match="-1"):
        JoinDP((3, -1), 5)
    with pytest.raises(ValueError, match="cmax"):
        JoinDP((3, 1), -2)
    with pytest.raises(ValueError, match="limit"):
        JoinDP((400, 400, 400), 1200)
    with pytest.raises(ValueError, match="uf"):
        JoinDP((3, 1), 5, uf=-1)
    with pytest.raises(ValueError, match="cmax = 5"):
        JoinDP((3, 1), 5).makespan(6)


def test_store_all_cap_answers_larger_memory():
    dp = JoinDP((4, 10, 12), 1000)
    assert dp.columns == 29 and dp.makespan(1000) == dp.makespan(29) == lower_bound((4, 10, 12)) == 53


# ---------------------------------------------------------------------------- CLI
def _cli(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_json_shape(capsys):
    code, out, err = _cli(capsys, "join", "--paper", "--lengths", "10,50", "--slots", "4,5,6,31", "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    assert set(data) == {"lengths", "method", "curve"}
    assert data["lengths"] == [10, 50] and data["method"] == "optimal"
    assert data["curve"][0] == {"slots": 4, "makespan": None}      # below c_min = 5
    assert [p["slots"] for p in data["curve"]] == [4, 5, 6, 31]
    assert data["curve"][1]["makespan"] == JoinDP((10, 50), 5).makespan(5)
    code, out, _ = _cli(capsys, "join", "--paper", "--lengths", "4,4,4", "--slots", "7..15", "--method", "equiv-chain",
                        "--uf", "1", "--ub", "2", "--ut", "1", "--json")
    data = json.loads(out)
    assert [p["slots"] for p in data["curve"]] == list(range(7, 16))
    assert [p["makespan"] for p in data["curve"]] == [None if not math.isfinite(x) else x for x in
                                                       EquivChain((4, 4, 4), 15, 1, 2, 1).curve(range(7, 16))]


def test_cli_table(capsys):
    code, out, _ = _cli(capsys, "join", "--paper", "--lengths", "4,10,12", "--slots", "6..9")
    assert code == 0
    lines = out.splitlines()
    assert "minimum slots 7" in lines[1] and "store-all 29" in lines[1]
    assert lines[-1].split() == ["9", "74", f"{74 / 53:.3f}"] and lines[4].split()[1] == "infeasible"


@pytest.mark.parametrize("argv,message", [
    (["--lengths", "10,50", "--slots", "5"], "--lengths, --slots belong to the paper's slot model: add --paper"),
    # taken and ignored on branch profiles before (a review)
    (["resnet50_b128", "resnet50_b128", "--budget", "50%", "--method", "equiv-chain"],
     "--method belongs to the paper's slot model: add --paper"),
    (["resnet50_b128", "resnet50_b128", "--budget", "50%", "--ut", "100"], "--ut belongs to the paper's slot model"),
    (["--paper", "--lengths", "10,-5", "--slots", "5"], "branch length -5 is negative"),
    (["--paper", "--lengths", "10,50", "--slots", "0,5"], "slot count 0 is below 1"),
    (["--paper", "--lengths", "10,50", "--slots", "5.."], "'5..' is malformed"),
    (["--paper", "--lengths", "10,50", "--slots", "9..5"], "the range 9..5 is empty"),
    (["--paper", "--lengths", "10,x", "--slots", "5"], "'x' is not an integer"),
    (["--paper", "--lengths", "10,50", "--slots", "5", "--ub", "-1"], "--ub -1.0: costs must be finite and >= 0"),
    (["--paper", "--lengths", "10,50", "--slots", "5", "--method", "equiv-chain"], "needs a balanced join"),
    (["--paper", "--slots", "5"], "needs --lengths"),
])
def test_cli_errors_are_one_line(capsys, argv, message):
    code, out, err = _cli(capsys, "join", *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("gpusolve: error: ") and message in err, err


def test_cli_entry_point():
    res = subprocess.run([sys.executable, "-m", "gpusolve.cli", "join", "--paper", "--lengths", "2,2,2", "--slots",
                          "6..9", "--json"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["curve"] == [{"slots": 6, "makespan": None}, {"slots": 7, "makespan": 15},
                                               {"slots": 8, "makespan": 14}, {"slots": 9, "makespan": 13}]
