"""Sharding an area over gloo ranks, at equal total threads: `lstmnb region scaling` on the 89 x 9 cells of
the synthetic sample (`--source sample`; 19..41N, 279..281E), N ranks of one thread each against one process
of N threads, alternating five times; medians.

    python benchmarks/region_scaling.py
    python benchmarks/region_scaling.py --world-sizes 1,2,4 --modes tiles
    python benchmarks/region_scaling.py --tiny     # CI: 5 x 5 cells, January 2020, 2 steps, one run, no records

Prints seconds per step of each side, the speed-up at equal threads, halo bytes per rank and step, and
the loss's largest relative difference from one process; the threads line says how loaded the machine
was. Any option of `lstmnb region scaling` may be added and overrides these.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads must not spin on a shared machine

SETTINGS = ["--source", "sample", "--box", "19,41,279,281", "--world-sizes", "1,2", "--steps", "8", "--repeats", "5"]
TINY = ["--source", "sample", "--box", "39,40,279,280", "--end", "2020-01-31", "--world-sizes", "1,2", "--steps", "2",
        "--repeats", "1", "--no-record"]

if __name__ == "__main__":
    from _tiny import region

    sys.exit(region("scaling", SETTINGS, TINY, sys.argv[1:]))
