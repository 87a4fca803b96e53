"""What this process's CUDA stack can do, decided from facts before anything fails: cuDNN against the GPUs' compute
capabilities, native bfloat16, the TF32 math modes, and whether the torch build carries kernels for a GPU (docs/gpu.md
gives each rule's source). Nothing here initialises CUDA unless a CUDA device is in use (``cudnn_state`` does;
``cudnn_version`` does not), so a CPU run, a record's software section and a memory-capped child never start it."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from ..rules import PYTHON, Spelling

# torch/backends/cudnn/__init__.py, _init(): "cuDNN version {v} is not compatible with devices with SM < 7.5"
# when the cuDNN version int is >= 91100 and the smallest capability of all visible GPUs is below (7, 5)
# (cuDNN 9.11.0 dropped Maxwell, Pascal and Volta; pytorch/pytorch#162574).
CUDNN_WITHOUT_OLD_GPUS = 91100
CUDNN_MIN_CAPABILITY = (7, 5)
BF16_MIN_CAPABILITY = (8, 0)  # torch.cuda.is_bf16_supported(including_emulation=False): major >= 8
TF32_MIN_CAPABILITY = (8, 0)  # TensorFloat-32 tensor cores: Ampere and newer

# Which torch builds keep cuDNN on a P100 (SM 6.0) or V100 (SM 7.0): doctor prints this.
OLD_GPU_BUILDS = ("a torch whose bundled cuDNN is 9.10 or older (torch.backends.cudnn.version() < 91100) and whose "
                  "arch list has sm_60/sm_70: conda-forge `pytorch cuda*` with `cudnn <9.11` and `cuda-version <13` "
                  "(carc/environment.yml pins these), or PyTorch's CUDA 12.6 / 11.8 wheels of a release that bundles "
                  "cuDNN <= 9.10; CUDA 13 builds have no kernels for SM < 7.5 at all")


def cudnn_version() -> int | None:
    """The cuDNN version torch is linked with (e.g. 91002), or None without cuDNN. Read from ``torch._C._cudnn``:
    ``torch.backends.cudnn.version()`` runs the SM check that raises on a P100/V100 host and initialises CUDA."""
    lib = getattr(torch._C, "_cudnn", None)
    if lib is None or not torch.backends.cudnn.is_available():
        return None
    return int(lib.getVersionInt())


def version_text(version: int | None) -> str:
    """91002 -> '9.10.2' (cuDNN 9 encodes major*10000 + minor*100 + patch)."""
    if version is None:
        return "none"
    major, rest = divmod(version, 10000) if version >= 10000 else divmod(version, 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def cudnn_problem(version: int | None, capabilities: list[tuple[int, int]]) -> str | None:
    """Why cuDNN cannot be used with these GPUs (torch would raise), or None. Pure: the rule of torch's
    ``torch.backends.cudnn._init``, which looks at the smallest capability of every visible GPU."""
    low = min(capabilities, default=CUDNN_MIN_CAPABILITY)  # no GPU: nothing to refuse
    if version is None or version < CUDNN_WITHOUT_OLD_GPUS or low >= CUDNN_MIN_CAPABILITY:
        return None
    return (f"cuDNN {version_text(version)} has no kernels for SM < 7.5 and a visible GPU is SM {low[0]}.{low[1]}; "
            f"the LSTM runs on PyTorch's own CUDA kernels (cuDNN off for this process)")


@functools.cache
def cudnn_state() -> dict[str, Any]:
    """cuDNN in this process: its version, whether lstmnb lets runs use it, and why not. Decided once: the GPUs and
    the linked cuDNN do not change while the process lives. Initialises CUDA when there is a GPU."""
    version = cudnn_version()
    gpus = range(torch.cuda.device_count()) if torch.cuda.is_available() else []
    reason = cudnn_problem(version, [tuple(torch.cuda.get_device_capability(i)) for i in gpus])
    return {"version": version, "usable": reason is None, "reason": reason}


def prepare_cuda() -> dict[str, Any]:
    """Call before a model touches a CUDA device. Where torch's cuDNN refuses the visible GPUs, cuDNN is turned off
    for the rest of the process, so the LSTM runs on PyTorch's native CUDA kernels instead of raising in
    ``Module.to('cuda')``. Process-wide on purpose (docs/gpu.md): torch's check looks at every visible GPU, and a
    run's model outlives the run (``RunResult.model``, a notebook's forecast cell), so a switch scoped to the run
    would let the next forward pass raise. Set only when the facts require it; never turned back on."""
    state = cudnn_state()
    if not state["usable"] and torch.backends.cudnn.enabled:
        torch.backends.cudnn.enabled = False
    return state


def bf16_native(capability: tuple[int, int]) -> bool:
    """Whether a GPU of this capability computes bfloat16 natively (Ampere, SM 8.0, and newer). Pure.
    ``torch.cuda.is_bf16_supported()`` also counts emulation, which is slow on SM < 8.0."""
    return tuple(capability) >= BF16_MIN_CAPABILITY


def lstm_math(device_type: str, cudnn_on: bool, cudnn_allow_tf32: bool, capability: tuple[int, int] | None,
              amp: torch.dtype | None = None) -> str:
    """The math the LSTM's matrix products use: 'float16' under fp16 autocast on a GPU; 'tf32' when cuDNN runs it
    with TF32 allowed on a GPU with TF32 tensor cores; else 'float32' (bf16 autocast included: ``models.Forecaster``
    keeps the recurrence in float32 there). Pure. PyTorch's native CUDA LSTM goes through cuBLAS, whose TF32 switch
    (``torch.backends.cuda.matmul.allow_tf32``) is off by default."""
    if device_type == "cuda" and amp == torch.float16:
        return "float16"
    tf32_cores = device_type == "cuda" and capability is not None and tuple(capability) >= TF32_MIN_CAPABILITY
    return "tf32" if tf32_cores and cudnn_on and cudnn_allow_tf32 else "float32"


def _read(getter: Callable[[], Any]) -> Any:
    """A switch's value, or None where torch refuses to read it (from 2.9, a legacy getter once the new
    ``fp32_precision`` API disagrees with it): a record must never end a run."""
    try:
        return getter()
    except RuntimeError:
        return None


def _fp32_node(op: str) -> Any:
    """torch >= 2.9's ``fp32_precision`` holder for ``op`` ('matmul': cuBLAS; 'rnn': cuDNN's RNN), or None."""
    node = torch.backends.cuda.matmul if op == "matmul" else getattr(torch.backends.cudnn, "rnn", None)
    return node if node is not None and hasattr(node, "fp32_precision") else None


def precision_flags() -> dict[str, Any]:
    """torch's float32 math switches as they are now (the record's ``backends.tf32``): the legacy ones (None where
    torch refuses the read) and, where it exists, the new API's precision of the matmul and the RNN."""
    flags: dict[str, Any] = {
        "cudnn_allow_tf32": _read(lambda: bool(torch.backends.cudnn.allow_tf32)),
        "matmul_allow_tf32": _read(lambda: bool(torch.backends.cuda.matmul.allow_tf32)),
        "float32_matmul_precision": _read(torch.get_float32_matmul_precision),
    }
    for key, node in (("matmul_fp32_precision", _fp32_node("matmul")), ("cudnn_rnn_fp32_precision", _fp32_node("rnn"))):
        if node is not None:
            flags[key] = node.fp32_precision
    return flags


def rnn_tf32(flags: dict[str, Any]) -> bool:
    """Whether cuDNN's RNN may use TF32 by ``precision_flags``: the new API's leaf where it exists (setting a
    parent, e.g. ``torch.backends.fp32_precision``, sets it too), else the legacy ``cudnn.allow_tf32``."""
    if "cudnn_rnn_fp32_precision" in flags:
        return flags["cudnn_rnn_fp32_precision"] == "tf32"
    return bool(flags["cudnn_allow_tf32"])


@contextmanager
def fp32_math(op: str, tf32: bool) -> Iterator[None]:
    """``op``'s float32 math ('matmul' or 'rnn') TF32 or IEEE inside the block, restored after: through the new API
    where it exists (a legacy read after the user set the new API raises), else the legacy switch
    (``cuda.matmul.allow_tf32`` is what ``set_float32_matmul_precision('high')`` sets)."""
    node = _fp32_node(op)
    holder, name, value = ((node, "fp32_precision", "tf32" if tf32 else "ieee") if node is not None else
                           (torch.backends.cuda.matmul if op == "matmul" else torch.backends.cudnn, "allow_tf32", tf32))
    before = getattr(holder, name)
    setattr(holder, name, value)
    try:
        yield
    finally:
        setattr(holder, name, before)


def backends_record(device: torch.device, amp: torch.dtype | None = None) -> dict[str, Any] | None:
    """The record's ``backends`` section for a CUDA run (autocast dtype ``amp``): cuDNN (version, on or off
    and why), the TF32 switches and the LSTM's math; None for other devices."""
    if device.type != "cuda":
        return None
    state, flags = cudnn_state(), precision_flags()
    index = device.index if device.index is not None else torch.cuda.current_device()
    on = state["usable"] and bool(torch.backends.cudnn.enabled)
    return {"cudnn": {"version": state["version"], "enabled": on,
                      "reason": state["reason"] or (None if on else "turned off by the caller")},
            "tf32": flags,
            "lstm_math": lstm_math("cuda", on, rnn_tf32(flags), torch.cuda.get_device_capability(index), amp)}


def arch_supported(capability: tuple[int, int], arch_list: list[str]) -> bool:
    """Whether a torch build whose ``torch.cuda.get_arch_list()`` is ``arch_list`` has kernels for a GPU of
    ``capability``. Pure. SASS for sm_XY runs on the same major version with minor >= Y; PTX for compute_XY is
    compiled at load time for any GPU >= X.Y (CUDA C Programming Guide, "Binary" and "PTX Compatibility")."""
    major, minor = capability
    for kind, _, digits in (arch.partition("_") for arch in arch_list):
        if not digits[:-1].isdigit() or not digits[-1].isdigit():
            continue
        a_major, a_minor = int(digits[:-1]), int(digits[-1])
        if (kind == "sm" and a_major == major and a_minor <= minor
                or kind == "compute" and (a_major, a_minor) <= (major, minor)):
            return True
    return False


def arch_problem(name: str, capability: tuple[int, int], arch_list: list[str], say: Spelling = PYTHON) -> str | None:
    """None when ``arch_supported``; otherwise the refusal, in one line naming the GPU, the build's architectures
    and the fix (the CPU as ``say`` spells the device). Pure: ``device.resolve_device`` asks it before a run starts,
    so a P100 or V100 under a CUDA >= 12.8 wheel stops there instead of at the first kernel ("no kernel image is
    available")."""
    if arch_supported(capability, arch_list):
        return None
    major, minor = capability
    return (f"{name} (SM {major}.{minor}, sm_{major}{minor}) has no kernels in this torch build (its architectures: "
            f"{' '.join(arch_list) or 'none'}); install {OLD_GPU_BUILDS}, or use {say('device', 'cpu')}")
