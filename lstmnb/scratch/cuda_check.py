"""Can a GPU engine start here? Asked by doing the real thing once (a tiny kernel compiled and launched for numba-cuda,
a tiny operation on the GPU for torch-cuda) and catching whatever goes wrong, with no version guessing: a numba-cuda
whose compiler breaks under the installed NumPy (``AttributeError: module 'numpy' has no attribute 'row_stack'``), a
missing driver and an absent GPU all raise from the attempt. The answer, once per process: None or a reason (one line
naming the library versions). Nothing here imports numba or torch until a check is asked for."""

from __future__ import annotations

import functools
import importlib
import re
import warnings
from contextlib import contextmanager
from importlib import metadata

NO_GPU_HINT = ("without a GPU, Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1, set before Python starts) can run "
               "these kernels to check their numbers, as lstmnb's tests do, never to time them: the bench skips "
               "them there too")
MAX_MESSAGE = 300  # characters of an exception's message kept in a reason


def library_version(name: str) -> str:
    """Installed version of ``name`` ('not installed' when absent; importlib normalises numba-cuda to numba_cuda)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions_note(names: tuple[str, ...]) -> str:
    """'numpy 2.4.6, numba 0.61.0, numba-cuda not installed': what a reason should name."""
    return ", ".join(f"{n} {library_version(n)}" for n in names)


NUMBA_LIBS = ("numpy", "numba", "numba-cuda")
TORCH_LIBS = ("numpy", "torch")


def start_failure(engine: str, exc: BaseException, libs: tuple[str, ...] = NUMBA_LIBS) -> str:
    """One line: why ``engine`` could not start (exception type, message collapsed and shortened, library versions)."""
    message = re.sub(r"\s+", " ", str(exc)).strip().rstrip(":").rstrip()  # numba's driver errors end in ':'
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    return f"{engine} cannot start: {type(exc).__name__}{f': {message}' if message else ''} ({versions_note(libs)})"


@functools.cache
def performance_warnings() -> tuple[type[Warning], ...]:
    """NumbaPerformanceWarning of numba and numba-cuda's own if any (cached: ``quiet_launches`` runs every batch)."""
    found: dict[type[Warning], None] = {}  # in order, each once
    for module in ("numba.core.errors", "numba.cuda.core.errors"):
        try:
            found[importlib.import_module(module).NumbaPerformanceWarning] = None
        except (ImportError, AttributeError):
            continue
    return tuple(found)


@contextmanager
def quiet_launches():
    """Silence NumbaPerformanceWarning (low occupancy of a small grid, host arrays copied) inside the block: the
    engines choose their grids on purpose and a user cannot act on it. Other warnings pass through."""
    with warnings.catch_warnings():
        for cls in performance_warnings():
            warnings.simplefilter("ignore", cls)
        yield


def simulator_enabled() -> bool:
    """True when Numba's CUDA simulator is on (numba reads NUMBA_ENABLE_CUDASIM when it is imported)."""
    from numba import config

    return bool(config.ENABLE_CUDASIM)


@functools.cache
def numba_cuda_reason() -> str | None:
    """None when a numba.cuda kernel compiles and runs here (a GPU, or the simulator), else why not."""
    try:
        from .cuda_probe import launch_probe_kernel

        launch_probe_kernel(quiet_launches)
    except Exception as exc:  # anything: the point is that an optional engine never stops a run
        reason = start_failure("numba.cuda", exc)
        return f"{reason}; {NO_GPU_HINT}" if not gpu_visible_to_numba() else reason
    return None


def gpu_visible_to_numba() -> bool:
    """True when numba.cuda sees a CUDA GPU (or runs its simulator); False where it cannot even ask."""
    try:
        from numba import cuda

        return simulator_enabled() or bool(cuda.is_available())
    except Exception:
        return False


@functools.cache
def torch_cuda_reason() -> str | None:
    """None when PyTorch can run an operation on a CUDA GPU here, else why not."""
    try:
        import torch

        if not torch.cuda.is_available():
            return (f"torch-cuda cannot start: no CUDA GPU visible to PyTorch (torch.cuda.is_available() is False; "
                    f"{versions_note(TORCH_LIBS)}, built with CUDA {torch.version.cuda})")
        value = float((torch.arange(4.0, device="cuda") ** 2).sum().item())
        if value != 14.0:
            raise RuntimeError(f"a sum of squares on the GPU gave {value} instead of 14")
    except Exception as exc:
        return start_failure("torch-cuda", exc, TORCH_LIBS)
    return None
