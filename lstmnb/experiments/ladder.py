"""The ladder experiment: every rung of ``rungs`` on the CPU and, where there is one, the GPU of this
machine, each run a fresh ``lstmnb train`` process (a process's C heap cannot be put back once a run kept it,
and the study's DataLoader workers start from a fresh parent too), alternated over rounds; every run's record
is kept, its rung in ``ladder``. A rung that cannot run here (no GPU) is recorded as skipped with the reason."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..machine.device import cpu_threads, device_problem
from ..errors import ConfigError
from ..records import Recorder, read_records
from ..rules import known
from ..rungs import BOTH, Rung, rung_options, rungs_on
from ..training import preset_config, skipped_record


def rung_command(rung: Rung, device: str, epochs: int, threads: int) -> list[str]:
    """The ``lstmnb train`` options of one rung: what a reader types to run it alone."""
    preset, overrides = rung_options(rung)
    args = ["--preset", preset, "--device", device, "--epochs", str(epochs), "--threads", str(threads),
            "--experiment", "ladder", "--no-progress"]
    for name, value in overrides.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, tuple):
            args += [flag, ",".join(map(str, value))]
        else:
            args += [flag, "none" if value is None else str(value)]
    return args


def _run_rung(rung: Rung, device: str, epochs: int, threads: int, folder: Path, n: int) -> dict[str, Any]:
    """One rung in a fresh process; its record (a failed run: a ``failed`` record with its last line)."""
    out = folder / f"rung{rung.rung}-{device}-{n}.jsonl"
    cmd = [sys.executable, "-m", "lstmnb", "train", *rung_command(rung, device, epochs, threads), "--results", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    got = read_records(out) if out.exists() else []
    if done.returncode == 0 and got:
        return {k: v for k, v in got[-1].items() if k != "_file"}  # the temporary file is gone: no record's source
    lines = [line for line in (done.stderr or done.stdout or "").splitlines() if line.strip()]
    why = lines[-1] if lines else f"exit status {done.returncode}"
    preset, overrides = rung_options(rung)
    cfg = preset_config(preset, epochs=epochs, device=device, threads=threads, experiment="ladder", **overrides)
    return skipped_record(cfg, f"lstmnb train {' '.join(rung_command(rung, device, epochs, threads))}: {why}",
                          status="failed")


def ladder_experiment(epochs: int = 5, rounds: int = 1, devices: Iterable[str] = BOTH, *, results,
                      threads: int | None = None,
                      on_point: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Every rung on each of ``devices`` ('cpu', 'cuda'), ``rounds`` times alternated (forward, then backward), each on
    ``threads`` CPU threads (default: this machine's choice now, the same for every rung); returns the records."""
    devices = known(devices, BOTH, f"devices={devices!r}")
    for name, value in (("epochs", epochs), ("rounds", rounds)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name}={value!r} must be a whole number >= 1")
    # one count for every rung (the same threads, so that a rung changes one thing), chosen once as any CPU run
    # chooses its own: torch's default, fewer where other processes keep cores busy now (docs/architecture.md)
    threads = threads or cpu_threads()["used"]
    recorder = Recorder(results, on_point)
    here = {d: device_problem(d, hint="the ladder's GPU half needs a CUDA GPU") for d in devices}
    runs = [(rung, d) for d in devices if here[d] is None for rung in rungs_on(d)]
    with tempfile.TemporaryDirectory(prefix="lstmnb-ladder-") as tmp:
        for r in range(rounds):
            for n, (rung, device) in enumerate(runs if r % 2 == 0 else runs[::-1]):
                recorder.add(_run_rung(rung, device, epochs, threads, Path(tmp), r * len(runs) + n))
    for device, why in here.items():
        for rung in rungs_on(device) if why is not None else ():
            preset, overrides = rung_options(rung)
            cfg = preset_config(preset, epochs=epochs, device=device, threads=threads, experiment="ladder", **overrides)
            recorder.add(skipped_record(cfg, why))
    return recorder.records
