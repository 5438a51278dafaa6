"""The plan classes share their fields through gpusolve.solve.PlanBase (Note [Plan fields]).

These tests fail when the field lists drift apart again: a field declared in both subclasses
instead of the base, a base field re-declared with another type or default (beyond the three
re-declarations of JoinPlan pinned here), ``overhead`` defined twice, or a change to the
positional order that existing constructor calls rely on (torch_exec.join builds a JoinPlan
positionally).
"""
from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

from gpusolve import Plan
from gpusolve.join import JoinPlan
from gpusolve.offload import OffloadPlan
from gpusolve.solve import Curve, PlanBase

MISSING = dataclasses.MISSING

# JoinPlan's re-declarations of base fields: (type annotation, default, kw_only). Anything else differing
# from PlanBase is drift.
JOIN_OVERRIDES = {"policy": ("JoinPolicy | None", MISSING, False),
                  "store_all_time_ms": ("float", MISSING, False),
                  "backend": ("str", "cpu", True)}

# What the constructors take positionally; every other field is keyword-only.
PLAN_POSITIONAL = ["feasible", "predicted_time_ms", "predicted_peak_bytes", "budget_bytes", "bucket_bytes",
                   "buckets", "backend", "solve_seconds", "curve", "schedule", "policy", "store_all_time_ms",
                   "bytes_per_state"]
JOIN_POSITIONAL = ["feasible", "predicted_time_ms", "predicted_peak_bytes", "budget_bytes", "bucket_bytes",
                   "buckets", "solve_seconds", "curve", "schedule", "policy", "store_all_time_ms",
                   "min_feasible_bytes", "decided_by"]


def declaration(f: dataclasses.Field) -> tuple:
    return (f.type, f.default, f.default_factory, f.init, f.repr, f.compare, f.hash, f.kw_only, dict(f.metadata))


def fields_of(cls) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def empty_curve() -> Curve:
    return Curve(np.zeros(0, dtype=np.int64), np.zeros(0))


@pytest.mark.parametrize("cls", [Plan, OffloadPlan, JoinPlan])
def test_every_base_field_is_declared_as_in_the_base(cls):
    base, sub = fields_of(PlanBase), fields_of(cls)
    assert set(base) <= set(sub)
    for name, f in base.items():
        if cls is JoinPlan and name in JOIN_OVERRIDES:
            assert (sub[name].type, sub[name].default, sub[name].kw_only) == JOIN_OVERRIDES[name], name
            assert declaration(sub[name])[2:7] == declaration(f)[2:7], name  # factory, init, repr, compare, hash
        else:
            assert declaration(sub[name]) == declaration(f), name


def test_the_fields_common_to_both_plans_are_the_base_fields():
    assert set(fields_of(Plan)) & set(fields_of(JoinPlan)) == set(fields_of(PlanBase))
    assert {"policy", "store_all_time_ms", "notes", "timings", "backend", "curve", "schedule"} <= set(
        fields_of(PlanBase))


def test_overhead_lives_in_the_base_and_min_feasible_bytes_in_each_class():
    for cls in (Plan, JoinPlan):
        assert "overhead" not in vars(cls)
    assert isinstance(vars(PlanBase)["overhead"], property)
    assert isinstance(vars(Plan)["min_feasible_bytes"], property)
    assert "min_feasible_bytes" not in fields_of(Plan) and "min_feasible_bytes" in fields_of(JoinPlan)


@pytest.mark.parametrize("cls, positional", [(Plan, PLAN_POSITIONAL), (JoinPlan, JOIN_POSITIONAL),
                                             (OffloadPlan, PLAN_POSITIONAL + ["link", "dp_time_ms", "swaps"])])
def test_positional_order(cls, positional):
    params = list(inspect.signature(cls).parameters.values())
    assert [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD] == positional
    assert {p.name for p in params if p.kind is p.KEYWORD_ONLY} == set(fields_of(cls)) - set(positional)


def test_constructors_replace_and_equality():
    # As torch_exec.join builds a given-schedule JoinPlan: twelve positional arguments.
    join = JoinPlan(True, 2.0, 10, 10, 0, 0, 0.0, empty_curve(), [], None, 1.0, 7,
                    decided_by="schedule_fn", notes=["n"], net=None)
    assert (join.backend, join.min_feasible_bytes, join.overhead, join.timings) == ("cpu", 7, 1.0, {})
    assert dataclasses.replace(join, net=object()) == join  # net: compare=False
    assert dataclasses.replace(join, budget_bytes=11).budget_bytes == 11
    with pytest.raises(TypeError):
        JoinPlan(True, 2.0, 10, 10, 0, 0, 0.0, empty_curve(), [], None, 1.0)  # min_feasible_bytes is required
    with pytest.raises(TypeError):
        JoinPlan(True, 2.0, 10, 10, 0, 0, 0.0, empty_curve(), [], None, min_feasible_bytes=7)  # so is the time

    plan = Plan(feasible=True, predicted_time_ms=3.0, predicted_peak_bytes=10, budget_bytes=10, bucket_bytes=0,
                buckets=0, backend="given", solve_seconds=0.0, curve=empty_curve(), schedule=[],
                store_all_time_ms=2.0, notes=["n"], known_min_bytes=5)
    assert (plan.policy, plan.timings, plan.overhead, plan.min_feasible_bytes) == (None, {}, 0.5, 5)
    assert dataclasses.replace(plan, chain=object()) == plan  # chain: compare=False
    assert dataclasses.replace(plan, known_min_bytes=6) != plan
    assert plan.to_dict()["backend"] == "given" and join.to_dict()["decided_by"] == "schedule_fn"
    with pytest.raises(TypeError):
        Plan(True, 3.0, 10, 10, 0, 0, solve_seconds=0.0, curve=empty_curve(), schedule=[])  # backend is required
