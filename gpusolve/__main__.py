"""``python -m gpusolve``: the ``gpusolve`` command (:mod:`gpusolve.cli`)."""
from .cli import _entry

_entry()
