"""What this environment can do, and why not: the torch build, CUDA and cuDNN, the GPUs, the distributed backends,
numba and numba-cuda, the cloud reader, the notebook runner and the Jupyter kernels the profiles name. `lstmnb doctor`
prints it; the notebook runner and the GPU notebooks use the same checks (``gpu_problem``, ``kernel_problem``).
"""

from __future__ import annotations

import importlib
import os
import platform
import subprocess
import sys
from dataclasses import dataclass

OK, MISSING, ABSENT = "ok", "missing", "absent"  # absent: optional here (a GPU on a CPU machine)


@dataclass(frozen=True)
class Check:
    """One line of the report: what was checked, its status and the detail (a version or the reason)."""

    name: str
    status: str
    detail: str


def gpu_problem(device: str = "cuda", min_gpus: int = 1) -> str | None:
    """None when ``min_gpus`` CUDA GPUs are usable for ``device``; otherwise the reason, in one line."""
    import torch

    from .errors import LstmnbError
    from .machine.device import no_cuda_reason, resolve_device

    if not str(device).startswith("cuda"):
        return f"device={device!r} is not a CUDA device; this notebook measures GPUs (set device='cuda')"
    if not torch.cuda.is_available():
        return no_cuda_reason()
    if (count := torch.cuda.device_count()) < min_gpus:
        return f"{count} CUDA GPU(s) visible; this experiment needs at least {min_gpus}"
    try:  # the run's own refusal: a GPU whose architecture this torch build lacks (cuda.arch_problem)
        resolve_device(device)
    except LstmnbError as exc:
        return str(exc)
    return None


def installed_kernels() -> dict[str, str]:
    """Jupyter kernels installed here: name -> display name."""
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().get_all_specs()
    return {name: spec.get("spec", {}).get("display_name", name) for name, spec in specs.items()}


def kernel_problem(name: str, kernels: dict[str, str] | None = None) -> str | None:
    """None when Jupyter kernel ``name`` is installed and its Python can import lstmnb; otherwise what is wrong and
    how to fix it (a user-level kernel of another Python shadows this environment's own)."""
    kernels = installed_kernels() if kernels is None else kernels
    install = f"`{sys.executable} -m ipykernel install --user --name {name}`"
    if name not in kernels:
        return (f"Jupyter kernel {name!r} is not installed (installed: {', '.join(sorted(kernels)) or 'none'}); "
                f"install one for this Python with {install}, or pass --kernel with an installed name")
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        python = KernelSpecManager().get_kernel_spec(name).argv[0]
    except (NoSuchKernel, IndexError):
        return None
    # jupyter_client runs a bare "python" as the running interpreter; any other path is another Python
    if python in ("python", "python3", sys.executable) or not os.path.isabs(python):
        return None
    try:
        probe = subprocess.run([python, "-c", "import lstmnb"], capture_output=True, text=True, timeout=120)
        why = None if probe.returncode == 0 else (probe.stderr.strip().splitlines() or ["failed"])[-1]
    except (OSError, subprocess.TimeoutExpired) as exc:
        why = f"{type(exc).__name__}: {exc}"
    return None if why is None else (
        f"Jupyter kernel {name!r} runs {python}, which cannot import lstmnb ({why}); register this Python's kernel "
        f"with {install}, or pass --kernel with another name")


def torch_checks() -> list[Check]:
    import torch
    import torch.distributed as dist

    rows = [Check("python", OK, platform.python_version()),
            Check("torch", OK, f"{torch.__version__} ({'CUDA ' + torch.version.cuda if torch.version.cuda else 'CPU'} build)")]
    if torch.cuda.is_available():
        from .machine.cuda import arch_supported

        arch = torch.cuda.get_arch_list()
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            fits = arch_supported((p.major, p.minor), arch)
            rows.append(Check(f"GPU cuda:{i}", OK if fits else MISSING,
                              f"{p.name}, {p.total_memory / 2**30:.1f} GiB, capability {p.major}.{p.minor}"
                              + ("" if fits else f"; this torch build has no kernels for it (its arch list: "
                                                 f"{' '.join(arch)})")))
        rows.append(cudnn_check())
        nccl = dist.is_available() and dist.is_nccl_available()
        version = ".".join(map(str, torch.cuda.nccl.version())) if nccl else "not built into torch"
        rows.append(Check("NCCL", OK if nccl else MISSING, version))
    else:
        from .machine.device import no_cuda_reason

        rows.append(Check("GPU", ABSENT, no_cuda_reason()))
    gloo = dist.is_available() and dist.is_gloo_available()
    rows.append(Check("gloo", OK if gloo else MISSING, "DDP on CPU" if gloo else "not built into torch"))
    return rows


def cudnn_check() -> Check:
    """cuDNN's version, read without torch's GPU check, and whether runs here use it; on a P100/V100 host
    with a cuDNN that refuses them, the fallback and the torch builds that keep cuDNN for those GPUs."""
    from .machine.cuda import OLD_GPU_BUILDS, cudnn_state, version_text

    state = cudnn_state()
    if state["version"] is None:
        return Check("cuDNN", MISSING, "not available to torch")
    if state["usable"]:
        return Check("cuDNN", OK, version_text(state["version"]))
    return Check("cuDNN", ABSENT, f"{state['reason']}; the records say so. To keep cuDNN on these GPUs use "
                                  f"{OLD_GPU_BUILDS}")


def numba_checks() -> list[Check]:
    """numba, and numba-cuda by compiling and launching a tiny kernel (the from-scratch bench's probe)."""
    from .scratch.cuda_check import library_version, numba_cuda_reason

    version = library_version("numba")
    if version == "not installed":
        return [Check("numba", MISSING, version)]
    reason, usable = numba_cuda_reason(), f"usable ({library_version('numba-cuda')})"
    return [Check("numba", OK, version), Check("numba-cuda", OK if reason is None else ABSENT, reason or usable)]


def package_checks() -> list[Check]:
    rows = []
    for module, what, status_if_missing in (("gcsfs", "reading ERA5 in the cloud (--source arco-v3)", ABSENT),
                                            ("papermill", "running the notebook series", MISSING),
                                            ("sphinx", 'the rendered report (the site: pip install "lstmnb[site]")',
                                             ABSENT)):
        try:
            detail = str(getattr(importlib.import_module(module), "__version__", "installed"))
        except Exception as exc:  # noqa: BLE001 - a broken install reports here as well as a missing one
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip()
            rows.append(Check(module, status_if_missing, f"{why}; needed for {what}"))
            continue
        if module == "gcsfs":
            from .data.stores import gcsfs_path

            detail += f", {gcsfs_path()}"
        rows.append(Check(module, OK, detail))
    return rows


def profile_checks(names: list[str] | None = None, strict: bool = False) -> list[Check]:
    """One line per profile: ready, or what it needs that is missing here (its kernel, its GPU). A
    missing GPU is ``absent`` (the runner refuses that profile here; ``-p device auto`` runs it on what
    there is, its GPU runs recorded as skipped) unless ``strict``: a profile asked for by name needs its GPU."""
    from .profiles import load_profile, profile_names

    kernels = installed_kernels()
    rows = []
    for name in names or profile_names():
        prof = load_profile(name)
        kernel = kernel_problem(prof.kernel, kernels)  # not installed, or its Python cannot import lstmnb
        device = str(prof.parameters.get("device", "cpu"))
        gpu = gpu_problem(device) if device.startswith("cuda") else None
        refused = (f"`lstmnb notebooks run --profile {name}` refuses to start here ({gpu}); `-p device auto` runs it "
                   "on this machine, its GPU runs recorded as skipped") if gpu else None
        problems = [p for p in (kernel, refused) if p]
        status = MISSING if kernel or (gpu and strict) else ABSENT if gpu else OK
        rows.append(Check(f"profile {name}", status, "; ".join(problems) or f"ready (kernel {prof.kernel})"))
    return rows


def diagnose(profiles: list[str] | None = None) -> tuple[list[Check], bool]:
    """Every check, in the order `lstmnb doctor` prints them, and whether all that is needed is here:
    the notebook runner's packages and the named profiles (default: the ``cpu`` profile)."""
    base = torch_checks() + numba_checks() + package_checks()
    named = profile_checks(profiles, strict=True) if profiles else profile_checks(["cpu"])
    others = [] if profiles else [c for c in profile_checks() if c.name != "profile cpu"]
    return base + named + others, not any(c.status == MISSING for c in base + named)
