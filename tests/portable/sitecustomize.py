"""Imported at start-up by every Python process whose PYTHONPATH holds this folder (the test's CLI runs
and the notebook kernels they start): takes away what only Linux offers, as on macOS and Windows.

- ``os.sched_getaffinity``/``sched_setaffinity``, ``os.pread``/``pwrite``: gone (macOS has none of them;
  Windows none either).
- ``psutil.Process.cpu_affinity``: gone (psutil has none on macOS).
- ``/proc``: any read or write of it from lstmnb's own code fails as on a system without it (psutil's
  reads stay: psutil is the portable path, and on macOS and Windows it asks the system its own way).
- New processes (DataLoader workers among them) start by ``spawn``, the default on macOS and Windows: what a
  worker needs must pickle, and it imports lstmnb afresh.

``LSTMNB_PORTABLE_MARK`` names a file each process appends its pid to, so the test can tell that the
kernels ran under this module too.
"""

import builtins
import os
import sys

for _name in ("sched_getaffinity", "sched_setaffinity", "pread", "pwrite"):
    if hasattr(os, _name):
        delattr(os, _name)

_real_open = builtins.open


def _open(file, *args, **kwargs):
    if isinstance(file, (str, os.PathLike)) and os.fspath(file).startswith("/proc"):
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller == "lstmnb" or caller.startswith("lstmnb."):
            raise FileNotFoundError(2, "No such file or directory (no /proc on this system)", os.fspath(file))
    return _real_open(file, *args, **kwargs)


builtins.open = _open

import multiprocessing  # noqa: E402

multiprocessing.set_start_method("spawn", force=True)

try:
    import psutil

    if hasattr(psutil.Process, "cpu_affinity"):
        del psutil.Process.cpu_affinity
except ImportError:
    pass

if os.environ.get("LSTMNB_PORTABLE_MARK"):
    with _real_open(os.environ["LSTMNB_PORTABLE_MARK"], "a") as _fh:
        _fh.write(f"{os.getpid()}\n")
