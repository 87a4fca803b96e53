"""Training runs on small real series: determinism, resume, checkpoints, timing fields, bad input."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from lstmnb.errors import CheckpointError, ConfigError, DeviceError
from lstmnb.machine.device import resolve_device
from lstmnb.machine.memory import reset_peak_memory
from lstmnb.training import TrainConfig, config_from_dict, predict, time_to_target, train
from lstmnb.training.checkpoints import trajectory_key
from lstmnb.windows import error_metrics, make_windows


def _series(n_hours=24 * 60, seed=0):
    """Two points of diurnal cycle + red noise, hourly: small enough for second-long runs."""
    t = pd.date_range("2020-03-01", periods=n_hours, freq="h")
    rng = np.random.default_rng(seed)
    noise = np.zeros((n_hours, 2))
    for i in range(1, n_hours):
        noise[i] = 0.95 * noise[i - 1] + rng.normal(0, 0.5, 2)
    diurnal = 4 * np.sin(2 * np.pi * (t.hour.to_numpy() - 9) / 24)
    return 285 + np.stack([diurnal, 0.5 * diurnal], 1) + noise, t


@pytest.fixture(scope="module")
def small_windows():
    v, t = _series()
    return make_windows(v, t, TrainConfig(window=12).window_config())


def cfg(**kw):
    base = dict(window=12, hidden=8, epochs=3, batch_size=32, progress=False, device="cpu")  # pinned: GPU machines too
    base.update(kw)
    return TrainConfig(**base)


def weights(model):
    return [p.detach().clone() for p in model.parameters()]


def test_run_record_has_timing_memory_and_metrics(small_windows):
    r = train(small_windows, cfg(target_rmse=100.0))
    rec = r.record
    assert rec["status"] == "ok" and rec["device"]["kind"] == "cpu"
    assert len(rec["epochs"]) == 3
    cum = [e["cumulative_s"] for e in rec["epochs"]]
    assert all(b > a for a, b in zip(cum, cum[1:]))
    t = rec["timing"]
    assert t["warmup_epoch_s"] == rec["epochs"][0]["train_s"]
    assert t["samples_per_s"] > 0 and t["train_s"] == pytest.approx(sum(e["train_s"] for e in rec["epochs"]))
    assert t["time_to_target"]["reached"] and t["time_to_target"]["epoch"] == 1
    if reset_peak_memory(torch.device("cpu")):
        assert rec["memory"]["peak_mb"] > 0
    else:  # no resettable high-water mark here: no figure, and a note saying why
        assert rec["memory"]["peak_mb"] is None and "clear_refs" in rec["memory"]["note"]
    m = rec["metrics"]
    for k in ("test_rmse_k", "persistence_rmse_k", "climatology_rmse_k"):
        assert math.isfinite(m[k]) and m[k] > 0
    assert rec["data"]["sizes"] == small_windows.sizes()
    assert rec["model"]["flops_per_sample"]["training"] == 3 * rec["model"]["flops_per_sample"]["forward"]


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024


@pytest.mark.skipif(not reset_peak_memory(torch.device("cpu")), reason="needs Linux's resettable VmHWM")
def test_cpu_peak_memory_is_the_runs_own_not_the_process_lifetime_peak(small_windows):
    """A 400 MB allocation before the run raises the process's all-time peak (getrusage's max RSS); the
    run's recorded peak must not include it, and a run that allocates more must record more."""
    big = np.ones(400 * 2**20 // 8)  # touched, so resident
    with_big = _rss_mb()
    del big  # a large numpy buffer is its own mapping: freeing it gives the memory back to the system
    assert _rss_mb() < with_big - 300
    small = train(small_windows, cfg(epochs=1)).record["memory"]
    assert small["kind"] == "process_peak_rss" and small["peak_mb"] > 0
    assert small["peak_mb"] < with_big - 300

    def allocate_in_run(entry):  # 300 MB held inside the run's window, then freed
        held = np.ones(300 * 2**20 // 8)
        assert held[-1] == 1.0

    large = train(small_windows, cfg(epochs=1), on_epoch_end=allocate_in_run).record["memory"]
    assert large["peak_mb"] > small["peak_mb"] + 250


def test_deterministic_on_cpu_for_a_seed(small_windows):
    a = weights(train(small_windows, cfg(epochs=2)).model)
    b = weights(train(small_windows, cfg(epochs=2)).model)
    c = weights(train(small_windows, cfg(epochs=2, seed=1)).model)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))


class Interrupt(Exception):
    pass


@pytest.mark.parametrize("input_path", ["fast", "dataloader"])
def test_resume_after_interruption_gives_same_weights(small_windows, tmp_path, input_path):
    kw = dict(epochs=4, input_path=input_path, num_workers=0, lr_schedule="onecycle", dropout=0.0)
    full = train(small_windows, cfg(**kw))
    ckpt = tmp_path / "run.pt"

    def stop_after_two(entry):
        if entry["epoch"] == 2:
            raise Interrupt

    with pytest.raises(Interrupt):
        train(small_windows, cfg(checkpoint=str(ckpt), **kw), on_epoch_end=stop_after_two)
    assert ckpt.exists()
    epochs_seen = []
    resumed = train(small_windows, cfg(checkpoint=str(ckpt), resume=True, **kw),
                    on_epoch_end=lambda e: epochs_seen.append(e["epoch"]))
    assert epochs_seen == [3, 4]  # finished epochs are not repeated
    assert all(torch.equal(a, b) for a, b in zip(weights(full.model), weights(resumed.model)))
    assert [e["epoch"] for e in resumed.record["epochs"]] == [1, 2, 3, 4]


def test_corrupt_checkpoint_is_reported_and_kept(small_windows, tmp_path):
    ckpt = tmp_path / "run.pt"
    ckpt.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(CheckpointError, match=r"run.pt has no run.pt.sha256 beside it, so it cannot be verified"):
        train(small_windows, cfg(checkpoint=str(ckpt), resume=True))
    assert ckpt.read_bytes() == b"PK\x03\x04 truncated"


def test_checkpoint_of_another_config_is_refused(small_windows, tmp_path):
    ckpt = tmp_path / "run.pt"
    train(small_windows, cfg(epochs=1, checkpoint=str(ckpt)))
    with pytest.raises(CheckpointError, match="lr"):
        train(small_windows, cfg(epochs=2, lr=0.01, checkpoint=str(ckpt), resume=True))


def test_early_stopping_restores_best(small_windows):
    r = train(small_windows, cfg(epochs=30, lr=0.05, patience=1))
    m = r.record["metrics"]
    assert m["epochs_run"] < 30 and m["stopped_early"]
    val = [e["val_rmse_k"] for e in r.record["epochs"]]
    best = min(val)
    assert val[-1] > best  # the run went on past its best epoch, so the last weights are not the best
    # the returned model's validation RMSE, computed here in kelvin, is the best epoch's, not the last's
    pred = predict(r.model, small_windows.x["val"], r.device).cpu().numpy()
    got = error_metrics(small_windows.to_kelvin(pred), small_windows.to_kelvin(small_windows.y["val"]))["rmse"]
    assert got == pytest.approx(best, rel=1e-4)
    assert m["best_val_rmse_k"] == best
    epoch = val.index(best) + 1
    assert m["stop_reason"] == (f"validation RMSE did not improve for 1 epochs; the best epoch's weights "
                                f"(epoch {epoch}, {best:.3f} K) are kept")
    capped = train(small_windows, cfg(epochs=2, patience=None)).record["metrics"]
    assert not capped["stopped_early"] and capped["stop_reason"] == "ran all 2 epochs"


def test_presets_default_recommended_and_published_exactly():
    from lstmnb.training import PRESETS, preset_config

    rec = TrainConfig()
    assert (rec.preset, rec.batch_size, rec.learning_rate, rec.residual, rec.calendar, rec.epochs, rec.patience,
            rec.input_path) == ("recommended", 256, 4e-3, True, True, 30, 5, "fast")
    # the learning rate by lead: 4e-3 to 6 h, 5e-4 from 24 h, log-linear between; an explicit lr wins
    assert [TrainConfig(lead_hours=h).learning_rate for h in (1, 6, 24, 48)] == [4e-3, 4e-3, 5e-4, 5e-4]
    assert TrainConfig(lead_hours=12).learning_rate == pytest.approx((4e-3 * 5e-4) ** 0.5)
    assert TrainConfig(lead_hours=24, lr=2e-3).learning_rate == 2e-3
    assert TrainConfig(lead_hours=24).as_record()["lr"] == 5e-4 and TrainConfig().as_record()["lr_by_lead"]
    # a checkpoint of a run at the rate by lead resumes under the same rate given explicitly
    assert trajectory_key(TrainConfig()) == trajectory_key(TrainConfig(lr=4e-3))
    pub = preset_config("published")
    assert (pub.preset, pub.epochs, pub.patience, pub.batch_size, pub.layers, pub.lr, pub.residual, pub.calendar,
            pub.input_path, pub.num_workers, pub.fused_adam) == ("published", 5, None, 128, 2, 1e-3, False, False,
                                                                  "dataloader", 2, False)
    assert preset_config("published", epochs=15).epochs == 15 and set(PRESETS) == {"recommended", "published"}
    with pytest.raises(ConfigError, match="preset='fast' is not one of recommended, published"):
        preset_config("fast")


def test_time_to_target_not_reached_is_not_a_time():
    hist = [{"epoch": 1, "val_rmse_k": 2.0, "cumulative_s": 1.0}, {"epoch": 2, "val_rmse_k": 1.5, "cumulative_s": 2.0}]
    out = time_to_target(hist, 1.0)
    assert out["seconds"] is None and out["note"] == "not reached in 2 epochs (best 1.500 K)"
    assert time_to_target(hist, 1.6)["seconds"] == 2.0


@pytest.mark.parametrize("kw, err, match", [
    ({"epochs": 0}, ConfigError, "epochs=0"),
    ({"batch_size": -4}, ConfigError, "batch_size=-4"),
    ({"window": 0}, ConfigError, "window=0"),
    ({"lr": 0}, ConfigError, "lr=0"),
    ({"device": "tpu"}, ConfigError, "device='tpu' is not one of"),
    ({"input_path": "fastest"}, ConfigError, "input_path='fastest'"),
    ({"amp": "bf16"}, ConfigError, "amp='bf16' is for CUDA"),
    ({"resume": True}, ConfigError, "needs a checkpoint"),
])
def test_bad_training_input(small_windows, kw, err, match):
    with pytest.raises(err, match=match):
        train(small_windows, cfg(**kw))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_asked_where_none_exists():
    with pytest.raises(DeviceError, match="no usable CUDA GPU"):
        resolve_device("cuda:0")


def test_a_gpu_index_beyond_those_visible_says_which_there_are_and_what_to_do(monkeypatch):
    from lstmnb.machine.device import device_problem

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a one-GPU node, as far as the check asks
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert device_problem("cuda:3", hint="pass -p device auto") == (
        "device='cuda:3': only 1 CUDA device(s) visible (cuda:0..cuda:0); pass -p device auto")
    assert device_problem("cuda:0") is None and device_problem("cuda") is None


def test_the_no_gpu_reason_names_a_cuda_visible_devices_that_hides_them(monkeypatch):
    from lstmnb.machine.device import no_cuda_reason

    monkeypatch.setattr(torch.version, "cuda", "13.0")  # a CUDA build of torch, as on a GPU node
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a job that asked for no GPU, or a test hiding them
    assert no_cuda_reason().endswith("CUDA build: 13.0; CUDA_VISIBLE_DEVICES is empty, which hides every GPU)")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # a GPU index that is not there
    assert no_cuda_reason().endswith("CUDA build: 13.0; CUDA_VISIBLE_DEVICES=3 names the GPUs torch may use)")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert no_cuda_reason().endswith("CUDA build: 13.0)")
    monkeypatch.setattr(torch.version, "cuda", None)  # a CPU build: the variable cannot be the reason
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert no_cuda_reason().endswith("CUDA build: none)")


def test_window_longer_than_training_part(small_windows):
    v, t = _series(24 * 10)
    with pytest.raises(ConfigError, match="longer than the training part"):
        make_windows(v, t, TrainConfig(window=24 * 9).window_config())


def test_unknown_parameter_named():
    with pytest.raises(ConfigError, match="batchsize"):
        config_from_dict({"batchsize": 3})


def test_stop_at_target_ends_the_run(small_windows):
    r = train(small_windows, cfg(epochs=20, target_rmse=100.0, stop_at_target=True))
    assert r.record["metrics"]["epochs_run"] == 1
    assert r.record["timing"]["time_to_target"]["epoch"] == 1


def test_fused_and_plain_adam_agree(small_windows):
    a = weights(train(small_windows, cfg(epochs=1, fused_adam=True)).model)
    b = weights(train(small_windows, cfg(epochs=1, fused_adam=False)).model)
    assert all(torch.allclose(x, y, atol=1e-4) for x, y in zip(a, b))


def test_cuda_graph_is_on_by_default_and_the_record_says_why_a_run_is_eager(small_windows):
    """Graphs are the default; where one cannot apply, the run is eager and the record gives the reason."""
    from lstmnb.training.step import graph_plan

    assert TrainConfig().cuda_graph is True
    rec = train(small_windows, cfg(epochs=1)).record  # pinned to the CPU
    assert rec["cuda_graph"] == {"planned": False, "used": False, "captured_steps": 0,
                                 "reason": "runs on cpu; CUDA graphs need a CUDA GPU"}
    assert rec["backends"] is None  # cuDNN and TF32 switches are recorded for CUDA runs
    gpu = torch.device("cuda", 0)  # the rule alone: no GPU is touched
    assert graph_plan(cfg(device="cuda"), gpu, None)[0] is True
    for kw, why in [({"cuda_graph": False}, "turned off"), ({"input_path": "dataloader"}, "input_path=dataloader"),
                    ({"lr_schedule": "cosine"}, "lr_schedule=cosine"), ({"strategy": "ddp"}, "strategy=ddp"),
                    ({"compile": True}, "compile=True")]:
        used, reason = graph_plan(cfg(device="cuda", **kw), gpu, None)
        assert not used and why in reason, (kw, reason)
    assert graph_plan(cfg(device="cuda", amp="fp16"), gpu, torch.float16)[1].startswith("amp in float16")
    assert graph_plan(cfg(device="cuda", amp="bf16"), gpu, torch.bfloat16)[0] is True