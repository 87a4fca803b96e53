"""What the benchmarks share for their tiny mode (`--tiny`, run by CI through benchmarks/run_tiny.py).

Not a benchmark (run_tiny.py runs no file whose name starts with an underscore). The scripts run as
``python benchmarks/NAME.py``, so Python finds this module beside them.
"""

from __future__ import annotations

# Every benchmark prints this line last, once its tables are printed: run_tiny.py takes it as the sign that
# the script ran to its end (the figures above it are not checked).
DONE = "benchmark done: tables above"

