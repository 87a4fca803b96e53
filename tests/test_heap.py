"""A CPU run's C heap (``memory.keep_freed_heap``): on glibc, freed memory is kept for the next step instead of
being given back to the system and faulted in again; the record says so. The study's epoch with the kept heap
against glibc's own thresholds (the same loss, the buffers faulted in once) is the CPU ladder's rungs 1 and 2,
test_ladder.py."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from lstmnb.machine.memory import _glibc
from lstmnb.training import TrainConfig, train
from lstmnb.windows import make_windows

GLIBC = _glibc() is not None


@pytest.mark.parametrize("libc", ["this one", "not glibc"])
def test_a_system_heap_run_after_a_kept_one_says_the_heap_stayed_kept(libc):
    """heap=system cannot put back what an earlier run of the process kept (glibc has no getter and no undo): the
    record must not claim glibc's thresholds then, and it says to use a fresh process (as the ladder does). Where
    the C library is not glibc (macOS, Windows, musl: here its probe answers None), nothing was kept: both say so."""
    probe = "m._glibc = lambda: None; " if libc == "not glibc" else ""
    code = (f"import json; import lstmnb.machine.memory as m; {probe}h = m.heap_for_run; a = h(False); h(True); "
            "print(json.dumps([a, h(False)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    fresh, after = json.loads(out.strip().splitlines()[-1])
    assert fresh["policy"] == "system"
    if GLIBC and libc == "this one":
        assert "glibc's default" in fresh["reason"]
        assert after["policy"] == "kept" and "fresh process" in after["reason"]
    else:
        assert after == fresh and fresh["reason"] == "not glibc: the system's allocator as it is"


def test_cpu_run_records_how_its_heap_was_kept():
    t = pd.date_range("2020-03-01", periods=24 * 20, freq="h")
    v = 285 + 4 * np.sin(2 * np.pi * t.hour.to_numpy() / 24)[:, None] + np.zeros((1, 2))
    cfg = TrainConfig(window=12, hidden=8, epochs=1, batch_size=32, progress=False, device="cpu")
    heap = train(make_windows(v, t, cfg.window_config()), cfg).record["memory"]["heap"]
    if GLIBC:
        assert heap["policy"] == "kept" and heap["mmap_threshold_mb"] == 32 and heap["trim_threshold_mb"] == 64
    else:
        assert heap["policy"] == "system" and "not glibc" in heap["reason"]


@pytest.mark.slow
def test_heap_benchmark_leaves_the_warm_up_epoch_out_of_its_figures(capsys):
    """benchmarks/heap_cpu.py compares the kept heap with glibc's over training seconds, page faults and CPU
    seconds: those of the steady epochs, as every timing in lstmnb is read; the first epoch (the process's
    first allocations and start-up, in both variants alike) would water the ratio down."""
    import heap_cpu  # benchmarks/, on the path by conftest.py

    heap_cpu.child("kept", "published", 2, 1, True)
    run = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(run["train_s"]) == 2
    assert run["steady_s"] == pytest.approx(run["train_s"][1])  # epoch 2 alone: the warm-up epoch is left out
    assert run["faults"] >= 0 and run["cpu_s"] > 0
