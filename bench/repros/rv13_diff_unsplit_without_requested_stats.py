"""Review of 8e25cd8: torch_exec.meter.unsplit_bytes reads ``requested_bytes.all.peak`` with a default of 0. Where
the allocator does not report it (torch documents that with backend:cudaMallocAsync "some stats are not meaningful,
and are always reported as zero"; a custom/pluggable allocator reports none), the "rounding" becomes the whole
allocated peak, so every over-budget excess of a measured step is learned as the allocator's unsplit blocks
(cap = the whole peak) and the warning says the allocator held GBs beyond what was asked for.

Exits 1 while an absent or zero requested-bytes counter reads as rounding, 0 once it reads as unknown (0).
"""
import sys

import torch

from torch_exec.meter import unsplit_bytes


def main() -> int:
    peak = 8 << 30
    bad = False
    for name, stats in (("key absent (pluggable allocator)", {"allocated_bytes.all.peak": peak}),
                        ("key zero (cudaMallocAsync)", {"allocated_bytes.all.peak": peak,
                                                        "requested_bytes.all.peak": 0})):
        torch.cuda.memory_stats = lambda device=None, s=stats: s
        got = unsplit_bytes(torch.device("cuda", 0))
        print(f"{name}: allocated peak {peak} B, unsplit_bytes -> {got} B")
        bad |= got != 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
