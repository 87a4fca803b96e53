"""Epoch time under load: torch's default intra-op threads (one per core) against the load policy
(``lstmnb.device.thread_policy``), on the embedded sample at the published model size.

The two settings alternate (default, policy, default, ...) so that a change in the machine's load hits
both alike; each run's steady epochs (warm-up apart) give its median epoch time, and the medians over the
repeats are compared. The load average at each run's start is printed beside it. Run it while the machine
is busy (other jobs, or `python benchmarks/thread_policy.py --burn 2` to add two busy processes):

    python benchmarks/thread_policy.py [--repeats 5] [--epochs 4] [--end 2020-03-31] [--burn N]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
from dataclasses import replace

import torch

from lstmnb.data import Request
from lstmnb.device import cpu_cores
from lstmnb.training import TrainConfig, prepare_windows, train


def _spin(_: int) -> None:  # a busy process: what shares the cores on a loaded machine
    while True:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5, help="runs of each setting, alternated")
    ap.add_argument("--epochs", type=int, default=4, help="epochs per run (the first is warm-up)")
    ap.add_argument("--end", default="2020-03-31", help="last day of the sample series (from 2020-01-01)")
    ap.add_argument("--burn", type=int, default=0, help="start this many busy processes for the measurement")
    args = ap.parse_args()

    burners = [mp.Process(target=_spin, args=(i,), daemon=True) for i in range(args.burn)]
    for p in burners:
        p.start()
    try:
        cfg = TrainConfig(device="cpu", epochs=args.epochs, progress=False)
        windows, _ = prepare_windows(Request(end=args.end), cfg, progress=False)
        default = torch.get_num_threads()
        print(f"torch {torch.__version__}: {default} intra-op threads by default, {cpu_cores()} cores usable, "
              f"{args.burn} busy process(es) added; {windows.sizes()['train']} training samples, "
              f"{args.epochs} epochs per run\n")
        print(f"{'run':>4} {'setting':>8} {'load':>6} {'threads':>7} {'median epoch s':>15}  policy")
        epoch_s: dict[str, list[float]] = {"default": [], "policy": []}
        for rep in range(args.repeats):
            for name in (("default", "policy") if rep % 2 == 0 else ("policy", "default")):
                run_cfg = replace(cfg, threads=default if name == "default" else None)
                load = os.getloadavg()[0]
                rec = train(windows, run_cfg).record
                s = rec["timing"]["epoch_s_median"]
                epoch_s[name].append(s)
                print(f"{rep + 1:>4} {name:>8} {load:>6.2f} {rec['threads']['used']:>7} {s:>15.3f}  "
                      f"{rec['threads']['policy']}")
        d, p = statistics.median(epoch_s["default"]), statistics.median(epoch_s["policy"])
        print(f"\nmedian epoch: default threads {d:.3f} s, policy {p:.3f} s; the policy is {d / p:.2f}x "
              f"{'faster' if p < d else 'slower'}")
    finally:
        for proc in burners:
            proc.terminate()


if __name__ == "__main__":
    main()
