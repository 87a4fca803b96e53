"""Peak memory and step time of the region forecaster against the area's size, dense vs sparse relation,
on this machine (each case in a fresh process; the memory model in lstmnb/region/memory.py), at the
sizes the project quotes: `lstmnb region memory` with a 4 GiB budget, sides up to 140 and the
60 x 168 target (10,080 cells) trained by the sparse model.

    python benchmarks/region_memory.py
    python benchmarks/region_memory.py --budget-gb 8 --plot region_memory.png
    python benchmarks/region_memory.py --tiny      # CI: one small side and a 5 x 6 target, one step, no records

Prints, per variant and side, predicted and measured peak MiB and seconds per step, the largest square
area each variant fits in the budget, and the target area's measurement beside the dense model's
prediction; any option of `lstmnb region memory` may be added and overrides these.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads must not spin on a shared machine

SETTINGS = ["--sides", "10,20,30,40,50,60,70,80,90,100,120,140", "--budget-gb", "4", "--target", "60x168"]
TINY = ["--sides", "6", "--budget-gb", "1", "--target", "5x6", "--steps", "1", "--no-record"]

if __name__ == "__main__":
    from _tiny import region

    sys.exit(region("memory", SETTINGS, TINY, sys.argv[1:],
                    data="synthetic inputs (random values: memory and speed do not depend on them)"))
