"""The simulator: hand-computed figures and rejection of schedules that cannot run."""
from __future__ import annotations

import pytest

from gpusolve import Chain, Checkpoint, Op, OpKind, ScheduleError, Tape, policy_to_schedule, simulate
from gpusolve.schedule import count_recomputations, schedule_from_json, schedule_to_json, segments_policy, tape_chain

F, T, B, X = OpKind.FWD_NOGRAD, OpKind.FWD_TAPE, OpKind.BWD, OpKind.FREE


def chain3():
    return Chain(t_fwd=[1, 2, 3], t_fwd_nograd=[0.5, 1, 1.5], t_bwd=[10, 20, 30], act_bytes=[100, 200, 300],
                 grad_bytes=[100, 200, 300], tape_bytes=[1000, 2000, 3000], fwd_nograd_extra=[1, 2, 3],
                 fwd_grad_extra=[10, 20, 30], bwd_extra=[7, 8, 9], input_bytes=50)


def test_store_all_by_hand():
    sched = policy_to_schedule(tape_chain(0, 3), 0, 3)
    assert [(op.kind, op.stage) for op in sched] == [(T, 1), (T, 2), (T, 3), (B, 3), (B, 2), (B, 1)]
    sim = simulate(chain3(), sched)
    assert sim.time_ms == 66
    # held grad a_3 (300) + tapes 1000 + 2000; tape 3 transient 3000 + 30 -> 6330;
    # bwd 3: 6300 + grad a_2 (200) + 9 = 6509 (the peak).
    assert sim.peak_bytes == 6509


def test_checkpoint_by_hand():
    policy = Checkpoint(2, right=Tape(None), left=Checkpoint(1, right=Tape(None), left=Tape(None)))
    sched = policy_to_schedule(policy, 0, 3)
    assert [str(op) for op in sched] == ["fwd_nograd(1, keep)", "fwd_nograd(2)", "fwd_tape(3)", "bwd(3)", "free(2)",
                                         "fwd_nograd(1, keep)", "fwd_tape(2)", "bwd(2)", "free(1)", "fwd_tape(1)",
                                         "bwd(1)"]
    sim = simulate(chain3(), sched)
    assert sim.time_ms == pytest.approx(0.5 + 1 + 3 + 30 + 0.5 + 2 + 20 + 1 + 10)
    assert count_recomputations(sched) == 3
    # Peaks: fwd 2: 300 + a_1 100 + a_2 200 + 2 = 602; tape 3: 300 + 200 + 3000 + 30 = 3530;
    # bwd 3: 200 + 3000 + 300 + 200 + 9 = 3709; tape 2: 200 + 100 + 2000 + 20 = 2320; bwd 1: 1000+100+100+7.
    assert sim.peak_bytes == 3709


def test_a_checkpoint_goes_once_the_tape_it_feeds_is_back_propagated():
    sched = [Op(F, 1, True), Op(T, 2), Op(T, 3), Op(B, 3), Op(B, 2), Op(X, 1), Op(T, 1), Op(B, 1)]
    assert simulate(chain3(), sched).time_ms == pytest.approx(0.5 + 2 + 3 + 30 + 20 + 1 + 10)


def test_segments_policy_keeps_boundaries():
    sched = policy_to_schedule(segments_policy([2], 4), 0, 4)
    assert [str(op) for op in sched][:4] == ["fwd_nograd(1, keep)", "fwd_nograd(2)", "fwd_tape(3)", "fwd_tape(4)"]


@pytest.mark.parametrize("ops,message", [
    ([Op(T, 2)], "input a_1 is not held"),
    ([Op(T, 1), Op(B, 2)], "needs the tape of stage 2"),
    ([Op(F, 1, True), Op(X, 2)], "not a held checkpoint"),
    ([Op(F, 1, False)], "not a droppable checkpoint"),
    ([Op(T, 1), Op(T, 1)], "already recorded"),
    ([Op(T, 4)], "outside the sub-chain"),
    ([Op(T, 1), Op(T, 2), Op(T, 3), Op(B, 3)], "schedule ends with"),
    # a tape is counted without its input: a_1 may not go before bwd(2) (review rv19c:
    # bench/repros/rv19c_simulate_frees_input_of_live_tape.py, 18 B against a least budget of 21 B)
    ([Op(F, 1, True), Op(T, 2), Op(X, 1)], r"drops a_1, the input of stage 2's tape, before bwd\(2\)"),
    ([Op(F, 1, True), Op(F, 2, True), Op(T, 3), Op(F, 3, False)], r"drops a_2, the input of stage 3's tape"),
])
def test_invalid_schedules_are_rejected(ops, message):
    with pytest.raises(ScheduleError, match=message):
        simulate(chain3(), ops)


def test_json_round_trip_of_schedules():
    sched = policy_to_schedule(Checkpoint(1, right=tape_chain(1, 3), left=Tape(None)), 0, 3)
    assert schedule_from_json(schedule_to_json(sched)) == sched


def test_sub_chain_start():
    sched = policy_to_schedule(tape_chain(1, 3), 1, 3)
    sim = simulate(chain3(), sched, start=(1, 3))
    assert sim.time_ms == 2 + 3 + 20 + 30
