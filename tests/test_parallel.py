"""DDP over gloo on CPU: equivalence with one process, launchers, uneven shards, failures. Real process groups."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from lstmnb.machine.device import cpu_cores, rank_threads
from lstmnb.machine.processes import PRELOAD
from lstmnb.training import parallel
from lstmnb.training.parallel.groups import LAUNCH_ENV, free_port
from lstmnb.errors import ConfigError, DeviceError
from lstmnb.records import read_records
from lstmnb.training import TrainConfig, train
from lstmnb.paths import atomic_path
from lstmnb.training.checkpoints import checksum_path, read_checkpoint
from lstmnb.windows import make_windows

pytestmark = [pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore::UserWarning")]

TINY = dict(device="cpu", hidden=16, window=12, epochs=1, progress=False)
SAMPLE_ARGS = ["--source", "sample", "--start", "2020-01-01", "--end", "2020-02-29", "--device", "cpu",
               "--epochs", "2", "--hidden", "8", "--window", "12", "--batch-size", "32", "--no-progress"]


def synthetic_windows(cfg: TrainConfig, days: int = 60, points: int = 2):
    """A daily cycle plus noise at ``points`` points: real windows without the data store."""
    rng = np.random.default_rng(0)
    hours = np.arange(24 * days)
    values = 280 + 8 * np.sin(2 * np.pi * hours / 24)[:, None] + rng.normal(0, 1, (hours.size, points))
    return make_windows(values, pd.date_range("2020-01-01", periods=hours.size, freq="h"), cfg.window_config())


def _abort_while_exiting(env, value: int) -> int:
    """A spawn job whose rank 1 aborts as its interpreter exits, after the job (as gloo's teardown can)."""
    if env.rank == 1:
        import atexit

        atexit.register(os.abort)
    return value * 2


def _environment_and_parent(env, name: str) -> tuple[str | None, int]:
    """A spawn job: what rank 0 sees of one environment variable, and its parent process."""
    return os.environ.get(name), os.getppid()


def _imported(env, name: str) -> bool:
    """A spawn job: whether rank 0 started with module ``name`` already imported."""
    return name in sys.modules


def _die_at_epoch_2(rank: int, entry: dict) -> None:
    """Rank callback: rank 1 crashes hard (no cleanup, no error report) after its second epoch."""
    if rank == 1 and entry["epoch"] == 2:
        os._exit(3)


def _writer_dies_mid_checksum(checkpoint: str, rank: int, entry: dict) -> None:
    """Rank callback: rank 0, the writer, dies after its second epoch half-way through writing the
    checkpoint's checksum (its temporary written, never renamed), as a rank stopped mid-write would."""
    if rank == 0 and entry["epoch"] == 2:
        with atomic_path(checksum_path(checkpoint)) as tmp:
            tmp.write_text("partial")
            os._exit(3)


def _dropout_mask(folder: str, rank: int, entry: dict) -> None:
    """Rank callback: the dropout mask this rank would draw next, saved per rank and epoch; the rank's random
    state is put back, so the run goes on as it would have."""
    state = torch.get_rng_state()
    mask = torch.nn.functional.dropout(torch.ones(512), 0.5) > 0
    torch.set_rng_state(state)
    np.save(Path(folder, f"mask-rank{rank}-epoch{entry['epoch']}.npy"), mask.numpy())


def _env_without_launcher() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV + ("LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    return env


# --- pure pieces ------------------------------------------------------------------------------------

def test_balanced_sizes_follow_throughput_and_keep_the_global_batch():
    assert parallel.balanced_sizes(64, [1000.0, 1000.0]) == [32, 32]
    sizes = parallel.balanced_sizes(64, [3000.0, 1000.0])
    assert sizes == [48, 16] and sum(sizes) == 64
    assert sum(parallel.balanced_sizes(100, [5.0, 3.0, 1.0])) == 100
    assert parallel.balanced_sizes(4, [1e9, 1.0, 1.0, 1.0]) == [1, 1, 1, 1]  # every rank keeps a sample
    assert parallel.balanced_sizes(10, [0.0, 0.0]) == [5, 5]  # nothing measured: even split
    with pytest.raises(ConfigError, match="smaller than world_size=3"):
        parallel.balanced_sizes(2, [1.0, 1.0, 1.0])


# --- bad input --------------------------------------------------------------------------------------

@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU errors")
def test_gpu_strategies_without_gpu_are_device_errors():
    cfg = TrainConfig(**TINY)
    windows = synthetic_windows(cfg, days=20)
    with pytest.raises(DeviceError, match="strategy='dataparallel' asked for, but there is no usable CUDA GPU.*use strategy='ddp'"):
        train(windows, replace(cfg, strategy="dataparallel"))
    with pytest.raises(DeviceError, match="device='cuda' asked for, but there is no usable CUDA GPU.*; use "
                                          r"device='cpu' \(gloo ranks\)$"):
        train(windows, replace(cfg, strategy="ddp", device="cuda", nproc=2))
    with pytest.raises(DeviceError, match=r"^2 ranks on this node, but only 0 CUDA GPU"):
        parallel.check_world_size("cuda", 2)


def test_bad_ddp_settings_fail_before_any_process_starts():
    cfg = TrainConfig(**TINY, strategy="ddp")
    windows = synthetic_windows(cfg, days=20)
    too_many = cpu_cores() + 1
    with pytest.raises(DeviceError, match=f"^{too_many} ranks on this node.*give nproc at most {too_many - 1}$"):
        train(windows, replace(cfg, nproc=too_many))
    with pytest.raises(ConfigError, match="uneven_shards=True needs strategy='ddp' and input_path='fast'"):
        train(windows, replace(cfg, uneven_shards=True, input_path="dataloader"))
    with pytest.raises(ConfigError, match="device='mps' with strategy='ddp'"):
        train(windows, replace(cfg, device="mps"))
    with pytest.raises(ConfigError, match="bucket_cap_mb=0"):
        train(windows, replace(cfg, bucket_cap_mb=0))
    with pytest.raises(ConfigError, match="needs a launcher's environment \\(missing: RANK.*nproc=N\\)$"):
        parallel.init_distributed("cpu")  # what a rank does when started by hand without torchrun


def test_a_launcher_that_starts_more_ranks_than_cores_is_named(monkeypatch):
    """Under torchrun or srun the ranks per node come from the launcher, so the refusal names its setting, not
    lstmnb's --nproc (which the launcher's ranks do not read)."""
    too_many = cpu_cores() + 1
    for key, value in {"RANK": "0", "WORLD_SIZE": str(too_many), "LOCAL_WORLD_SIZE": str(too_many),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(DeviceError, match=rf"^{too_many} ranks on this node, but only .*; give the "
                                          rf"launcher's ranks per node \(torchrun --nproc-per-node, srun "
                                          rf"--ntasks-per-node\) at most {too_many - 1}$"):
        parallel.init_distributed("cpu")  # before any process group is made


_DDP_WITH_CAP = """
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
for cap in map(float, sys.argv[2:]):
    try:
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1), bucket_cap_mb=cap)
        model(torch.ones(2, 4)).sum().backward()
        print(cap, "ok")
    except TypeError:
        print(cap, "refused")
dist.destroy_process_group()
"""


def test_the_largest_bucket_cap_is_one_torchs_ddp_accepts(tmp_path):
    # torch counts a bucket in bytes as an int64: past 2**43 MB its Reducer refuses the value (a TypeError in every
    # rank, once they had started); lstmnb's bound lies far inside that, and the next value up is refused first
    from lstmnb.training.config import MAX_BUCKET_CAP_MB

    beyond = float(2**63 // 2**20 + 1)
    out = subprocess.run([sys.executable, "-c", _DDP_WITH_CAP, str(tmp_path / "store"), str(MAX_BUCKET_CAP_MB),
                          str(beyond)], capture_output=True, text=True, timeout=120)
    assert out.stdout.split("\n")[:2] == [f"{MAX_BUCKET_CAP_MB} ok", f"{beyond} refused"], out.stderr[-2000:]
    TrainConfig(strategy="ddp", bucket_cap_mb=MAX_BUCKET_CAP_MB).validate()
    with pytest.raises(ConfigError, match=r"^bucket_cap_mb=1000000.1 must be a positive number of MB up to 1000000 "):
        TrainConfig(strategy="ddp", bucket_cap_mb=MAX_BUCKET_CAP_MB + 0.1).validate()


@pytest.mark.slow
def test_error_inside_a_rank_comes_back_as_that_error():
    cfg = TrainConfig(**TINY, strategy="ddp", nproc=2, batch_size=5000, uneven_shards=True)
    windows = synthetic_windows(cfg, days=20)
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=r"rank \d of 2: batch_size=5000 per rank x world_size=2"):
        parallel.train_parallel(windows, cfg)  # the ranks' own check (train() says it before any rank starts)
    assert time.monotonic() - t0 < 60
    with pytest.raises(ConfigError, match=r"^batch_size=5000 per rank x 2 ranks = 10000 is more than the \d+ training "
                                          r"samples, and uneven shards take whole batches only; give a smaller batch_size$"):
        train(windows, cfg)


def test_cpu_ranks_share_the_node_cores_and_record_their_threads():
    assert rank_threads(16, 3) == {"cores": 16, "used": 5, "policy": "shared by ranks",
                                   "reason": "16 core(s) shared by the 3 rank(s) on this node; --threads N chooses"}
    assert rank_threads(2, 4)["used"] == 1 and rank_threads(2, 4, requested=3)["used"] == 3
    cfg = TrainConfig(**TINY, strategy="ddp", nproc=2)
    record = train(synthetic_windows(cfg, days=20), cfg).record  # each rank's threads, in the record as a run's
    share = max(1, cpu_cores() // 2)
    assert record["threads"]["policy"] == "shared by ranks" and record["threads"]["used"] == share
    assert record["parallel"]["threads_per_rank"] == share


# --- equivalence ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_two_gloo_ranks_match_one_process_on_the_combined_batch(tmp_path):
    """Each rank takes every 2nd sample of the shared permutation with batch b; DDP averages the two
    gradients, which is the gradient of one process on the combined 2b samples: same parameters."""
    base = TrainConfig(**TINY, threads=1, batch_size=32)
    windows = synthetic_windows(base)
    assert windows.sizes()["train"] % 2 == 0
    single = train(windows, base)
    ddp = train(windows, replace(base, strategy="ddp", nproc=2, batch_size=16, checkpoint=str(tmp_path / "ck.pt")))
    ref, got = single.model.state_dict(), ddp.model.state_dict()
    assert max((ref[k] - got[k]).abs().max().item() for k in ref) < 1e-5
    assert ddp.record["epochs"][0]["train_loss"] == pytest.approx(single.record["epochs"][0]["train_loss"], rel=1e-5)
    par = ddp.record["parallel"]
    assert ddp.record["world_size"] == 2 and par["backend"] == "gloo" and par["global_batch"] == 32
    assert ddp.record["threads"]["policy"] == "explicit"
    assert ddp.record["threads"]["used"] == par["threads_per_rank"] == 1
    assert ddp.record["epochs"][0]["world_size"] == 2
    assert ddp.record["epochs"][0]["samples_per_s"] > 0
    state = read_checkpoint(str(tmp_path / "ck.pt"))  # rank 0's checkpoint, complete (its checksum holds)
    assert state["epoch"] == 1 and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    # resumed: the checkpoint train() read once reaches both launched ranks, which continue its run
    more = train(windows, replace(base, strategy="ddp", nproc=2, batch_size=16, epochs=2, resume=True,
                                  checkpoint=str(tmp_path / "ck.pt")))
    assert more.record["run_id"] == ddp.record["run_id"] and [e["epoch"] for e in more.record["epochs"]] == [1, 2]
    assert more.record["epochs"][0] == ddp.record["epochs"][0]
    assert read_checkpoint(str(tmp_path / "ck.pt"))["epoch"] == 2


@pytest.mark.slow
def test_ddp_dataloader_path_trains_no_sample_twice_when_the_ranks_do_not_divide_it():
    """307 training samples over 2 ranks: DistributedSampler would pad to 308 with a repeat (trained and counted
    twice); the DataLoader path leaves the odd one out instead, as the fast path does, so both paths train the
    same 306 samples of the same permutation in the first epoch: the same loss and sample count."""
    base = TrainConfig(**TINY, threads=1, batch_size=16, strategy="ddp", nproc=2, num_workers=0, patience=None)
    windows = synthetic_windows(base, days=19, points=1)
    assert windows.sizes()["train"] == 307
    fast, loader = (train(windows, replace(base, input_path=p)).record["epochs"][0] for p in ("fast", "dataloader"))
    for e in (fast, loader):
        assert round(e["samples_per_s"] * e["train_s"]) == 306
    assert loader["train_loss"] == pytest.approx(fast["train_loss"], rel=1e-6)


def test_a_ddp_step_batch_beyond_the_data_is_noted_as_a_single_device_one_is():
    """200 per rank x 2 ranks = 400 > 324 samples: each epoch is one full-batch step of all 324, as a single
    device's batch of 400 would be, and the run says so (it ran silently: the note was left to the ranks,
    which refuse it only with uneven shards). The knob's help says the batch is per rank under DDP."""
    cfg = TrainConfig(**TINY, threads=1, batch_size=200, strategy="ddp", nproc=2, patience=None)
    windows = synthetic_windows(cfg, days=20, points=1)
    assert windows.sizes()["train"] == 324
    with pytest.warns(UserWarning, match=r"batch_size=200 per rank x 2 ranks = 400 is more than the 324 training "
                                         r"samples of this data: each epoch is one step of all 324"):
        record = train(windows, cfg).record
    assert record["parallel"]["global_batch"] == 400 and round(record["epochs"][0]["samples_per_s"]
                                                               * record["epochs"][0]["train_s"]) == 324
    from dataclasses import fields

    help_text = next(f.metadata["help"] for f in fields(TrainConfig) if f.name == "batch_size")
    assert "ddp: per rank" in help_text


def test_each_rank_past_the_first_draws_from_a_stream_of_its_own():
    from lstmnb.training.parallel.ddp import own_rank_stream, stream_seed

    torch.manual_seed(7)
    before = torch.get_rng_state()
    own_rank_stream(7, 0)  # rank 0 keeps its stream: one rank draws what one process draws
    assert torch.equal(torch.get_rng_state(), before)
    draws = {}
    for rank, epoch in ((1, 0), (2, 0), (1, 3)):
        own_rank_stream(7, rank, epoch)
        draws[rank, epoch] = torch.rand(4)
    own_rank_stream(7, 1, 0)
    assert torch.equal(torch.rand(4), draws[1, 0])  # the same rank and epoch: the same stream
    assert len({tuple(d.tolist()) for d in draws.values()}) == 3
    assert stream_seed(7, 1) != stream_seed(8, 1) and 0 <= stream_seed(2**64 - 1, 5) < 2**64


@pytest.mark.slow
def test_two_gloo_ranks_drop_different_units(tmp_path):
    """With dropout, each rank's share of a batch gets masks of its own, as one process's whole batch would
    (the same seed on both ranks used to give rank 1's k-th sample rank 0's k-th mask)."""
    cfg = TrainConfig(**{**TINY, "epochs": 2}, threads=1, batch_size=16, layers=2, dropout=0.5, strategy="ddp",
                      nproc=2, patience=None)
    windows = synthetic_windows(cfg, days=20)
    result = parallel.launch_train(windows, cfg, options=parallel.RankOptions(
        rank_callback=partial(_dropout_mask, str(tmp_path))))
    assert result.record["status"] == "ok"
    for epoch in (1, 2):
        masks = [np.load(tmp_path / f"mask-rank{r}-epoch{epoch}.npy") for r in (0, 1)]
        assert not np.array_equal(*masks), f"epoch {epoch}: both ranks would drop the same units"
        assert 0.3 < masks[0].mean() < 0.7 and 0.3 < masks[1].mean() < 0.7


# --- uneven shards ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_uneven_shards_follow_the_measured_throughput_when_one_rank_is_slow():
    """Rank 1 sleeps 1 ms per training sample (a slower device). The balanced run measures each rank's own
    throughput in its first epoch and sizes the later epochs' shards from it; the even run keeps 32 + 32.
    Epoch times are not compared: a busy machine can make either run the slower (that is a benchmark's
    question: benchmarks/scaling_cpu.py --uneven), but the slept time is the slow rank's own, so it measures
    slower."""
    from lstmnb import experiments

    cfg = TrainConfig(**{**TINY, "epochs": 3}, batch_size=32)
    out = experiments.uneven_demo(synthetic_windows(cfg), cfg, slow_rank=1, seconds_per_sample=1e-3, deadline_s=150)
    even, balanced = out["even"]["epochs"], out["balanced"]["epochs"]
    assert len(even) == 3 and all("shard_sizes" not in e and "rank_samples_per_s" not in e for e in even)
    first = balanced[0]
    assert first["shard_sizes"] == [32, 32]  # the first epoch measures with the even split
    fast, slow = first["rank_samples_per_s"]
    assert fast > slow > 0
    # the next shards are the measured throughputs' split of the global batch, and the later epochs use them
    assert first["next_shard_sizes"] == parallel.balanced_sizes(64, [fast, slow])
    assert first["next_shard_sizes"][0] > first["next_shard_sizes"][1] and sum(first["next_shard_sizes"]) == 64
    assert [e["shard_sizes"] for e in balanced[1:]] == [first["next_shard_sizes"]] * 2
    assert all("rank_samples_per_s" not in e for e in balanced[1:])  # measured once, in the first epoch


@pytest.mark.slow
def test_unequal_shards_still_compute_the_global_batch_gradient():
    """Ranks with 18 and 6 samples per step: the comm hook weights each rank's mean gradient by its share
    of the 24, so two epochs give the parameters of one process with batch 24 on the same permutation."""
    base = TrainConfig(**{**TINY, "epochs": 2}, threads=1, batch_size=24)
    windows = synthetic_windows(base)
    assert windows.sizes()["train"] % 24 == 0  # no partial last batch, so the step sequences agree
    single = train(windows, base)
    uneven = parallel.launch_train(windows, replace(base, strategy="ddp", batch_size=12, uneven_shards=True), 2,
                                   options=parallel.RankOptions(shard_sizes=[18, 6]))
    ref, got = single.model.state_dict(), uneven.model.state_dict()
    assert max((ref[k] - got[k]).abs().max().item() for k in ref) < 1e-5
    assert uneven.record["parallel"]["shard_sizes"] == [18, 6]


def test_ranks_see_the_callers_environment_as_it_is_when_the_job_starts(monkeypatch):
    """On Linux the ranks are forked from one forkserver, started with the first job and its environment; each job
    still hands its ranks the caller's environment of that moment (a variable set or removed since included)."""
    name = "LSTMNB_TEST_LAUNCH_MARK"
    seen = []
    for value in ("first", "second", None):
        if value is None:
            monkeypatch.delenv(name)
        else:
            monkeypatch.setenv(name, value)
        seen.append(parallel.spawn(_environment_and_parent, 2, device="cpu", kwargs={"name": name}))
    assert [got for got, _ in seen] == ["first", "second", None]
    parents = {parent for _, parent in seen}
    if sys.platform == "linux":  # one server for every job, not this process
        assert len(parents) == 1 and os.getpid() not in parents
    else:  # a fresh Python per rank, started by this process
        assert parents == {os.getpid()}


@pytest.mark.skipif(sys.platform != "linux", reason="a fresh Python per rank off Linux: nothing is preloaded")
def test_forked_ranks_start_with_what_every_optimizer_imports():
    """torch._dynamo, which making any torch.optim optimizer imports (seconds of CPU per rank), comes with the
    forkserver, imported once: a rank starts with it."""
    assert PRELOAD == ("torch._dynamo",)
    assert parallel.spawn(_imported, 2, device="cpu", kwargs={"name": "torch._dynamo"})
    assert not parallel.spawn(_imported, 2, device="cpu", kwargs={"name": "lstmnb.no_such_module"})  # a control


# --- failures ---------------------------------------------------------------------------------------

def test_a_rank_that_dies_while_exiting_after_its_work_loses_nothing(monkeypatch):
    # a fresh Python per rank, as on macOS and Windows: a forkserver's child leaves with os._exit, running no atexit
    # handler (nor C++ static destructors, where gloo's abort at exit comes from)
    monkeypatch.setattr(parallel.launcher, "START_METHOD", "spawn")
    with pytest.warns(RuntimeWarning, match="rank 1 of 2 ended by SIGABRT while exiting, after its work was done"):
        assert parallel.spawn(_abort_while_exiting, 2, device="cpu", kwargs={"value": 21}) == 42


@pytest.mark.slow
def test_a_dying_rank_fails_the_run_fast_and_leaves_only_complete_files(tmp_path):
    # fast: the launcher sees the exit, never waits out the collective timeout (600 s, far beyond any busy machine)
    cfg = TrainConfig(**{**TINY, "epochs": 50}, strategy="ddp", nproc=2, checkpoint=str(tmp_path / "ck.pt"),
                      dist_timeout_s=600)
    windows = synthetic_windows(cfg, days=20)
    t0 = time.monotonic()
    with pytest.raises(parallel.DistributedError, match="rank 1 of 2 exited with status 3 before finishing"):
        parallel.launch_train(windows, cfg, options=parallel.RankOptions(rank_callback=_die_at_epoch_2))
    assert time.monotonic() - t0 < 300
    state = read_checkpoint(str(tmp_path / "ck.pt"))  # the last complete checkpoint (its checksum holds)
    assert state["epoch"] in (1, 2)
    # no half-written temporary, also when rank 0 was stopped while writing one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.pt", "ck.pt.sha256"]


def test_a_writer_stopped_mid_write_leaves_its_last_checkpoint_and_no_temporary(tmp_path):
    ck = tmp_path / "ck.pt"
    cfg = TrainConfig(**{**TINY, "epochs": 50}, strategy="ddp", nproc=2, checkpoint=str(ck), dist_timeout_s=600)
    windows = synthetic_windows(cfg, days=20)
    with pytest.raises(parallel.DistributedError, match="rank 0 of 2 exited with status 3 before finishing"):
        parallel.launch_train(windows, cfg, options=parallel.RankOptions(
            rank_callback=partial(_writer_dies_mid_checksum, str(ck))))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.pt", "ck.pt.sha256"]  # the launcher swept it
    assert read_checkpoint(str(ck))["epoch"] == 2  # and the checkpoint of epoch 2 still passes its checksum


@pytest.mark.slow
def test_a_killed_peer_makes_the_other_rank_exit_with_a_clear_error(tmp_path):
    """No launcher to clean up: two `lstmnb train` ranks started by hand; SIGKILL rank 1 mid-run."""
    from lstmnb import era5

    era5.extract(era5.Request(start="2020-01-01", end="2020-02-29"), progress=False)  # cache once, no race
    results, ck = tmp_path / "runs.jsonl", tmp_path / "ck.pt"
    port = free_port()
    procs = []
    for rank in (0, 1):
        env = _env_without_launcher()
        env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
        cmd = [sys.executable, "-m", "lstmnb", "train", *SAMPLE_ARGS, "--strategy", "ddp", "--epochs", "500",
               "--dist-timeout-s", "20", "--checkpoint", str(ck), "--results", str(results)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        deadline = time.monotonic() + 90
        while not ck.exists() and time.monotonic() < deadline and procs[0].poll() is None:
            time.sleep(0.2)
        assert ck.exists(), procs[0].communicate(timeout=5)
        procs[1].send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        _, err = procs[0].communicate(timeout=40)
        assert time.monotonic() - t0 < 30
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert procs[0].returncode == 2, err
    assert "lstmnb train: error: rank 0/2 lost contact with the other ranks" in err
    assert "waited longer than --dist-timeout-s 20;" in err  # the setting as the command was given it
    assert "Traceback" not in err
    assert not results.exists()  # no record from a failed run
    assert read_checkpoint(str(ck))["epoch"] >= 1


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM cannot be sent to a child process on Windows")
def test_sigterm_to_the_launcher_stops_its_ranks_and_keeps_the_checkpoint(tmp_path):
    """SIGTERM to `lstmnb train --nproc 2` alone (not its ranks): one line, exit 143, no rank left running,
    the last checkpoint intact and no record of an unfinished run."""
    import psutil

    from lstmnb import era5

    era5.extract(era5.Request(start="2020-01-01", end="2020-02-29"), progress=False)  # cache once, no race
    results, ck = tmp_path / "runs.jsonl", tmp_path / "ck.pt"
    cmd = [sys.executable, "-m", "lstmnb", "train", *SAMPLE_ARGS, "--strategy", "ddp", "--nproc", "2",
           "--epochs", "500", "--patience", "none", "--checkpoint", str(ck), "--results", str(results)]
    proc = subprocess.Popen(cmd, env=_env_without_launcher(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 90
        while not ck.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert ck.exists(), proc.communicate(timeout=5)
        # a fresh Python per rank ("spawn_main"), or on Linux the forkserver's children (the server's parent is proc)
        ranks = [c for c in psutil.Process(proc.pid).children(recursive=True) if "spawn" in " ".join(c.cmdline())
                 or ("forkserver" in " ".join(c.cmdline()) and c.ppid() != proc.pid)]
        assert len(ranks) == 2, [c.cmdline() for c in ranks]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    _, alive = psutil.wait_procs(ranks, timeout=15)
    assert not alive, [p.pid for p in alive]
    assert proc.returncode == 143, err
    # one line: no traceback, and no "leaked semaphore" warning from multiprocessing's resource tracker
    [line] = err.strip().splitlines()
    assert line.startswith("lstmnb train: stopped by SIGTERM"), err
    assert not results.exists()
    assert read_checkpoint(str(ck))["epoch"] >= 1


# --- launchers --------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["nproc", "torchrun"])
def test_lstmnb_train_ddp_with_nproc_and_under_torchrun(launcher, tmp_path):
    from lstmnb import era5

    era5.extract(era5.Request(start="2020-01-01", end="2020-02-29"), progress=False)
    results = tmp_path / "runs.jsonl"
    train_args = ["train", *SAMPLE_ARGS, "--strategy", "ddp", "--results", str(results)]
    if launcher == "nproc":
        cmd = [sys.executable, "-m", "lstmnb", *train_args, "--nproc", "2"]
    else:
        # `--` ends torchrun's own options: it would read our --start as an abbreviation of --start-method
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "--", "lstmnb", *train_args]
    out = subprocess.run(cmd, env=_env_without_launcher(), capture_output=True, text=True, timeout=150)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("test RMSE (K)") == 1  # rank 0 printed the results table, once
    recs = read_records(results)
    assert len(recs) == 1  # only rank 0 wrote
    rec = recs[0]
    assert rec["status"] == "ok" and rec["world_size"] == 2 and rec["parallel"]["backend"] == "gloo"
    assert rec["config"]["strategy"] == "ddp" and len(rec["epochs"]) == 2
    assert rec["metrics"]["test_rmse_k"] > 0
