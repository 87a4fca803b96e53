"""Real CUDA: every GPU path of lstmnb on the GPU this machine has. Marked `gpu`: skipped with the reason
where no CUDA GPU is usable (see conftest.py); `python -m pytest -m gpu` runs them on a GPU node.

Tolerances: a CUDA graph replays the same kernels as the eager step, but Adam is capturable instead of
fused there and cuDNN's reductions are not bitwise repeatable, so loss trajectories are compared to 1%.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lstmnb import experiments
from lstmnb.machine import cuda
from lstmnb.selfcheck import tiny_windows
from lstmnb.training import TrainConfig, parallel, train

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def windows():
    return tiny_windows()  # the deep self-check's input: 40 days of two diurnal series


def cfg(**kw):
    base = dict(window=12, hidden=16, epochs=3, batch_size=64, progress=False, device="cuda", seed=0)
    base.update(kw)
    return TrainConfig(**base)


def epoch_losses(record):
    return [e["train_loss"] for e in record["epochs"]]


def test_fast_and_dataloader_paths_train_on_the_gpu(windows):
    fast = train(windows, cfg()).record
    loader = train(windows, cfg(input_path="dataloader", num_workers=0)).record
    for rec in (fast, loader):
        assert rec["status"] == "ok" and rec["device"]["kind"] == "cuda" and rec["device"]["count"] >= 1
        assert math.isfinite(rec["metrics"]["test_rmse_k"]) and rec["memory"]["kind"] == "cuda_max_allocated"
    assert fast["cuda_graph"]["used"] is True and fast["cuda_graph"]["captured_steps"] > 0
    assert loader["cuda_graph"]["planned"] is False and loader["cuda_graph"]["used"] is False
    assert "dataloader" in loader["cuda_graph"]["reason"]
    backends = fast["backends"]  # cuDNN on or off and why, TF32 switches, the LSTM's math
    assert backends["cudnn"]["enabled"] == (cuda.cudnn_state()["usable"] and torch.backends.cudnn.enabled)
    assert set(backends["tf32"]) >= {"cudnn_allow_tf32", "matmul_allow_tf32"} and backends["lstm_math"] in ("tf32", "float32")


def test_graph_and_eager_follow_the_same_loss_trajectory(windows):
    graph = train(windows, cfg(epochs=4)).record
    eager = train(windows, cfg(epochs=4, cuda_graph=False)).record
    assert graph["cuda_graph"]["used"] and not eager["cuda_graph"]["used"]
    np.testing.assert_allclose(epoch_losses(graph), epoch_losses(eager), rtol=1e-2)
    assert graph["metrics"]["test_rmse_k"] == pytest.approx(eager["metrics"]["test_rmse_k"], rel=1e-2)


def test_each_captured_step_gives_the_eager_steps_loss(windows):
    """Step by step on the same batches: 3 warm-up steps, the captured one and its replays equal eager
    training's losses (the doctor --deep job)."""
    from lstmnb.selfcheck import GRAPH_STEPS, LOSS_RTOL, step_losses

    dev = torch.device("cuda", 0)
    eager, _ = step_losses(windows, dev, graph=False)
    graph, tr = step_losses(windows, dev, graph=True)
    assert tr.graph.replays == GRAPH_STEPS - 3
    np.testing.assert_allclose(graph, eager, rtol=LOSS_RTOL)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs (a graph on cuda:1)")
def test_a_graph_on_the_second_gpu_trains_there(windows):
    """torch.cuda.graph's default capture stream is made on the device current at the first capture:
    the capture runs inside cuda:1 with its own streams, and trains what eager training on cuda:1 trains."""
    graph = train(windows, cfg(device="cuda:1", epochs=3)).record
    eager = train(windows, cfg(device="cuda:1", epochs=3, cuda_graph=False)).record
    assert graph["cuda_graph"]["captured_steps"] > 0 and "on cuda:1" in graph["cuda_graph"]["reason"]
    np.testing.assert_allclose(epoch_losses(graph), epoch_losses(eager), rtol=1e-2)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs (DataParallel's replicas)")
def test_dataparallel_replicas_draw_their_own_dropout_masks():
    """Seeded alike, cuda:0 and cuda:1 would draw the same masks for their halves of a batch; after
    own_replica_streams cuda:1 has a stream of its own and cuda:0 keeps the seed's."""
    from lstmnb.training.parallel.ddp import own_replica_streams

    def masks():
        return [(torch.nn.functional.dropout(torch.ones(512, device=f"cuda:{i}"), 0.5) > 0).cpu() for i in (0, 1)]

    torch.manual_seed(3)
    same = masks()
    assert torch.equal(*same)
    torch.manual_seed(3)
    own_replica_streams(3, [0, 1])
    own = masks()
    assert torch.equal(own[0], same[0]) and not torch.equal(*own)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs (DataParallel's replicas)")
def test_dataparallel_replicas_run_in_bf16_in_their_threads():
    """Issue 48: torch's worker threads re-enter autocast at CUDA's default float16; each replica enters the
    run's bf16 itself (tests/test_gpu_paths_on_cpu.py shows the threads on a CPU)."""
    from lstmnb.models import Forecaster, ModelConfig
    from lstmnb.training.parallel import ReplicaDataParallel

    if not cuda.bf16_native(torch.cuda.get_device_capability()):
        pytest.skip("no native bfloat16 on this GPU")
    core, seen = Forecaster(ModelConfig(n_features=1, hidden=8)).cuda(), []
    core.head.register_forward_hook(lambda m, i, out: seen.append(out.dtype))  # the replicas share it
    with torch.autocast("cuda", dtype=torch.bfloat16):
        ReplicaDataParallel(core, [0, 1], torch.bfloat16)(torch.randn(8, 6, 1, device="cuda"))
    assert seen == [torch.bfloat16, torch.bfloat16]


def test_a_cpu_checkpoint_resumes_into_a_captured_graph(windows, tmp_path):
    """The saved optimizer is fused (CPU); the graph run's must stay capturable or the capture refuses."""
    ckpt = str(tmp_path / "cpu.pt")
    train(windows, cfg(device="cpu", epochs=2, checkpoint=ckpt))
    resumed = train(windows, cfg(epochs=4, checkpoint=ckpt, resume=True))
    assert [e["epoch"] for e in resumed.history] == [1, 2, 3, 4]
    assert resumed.record["cuda_graph"]["captured_steps"] > 0 and math.isfinite(resumed.record["metrics"]["test_rmse_k"])


NO_NATIVE_BF16 = torch.cuda.is_available() and not cuda.bf16_native(torch.cuda.get_device_capability())


@pytest.mark.skipif(NO_NATIVE_BF16, reason="no native bfloat16 on this GPU (SM < 8.0; torch's check counts emulation)")
def test_mixed_precision_trains(windows):
    rec = train(windows, cfg(amp="bf16")).record
    assert rec["cuda_graph"]["used"] and math.isfinite(rec["metrics"]["test_rmse_k"])
    fp16 = train(windows, cfg(amp="fp16")).record  # a loss scaler: eager, and the record says why
    assert not fp16["cuda_graph"]["used"] and "float16" in fp16["cuda_graph"]["reason"]


@pytest.mark.skipif(NO_NATIVE_BF16, reason="no native bfloat16 on this GPU (SM < 8.0)")
def test_the_lstm_runs_in_float32_under_bf16_autocast(windows):
    """Finding 5: cuDNN's RNN autocast wrapper casts to float16 whatever autocast's dtype is; the Forecaster
    keeps its recurrence in float32 under bf16 autocast. When this torch's cuDNN LSTM stops casting to
    fp16, the first assertion fails and the guard in models.Forecaster.forward can go."""
    from lstmnb.models import Forecaster, ModelConfig

    model = Forecaster(ModelConfig(n_features=2, hidden=16)).cuda()
    x = torch.randn(8, 12, 2, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        raw = model.rnn(x)[0].dtype
        seen = []
        model.rnn.register_forward_hook(lambda m, i, out: seen.append(out[0].dtype))
        model(x)
    if torch.backends.cudnn.enabled:
        assert raw == torch.float16, raw
    assert seen == [torch.float32]


def test_dataparallel_and_ddp_over_nccl_with_one_rank(windows):
    dp = train(windows, cfg(strategy="dataparallel", nproc=1)).record
    assert dp["parallel"]["strategy"] == "dataparallel" and dp["world_size"] == 1
    ddp = parallel.launch_train(windows, cfg(strategy="ddp"), 1).record
    assert ddp["parallel"]["backend"] == "nccl" and ddp["device"]["kind"] == "cuda"
    assert math.isfinite(ddp["metrics"]["test_rmse_k"])


def test_two_ddp_ranks_sharing_the_gpu_match_two_cpu_ranks(windows):
    """A correctness check of the multi-rank CUDA path on a one-GPU machine (gloo, no timing)."""
    gpu = parallel.launch_train(windows, cfg(strategy="ddp", epochs=2), 2, backend="gloo").record
    cpu = parallel.launch_train(windows, cfg(strategy="ddp", epochs=2, device="cpu"), 2).record
    assert gpu["parallel"]["backend"] == "gloo" and gpu["device"]["kind"] == "cuda"
    np.testing.assert_allclose(epoch_losses(gpu), epoch_losses(cpu), rtol=1e-2)


def test_checkpoint_resume_on_the_gpu_equals_an_uninterrupted_run(windows, tmp_path):
    ckpt = str(tmp_path / "ckpt.pt")
    train(windows, cfg(epochs=2, checkpoint=ckpt))
    resumed = train(windows, cfg(epochs=4, checkpoint=ckpt, resume=True))
    whole = train(windows, cfg(epochs=4))
    assert [e["epoch"] for e in resumed.history] == [1, 2, 3, 4]
    for a, b in zip(resumed.model.parameters(), whole.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-3)


def test_cuda_memory_cap_records_oom(windows):
    recs = experiments.batch_sweep(windows, cfg(epochs=1, hidden=256),
                                   experiments.SweepConfig(start=64, factor=8, memory_cap_mb=4))
    assert recs[-1]["status"] == "oom" and "4 MB cap" in recs[-1]["reason"]


@pytest.mark.slow
def test_notebook_series_with_a_gpu_profile(tmp_path):
    from lstmnb import notebooks, records

    result = notebooks.run_series(
        "carc-a100", only="02,04", runs_dir=tmp_path / "runs", kernel="python3", echo=None, progress=False,
        overrides={"end": "2020-01-21", "split_dates": ["2020-01-15", "2020-01-15"],
                   "fit_split_dates": ["2020-01-12", "2020-01-17"], "window": 12, "hidden": 8, "epochs_list": [1], "fit_epochs": 1,
                   "batch_sweep_max": 256, "num_workers": 0, "results": str(tmp_path / "results")})
    assert [r.status for r in result.runs] == ["ok", "ok"]
    recs = records.read_records(tmp_path / "results")
    gpu = [r for r in recs if r["status"] == "ok" and r["device"]["kind"] == "cuda"]
    assert gpu and all(math.isfinite(r["metrics"]["test_rmse_k"]) for r in gpu if "metrics" in r)


@pytest.mark.slow
def test_doctor_deep_passes_what_a_gpu_profile_needs():
    from lstmnb.selfcheck import deep_check, deep_ready

    jobs = deep_check()
    ready, blocking = deep_ready(jobs, "cuda")
    assert ready, [(j.device, j.name, j.status, j.detail) for j in blocking]
    assert all(j.status == "ok" for j in jobs if j.device.startswith("cuda:") and j.name != "bf16")


def test_region_skill_trains_every_variant_on_the_gpu(small_store, tmp_path):
    """Region mode's models (a cell's neighbours mixed in, sparse and dense) through the CUDA step; the
    per-cell scores pool to the run's figures, as on the CPU."""
    from lstmnb.cli import main
    from lstmnb.records import read_records
    from lstmnb.region.grid import record_maps

    rc = main(["region", "skill", "--source", str(small_store), "--box", "39.5,40,279,279.75", "--start", "2020-01-01",
               "--end", "2020-01-10", "--window", "12", "--hidden", "8", "--epochs", "2", "--batch-size", "64",
               "--neighbours", "3", "--device", "cuda", "--no-progress", "--results", str(tmp_path)])
    assert rc == 0
    recs = read_records(tmp_path)
    assert [r["region"]["variant"] for r in recs] == ["none", "sparse", "dense"]
    for r in recs:
        assert r["status"] == "ok" and r["device"]["kind"] == "cuda" and r["memory"]["kind"] == "cuda_max_allocated"
        assert r["cuda_graph"]["reason"] and len(r["skill"]["per_point"]) == 12
        maps = record_maps(r)
        assert maps.attrs["pooled_rmse_model"] == pytest.approx(r["metrics"]["test_rmse_k"], rel=1e-6)
        m = r["metrics"]
        assert math.isfinite(m["test_rmse_k"]) and m["test_rmse_k"] < m["climatology_rmse_k"]


def test_a_cpu_run_on_a_gpu_host_starts_no_cuda():
    """torch >= 2.12's optimizer step asks for the current CUDA stream where a GPU is, which starts CUDA; a
    CPU run of lstmnb's (a fresh interpreter: nothing else started it) must not hold a CUDA context."""
    import json
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import json, torch
        from lstmnb.selfcheck import tiny_windows
        from lstmnb.training import TrainConfig, train
        train(tiny_windows(), TrainConfig(window=12, hidden=8, epochs=2, batch_size=64, progress=False, device="cpu"))
        print(json.dumps({"cuda_started": torch.cuda.is_initialized()}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"cuda_started": False}
