"""Region mode, memory: the memory model's laws, and its dense prediction against a measured step."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")

import pytest

from lstmnb.errors import ConfigError
from lstmnb.region.memory import SEARCH_SIDE, MemoryCase, largest_side, measure, plot_memory, predict_bytes, sweep

MiB = 2**20


def test_dense_grows_with_the_fourth_power_of_the_side_and_sparse_linearly():
    base = MemoryCase(batch=1, window=8, hidden=8)

    def rel(variant, side):
        return predict_bytes(dataclasses.replace(base, ny=side, nx=side, variant=variant))["relation_weights"]

    assert rel("dense", 40) == 16 * rel("dense", 20) == 4 * base.channels * 1600**2
    assert rel("sparse", 40) == 4 * rel("sparse", 20)
    assert rel("none", 40) == 0
    # activations are O(cells) for every variant
    act = [predict_bytes(dataclasses.replace(base, ny=s, nx=s))["activations"] for s in (10, 20)]
    assert act[1] == pytest.approx(4 * act[0], rel=1e-9)
    # peak: activations beside three copies of the weights, or Adam's six
    big = dataclasses.replace(base, ny=60, nx=60, variant="dense")
    p = predict_bytes(big, floor_bytes=100)
    assert p["total"] == 100 + max(p["activations"] + 3 * p["relation_weights"], 6 * p["relation_weights"])


def test_largest_side_fits_the_budget_and_the_next_does_not():
    base = MemoryCase()
    budget = 2 * 2**30
    for variant in ("dense", "sparse"):
        s = largest_side(variant, budget, base)
        fits = [predict_bytes(dataclasses.replace(base, ny=n, nx=n, variant=variant))["total"] for n in (s, s + 1)]
        assert fits[0] <= budget < fits[1]
    assert largest_side("dense", budget, base) < largest_side("sparse", budget, base)
    assert largest_side("dense", 2 * budget, base) > largest_side("dense", budget, base)
    assert largest_side("dense", 1.0, base) == 0
    # a budget beyond any area: the search's own limit, which the command says is a limit, not an answer
    # (`lstmnb region memory` refuses a budget over the machine's memory: test_region_experiments's bad input)
    assert largest_side("sparse", 1e300, base) == SEARCH_SIDE


def test_sweep_stops_a_variant_at_the_budget():
    base = MemoryCase(batch=1, window=8, hidden=8)
    budget = predict_bytes(dataclasses.replace(base, ny=30, nx=30, variant="dense"))["total"] + 1
    df = sweep([10, 20, 30, 40, 50], ("dense", "sparse"), budget, base, run=False)
    dense = df[df["variant"] == "dense"]
    assert list(dense["ny"]) == [10, 20, 30, 40] and list(dense["status"]) == ["predicted"] * 3 + ["over budget"]
    assert list(df[df["variant"] == "sparse"]["status"]) == ["predicted"] * 5
    fig = plot_memory(df, budget)
    assert len(fig.axes) == 2
    # predicted only (run=False): the legend names the predicted lines and the budget, nothing that was not drawn
    memory_axis, time_axis = fig.axes
    assert memory_axis.get_legend_handles_labels()[1] == ["dense predicted", "sparse predicted", "budget"]
    assert time_axis.get_legend() is None


def test_bad_cases_are_config_errors():
    with pytest.raises(ConfigError, match=r"^variant='full' is not one of sparse, none, dense$"):
        predict_bytes(MemoryCase(variant="full"))
    with pytest.raises(ConfigError, match="ny=0 must be a whole number >= 1"):
        measure(MemoryCase(ny=0))


def test_a_failed_allocation_is_one_short_line():
    """A case whose allocation still fails (a real one: more than any address space holds) is reported as
    out of memory with what was asked, without torch's C++ source location."""
    import torch

    from lstmnb.region.memory import failure_reason

    with pytest.raises(RuntimeError) as failed:
        torch.empty(2**50, dtype=torch.uint8)
    reason = failure_reason(failed.value)
    assert reason == "out of memory: tried to allocate 1,048,576.0 GiB", str(failed.value)
    assert failure_reason(ValueError("ny=0 is bad\nmore")) == "ValueError: ny=0 is bad"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's getrusage keeps a parent's size across exec")
def test_a_measuring_process_started_by_a_large_one_reports_its_own_peak():
    """Without a resettable mark a process's peak is its own (``process_peak_mb``). On Linux getrusage's max RSS of a
    process started by fork and exec (a ladder rung's `lstmnb train`, the forkserver's server) still holds what its
    parent had resident at the fork: from a 2 GiB kernel, a small process would report 2 GiB."""
    held = bytearray(b"\x01") * (2 * 1024 * MiB)  # resident: every page written
    code = ("import resource; from lstmnb.machine.memory import process_peak_mb; "
            "print(process_peak_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    del held
    assert done.returncode == 0, done.stderr[-2000:]
    own, rusage = map(float, done.stdout.split())
    assert rusage > 2048, rusage  # the parent's 2 GiB, which is why getrusage is not read
    assert 10 < own < 1024, (own, rusage)  # Python and torch, imported: a few hundred MiB


@pytest.mark.slow
def test_dense_memory_measured_as_predicted():
    """Two dense steps in fresh processes: the growth of the measured peak from 48 x 48 to 64 x 64 cells
    is the model's n^2 growth (runtime and fixed buffers cancel); memory, not time, so load cannot flip it."""
    base = MemoryCase(batch=1, window=8, hidden=8, channels=1, steps=1, threads=1, variant="dense")
    small, large = (measure(dataclasses.replace(base, ny=s, nx=s)) for s in (48, 64))
    assert small["status"] == large["status"] == "ok", (small.get("reason"), large.get("reason"))
    predicted = large["predicted_total"] - small["predicted_total"]  # about 262 MiB
    measured = large["measured_bytes"] - small["measured_bytes"]
    assert measured == pytest.approx(predicted, rel=0.15)
    assert large["measured_bytes"] >= large["predicted_total"]  # the six copies are really there
    assert large["method"] in ("VmHWM after clear_refs", "process peak (no reset possible)")
    assert large["step_s"] > 0 and large["loss"] > 0
