"""bench/frontend_timings.py's sum of the phases besides the table and its walks: the parts of a phase
(device_setup's, recover's: gpusolve.dp.cuda.SUB_PHASES) are not counted twice."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import frontend_timings as ft  # noqa: E402


def test_other_phases_leave_the_parts_of_a_phase_out(tmp_path, monkeypatch):
    timings = {"setup": 0.002, "dp": 0.05, "device_setup": 0.003, "device_check": 0.001, "device_upload": 0.001,
               "device_table": 0.001, "recover": 0.004, "recover_walks": 0.003, "candidates": 0.002,
               "schedule": 0.003, "curve": 0.0005}
    monkeypatch.setattr(ft, "solve", lambda *a, **k: SimpleNamespace(timings=dict(timings)))
    assert ft.main(["--buckets", "16", "--repeats", "1", "--out", str(tmp_path)]) == 0
    [row] = json.loads((tmp_path / "frontend_timings.json").read_text())["records"]
    assert row["other_s"] == pytest.approx(0.002 + 0.003 + 0.002 + 0.003 + 0.0005)


def test_a_missing_profile_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        ft.main(["--profile", "no_such_profile"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no_such_profile" in err


@pytest.mark.parametrize("value", ["1.5", "a,2", ","])
def test_a_bad_number_list_is_refused_naming_the_option(capsys, value):
    """bench/_common.number_list: argparse names the option and the value (not a bare 'could not convert')."""
    with pytest.raises(SystemExit) as exit_info:
        ft.main(["--buckets", value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"argument --buckets: {value!r} is not a comma-separated list of int values" in err


def test_a_number_list_keeps_its_order_and_skips_empty_parts():
    from _common import number_list
    assert number_list(int)("1024,64,") == [1024, 64]
    assert number_list(float)("0.5, 0.35") == [0.5, 0.35]
