"""The speed benchmark on tiny sizes: every contender trains, reaches a loose target, and is reported."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from lstmnb.errors import ConfigError
from lstmnb.experiments.speed import CONTENDERS, contender_settings, format_report, matmul_rate, mfu_text, speed_benchmark
from lstmnb.training import preset_config
from lstmnb.windows import make_windows


@pytest.fixture(scope="module")
def tiny():
    t = pd.date_range("2020-01-01", periods=24 * 40, freq="h")
    rng = np.random.default_rng(1)
    v = 280 + 5 * np.sin(2 * np.pi * t.hour.to_numpy() / 24) + np.cumsum(rng.normal(0, 0.2, len(t))) * 0.1
    base = preset_config("published", window=12, hidden=8, device="cpu", split_dates=None)  # the settings this test was written for
    return make_windows(v, t, base.window_config()), base


def test_matmul_rate_is_a_positive_measured_rate():
    torch.manual_seed(0)
    r = matmul_rate("cpu", size=256, repeats=3)
    assert 1e7 < r < 1e14  # between 10 MFLOP/s and 100 TFLOP/s: measured, not a constant


def test_each_contender_trains_and_reaches_a_loose_target(tiny):
    windows, base = tiny
    loose = 3 * windows.baselines["val"]["persistence"]["rmse"] + 1.0
    rep = speed_benchmark(windows=windows, base=base, device="cpu", repeats=1, max_epochs=3, target_rmse=loose,
                          progress=False)
    assert list(rep.table.index) == list(CONTENDERS)
    for name, row in rep.table.iterrows():
        assert row["time_to_target_s"] > 0 and row["epochs_to_target"] == 1, name
        assert math.isfinite(row["test_rmse_k"])
        # stopped at the target in the warm-up epoch: no steady epoch, so no samples/s, s/epoch or MFU
        assert math.isnan(row["samples_per_s"]) and math.isnan(row["epoch_s"]) and math.isnan(row["mfu"])
    # the ratios are each contender's own runs against the published runs (one repeat: the run itself)
    runs = rep.runs.set_index("contender")
    for name in CONTENDERS:
        assert rep.table.loc[name, "time_to_target_speedup"] == pytest.approx(
            runs.loc["published", "time_to_target_s"] / runs.loc[name, "time_to_target_s"])
    assert rep.runs["batch"].tolist() == [128, 128, contender_settings("recommended", "cpu")["batch_size"]]
    text = format_report(rep)
    assert "MFU" in text and "published" in text and f"{rep.target_rmse_k:.3f} K" in text


def test_samples_per_s_are_steady_epochs_only(tiny):
    """samples/s, s/epoch, MFU and the samples/s ratio are steady epochs' figures, as the report says ("the first,
    warm-up epoch excluded"): a run stopped at the target in its warm-up epoch gives none (its epoch paid the
    warm-up: DataLoader workers, first allocations), it is said so and printed '-', never a NaN or the warm-up's rate."""
    windows, base = tiny
    loose = 3 * windows.baselines["val"]["persistence"]["rmse"] + 1.0
    rep = speed_benchmark(windows=windows, base=base, device="cpu", repeats=1, max_epochs=3, target_rmse=loose,
                          only=["published", "fast"], progress=False)
    text = format_report(rep)
    assert "nan" not in text.lower()
    for name in ("published", "fast"):
        assert math.isnan(rep.table.loc[name, "samples_per_s"]), name
        assert (f"{name}: 1 of 1 repeat(s) reached the target in the warm-up epoch, so had no steady epoch to time: "
                "samples/s, s/epoch and MFU not measured (-)") in text
    # run on past the warm-up (a target never reached): the figures are the steady epochs' (epoch 2 of 2)
    rep = speed_benchmark(windows=windows, base=base, device="cpu", repeats=1, max_epochs=2, target_rmse=1e-6,
                          only=["published", "fast"], progress=False)
    runs = rep.runs.set_index("contender")
    assert rep.table.loc["fast", "samples_per_s_vs_published"] == pytest.approx(
        runs.loc["fast", "samples_per_s"] / runs.loc["published", "samples_per_s"])
    assert (rep.table["samples_per_s"] > 0).all() and (rep.table["mfu"] > 0).all()
    assert "warm-up epoch, so had no steady epoch" not in format_report(rep)


def test_unreached_target_is_reported_as_not_reached(tiny):
    windows, base = tiny
    rep = speed_benchmark(windows=windows, base=base, device="cpu", repeats=1, max_epochs=2, target_rmse=1e-6,
                          only=["fast"], progress=False)
    assert math.isnan(rep.table.loc["fast", "time_to_target_s"])
    assert "not reached in 2 epochs (best" in format_report(rep)


def test_unknown_contender():
    with pytest.raises(ConfigError, match="contender 'fastest' is not one of"):
        contender_settings("fastest", "cpu")


def test_a_contender_named_twice_is_refused_before_any_run():
    # `bench speed --only published,published` ran it twice and printed two identical rows
    with pytest.raises(ConfigError, match=r"only=\['published', 'published'\] names a contender more than once"):
        speed_benchmark(None, device="cpu", only=["published", "published"])


def test_mfu_prints_with_the_digits_it_needs():
    assert (mfu_text(0.005), mfu_text(0.0123), mfu_text(0.37), mfu_text(float("nan"))) == ("0.5%", "1.2%", "37%", "-")


def test_gemm_rate_counts_two_size_cubed_flops_per_gemm():
    from lstmnb.experiments.speed import gemm_rate

    assert gemm_rate(1000, 1, 0.5) == pytest.approx(4e9)
    assert gemm_rate(2048, 30, 30 * 1e-4) == pytest.approx(2 * 2048**3 / 1e-4)


def test_the_reference_is_timed_after_gemms_for_a_measured_time(monkeypatch):
    """An idle GPU raises its clocks over tens of milliseconds, so timing the reference after two GEMMs read it
    low and MFU high: the GEMMs before the timed one must span ~100 ms (``speed.WARMUP_S``) on the synchronised
    clock. Shown on the CPU device, whose clock read is the same call."""
    import time

    stamps, mm = [], torch.mm
    monkeypatch.setattr(torch, "mm", lambda *a, **k: (stamps.append(time.perf_counter()), mm(*a, **k))[1])
    matmul_rate("cpu", size=8, repeats=1)
    # the last warm-up GEMM is queued just before the clock passes WARMUP_S (a few microseconds short of it), and
    # then it stops: a bound no busy machine can flip, unlike the old two GEMMs' microseconds
    assert 0.09 <= stamps[-1] - stamps[0] < 30


def test_matmul_rate_refuses_an_empty_sample():
    from lstmnb.errors import ConfigError

    with pytest.raises(ConfigError, match="gemms=0"):
        matmul_rate("cpu", size=8, gemms=0)


@pytest.mark.gpu
def test_reference_rate_matches_back_to_back_gemms_timed_with_cuda_events():
    """The MFU denominator against 40 GEMMs queued back to back between two CUDA events (one sync):
    ratio ~1, where one GEMM between two full synchronisations reads low on fast GPUs."""
    import statistics

    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from lstmnb.experiments.speed import gemm_rate

    dev, size, n = torch.device("cuda", 0), 2048, 40
    rate = matmul_rate(dev, size=size, precision="tf32")
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        a, b = torch.randn(size, size, device=dev), torch.randn(size, size, device=dev)
        rates = []
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(n):
                a @ b
            end.record()
            end.synchronize()
            rates.append(gemm_rate(size, n, start.elapsed_time(end) / 1e3))
    finally:
        torch.set_float32_matmul_precision(before)
    assert 0.85 <= rate / statistics.median(rates) <= 1.15


def test_mfu_divides_each_run_by_the_gemm_rate_on_that_runs_own_threads(tiny, monkeypatch, tmp_path):
    """The CPU thread policy decides afresh at every call from the load it sees over 0.2 s, so on a shared
    machine the run can train on 2 threads while a rate taken under a decision of its own ran on 1: MFU
    doubled. Here the load sensor (``device.busy_cores``) reports a core busy, then none, alternately,
    as a machine whose neighbour comes and goes does; each run's denominator must be measured on the
    threads its record says it used, and each contender's MFU is the median of its runs' own ratios."""
    import itertools
    import json

    import lstmnb.machine.device as device
    import lstmnb.experiments.speed as speed

    if device.cpu_cores() < 2:
        pytest.skip("needs 2 usable cores for the policy to choose between 1 and 2 threads")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    loads = itertools.cycle([1.0, 0.0])  # of 2 cores: 1 thread, then 2
    monkeypatch.setattr(device, "busy_cores", lambda *a, **k: {"others": next(loads), "own": 0.0, "window_s": 0.2})
    measured_on = []  # the threads each GEMM-rate measurement ran on (the real measurement, timed as ever)
    real_rate = speed.matmul_rate

    def rate_seen(*args, **kwargs):
        measured_on.append(torch.get_num_threads())
        return real_rate(*args, **{**kwargs, "size": 256, "repeats": 3})

    monkeypatch.setattr(speed, "matmul_rate", rate_seen)
    windows, base = tiny
    results = tmp_path / "runs.jsonl"
    try:
        rep = speed_benchmark(windows=windows, base=base, device="cpu", repeats=2, max_epochs=2, target_rmse=1e-6,
                              only=["published", "fast"], results=results, progress=False)
    finally:
        torch.set_num_threads(before)
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(records) == len(measured_on) == 4
    assert measured_on == [r["threads"]["used"] for r in records]
    assert [r["mfu_reference"]["threads"] for r in records] == measured_on
    for name in ("published", "fast"):
        own = [r["timing"]["train_flops_per_s"] / r["mfu_reference"]["matmul_flops_per_s"]
               for r in records if r["contender"] == name]
        assert rep.table.loc[name, "mfu"] == pytest.approx(float(np.median(own)))
