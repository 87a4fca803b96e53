"""Sharding an area over gloo ranks, at equal total threads: `lstmnb region scaling` on the 89 x 9 cells of
the embedded sample (19..41N, 279..281E), N ranks of one thread each against one process of N threads,
alternating five times; medians.

    python benchmarks/region_scaling.py
    python benchmarks/region_scaling.py --world-sizes 1,2,4 --modes tiles

Prints seconds per step of each side, the speed-up at equal threads, halo bytes per rank and step, and
the loss's largest relative difference from one process; the threads line says how loaded the machine
was. Any option of `lstmnb region scaling` may be added and overrides these.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads must not spin on a shared machine

SETTINGS = ["--box", "19,41,279,281", "--world-sizes", "1,2", "--steps", "8", "--repeats", "5"]

if __name__ == "__main__":
    from lstmnb.cli import main

    sys.exit(main(["region", "scaling", *SETTINGS, *sys.argv[1:]]))
