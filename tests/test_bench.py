"""Scaling, all-reduce bandwidth, batch sweep under a real memory cap, and the cost table. CPU only."""

from __future__ import annotations

import contextlib
import math
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
import torch

from lstmnb import experiments as bench
from lstmnb import report
from lstmnb.cli import main
from lstmnb.errors import ConfigError
from lstmnb.models import Forecaster, count_parameters
from lstmnb.records import append_record, new_record, read_records
from lstmnb.training import TrainConfig
from lstmnb.windows import make_windows

pytestmark = [pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore::UserWarning")]

TINY = dict(device="cpu", hidden=16, window=12, epochs=2, progress=False)


def synthetic_windows(cfg: TrainConfig, days: int = 40, points: int = 2):
    rng = np.random.default_rng(1)
    hours = np.arange(24 * days)
    values = 280 + 8 * np.sin(2 * np.pi * hours / 24)[:, None] + rng.normal(0, 1, (hours.size, points))
    return make_windows(values, pd.date_range("2020-01-01", periods=hours.size, freq="h"), cfg.window_config())


# --- scaling ----------------------------------------------------------------------------------------

def test_strong_scaling_refuses_a_global_batch_not_divisible_by_a_world_size():
    cfg = TrainConfig(**TINY, batch_size=30)
    with pytest.raises(ConfigError, match=r"global batch 30 is not divisible by world size\(s\) \[4\].*multiple of 4"):
        bench.ScalingConfig(world_sizes=(1, 2, 4), mode="strong").validate(cfg)
    bench.ScalingConfig(world_sizes=(1, 2, 4), mode="weak").validate(cfg)  # weak: per-device batch, any size
    with pytest.raises(ConfigError, match="mode='medium'"):
        bench.ScalingConfig(mode="medium").validate(cfg)
    with pytest.raises(ConfigError, match="world_sizes"):
        bench.ScalingConfig(world_sizes=(0, 2)).validate(cfg)


@pytest.mark.slow
def test_strong_scaling_one_and_two_gloo_ranks(tmp_path):
    cfg = TrainConfig(**TINY, batch_size=64)
    records = bench.scaling(synthetic_windows(cfg), cfg, bench.ScalingConfig(world_sizes=(1, 2), comm_split_steps=5),
                            results=str(tmp_path))
    assert [r["world_size"] for r in records] == [1, 2]
    assert [r["scaling"]["per_device_batch"] for r in records] == [64, 32]
    assert all(r["scaling"]["global_batch"] == 64 and r["experiment"] == "scaling-strong" for r in records)
    assert len(read_records(tmp_path)) == 2
    split = records[1]["parallel"]["comm_split"]
    assert split["steps"] == 5 and split["step_s"] > 0 and split["compute_s"] > 0 and split["comm_s"] >= 0
    table = report.scaling_table(records)
    one, two = table.loc[("strong", 1)], table.loc[("strong", 2)]
    assert one["device"] == two["device"] == "CPU" and one["strategy"] == two["strategy"] == "ddp"
    assert two["comm ms"] == pytest.approx(1e3 * split["comm_s"]) and pd.isna(one["comm ms"])  # one rank: no exchange
    # the table's epoch times are the records' own (a mix-up of world sizes fails here), and the
    # speedup is t1 / t2 of those records
    t1, t2 = (r["timing"]["epoch_s_median"] for r in records)
    assert one["epoch s"] == pytest.approx(t1) and two["epoch s"] == pytest.approx(t2)
    assert two["speedup"] == pytest.approx(t1 / t2)
    assert two["efficiency"] == pytest.approx(two["speedup"] / 2)
    conv = report.convergence_table(records)
    assert set(conv["world_size"]) == {1, 2} and (conv.groupby("world_size")["epoch"].max() == 2).all()
    assert "speedup = t1 / tN" in report.SCALING_DEFINITIONS["strong"]


def _comm_split_order(env, steps: int):
    """A spawn job: one DDP rank's ``comm_split`` with every training step's all-reduce flag noted as the step
    runs (DDP's ``require_backward_grad_sync``: False under ``no_sync``); returns (flags, the split)."""
    from lstmnb.training.parallel.ddp import comm_split, steps_per_epoch, wrap_ddp
    from lstmnb.training.trainer import Trainer

    cfg = TrainConfig(**TINY, batch_size=16, strategy="ddp", nproc=env.world_size)
    windows = synthetic_windows(cfg, days=10)
    tr = Trainer(windows, cfg, env.device, steps_per_epoch=steps_per_epoch(windows.x["train"].shape[0], cfg, 1))
    ddp = wrap_ddp(tr.core, cfg, env)
    tr.model = ddp
    flags, step = [], tr.step

    def noted(xb, yb):
        flags.append(ddp.require_backward_grad_sync)
        return step(xb, yb)

    tr.step = noted
    x, y = tr.feed.train_tensors()
    return flags, comm_split(tr, ddp, env, x, y, steps)


def test_comm_split_alternates_the_two_timings_and_compares_medians():
    """The compute vs communication split is a difference of two timings of the same steps: timed once each,
    always with the all-reduce first, a drift of the shared cores (or the other rank still busy) lands on one
    side only. After the warm-up the two are alternated (with, without, then without, with, ...) and their
    medians compared."""
    from lstmnb.training import parallel

    steps = 2
    flags, split = parallel.spawn(_comm_split_order, 1, device="cpu", kwargs={"steps": steps})
    blocks = [flags[i:i + steps] for i in range(0, len(flags), steps)]
    assert all(len(set(b)) == 1 for b in blocks)  # each timing is one kind of step throughout
    kinds = ["sync" if b[0] else "local" for b in blocks]
    warmup, timed = kinds[0], kinds[1:]
    assert warmup == "sync"
    assert timed.count("sync") == timed.count("local") >= 3, kinds  # repeats of each, for a median
    pairs = [tuple(timed[i:i + 2]) for i in range(0, len(timed), 2)]
    assert pairs == [("sync", "local") if i % 2 == 0 else ("local", "sync") for i in range(len(pairs))], kinds
    assert split["repeats"] == len(pairs) and split["steps"] == steps
    assert split["comm_s"] == pytest.approx(max(0.0, split["step_s"] - split["compute_s"]))


# --- all-reduce -------------------------------------------------------------------------------------

def test_size_ladder_and_bus_bandwidth_convention():
    assert bench.size_ladder(1024, 65536, 4) == [1024, 4096, 16384, 65536]
    assert bench.size_ladder(1024, 4096, 4, extra=(2050,)) == [1024, 2048, 4096]  # whole float32s
    with pytest.raises(ConfigError, match="factor >= 2"):
        bench.size_ladder(1024, 4096, 1)
    with pytest.raises(ConfigError, match=r"world_size=1 must be a whole number in 2\.\."):  # a bandwidth needs 2 ranks
        bench.allreduce(TrainConfig(), bench.AllreduceConfig(world_size=1))


@pytest.mark.parametrize("inputs", [dict(), dict(calendar=False), dict(cycles=False), dict(calendar=False, cycles=False)])
def test_the_gradient_measured_is_the_models_on_the_inputs_it_trains_on(inputs):
    """`bench allreduce` marked the gradient of a one-input model: 68,868 bytes where the default model (the
    target, four calendar inputs and its cycle) all-reduces 73,988 a step."""
    cfg = TrainConfig(**TINY, **inputs)
    windows = synthetic_windows(cfg)
    assert cfg.window_config().n_inputs() == windows.n_features
    assert bench.gradient_bytes(cfg) == 4 * count_parameters(Forecaster(cfg.model_config(windows.n_features)))
    if not inputs:
        assert bench.gradient_bytes(TrainConfig()) == 73_988  # the published model on its default inputs


@pytest.mark.slow
def test_allreduce_on_gloo_gives_sane_monotone_sizes_and_bandwidths():
    cfg = TrainConfig(hidden=32)
    acfg = bench.AllreduceConfig(world_size=2, device="cpu", min_bytes=1024, max_bytes=4 * 2**20, budget_s=0.05)
    out = bench.allreduce(cfg, acfg)
    rows = out["rows"]
    sizes = [r["bytes"] for r in rows]
    assert sizes == sorted(set(sizes)) and sizes[0] == 1024 and sizes[-1] == 4 * 2**20
    assert out["gradient_bytes"] == 4 * count_parameters(Forecaster(cfg.model_config(synthetic_windows(cfg).n_features)))
    assert sum(r["gradient_size"] for r in rows) == 1
    for r in rows:
        assert r["backend"] == "gloo" and r["world_size"] == 2 and r["iters"] >= 5
        assert math.isfinite(r["algbw_gbps"]) and r["algbw_gbps"] > 0
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 * (2 - 1) / 2)
    # bigger buffers amortise the per-call latency: the 4 MB bandwidth is well above the 1 KB one. Times
    # themselves are not compared: on a busy CI machine one 1 KB call measured 3.9 ms against 3.3 ms for
    # 4 MB, while 4096x the bytes in under 410x the time holds with a wide margin.
    assert rows[-1]["algbw_gbps"] > 10 * rows[0]["algbw_gbps"]
    table = report.allreduce_table([out], step_s=0.01)
    assert table["share of a step"].notna().sum() == 1
    assert {"time us", "algbw GB/s", "busbw GB/s", "ranks"} <= set(table.columns)  # bytes per s, not bits


# --- batch sweep ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_batch_sweep_records_oom_under_a_memory_cap(tmp_path):
    """The cap is a real limit (the process's data segment): the allocator fails, nothing is mocked.
    The cap sits far from both points' needs (measured on a 2-core Linux box: batch 512 fits in 96 MB, batch
    2048 asks for one 197 MB block), since what a point's process holds before its batch varies by machine
    (a 48 MB cap once stopped batch 32 in CI and not on a developer's run)."""
    cfg = TrainConfig(device="cpu", hidden=64, window=24, epochs=1, progress=False, eval_batch_size=512)
    windows = synthetic_windows(cfg, days=100)
    records = bench.batch_sweep(windows, cfg, bench.SweepConfig(start=512, factor=4, memory_cap_mb=160),
                                results=str(tmp_path))
    statuses = [(r["sweep"]["batch_size"], r["status"]) for r in records]
    assert statuses == [(512, "ok"), (2048, "oom")], statuses
    oom = records[-1]
    assert "out of memory at batch_size=2048" in oom["reason"] and "160 MB cap" in oom["reason"]
    assert "timing" not in oom and "metrics" not in oom  # a reason, never a number
    assert [r["status"] for r in read_records(tmp_path)] == [s for _, s in statuses]
    # the cap was lifted afterwards: a large allocation works again
    assert torch.empty(64 * 2**20, dtype=torch.uint8).numel() == 64 * 2**20
    table = report.batch_sweep_table(records)
    assert table.loc[512, "final val RMSE K"] > 0 and table.iloc[-1]["status"] == "oom"


_SWEEP_TO_STOP = """
import numpy as np, pandas as pd
from lstmnb import experiments
from lstmnb.cli import stop_on_sigterm
from lstmnb.training import TrainConfig
from lstmnb.windows import make_windows
cfg = TrainConfig(device="cpu", hidden=32, window=24, epochs=20000, patience=None, progress=False)
hours = np.arange(24 * 60)
values = 280 + 8 * np.sin(2 * np.pi * hours / 24)[:, None] + np.random.default_rng(1).normal(0, 1, (hours.size, 1))
w = make_windows(values, pd.date_range("2020-01-01", periods=hours.size, freq="h"), cfg.window_config())
print("ready", flush=True)
with stop_on_sigterm():
    experiments.batch_sweep(w, cfg, experiments.SweepConfig(start=32, max_batch=32, memory_cap_mb=4096))
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="the memory cap (RLIMIT_DATA) and SIGTERM to a child: Linux")
def test_a_stopped_capped_sweep_does_not_wait_for_its_points_process():
    """SIGTERM (the CLI's Terminated) while a capped point trains in its child: the child is stopped, not
    waited for through its 20000 epochs (minutes)."""
    import psutil

    def below_the_server() -> list:
        """The processes below this process's own children: the point's process, forked by the forkserver (a child
        beside multiprocessing's resource tracker). A process that ends while they are listed is left out."""
        found = []
        for c in psutil.Process(proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                if c.ppid() != proc.pid:
                    found.append(c)
        return found

    def cpu_s(c) -> float:
        with contextlib.suppress(psutil.NoSuchProcess):
            return sum(c.cpu_times()[:2])
        return 0.0

    proc = subprocess.Popen([sys.executable, "-c", _SWEEP_TO_STOP], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    child = []
    try:
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the point's process has trained for a second of CPU
            child = below_the_server()
            if any(cpu_s(c) >= 1 for c in child):
                break
            time.sleep(0.2)
        assert child, "the point's process never started"
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        _, alive = psutil.wait_procs(child, timeout=10)
        for c in alive:  # a failed run leaves no trainer behind
            c.kill()
    assert not alive and proc.returncode != 0


def test_batch_sweep_without_cap_stops_at_max_batch():
    cfg = TrainConfig(**{**TINY, "epochs": 1})
    records = bench.batch_sweep(synthetic_windows(cfg, days=20), cfg, bench.SweepConfig(start=32, max_batch=128))
    assert [(r["sweep"]["batch_size"], r["status"]) for r in records] == [(32, "ok"), (128, "ok")]
    windows = synthetic_windows(cfg, days=20)
    with pytest.raises(ConfigError, match=r"^factor=1 must be a whole number >= 2"):
        bench.batch_sweep(windows, cfg, bench.SweepConfig(factor=1))
    n = windows.x["train"].shape[0]  # a first batch beyond the data: no point could run (an empty table before)
    with pytest.raises(ConfigError, match=f"^start={n + 1} is more than the {n} training samples; give at most"):
        bench.batch_sweep(windows, cfg, bench.SweepConfig(start=n + 1))
    with pytest.raises(ConfigError, match=r"memory_cap_mb=1000000000000000\.0 must be a positive number of MB, at most"):
        bench.SweepConfig(memory_cap_mb=1e15).validate()


# --- cost -------------------------------------------------------------------------------------------

def _timed(kind: str, name: str, wall_s: float, world_size: int | None = None, profile: str | None = None):
    rec = new_record("scaling-strong", device="cpu", profile=profile, timing={"wall_s": wall_s},
                     metrics={"best_val_rmse_k": 1.0})
    rec["device"].update(kind=kind, name=name)
    if world_size:
        rec["world_size"] = world_size
    return rec


def test_cost_table_prices_device_hours_and_marks_examples(tmp_path):
    prices = report.load_prices()
    assert all(e["example"] for e in prices["devices"].values())  # shipped figures are examples, and say so
    records = [
        _timed("cuda", "NVIDIA A100-SXM4-40GB", 1800, world_size=4),
        _timed("cuda", "Tesla V100-SXM2-16GB", 3600, profile="carc-v100"),
        _timed("cpu", "AMD EPYC", 7200),
        _timed("cuda", "Some Future GPU", 60),
        new_record("x", status="skipped", reason="no GPU"),
    ]
    table = report.cost_table(records, prices)
    assert len(table) == 4  # the skipped run has no time, so no cost
    a100 = table[table["device"] == "A100"].iloc[0]
    assert a100["devices"] == 4 and a100["device-hours"] == pytest.approx(2.0)
    assert a100["cost USD"] == pytest.approx(2.0 * prices["devices"]["a100"]["price_per_device_hour"])
    assert a100["price source"] == "example"
    assert table[table["device"] == "V100"].iloc[0]["price key"] == "v100"
    assert table[table["device"] == "CPU"].iloc[0]["cost USD"] == pytest.approx(
        2.0 * prices["devices"]["cpu"]["price_per_device_hour"])
    unknown = table[table["device"] == "Some Future GPU"].iloc[0]
    assert pd.isna(unknown["cost USD"]) and unknown["price source"] == "no price: add it"

    mine = tmp_path / "prices.yaml"
    mine.write_text("currency: EUR\ndevices:\n  a100: {price_per_device_hour: 1.0, match: [A100]}\n")
    own = report.cost_table(records, report.load_prices(mine))
    row = own[own["device"] == "A100"].iloc[0]
    assert row["cost EUR"] == pytest.approx(2.0) and row["price source"] == "user"
    mine.write_text("devices:\n  a100: {price_per_device_hour: cheap}\n")
    with pytest.raises(ConfigError, match="price_per_device_hour='cheap' must be a number"):
        report.load_prices(mine)

    import matplotlib

    matplotlib.use("Agg")
    assert report.plot_cost(table).axes[0].get_xscale() == "log"


def test_bench_cost_command(tmp_path, capsys):
    append_record(_timed("cuda", "NVIDIA A100-SXM4-40GB", 1800, world_size=2), tmp_path)
    assert main(["bench", "cost", str(tmp_path), "--plot", str(tmp_path / "cost.png")]) == 0
    out = capsys.readouterr().out
    assert "A100" in out and "example" in out and (tmp_path / "cost.png").exists()
    assert main(["bench", "cost", str(tmp_path / "empty")]) == 2
    assert main(["bench", "cost", str(tmp_path), "--prices", str(tmp_path / "missing.yaml")]) == 2


def test_bench_scaling_command_rejects_bad_batch_before_running(capsys):
    code = main(["bench", "scaling", "--device", "cpu", "--world-sizes", "1,2,3", "--batch-size", "64",
                 "--end", "2020-01-20", "--no-progress", "--no-record"])
    assert code == 2
    assert "global batch 64 is not divisible by world size(s) [3]" in capsys.readouterr().err
