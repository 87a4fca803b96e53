"""The CPU thread policy sees the present (``lstmnb.machine.device.cpu_threads``): a run started just after another
job ended uses every core, and a run beside a busy process still backs off.

Two scenarios, each repeated, on the study's real ERA5 (its two points, shipped with lstmnb) from 2020-01-01 to
``--end``, with one LSTM layer of 64, batch 64, Adam 1e-3 on the fast path (the one-layer setting the figures in
README were measured with; the threads, not the model, are what is compared):

- after a job: a job keeps every core busy for ``--job-s`` seconds (one spinning process per core) and
  ends; a CPU run starts at once with the policy's threads, and one with every core (``--threads``)
  follows, in alternating order over the repeats;
- beside a busy process: one spinning process keeps one core busy while a run with the policy's threads
  and one with every core alternate.

For each run it prints what the policy measured (other processes' busy cores over its 0.2 s window), the
threads it chose, the 1-minute load average at that moment and the threads the load-average rule lstmnb
used before would have chosen, and the run's median steady-epoch samples/s; then the medians per setting.
On a machine that other jobs keep busy the policy backs off in both scenarios, as it should: say how
loaded the machine was when quoting the figures.

    python benchmarks/thread_policy.py [--repeats 3] [--epochs 3] [--end 2020-02-29] [--job-s 20]
    python benchmarks/thread_policy.py --tiny      # CI: 10 days, one repeat of 2 epochs, a 1 s job
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import statistics
import time
from dataclasses import replace

import psutil
import torch

from _tiny import DONE  # benchmarks/_tiny.py, beside this script
from lstmnb.data import Request
from lstmnb.machine.device import busy_cores, cpu_cores
from lstmnb.training import TrainConfig, prepare_windows, train


def _spin(seconds: float) -> None:  # a busy process: what shares the cores on a loaded machine
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def _start(n: int, seconds: float) -> list:
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"  # Windows has no fork
    procs = [mp.get_context(method).Process(target=_spin, args=(seconds,), daemon=True) for _ in range(n)]
    for proc in procs:
        proc.start()
    return procs


def _stop(procs: list) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.join()


def load_average_rule(cores: int, default: int) -> int:
    """The threads lstmnb chose before: the 1-minute load average less this process's own share."""
    proc = psutil.Process()
    own = sum(proc.cpu_times()[:2]) / max(time.time() - proc.create_time(), 60.0)
    others = max(0.0, psutil.getloadavg()[0] - own)
    return max(1, min(default, math.floor(cores - others + 0.5)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="runs of each setting per scenario, alternated")
    ap.add_argument("--epochs", type=int, default=3, help="epochs per run (the first is warm-up)")
    ap.add_argument("--end", default="2020-02-29", help="last day of the series (the study's data, from 2020-01-01)")
    ap.add_argument("--job-s", type=float, default=20.0, help="seconds the job before each 'after a job' pair runs")
    ap.add_argument("--tiny", action="store_true", help="10 days, one repeat of 2 epochs, a 1 s job (CI: the script "
                                                        "runs and prints its tables)")
    args = ap.parse_args()
    if args.tiny:
        args.repeats, args.epochs, args.end, args.job_s = 1, 2, "2020-01-10", 1.0

    cores, default = cpu_cores(), torch.get_num_threads()
    cfg = TrainConfig(device="cpu", epochs=args.epochs, patience=None, batch_size=64, lr=1e-3, residual=False,
                      calendar=False, progress=False)
    request = Request(end=args.end)
    windows, _ = prepare_windows(request, cfg, progress=False)
    print(f"data: source {request.source} ({request.as_record()['kind']}), {request.start} .. {request.end}")
    print(f"torch {torch.__version__}: {default} intra-op threads by default, {cores} cores usable; "
          f"{windows.sizes()['train']} training samples, {args.epochs} epochs per run; load average at the start "
          f"{', '.join(f'{v:.2f}' for v in psutil.getloadavg())}\n")
    print(f"{'scenario':>14} {'setting':>9} {'busy':>5} {'threads':>7} {'load 1m':>7} {'old rule':>8} "
          f"{'samples/s':>10}  policy")
    rates: dict[tuple[str, str], list[float]] = {}
    for scenario in ("after a job", "beside a busy"):
        for rep in range(args.repeats):
            if scenario == "after a job" and args.job_s > 0:
                background = busy_cores()["others"]
                for proc in _start(cores, args.job_s):
                    proc.join()  # the job runs its course and ends; the runs start at once
                print(f"{'':>14} (before the {args.job_s:g} s job, other processes kept {background:.2f} cores busy)")
            busy = _start(1, 3600) if scenario == "beside a busy" else []
            try:
                for name in (("policy", "all cores") if rep % 2 == 0 else ("all cores", "policy")):
                    old = load_average_rule(cores, default)
                    load = psutil.getloadavg()[0]
                    rec = train(windows, replace(cfg, threads=None if name == "policy" else default)).record
                    th, sps = rec["threads"], rec["timing"]["samples_per_s"]
                    rates.setdefault((scenario, name), []).append(sps)
                    print(f"{scenario:>14} {name:>9} {th['busy_cores'] if th['busy_cores'] is not None else '-':>5} "
                          f"{th['used']:>7} {load:>7.2f} {old:>8} {sps:>10,.0f}  {th['policy']}")
            finally:
                _stop(busy)
    print()
    for scenario in ("after a job", "beside a busy"):
        pol, full = (statistics.median(rates[(scenario, n)]) for n in ("policy", "all cores"))
        print(f"{scenario}: median samples/s with the policy's threads {pol:,.0f}, with all {default} threads "
              f"{full:,.0f} (policy / all = {pol / full:.2f})")
    print(f"load average at the end: {', '.join(f'{v:.2f}' for v in psutil.getloadavg())}")
    print(DONE)


if __name__ == "__main__":
    main()
