"""The GPU paths' decisions, shown on a CPU (issue 22: the review's findings): each rule is a pure function
tested with real inputs (cuDNN and SM versions, capabilities, arch lists, exit codes, records, compiled
kernels' types), and what a CPU can run is run (a resume across step kinds, the capped sweep child's
order of calls). The GPU itself is tested by the `gpu`-marked tests (tests/test_gpu.py)."""

from __future__ import annotations

import copy
import inspect
import json
import math
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
import torch

from lstmnb.machine import cuda
from lstmnb.machine.device import amp_choice
from lstmnb.machine.memory import is_oom
from lstmnb.errors import ConfigError, DeviceError
from lstmnb.training import TrainConfig, make_optimizer, restore_optimizer, train
from lstmnb.training.checkpoints import read_checkpoint, save_checkpoint
from lstmnb.training.step import STEPS_TO_CAPTURE, graph_plan, graph_record
from lstmnb.windows import make_windows


@pytest.fixture(scope="module")
def windows():
    t = pd.date_range("2020-03-01", periods=24 * 40, freq="h")
    v = 285 + 4 * np.sin(2 * np.pi * t.hour.to_numpy() / 24)[:, None] + np.random.default_rng(0).normal(0, 0.3, (len(t), 2))
    return make_windows(v, t, TrainConfig(window=12).window_config())


def cfg(**kw):
    return TrainConfig(**{**dict(window=12, hidden=8, epochs=2, batch_size=32, progress=False, device="cpu"), **kw})


# --- 1: cuDNN >= 9.11 on P100/V100 ------------------------------------------------------------------

def test_the_cudnn_rule_is_torchs_own_and_names_the_smallest_gpu():
    source = inspect.getsource(torch.backends.cudnn)
    # the installed torch raises on exactly this rule (torch/backends/cudnn/__init__.py, _init)
    assert f">= {cuda.CUDNN_WITHOUT_OLD_GPUS}" in source and f"< {cuda.CUDNN_MIN_CAPABILITY}" in source
    assert cuda.cudnn_problem(91002, [(6, 0)]) is None  # cuDNN 9.10 still has Pascal kernels
    assert cuda.cudnn_problem(91100, [(7, 5), (8, 0)]) is None
    assert cuda.cudnn_problem(None, [(6, 0)]) is None and cuda.cudnn_problem(91300, []) is None
    why = cuda.cudnn_problem(91300, [(8, 0), (7, 0)])  # any visible GPU below 7.5: torch checks them all
    assert "cuDNN 9.13.0" in why and "SM 7.0" in why and "PyTorch's own CUDA kernels" in why
    assert cuda.version_text(91002) == "9.10.2" and cuda.version_text(8907) == "8.9.7"


def test_software_facts_and_cudnn_state_never_start_cuda_here():
    """A fresh interpreter: the record's software section, doctor's cuDNN row and ``prepare_cuda`` read
    cuDNN without torch's GPU check (which raises on P100/V100 and starts the CUDA driver)."""
    script = textwrap.dedent("""
        import json, torch
        from lstmnb.records import software_info
        from lstmnb.doctor import cudnn_check
        from lstmnb.machine.cuda import cudnn_version, prepare_cuda
        enabled = torch.backends.cudnn.enabled
        sw = software_info(); row = cudnn_check(); state = prepare_cuda()
        print(json.dumps({"cudnn": sw["cudnn"], "raw": cudnn_version(), "row": row.status, "usable": state["usable"],
                          "kept": torch.backends.cudnn.enabled == enabled, "cuda_started": torch.cuda.is_initialized()}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["cudnn"] == res["raw"] and res["usable"] and res["kept"]
    # without a visible GPU nothing starts the driver; with one, doctor's row reads the GPUs' capabilities
    assert res["cuda_started"] == torch.cuda.is_available()


# --- 5, 6: bfloat16 only where native; the LSTM's math -----------------------------------------------

def test_bf16_is_chosen_only_where_the_gpu_has_it_natively():
    assert cuda.bf16_native((8, 0)) and cuda.bf16_native((9, 0)) and not cuda.bf16_native((7, 5))
    assert amp_choice("auto", "cuda", (8, 6)) == torch.bfloat16
    for cap in ((6, 0), (7, 0), (7, 5)):  # P100, V100, T4: torch.cuda.is_bf16_supported() says True (emulated)
        assert amp_choice("auto", "cuda", cap) == torch.float16
        with pytest.raises(DeviceError, match=rf"SM {cap[0]}\.{cap[1]}\) has no native bfloat16.*amp='fp16'"):
            amp_choice("bf16", "cuda", cap)
    assert amp_choice("off", "cuda", (9, 0)) is None and amp_choice("auto", "cpu") is None
    with pytest.raises(ConfigError, match="amp='bf16' is for CUDA devices; this run is on cpu"):
        amp_choice("bf16", "cpu")


def test_the_lstm_math_names_tf32_only_where_cudnn_runs_it_on_tensor_cores():
    assert cuda.lstm_math("cuda", True, True, (8, 0)) == "tf32"
    assert cuda.lstm_math("cuda", True, True, (7, 0)) == "float32"  # V100: no TF32
    assert cuda.lstm_math("cuda", False, True, (8, 0)) == "float32"  # cuDNN off: cuBLAS, TF32 off by default
    assert cuda.lstm_math("cuda", True, False, (9, 0)) == "float32"
    assert cuda.lstm_math("cuda", True, True, (8, 0), torch.float16) == "float16"
    assert cuda.lstm_math("cuda", True, True, (8, 0), torch.bfloat16) == "tf32"  # the LSTM stays float32
    assert cuda.lstm_math("cpu", True, True, None) == "float32"


def test_mfu_reference_rate_is_measured_in_the_math_asked_and_leaves_torchs_setting():
    from lstmnb.experiments.speed import matmul_rate, mfu_precision

    before = torch.get_float32_matmul_precision()
    assert matmul_rate("cpu", size=64, repeats=3, precision="tf32") > 0
    assert torch.get_float32_matmul_precision() == before
    assert mfu_precision(torch.device("cpu")) == "float32"


def test_a_build_has_kernels_for_a_gpu_by_sass_major_or_older_ptx():
    cu128 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]  # torch 2.7 cu128 wheels' arch list
    cu126 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
    assert not cuda.arch_supported((6, 0), cu128) and not cuda.arch_supported((7, 0), cu128)
    assert cuda.arch_supported((6, 0), cu126) and cuda.arch_supported((7, 0), cu126)
    assert cuda.arch_supported((8, 9), cu128)  # sm_86 SASS runs on 8.9
    assert not cuda.arch_supported((10, 3), ["sm_90"]) and cuda.arch_supported((10, 3), ["compute_90"])


# --- 2, 4, 10: the graph plan's inputs and what the record says ---------------------------------------

def test_graph_plan_refuses_runs_too_short_to_capture_and_names_the_device():
    gpu1 = torch.device("cuda", 1)  # the rule alone: no GPU is touched
    used, why = graph_plan(cfg(device="cuda:1"), gpu1, None, full_batches=STEPS_TO_CAPTURE - 1)
    assert not used and f"has {STEPS_TO_CAPTURE - 1} full batch(es) of 32; a capture needs {STEPS_TO_CAPTURE}" in why
    used, why = graph_plan(cfg(device="cuda:1"), gpu1, None, full_batches=STEPS_TO_CAPTURE)
    assert used and "captured on cuda:1" in why and "gather" in why


def test_the_record_says_captured_only_when_steps_were_replayed():
    planned = "captured after 3 eager warm-up steps"
    none = graph_record(True, planned, replays=0, full_batches=3, steps=4, batch_size=256)
    assert none["planned"] and not none["used"] and none["captured_steps"] == 0 and none["steps"] == 4
    assert "nothing was captured" in none["reason"] and "3 full batch(es) of 256" in none["reason"]
    some = graph_record(True, planned, replays=7, full_batches=10, steps=11, batch_size=256)
    assert some["used"] and some["captured_steps"] == 7 and some["reason"] == planned
    assert graph_record(False, "runs on cpu") == {"planned": False, "used": False, "captured_steps": 0,
                                                   "reason": "runs on cpu"}


def test_eager_vs_graph_says_no_graph_was_captured_from_the_record():
    from lstmnb.notebooks import steps

    rec = {"timing": {"epoch_s_median": 1.0, "samples_per_s": 100.0}, "metrics": {"test_rmse_k": 1.0}}
    assert steps.graph_sentence(dict(rec, cuda_graph=graph_record(True, "x", full_batches=2, batch_size=256)),
                                dict(rec, cuda_graph=graph_record(False, "off")), 256).startswith(
        "No graph was captured: planned, but nothing was captured: the run reached 2 full batch(es)")


# --- 3: resuming across step kinds ---------------------------------------------------------------------

def test_a_graph_runs_checkpoint_resumes_on_the_cpu(windows, tmp_path):
    """Reproduces the review's crash: a CUDA-graph run saves a capturable Adam; on a CPU its flags made
    ``step`` assert "If capturable=True, params and state_steps must be on supported devices"."""
    ckpt = str(tmp_path / "ckpt.pt")
    train(windows, cfg(epochs=1, checkpoint=ckpt))
    state = read_checkpoint(ckpt)
    from lstmnb.models import Forecaster

    as_graph = make_optimizer(Forecaster(cfg().model_config(windows.n_features)), cfg(), torch.device("cuda"),
                              capturable=True)  # the flags a graph run's optimizer has (built on CPU params)
    for saved, graph in zip(state["optimizer"]["param_groups"], as_graph.param_groups):
        saved.update({k: graph[k] for k in ("capturable", "fused", "foreach")})
    assert state["optimizer"]["param_groups"][0]["capturable"] is True
    save_checkpoint(ckpt, state)
    resumed = train(windows, cfg(epochs=2, checkpoint=ckpt, resume=True))
    assert [e["epoch"] for e in resumed.history] == [1, 2] and math.isfinite(resumed.history[-1]["train_loss"])


def test_restored_optimizer_keeps_its_own_step_flags_and_moves_its_step_counts():
    model = torch.nn.Linear(3, 1)
    fused = torch.optim.Adam(model.parameters(), fused=True)  # a CPU run's optimizer
    model(torch.randn(4, 3)).sum().backward()
    fused.step()
    saved = copy.deepcopy(fused.state_dict())
    capturable = torch.optim.Adam(model.parameters(), capturable=True)  # what a graph run builds
    restore_optimizer(capturable, saved)
    group = capturable.param_groups[0]
    assert group["capturable"] is True and not group["fused"]
    plain = torch.optim.Adam(model.parameters(), fused=False)
    restore_optimizer(plain, saved)
    for opt in (capturable, plain):
        for p in model.parameters():
            step = opt.state[p]["step"]
            assert step.dtype == torch.float32 and float(step) == 1.0 and step.device.type == "cpu"
    torch.testing.assert_close(capturable.state[model.weight]["exp_avg"], fused.state[model.weight]["exp_avg"])


# --- 8, 13: the sweep's capped child, out-of-memory messages, NCCL's watchdog ------------------------------

ORDER_SCRIPT = textwrap.dedent("""
    import json, resource, sys
    import numpy as np, pandas as pd
    from lstmnb.training import TrainConfig
    from lstmnb.windows import make_windows
    from lstmnb.experiments import sweep
    cfg = TrainConfig(device="cpu", window=12, hidden=8, epochs=1, batch_size=32, progress=False)
    h = np.arange(24 * 30)
    v = 280 + 8 * np.sin(2 * np.pi * h / 24)[:, None] + np.random.default_rng(0).normal(0, 1, (h.size, 1))
    w = make_windows(v, pd.date_range("2020-01-01", periods=h.size, freq="h"), cfg.window_config())
    import torch
    free = resource.getrlimit(resource.RLIMIT_DATA)[0]
    calls, before, at_cap = set(), set(), []
    def profile(frame, event, arg):  # calls into torch.cuda / torch.backends.cudnn, before and while capped
        if event != "call":
            return
        name = frame.f_code.co_filename.replace("\\\\", "/")
        if not at_cap and resource.getrlimit(resource.RLIMIT_DATA)[0] != free:  # the first call under the cap
            at_cap.append(torch.cuda.is_initialized())
        if "/torch/cuda/" in name or "/torch/backends/cudnn/" in name:
            capped = resource.getrlimit(resource.RLIMIT_DATA)[0] != free
            (calls if capped else before).add(name.split("/torch/")[-1] + ":" + frame.f_code.co_name)
    sys.setprofile(profile)
    rec, oom = sweep._point(w, cfg, None, 512.0)
    sys.setprofile(None)
    print(json.dumps({"status": rec["status"], "free": free == resource.getrlimit(resource.RLIMIT_DATA)[0],
                      "calls": sorted(calls), "before": sorted(before), "cuda_started_before_cap": at_cap[0]}))
""")
# what can start the CUDA driver (cuInit) or runs torch's cuDNN check; manual_seed_all only queues a lazy call
DRIVER_CALLS = ("cuda/__init__.py:is_available", "cuda/__init__.py:device_count", "cuda/__init__.py:_lazy_init",
                "cuda/__init__.py:init", "cuda/__init__.py:current_device", "cuda/__init__.py:get_device_capability",
                "cuda/__init__.py:get_device_properties")


@pytest.mark.slow
def test_the_capped_sweep_child_reaches_no_cuda_or_cudnn_call_after_its_cap():
    """On a GPU host the child's record (``software_info``: cuDNN's check) started the CUDA driver after
    the cap, could die there, and read as oom. The child is run as the sweep runs it (``_point``); every call
    into torch.cuda and torch.backends.cudnn made while the data-segment cap is set is listed."""
    out = subprocess.run([sys.executable, "-c", ORDER_SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["status"] == "ok" and res["free"]  # it ran, and the cap was lifted afterwards
    # On a CUDA build torch's own Adam.step asks torch.cuda.is_available() at every step
    # (optimizer.py, _accelerator_graph_capture_health_check); the device count behind it is cached in C++
    # after its first query, which the warm-up makes before the cap: then it starts nothing. Where CUDA was
    # started before the cap (torch >= 2.12's check would, but lstmnb's CPU optimizers skip it:
    # device.off_the_gpu), the driver calls after the cap start nothing either; a first start after it fails.
    cached = set(DRIVER_CALLS) if res["cuda_started_before_cap"] else {"cuda/__init__.py:is_available"} & set(res["before"])
    bad = [c for c in res["calls"] if (c.startswith("backends/cudnn/") or c in DRIVER_CALLS) and c not in cached]
    assert not bad, res["calls"]


def test_a_capped_childs_death_is_oom_only_by_a_memory_signal_while_capped():
    from lstmnb.experiments.sweep import death_status

    status, why = death_status(-signal.SIGABRT, True, 4096, 48)
    assert status == "oom" and "batch_size=4096 under a 48 MB cap" in why and "SIGABRT while capped" in why
    assert death_status(-signal.SIGKILL, True, 64, 8)[0] == "oom"
    status, why = death_status(-signal.SIGSEGV, False, 64, 8)
    assert status == "failed" and "before its memory cap was set" in why and "not an out-of-memory end" in why
    status, why = death_status(3, True, 64, 8)
    assert status == "failed" and "exited with status 3 while capped" in why


def test_cuda_libraries_allocation_failures_are_out_of_memory():
    for text in ("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
                 "cuDNN error: CUDNN_STATUS_ALLOC_FAILED", "CUDA out of memory. Tried to allocate 2.00 GiB",
                 "DefaultCPUAllocator: can't allocate memory: you tried to allocate 123 bytes"):
        assert is_oom(RuntimeError(text)), text
    assert not is_oom(RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED")) and not is_oom(ValueError("out of memory"))


def test_a_rank_aborted_under_nccl_reads_as_lost_contact_with_the_timeout(tmp_path):
    from lstmnb.training.parallel.launcher import _launch_error

    codes = {0: -signal.SIGTERM, 1: -signal.SIGABRT}  # rank 1 aborted; the launcher stopped rank 0
    err = _launch_error(tmp_path, RuntimeError("process 1 terminated"), 2, codes, "nccl", "--dist-timeout-s 120")
    assert "rank 1 of 2 lost contact" in str(err) and "NCCL's watchdog" in str(err)
    assert "a collective waited longer than --dist-timeout-s 120 or a peer failed" in str(err)
    gloo = _launch_error(tmp_path, RuntimeError("process 1 terminated"), 2, codes, "gloo", "--dist-timeout-s 120")
    assert "rank 1 of 2 was killed by SIGABRT" in str(gloo)


# --- 13: bench size labels what ran -------------------------------------------------------------------------

def test_bench_size_labels_a_graph_that_did_not_run_as_not_used():
    from lstmnb.experiments.size import ran_variant, size_table

    def rec(variant, used, sps):
        return {"status": "ok", "size": {"points": 2, "variant": variant}, "cuda_graph": {"used": used},
                "timing": {"samples_per_s": sps, "epoch_s_median": 1.0}}

    refused = rec("cuda-graph", False, 90.0)
    assert ran_variant("cuda-graph", refused) == "cuda-graph (not used)"
    assert ran_variant("cuda-graph", rec("cuda-graph", True, 900.0)) == "cuda-graph"
    assert ran_variant("cuda-eager", rec("cuda-eager", False, 90.0)) == "cuda-eager"
    refused["size"]["ran"] = ran_variant("cuda-graph", refused)
    table = size_table([rec("cpu", False, 100.0), refused])
    assert list(table["samples/s"].columns) == ["cpu", "cuda-graph (not used)"]


# --- 11, 12: the Numba kernels' dtype and registers ---------------------------------------------------------

def test_the_per_sample_kernel_computes_in_the_working_dtype():
    """The per-sample kernel's arithmetic is ``sample_loss_grad``, compiled by cuda.jit(device=True) and by
    njit from one source with the same typing rules: compiled for float32, no value may be a float64 (an
    untyped ``0.0`` made every accumulator float64: 1/32 of a T4's float32 rate)."""
    from numba import njit, types

    from lstmnb.scratch.numba_cpu import sample_loss_grad

    T, F, H, O = 4, 2, 3, 1
    f32 = np.float32

    def z(*shape):
        return np.zeros(shape, f32)

    kernel = njit(sample_loss_grad)
    kernel(z(T, F), z(O), z(4 * H, F), z(4 * H, H), z(4 * H), z(O, H), z(O), z(4 * H, F), z(4 * H, H), z(4 * H),
           z(O, H), z(O), z(T, 4 * H), z(T + 1, H), z(T + 1, H), z(T, H), z(3, 4 * H), f32(0.5), f32(1.0))
    compiled = kernel.overloads[kernel.signatures[0]]
    wide = sorted(name for name, t in compiled.type_annotation.typemap.items() if t == types.float64)
    assert compiled.signature.return_type == types.float32 and not wide, wide


def test_block_kernel_registers_are_checked_against_the_gpus_limit_per_block():
    from lstmnb.scratch.numba_cuda_block import check_registers, registers_per_block, samples_that_fit

    assert registers_per_block(128, 64) == 4 * 64 * 32  # 4 warps of 2048 registers
    assert registers_per_block(100, 37) == 4 * 40 * 32  # a partial warp counts whole; 37 rounds up to 40 per thread
    check_registers(512, 2, np.float32, 64, 65536)  # 1024 threads x 64 registers: exactly the limit
    with pytest.raises(ConfigError, match=r"512 x 2 threads using 80 registers each \(float64\) needs 81920 "
                                          r"registers; this GPU gives a block at most 65536"):
        check_registers(512, 2, np.float64, 80, 65536)
    assert samples_that_fit(512, 2, 80, 65536) == 1 and samples_that_fit(64, 2, 64, 65536) == 2
    assert samples_that_fit(1024, 1, 80, 65536) == 0


def test_an_error_raised_while_handling_an_oom_is_that_oom():
    """Ending a CUDA graph capture that ran out of memory can raise its own error; the record is oom."""
    from lstmnb.experiments.sweep import _oom_reason

    try:
        try:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB")
        except torch.OutOfMemoryError:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
    except RuntimeError as exc:
        why = _oom_reason(exc, 512, 4)
    assert why.startswith("out of memory at batch_size=512 under a 4 MB cap: CUDA out of memory")
    assert _oom_reason(RuntimeError("CUDA error: an illegal memory access"), 512, 4) is None


# --- a CPU run's optimizer starts no CUDA on a GPU host ------------------------------------------------------

def _gpu_host(monkeypatch) -> None:
    """What a GPU host answers torch's optimizer check (torch >= 2.12), with a stream query that says it ran."""
    if not hasattr(torch.optim.Optimizer, "_accelerator_graph_capture_health_check"):
        pytest.skip(f"torch {torch.__version__}'s optimizers have no accelerator health check")

    def started(*args, **kwargs):
        raise AssertionError("asked for the current CUDA stream: CUDA would start here")

    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a, **k: torch.device("cuda"))
    monkeypatch.setattr(torch.accelerator, "current_stream", started)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def _one_step(opt, params) -> None:
    sum((p ** 2).sum() for p in params).backward()
    opt.step()


def test_a_cpu_runs_optimizers_never_ask_for_a_cuda_stream(monkeypatch):
    """On torch 2.13 (optimizer.py) every Adam step asks torch.accelerator.current_stream() where a GPU is,
    and that starts CUDA; every optimizer lstmnb builds for the CPU skips it. The GPU host is simulated (no
    GPU here); tests/test_gpu.py's twin checks torch.cuda.is_initialized() on a real one."""
    from lstmnb.machine.device import off_the_gpu
    from lstmnb.scratch.lstm import LSTMShape, init_params
    from lstmnb.scratch.torch_lstm import TorchEngine

    _gpu_host(monkeypatch)
    model = torch.nn.Linear(3, 1)
    plain = torch.optim.Adam(model.parameters())
    with pytest.raises(AssertionError, match="CUDA would start"):  # the simulation reaches torch's check
        _one_step(plain, list(model.parameters()))
    for flags in ({}, {"fused_adam": False}):
        opt = make_optimizer(model, TrainConfig(device="cpu", **flags), torch.device("cpu"))
        _one_step(opt, list(model.parameters()))
    shape = LSTMShape(n_features=1, hidden=4, n_outputs=1)
    x, y = np.zeros((8, 6, 1), np.float32), np.zeros((8, 1), np.float32)
    for name in ("adam", "sgd"):
        engine = TorchEngine("torch", shape, x, y, init_params(shape, seed=0), name, 0.01, None)
        _one_step(engine.opt, list(engine.model.trainable()))
    gpu = off_the_gpu(torch.optim.Adam(model.parameters()), torch.device("cuda"))  # a GPU's keeps the check
    with pytest.raises(AssertionError, match="CUDA would start"):
        _one_step(gpu, list(model.parameters()))
