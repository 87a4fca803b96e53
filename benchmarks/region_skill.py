"""Per-cell test RMSE of the region forecaster (sparse, dense, none) against persistence and climatology
on 153 cells of the embedded sample, at the sizes the project quotes: `lstmnb region skill` with a
longer training than its default.

    python benchmarks/region_skill.py                                   # 37..41N, 279..281E, 1 h ahead
    python benchmarks/region_skill.py --variants sparse,none --plot skill.png

Prints the per-variant table (mean over cells of the per-cell RMSE, pooled RMSE, share of cells better
than persistence, parameters, training seconds) and the share of cells where each variant beats the
per-cell control; any option of `lstmnb region skill` may be added and overrides these.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads must not spin on a shared machine

SETTINGS = ["--box", "37,41,279,281", "--start", "2020-01-01", "--end", "2021-06-30", "--epochs", "6",
            "--steps", "150"]

if __name__ == "__main__":
    from lstmnb.cli import main

    sys.exit(main(["region", "skill", *SETTINGS, *sys.argv[1:]]))
