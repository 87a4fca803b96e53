"""The CUDA versions of the from-scratch LSTM: the block kernel gives numpy's loss and gradient (under
Numba's CUDA simulator here, on the GPU where there is one), and a GPU engine that cannot start is a
reason with the library versions, never a stopped run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from lstmnb.errors import ConfigError, DeviceError
from lstmnb.scratch import LSTMShape, ScratchConfig, fit, init_params, loss_and_grad_numpy
from lstmnb.scratch.cuda_check import numba_cuda_reason, quiet_launches, start_failure, torch_cuda_reason
from lstmnb.scratch.fit import engine_start


def numba_gpu_reason() -> str | None:
    """None where numba.cuda runs kernels on a real GPU here, else why not (the reason tests skip with)."""
    reason = numba_cuda_reason()
    if reason is None and os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "NUMBA_ENABLE_CUDASIM=1: the simulator, not a GPU"
    return reason


@pytest.fixture
def numba_gpu():
    """Skip (with the reason) where numba.cuda cannot run kernels on a real GPU. Asked when the test runs,
    not at collection: no CUDA context is made in the test process unless a GPU test needs one."""
    reason = numba_gpu_reason()
    if reason is not None:
        pytest.skip(f"no CUDA GPU: {reason}")


SIMULATOR_SCRIPT = textwrap.dedent("""
    import json, sys, warnings
    import numpy as np
    from numba import config
    from lstmnb.scratch import LSTMShape, ScratchConfig, fit, init_params, loss_and_grad_numpy
    from lstmnb.scratch.bench import skip_reason
    from lstmnb.scratch.cuda_check import numba_cuda_reason
    from lstmnb.scratch.numba_cuda_block import NumbaCUDABlockGrad
    assert config.ENABLE_CUDASIM
    shape = LSTMShape(n_features=2, hidden=3, n_outputs=2)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(11, 4, 2)); y = rng.normal(size=(11, 2))
    theta = init_params(shape, seed=2) * 2.0  # larger weights: gates away from their linear range
    idx = np.array([3, 9, 0, 4, 7])
    ref_loss, ref_grad = loss_and_grad_numpy(theta, X[idx], y[idx], shape)
    out = {"probe": numba_cuda_reason(), "skip": skip_reason("numba-cuda-block"), "grad_max": float(np.abs(ref_grad).max())}
    # one block holding every sample, and blocks of 2 samples (the last one with an empty slot)
    for spb in (None, 2):
        g = NumbaCUDABlockGrad(X, y, shape, batch_size=8, dtype=np.float64, samples_per_block=spb)
        loss, grad = g(theta, idx)
        out[f"f64_{spb}"] = [g.S, loss, ref_loss, float(np.abs(grad - ref_grad).max())]
    X32, y32, th32 = X.astype(np.float32), y.astype(np.float32), theta.astype(np.float32)
    l32, g32 = loss_and_grad_numpy(th32, X32[idx], y32[idx], shape)
    loss, grad = NumbaCUDABlockGrad(X32, y32, shape, batch_size=5, dtype=np.float32, samples_per_block=3)(th32, idx)
    out["f32"] = [loss, float(l32), float(np.abs(grad - g32).max()), str(grad.dtype)]
    cfg = ScratchConfig(hidden=3, epochs=2, batch_size=4, lr=0.05)
    cu = fit("numba-cuda-block", shape, X, y, cfg)
    npy = fit("numpy", shape, X, y, cfg)
    out["steps"] = [cu.step_losses, npy.step_losses]
    out["theta_err"] = float(np.abs(cu.theta - npy.theta).max())
    json.dump(out, sys.stdout)
""")


def test_block_kernel_under_the_simulator_matches_numpy():
    # numba reads NUMBA_ENABLE_CUDASIM when it is imported: a fresh interpreter is the robust way
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    out = subprocess.run([sys.executable, "-c", SIMULATOR_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["probe"] is None  # the probe kernel runs in the simulator
    assert "simulator" in res["skip"]  # ... but a versions table does not time it there
    for spb, blocks in (("None", 8), ("2", 2)):
        got_spb, loss, ref_loss, grad_err = res[f"f64_{spb}"]
        assert got_spb == blocks
        assert loss == pytest.approx(ref_loss, rel=1e-12)
        assert grad_err <= 1e-12 * max(1.0, res["grad_max"])
    loss, ref_loss, grad_err, dtype = res["f32"]
    assert dtype == "float32" and loss == pytest.approx(ref_loss, rel=1e-5)
    assert grad_err <= 1e-5 * max(1.0, res["grad_max"])
    np.testing.assert_allclose(res["steps"][0], res["steps"][1], rtol=1e-10)
    assert len(res["steps"][0]) == 6  # 2 epochs of 3 batches (the last one short)
    assert res["theta_err"] < 1e-10


def test_without_a_gpu_the_probe_kernel_fails_for_real_and_says_why_with_versions():
    import numba

    if numba_gpu_reason() is None:
        pytest.skip("this machine has a working CUDA GPU")
    reason = numba_cuda_reason()  # compiled and launched for real: no driver, no GPU, or a broken compiler
    assert reason.startswith("numba.cuda cannot start: ")
    assert f"numpy {np.__version__}" in reason and f"numba {numba.__version__}" in reason
    assert "numba-cuda " in reason  # its version, or 'not installed'
    assert "\n" not in reason
    assert numba_cuda_reason() is reason  # asked once per process
    import torch

    torch_reason = torch_cuda_reason()  # torch's CUDA starts on its own: a GPU box with a broken numba-cuda runs it
    if torch.cuda.is_available():
        assert torch_reason is None
    else:
        assert torch_reason.startswith("torch-cuda cannot start") and "torch " in torch_reason
    X = np.zeros((6, 3, 1))
    y = np.zeros((6, 1))
    for version in ("numba-cuda", "numba-cuda-block"):
        with pytest.raises(DeviceError, match="numba.cuda cannot start") as info:
            fit(version, LSTMShape(1, 4, 1), X, y, ScratchConfig(hidden=4, epochs=1, batch_size=4))
        assert str(info.value) == reason


def test_an_optional_engine_that_fails_to_start_is_a_device_error_naming_the_exception_and_versions():
    import numba

    # the failure seen on a GPU machine: numba-cuda's compiler looks up a NumPy function that NumPy removed
    with pytest.raises(DeviceError) as info:
        with engine_start("numba-cuda-block"):
            np.row_stack_removed_in_this_numpy  # noqa: B018 - a real AttributeError from numpy
    msg = str(info.value)
    assert msg.startswith("numba-cuda-block cannot start: AttributeError: module 'numpy' has no attribute")
    assert f"(numpy {np.__version__}, numba {numba.__version__}, numba-cuda " in msg
    assert isinstance(info.value.__cause__, AttributeError)
    with pytest.raises(DeviceError, match=r"torch-cuda cannot start: RuntimeError: .*\(numpy .*, torch "):
        with engine_start("torch-cuda"):
            raise RuntimeError("CUDA error: no kernel image is available for execution on the device")
    # the reference versions are not optional: their errors are bugs and stay what they are
    with pytest.raises(AttributeError):
        with engine_start("numpy"):
            np.row_stack_removed_in_this_numpy  # noqa: B018
    with pytest.raises(ConfigError, match="hidden"):  # the project's own errors pass unchanged
        with engine_start("numba-cuda"):
            raise ConfigError("hidden=0 must be a positive whole number")


def test_a_start_failure_is_one_short_line():
    driver_text = "Error at driver init:\n\nCUDA driver library cannot be found.\n" * 20  # as numba words it
    try:
        raise RuntimeError(driver_text)
    except RuntimeError as exc:
        reason = start_failure("numba.cuda", exc)
    assert "\n" not in reason and len(reason) < 420
    assert reason.startswith("numba.cuda cannot start: RuntimeError: Error at driver init: CUDA driver library")
    assert "... (numpy " in reason
    try:  # numba's driver error ends in ':' and no more: the reason does not carry a dangling ' : ('
        raise RuntimeError("Error at driver init:\nCUDA driver library cannot be found.\n:")
    except RuntimeError as exc:
        reason = start_failure("numba.cuda", exc)
    assert "cannot be found. (numpy " in reason and " : (" not in reason


def test_quiet_launches_silences_numba_performance_warnings_only():
    from numba.core.errors import NumbaPerformanceWarning

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_launches():
            warnings.warn(NumbaPerformanceWarning("Grid size 1 will likely result in GPU under-utilization"))
            warnings.warn("something a user should see", UserWarning)
        warnings.warn(NumbaPerformanceWarning("outside the launches"))
    assert [w.category.__name__ for w in seen] == ["UserWarning", "NumbaPerformanceWarning"]
    assert "outside the launches" in str(seen[1].message)


def test_block_shapes_that_cannot_launch_are_clear_errors():
    pytest.importorskip("numba.cuda")
    from lstmnb.scratch.numba_cuda_block import check_block, default_samples_per_block

    assert default_samples_per_block(64, 256) == 2 and default_samples_per_block(32, 16) == 4
    assert default_samples_per_block(3, 5) == 5 and default_samples_per_block(512, 256) == 1
    check_block(512, 1, np.float64)  # 512 threads, 40 KB of shared memory: fits
    with pytest.raises(ConfigError, match="at most 1024"):
        check_block(2000, 1, np.float32)
    with pytest.raises(ConfigError, match="shared memory .* hidden=1024"):
        check_block(1024, 1, np.float64)
    with pytest.raises(ConfigError, match="samples_per_block=0"):
        check_block(8, 0, np.float32)


# --- on a real GPU (pytest -m gpu) ------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-10), ("float32", 2e-4)])
@pytest.mark.parametrize("version", ["numba-cuda", "numba-cuda-block"])
def test_cuda_kernels_on_the_gpu_match_numpy(numba_gpu, version, dtype, rtol):
    from lstmnb.scratch.fit import make_engine

    shape = LSTMShape(n_features=1, hidden=64, n_outputs=1)  # the era5 benchmark's network
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 24, 1)).astype(dtype)
    y = rng.normal(size=(300, 1)).astype(dtype)
    theta = init_params(shape, seed=1, dtype=dtype)
    cfg = ScratchConfig(hidden=64, batch_size=256, dtype=dtype)
    engine = make_engine(version, shape, X, y, theta, cfg)
    idx = rng.permutation(300)[:256]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        loss, grad = engine.grad_fn(theta, idx)
    assert not [w for w in seen if "Performance" in w.category.__name__]
    ref_loss, ref_grad = loss_and_grad_numpy(theta, X[idx], y[idx], shape)
    assert grad.dtype == np.dtype(dtype)
    assert loss == pytest.approx(float(ref_loss), rel=rtol)
    np.testing.assert_allclose(grad, ref_grad, rtol=rtol, atol=rtol * np.abs(ref_grad).max())
    cfg = ScratchConfig(hidden=64, batch_size=64, epochs=2, dtype=dtype)
    a, b = fit(version, shape, X, y, cfg), fit("numpy", shape, X, y, cfg)
    np.testing.assert_allclose(a.step_losses, b.step_losses, rtol=100 * rtol)


@pytest.mark.gpu
def test_versions_table_on_the_gpu_times_every_gpu_version(numba_gpu, tmp_path):
    from lstmnb.records import read_records
    from lstmnb.scratch.bench import versions_table

    versions = ["numpy", "numba-cuda", "numba-cuda-block", "torch-cuda"]
    table = versions_table(versions, ScratchConfig(epochs=2), repeats=1, record_path=tmp_path / "r.jsonl")
    assert list(table["status"]) == ["ok"] * 4, table["reason"].tolist()
    np.testing.assert_allclose(table["train_loss"], table.loc["numpy", "train_loss"], rtol=1e-6)
    recs = read_records(tmp_path / "r.jsonl")
    assert [(r["version"], r["status"], r["device"]["kind"]) for r in recs] == [
        ("numpy", "ok", "cpu"), ("numba-cuda", "ok", "cuda"), ("numba-cuda-block", "ok", "cuda"),
        ("torch-cuda", "ok", "cuda")]
    assert all(r["timing"]["run_s"] > 0 for r in recs)


def test_block_kernel_has_one_barrier_per_time_step_forward_and_backward():
    import ast
    import inspect
    import textwrap as tw

    pytest.importorskip("numba.cuda")
    from lstmnb.scratch import numba_cuda_block

    tree = ast.parse(tw.dedent(inspect.getsource(numba_cuda_block.build_kernels)))

    def barriers(node) -> int:
        return sum(isinstance(n, ast.Call) and ast.unparse(n.func) == "cuda.syncthreads" for n in ast.walk(node))

    time_loops = [n for n in ast.walk(tree) if isinstance(n, ast.For) and ast.unparse(n.target) == "t"
                  and "cuda.syncthreads" in ast.unparse(n)]
    assert [ast.unparse(loop.iter) for loop in time_loops] == ["range(T)", "range(T - 1, -1, -1)"]
    assert [barriers(loop) for loop in time_loops] == [1, 1]
