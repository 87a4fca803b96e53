"""Training speed on the embedded sample's default request: time to target, samples/s, MFU.

Prints the `lstmnb bench speed` table (published setting vs the fast path at the same batch vs the
recommended setting, alternated over repeats, medians), then a CPU thread-count check for the
recommended setting. Run from a fresh clone after `pip install -e .`:

    python benchmarks/train_speed.py [--repeats 3] [--max-epochs 15]

Targets this project holds itself to on a 2-core CPU: fast path >= 1.5x the published samples/s;
recommended >= 5x less time to the target RMSE with test RMSE no worse; MFU of the recommended
setting >= 30% of the measured matmul rate.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace

import torch

from lstmnb.data import Request
from lstmnb.experiments.speed import contender_settings, format_report, matmul_rate, speed_benchmark
from lstmnb.training import TrainConfig, prepare_windows, thread_choice, train


def thread_check(windows, threads_list, epochs=3):
    """Samples/s of the recommended setting for each intra-op thread count (median of steady epochs)."""
    rows = []
    cfg = replace(TrainConfig(), **contender_settings("recommended", "cpu"), epochs=epochs, progress=False,
                  device="cpu")
    for n in threads_list:  # an explicit thread count: the load policy does not change it
        cfg_n = replace(cfg, threads=n)
        rec = train(windows, cfg_n).record
        with thread_choice(cfg_n, torch.device("cpu")):  # the GEMM rate on the same n threads
            rate = matmul_rate("cpu")
        rows.append((n, rec["timing"]["samples_per_s"], rate))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-epochs", type=int, default=15)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--no-threads", action="store_true", help="skip the CPU thread-count check")
    args = ap.parse_args()

    print(f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads, {os.cpu_count()} cores\n")
    rep = speed_benchmark(Request(), device=args.device, repeats=args.repeats, max_epochs=args.max_epochs)
    print(format_report(rep))
    t = rep.table
    if {"published", "fast", "recommended"} <= set(t.index):
        print("\ntargets:")
        print(f"  fast vs published samples/s: {t.loc['fast', 'samples_per_s_vs_published']:.2f}x (target >= 1.5x)")
        print(f"  recommended vs published time to target: {t.loc['recommended', 'time_to_target_speedup']:.2f}x "
              f"(target >= 5x), test RMSE {t.loc['recommended', 'test_rmse_k']:.3f} K vs "
              f"{t.loc['published', 'test_rmse_k']:.3f} K")
        print(f"  recommended MFU: {t.loc['recommended', 'mfu']:.0%} (target >= 30%)")
    if not args.no_threads and rep.device == "cpu" and (os.cpu_count() or 1) > 1:
        windows, _ = prepare_windows(Request(), TrainConfig(), progress=False)
        counts = sorted({1, max(1, (os.cpu_count() or 2) // 2), os.cpu_count() or 1})
        print("\nintra-op threads for the recommended setting (samples/s, matmul GFLOP/s):")
        for n, sps, rate in thread_check(windows, counts):
            print(f"  {n} thread(s): {sps:,.0f} samples/s, matmul {rate / 1e9:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
