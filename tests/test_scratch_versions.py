"""Every version of the from-scratch LSTM gives the numpy version's numbers; the CUDA kernel is
checked under Numba's CUDA simulator (the block kernel in test_scratch_cuda.py); training beats a seasonal-naive forecast; the versions table
records each version (GPU versions without a GPU as skipped)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from lstmnb.errors import ConfigError, DataError, DeviceError
from lstmnb.scratch import LSTMShape, ScratchConfig, fit, mse
from lstmnb.scratch.bench import evaluate, format_versions, versions_notes, versions_table
from lstmnb.scratch.data import DATASETS, airline_passengers, default_window, load_airline, load_data, prepare_series
from lstmnb.records import read_records

SHAPE = LSTMShape(n_features=2, hidden=5, n_outputs=2)


def toy(n: int = 23, steps: int = 7, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, steps, SHAPE.n_features))
    y = np.tanh(X.sum(axis=1))[:, : SHAPE.n_outputs] + 0.1 * rng.normal(size=(n, SHAPE.n_outputs))
    return X, y


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
# numba-cpu is marked slow only for its first compilation (cached on disk afterwards)
@pytest.mark.parametrize("version", ["loops", pytest.param("numba-cpu", marks=pytest.mark.slow), "torch"])
def test_every_version_follows_the_numpy_trajectory(version, optimizer):
    X, y = toy()
    # 3 epochs of 4 batches (the last one short): shuffling, a partial batch and clipping all happen
    cfg = ScratchConfig(hidden=SHAPE.hidden, epochs=3, batch_size=6, optimizer=optimizer, lr=0.05, clip=0.5)
    ref = fit("numpy", SHAPE, X, y, cfg)
    got = fit(version, SHAPE, X, y, cfg)
    assert len(got.step_losses) == len(ref.step_losses) == 12
    np.testing.assert_allclose(got.step_losses, ref.step_losses, rtol=1e-10)
    np.testing.assert_allclose(got.theta, ref.theta, rtol=1e-9, atol=1e-12)
    assert ref.step_losses[-1] < ref.step_losses[0]


@pytest.mark.slow  # compiles the float32 numba-cpu kernel (several seconds the first time)
def test_float32_versions_agree_to_single_precision():
    X, y = toy()
    cfg = ScratchConfig(hidden=SHAPE.hidden, epochs=2, batch_size=8, dtype="float32")
    ref = fit("numpy", SHAPE, X, y, cfg)
    assert ref.theta.dtype == np.float32
    for version in ("numba-cpu", "torch"):
        got = fit(version, SHAPE, X, y, cfg)
        np.testing.assert_allclose(got.step_losses, ref.step_losses, rtol=1e-4)


SIMULATOR_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    from numba import config
    from lstmnb.scratch import LSTMShape, ScratchConfig, fit, init_params, loss_and_grad_numpy
    from lstmnb.scratch.numba_cuda import NumbaCUDAGrad
    assert config.ENABLE_CUDASIM
    shape = LSTMShape(n_features=2, hidden=3, n_outputs=2)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(11, 4, 2)); y = rng.normal(size=(11, 2))
    theta = init_params(shape, seed=2) * 2.0
    idx = np.array([3, 9, 0, 4, 7])
    grad_fn = NumbaCUDAGrad(X, y, shape, batch_size=8, dtype=np.float64)
    loss, grad = grad_fn(theta, idx)
    ref_loss, ref_grad = loss_and_grad_numpy(theta, X[idx], y[idx], shape)
    X32, y32, th32 = X.astype(np.float32), y.astype(np.float32), theta.astype(np.float32)
    l32, g32 = loss_and_grad_numpy(th32, X32[idx], y32[idx], shape)
    loss32, grad32 = NumbaCUDAGrad(X32, y32, shape, batch_size=8, dtype=np.float32)(th32, idx)
    cfg = ScratchConfig(hidden=3, epochs=2, batch_size=4, lr=0.05)
    cu = fit("numba-cuda", shape, X, y, cfg)
    npy = fit("numpy", shape, X, y, cfg)
    json.dump({"f32": [loss32, float(l32), float(np.abs(grad32 - g32).max()), str(grad32.dtype)],
               "loss": [loss, ref_loss], "grad_err": float(np.abs(grad - ref_grad).max()),
               "grad_max": float(np.abs(ref_grad).max()),
               "steps": [cu.step_losses, npy.step_losses],
               "theta_err": float(np.abs(cu.theta - npy.theta).max())}, sys.stdout)
""")


def test_cuda_kernel_under_the_simulator_matches_numpy():
    # numba reads NUMBA_ENABLE_CUDASIM when it is imported: a fresh interpreter is the robust way
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    out = subprocess.run([sys.executable, "-c", SIMULATOR_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["loss"][0] == pytest.approx(res["loss"][1], rel=1e-12)
    assert res["grad_err"] <= 1e-12 * max(1.0, res["grad_max"])
    np.testing.assert_allclose(res["steps"][0], res["steps"][1], rtol=1e-10)
    assert len(res["steps"][0]) == 6
    assert res["theta_err"] < 1e-10
    loss32, ref32, err32, dtype = res["f32"]  # float32 data with float32 constants (the typed `one`)
    assert dtype == "float32" and loss32 == pytest.approx(ref32, rel=1e-5) and err32 <= 1e-5 * max(1.0, res["grad_max"])


def test_gpu_versions_without_a_gpu_are_clear_errors_and_skipped_rows_while_the_rest_is_timed(tmp_path):
    import numba

    from lstmnb.scratch.cuda_check import gpu_visible_to_numba, numba_cuda_reason, torch_cuda_reason

    if numba_cuda_reason() is None:
        pytest.skip("numba.cuda runs kernels here (a GPU or the simulator)")
    # numba.cuda and torch's CUDA start independently: a torch GPU box without libNVVM runs torch-cuda
    torch_cuda = "skipped" if torch_cuda_reason() else "ok"
    X, y = toy()
    cfg = ScratchConfig(hidden=SHAPE.hidden, epochs=1, batch_size=8)
    for version in ("numba-cuda", "numba-cuda-block"):
        with pytest.raises(DeviceError, match="numba.cuda cannot start") as info:
            fit(version, SHAPE, X, y, cfg)
        # the simulator is the way out where numba sees no GPU; where it sees one, the reason is the fault
        assert ("NUMBA_ENABLE_CUDASIM" in str(info.value)) == (not gpu_visible_to_numba())
    path = tmp_path / "runs.jsonl"
    versions = ["numpy", "numba-cuda", "numba-cuda-block", "torch-cuda"]
    table = versions_table(versions, ScratchConfig(epochs=2), repeats=1, record_path=path)
    assert list(table["status"]) == ["ok", "skipped", "skipped", torch_cuda]
    assert table.loc["numpy", "run_s"] > 0 and np.isfinite(table.loc["numpy", "test_loss"])
    recs = {r["version"]: r for r in read_records(path)}
    assert set(recs) == set(versions)
    for v in versions[1:3] + (versions[3:] if torch_cuda == "skipped" else []):
        assert recs[v]["status"] == "skipped" and recs[v]["reason"]
        assert "timing" not in recs[v] and "metrics" not in recs[v]
        assert f"numpy {np.__version__}" in recs[v]["reason"]  # the versions involved
    for v in ("numba-cuda", "numba-cuda-block"):
        assert recs[v]["reason"].startswith("numba.cuda cannot start: ")
        assert f"numba {numba.__version__}" in recs[v]["reason"] and "numba-cuda " in recs[v]["reason"]
    # the printed table says one reason once: numba-cuda-block's row points at numba-cuda's
    printed = format_versions(table)
    assert printed.count(recs["numba-cuda"]["reason"]) == 1 and "the same reason as numba-cuda" in printed
    notes = versions_notes(table)  # 07's bullets under the table: the skipped versions named, not their reasons again
    assert "not run here: **numba-cuda**, **numba-cuda-block**" in notes and recs["numba-cuda"]["reason"] not in notes
    ok = recs["numpy"]
    assert ok["experiment"] == "scratch_versions" and ok["status"] == "ok"
    assert ok["timing"]["epochs"] == 2 and ok["timing"]["run_s"] > 0 and ok["timing"]["compile_s"] >= 0
    assert set(ok["metrics"]) >= {"train_loss", "test_loss"}
    assert ok["config"]["hidden"] == 32 and ok["data"]["source"] == "airline_passengers"
    assert ok["data"]["sizes"] == {"train": 88, "val": 10, "test": 9}
    assert len(ok["epochs"]) == 2
    assert ok["backends"] == {"math": "float64"}  # what its matrix products ran in (ScratchConfig's dtype)
    assert table.loc["numpy", "math"] == "float64"


def test_unknown_version_and_bad_config_name_the_choices():
    X, y = toy()
    with pytest.raises(ConfigError, match=r"version='numba-gpu' is not known; choose one of \('loops'"):
        fit("numba-gpu", SHAPE, X, y, ScratchConfig(hidden=SHAPE.hidden))
    with pytest.raises(ConfigError, match="optimizer='rmsprop'"):
        fit("numpy", SHAPE, X, y, ScratchConfig(hidden=SHAPE.hidden, optimizer="rmsprop"))
    with pytest.raises(ConfigError, match="batch_size=0"):
        fit("numpy", SHAPE, X, y, ScratchConfig(hidden=SHAPE.hidden, batch_size=0))
    with pytest.raises(ConfigError, match="data='era6'"):
        ScratchConfig(data="era6").validate()
    with pytest.raises(ConfigError, match=r"data='era6' is not known; choose one of \('airline', 'era5'\)"):
        load_data("era6", 12)
    assert DATASETS == ("airline", "era5")
    assert default_window("airline") == 12 and default_window("era5") == 24
    with pytest.raises(ConfigError, match="numba-gpu"):
        versions_table(["numpy", "numba-gpu"], repeats=1, record=False)


def test_bad_data_reaches_no_compiled_code():
    X, y = toy()
    cfg = ScratchConfig(hidden=SHAPE.hidden)
    Xn = X.copy()
    Xn[4, 2, 0] = np.nan
    for version in ("numba-cpu", "numba-cuda", "numba-cuda-block"):
        with pytest.raises(DataError, match="NaN"):
            fit(version, SHAPE, Xn, y, cfg)
        with pytest.raises(DataError, match="features per step"):
            fit(version, SHAPE, X[:, :, :1], y, cfg)
        with pytest.raises(DataError, match="23 samples but y has 20"):
            fit(version, SHAPE, X, y[:20], cfg)


def test_airline_data_file():
    s = airline_passengers()
    assert len(s) == 144 and s.sum() == 40363
    assert s.iloc[0] == 112 and s.iloc[-1] == 432
    assert str(s.index[0].date()) == "1949-01-01" and str(s.index[-1].date()) == "1960-12-01"
    assert s.max() == 622


def test_series_preparation_is_chronological_and_scaled_on_train_only():
    d = load_airline(window=12)
    sizes = d.sizes()
    assert sizes == {"train": 88, "val": 10, "test": 9}
    # train inputs are standardised with train statistics: mean ~0, std ~1 over the train part
    assert abs(d.X["train"].mean()) < 0.2 and 0.8 < d.X["train"].std() < 1.2
    # targets in units reconstruct the passenger counts exactly from the scaled targets
    np.testing.assert_allclose(d.to_units(d.y["test"], "test"), d.truth["test"], rtol=1e-12)
    # the test targets are the last months of the series, in order
    s = airline_passengers().to_numpy()
    np.testing.assert_array_equal(d.truth["test"], s[-9:])
    np.testing.assert_array_equal(d.baselines["test"]["seasonal_naive"], s[-21:-12])
    with pytest.raises(DataError, match="1 missing .* first at position 7"):
        prepare_series(np.where(np.arange(50) == 7, np.nan, 1.0 + np.arange(50)), window=5, period=12)
    with pytest.raises(DataError, match="positive"):
        prepare_series(np.arange(50.0) - 3, window=5, period=12, transform="logdiff")
    with pytest.raises(ConfigError, match="transform='log'"):
        prepare_series(np.arange(50.0) + 1, window=5, period=12, transform="log")


def test_training_on_airline_passengers_beats_seasonal_naive():
    data = load_airline(window=12)
    cfg = ScratchConfig(epochs=30)
    shape = LSTMShape(1, cfg.hidden, 1)
    res = fit("numpy", shape, data.X["train"], data.y["train"], cfg, X_val=data.X["val"], y_val=data.y["val"])
    m = evaluate(res.theta, shape, data)
    for split in ("train", "val", "test"):
        assert m[f"{split}_loss"] == pytest.approx(mse(res.theta, data.X[split], data.y[split], shape), rel=1e-12)
    naive = m["baselines_test_rmse"]["seasonal_naive"]
    assert m["test_rmse"] < 0.8 * naive, (m["test_rmse"], naive)
    assert res.train_losses[-1] < 0.5 * res.train_losses[0]
    assert len(res.val_losses) == cfg.epochs


def test_cli_scratch_bench(tmp_path, capsys):
    from lstmnb.cli import main

    path = tmp_path / "r.jsonl"
    rc = main(["scratch", "bench", "--versions", "loops,numpy,loops", "--epochs", "2", "--repeats", "1",
               "--results", str(path), "--plot", str(tmp_path / "v.png")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "loops" in out and "numpy" in out and "seasonal_naive" in out
    assert (tmp_path / "v.png").stat().st_size > 0
    assert [r["version"] for r in read_records(path)] == ["loops", "numpy"]
    rc = main(["scratch", "bench", "--versions", "numpy,fortran", "--no-record"])
    assert rc == 2
    assert "fortran" in capsys.readouterr().err


def test_cli_scratch_bench_refuses_when_no_version_asked_for_can_run(tmp_path, capsys):
    """Issue 49: `--versions numba-cuda` without a GPU exited 0 with a table whose only row was the driver's
    message; now one line, exit 2, nothing recorded. A CPU version beside it runs, the GPU one a skipped row."""
    from lstmnb.cli import main
    from lstmnb.scratch.bench import skip_reason

    if skip_reason("numba-cuda") is None or skip_reason("torch-cuda") is None:
        pytest.skip("a CUDA GPU is visible: the GPU versions run here")
    path = tmp_path / "r.jsonl"
    for versions, said in (("numba-cuda", "--versions numba-cuda: it cannot run here (numba-cuda: "),
                           ("numba-cuda,torch-cuda", "none of them can run here (numba-cuda: ")):
        assert main(["scratch", "bench", "--versions", versions, "--epochs", "1", "--repeats", "1",
                     "--results", str(path)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and said in err and "ask for a CPU version" in err, err
    assert not path.exists()
    assert main(["scratch", "bench", "--versions", "numpy,numba-cuda", "--epochs", "1", "--repeats", "1",
                 "--results", str(path)]) == 0
    assert [r["status"] for r in read_records(path)] == ["ok", "skipped"]


@pytest.mark.slow
def test_era5_point_series_trains_through_the_core_pipeline():
    pytest.importorskip("lstmnb.data")
    from lstmnb.scratch.data import load_era5

    data = load_era5(window=24, hours=24 * 14)
    assert data.units == "K" and data.info["time_range"][0].startswith("2020-01-01")
    assert sum(data.sizes().values()) > 0 and 200 < data.truth["train"].mean() < 320
    cfg = ScratchConfig(data="era5", window=24, hours=24 * 14, epochs=3, hidden=8)
    shape = LSTMShape(1, cfg.hidden, 1)
    a = fit("numpy", shape, data.X["train"], data.y["train"], cfg)
    b = fit("numba-cpu", shape, data.X["train"], data.y["train"], cfg)
    np.testing.assert_allclose(a.step_losses, b.step_losses, rtol=1e-9)
    m = evaluate(a.theta, shape, data)
    assert np.isfinite(m["test_rmse"]) and m["test_rmse"] < 10


def test_cli_lists_every_version():
    from lstmnb.cli.scratch_cmd import SCRATCH_VERSIONS
    from lstmnb.scratch.fit import VERSIONS

    assert SCRATCH_VERSIONS == VERSIONS


def test_records_and_the_table_say_which_math_each_version_ran_in(tmp_path):
    from lstmnb.scratch.bench import format_versions

    path = tmp_path / "runs.jsonl"
    table = versions_table(["numpy", "torch"], ScratchConfig(epochs=1, dtype="float32"), repeats=1, record_path=path)
    recs = {r["version"]: r for r in read_records(path)}
    for v in ("numpy", "torch"):
        assert recs[v]["status"] == "ok" and recs[v]["backends"] == {"math": "float32"}
    text = format_versions(table)
    assert "math" in text.splitlines()[0] and all(" float32 " in line for line in text.splitlines()[1:3])
    assert "nan" not in text and "—" in text.splitlines()[1]  # no loops version ran: no 'vs loops' figure


@pytest.mark.gpu
def test_torch_cuda_runs_ieee_float32_and_its_record_says_so(tmp_path):
    """The versions table's float32 comparison: torch-cuda with cuDNN's TF32 off follows NumPy's float32
    trajectory as closely as the CPU float32 versions do, and its record's backends say float32."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    X, y = toy()
    cfg = ScratchConfig(hidden=SHAPE.hidden, epochs=2, batch_size=8, dtype="float32")
    ref = fit("numpy", SHAPE, X, y, cfg)
    from lstmnb.machine.cuda import precision_flags, rnn_tf32

    before = precision_flags()
    got = fit("torch-cuda", SHAPE, X, y, cfg)
    assert precision_flags() == before  # restored after the run
    assert got.backends["math"] == "float32" and rnn_tf32(got.backends["tf32"]) is False
    assert got.backends["lstm_math"] == "float32" and "cudnn" in got.backends
    np.testing.assert_allclose(got.step_losses, ref.step_losses, rtol=1e-4)
    path = tmp_path / "runs.jsonl"
    versions_table(["numpy", "torch-cuda"], ScratchConfig(epochs=1, dtype="float32"), repeats=1, record_path=path)
    rec = {r["version"]: r for r in read_records(path)}["torch-cuda"]
    assert rec["status"] == "ok" and rec["backends"]["math"] == "float32"
    assert rnn_tf32(rec["backends"]["tf32"]) is False


@pytest.mark.parametrize("speedup, said", [(2.5, "**2.50x** faster"), (0.8, "**1.25x** slower")])
def test_07s_notes_say_a_slower_version_as_how_many_times_slower(speedup, said):
    """'0.80x slower' reads as faster; a ratio below 1 is turned round."""
    table = pd.DataFrame({"status": ["ok", "ok"], "speedup_vs_numpy": [1.0, speedup], "compile_s": [0.0, 0.3],
                          "run_s": [1.0, 1 / speedup], "train_loss": [0.5, 0.5]}, index=["numpy", "numba-cpu"])
    assert f"numba-cpu runs {said} than numpy here" in versions_notes(table)

