"""`lstmnb doctor`: what this environment can do for lstmnb, and why not."""

from __future__ import annotations

import textwrap

from ..paths import check_cache


def add_doctor(sub, full: bool) -> None:
    p = sub.add_parser(
        "doctor", help="what this environment can do: torch, CUDA, GPUs, NCCL, numba-cuda, kernels, profiles",
        description="Check the torch build, CUDA and cuDNN, the GPUs (memory, capability), NCCL and gloo, numba "
                    "and numba-cuda, gcsfs, the notebook runner and the Jupyter kernels the profiles name, and "
                    "print one table. Exit status 1 when something the named profiles (default: cpu) or the "
                    "notebook runner need is missing.")
    p.add_argument("--profile", dest="profiles", action="append", metavar="NAME",
                   help="a profile whose needs must be met (its kernel; its GPU for a GPU profile); repeatable")
    p.add_argument("--deep", action="store_true",
                   help="also run short real jobs on every device (under 2 minutes): CPU training and DDP over "
                        "gloo; per GPU eager and CUDA-graph steps, bf16, the memory cap; NCCL; Numba CUDA engines. "
                        "Exit status 1 when a job the named profiles (default: cpu) need fails")
    p.set_defaults(func=_run_doctor, check=_check_doctor)


def _check_doctor(args) -> None:
    """The named profiles exist, and the cache folder (where every command keeps the sample and the
    extracted series) can be written: a cache on a file is not 'ready'."""
    from ..profiles import load_profile

    for name in args.profiles or ():
        load_profile(name)
    check_cache()


def _print_row(head: str, detail: str, width: int) -> None:
    """``head`` then ``detail`` wrapped at ``width``, its further lines indented under the first."""
    indent = " " * len(head)
    print(textwrap.fill(detail, width + len(head), initial_indent=head, subsequent_indent=indent) or head, flush=True)


def _run_doctor(args) -> int:
    from ..doctor import diagnose

    rows, ready = diagnose(args.profiles)
    width = max(len(r.name) for r in rows) + 2
    print(f"{'check':<{width}}{'status':<9}detail")
    for r in rows:
        _print_row(f"{r.name:<{width}}{r.status:<9}", r.detail, 90)
    print("\nok: usable; absent: optional and not here (e.g. a GPU on a CPU machine); missing: needed and not here")
    print("ready" if ready else "not ready: see the 'missing' lines")
    if args.deep:
        ready = _run_deep(args.profiles or ["cpu"]) and ready
    return 0 if ready else 1


def _run_deep(profiles: list[str]) -> bool:
    """`doctor --deep`: the jobs' table as they finish, then whether the profiles' needs passed."""
    from ..profiles import load_profile
    from ..selfcheck import deep_check, deep_ready

    print(f"\ndeep check (real jobs, about 2 minutes plus a few seconds per further GPU)\n{'device':<12}{'job':<18}{'status':<9}{'seconds':>8}  detail")

    def show(job) -> None:
        secs = f"{job.seconds:8.1f}" if job.seconds is not None else f"{'-':>8}"
        _print_row(f"{job.device:<12}{job.name:<18}{job.status:<9}{secs}  ", job.detail, 80)

    jobs = deep_check(on_job=show)
    ok = True
    for name in profiles:
        ready, blocking = deep_ready(jobs, str(load_profile(name).parameters.get("device", "cpu")))
        ok = ok and ready
        print(f"profile {name}: " + ("its jobs passed" if ready else "needs " + ", ".join(
            f"{j.device} {j.name} ({j.status})" for j in blocking)))
    return ok
