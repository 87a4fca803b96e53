"""Do neighbours beat the point model? `lstmnb region skill` at the sizes the project quotes: the 45 cells
of 38..40N, 279..280E on the synthetic sample (`--source sample`; 2020-01-01 .. 2021-06-30, 1 h ahead), the
recommended point model (`lstmnb train --box` on the same box reached 0.443 K), k = 8 and 24 tried for the
sparse mix.

    python benchmarks/region_skill.py
    python benchmarks/region_skill.py --variants none,sparse --plot skill.png
    python benchmarks/region_skill.py --tiny       # CI: 3 x 3 cells, January 2020, 1 epoch, k = 8, no records

Prints per variant the mean and pooled test RMSE and the MSE skill score against persistence and against
none (the point model), then the same against none in the cells the weather reaches first (upstream)
and last (downstream), and one sentence per variant saying whether it beats the point model; any option
of `lstmnb region skill` may be added and overrides these. About 20 minutes on 2 idle cores, an hour on a loaded
2-core machine.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads must not spin on a shared machine

SETTINGS = ["--source", "sample", "--box", "38,40,279,280", "--start", "2020-01-01", "--end", "2021-06-30",
            "--neighbours", "8,24"]
TINY = ["--source", "sample", "--box", "39,39.5,279,279.5", "--end", "2020-01-31", "--epochs", "1", "--neighbours",
        "8", "--hidden", "8", "--no-progress", "--no-record"]

if __name__ == "__main__":
    from _tiny import region

    sys.exit(region("skill", SETTINGS, TINY, sys.argv[1:]))
