"""Data shipped with the package: ``thesis_dp_cases.json`` (format ``thesis-reference/1``), the
optimal costs of the thesis's DP (Butt 2019) that ``gpusolve thesis`` reproduces and the tests check."""
from pathlib import Path

THESIS_CASES = Path(__file__).resolve().parent / "thesis_dp_cases.json"
