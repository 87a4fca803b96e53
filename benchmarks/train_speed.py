"""Training speed on the study's real ERA5 (its two points, 2020-01-01 .. 2021-06-30, shipped with lstmnb): time
to target, samples/s, MFU.

Prints the `lstmnb bench speed` table (published setting vs the fast path at the same batch vs the
recommended setting, alternated over repeats, medians), then a CPU thread-count check for the
recommended setting. The time to target needs a validation part, which the study's own split has not: every
contender trains on the benchmark's split (70/15/15 of the range) and the study's problem (window 24 h, two
layers of 64). Run from a fresh clone after `pip install -e ".[bench]"`:

    python benchmarks/train_speed.py [--repeats 3] [--max-epochs 15]
    python benchmarks/train_speed.py --tiny      # CI: 30 days, one repeat of 2 epochs; checks the script runs

Targets this project holds itself to on a 2-core CPU: fast path >= 1.5x the published samples/s;
recommended >= 5x less time to the target RMSE with test RMSE no worse; MFU of the recommended
setting >= 30% of the measured matmul rate.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace

import pandas as pd
import torch

from _tiny import DONE  # benchmarks/_tiny.py, beside this script
from lstmnb.data import Request
from lstmnb.experiments.speed import (STUDY_PROBLEM, contender_settings, format_report, matmul_rate,
                                      speed_benchmark)
from lstmnb.training import TrainConfig, prepare_windows, thread_choice, train



def recommended_config(epochs: int) -> TrainConfig:
    """The recommended contender as the speed table trains it: the study's problem, the CPU profile's setting."""
    return replace(TrainConfig(**STUDY_PROBLEM), **contender_settings("recommended", "cpu"), epochs=epochs,
                   patience=None, progress=False, device="cpu")


def thread_check(request: Request, threads_list, epochs: int = 3, matmul_size: int = 2048):
    """Samples/s of the recommended setting for each intra-op thread count (median of steady epochs), on
    windows built for that setting (its inputs: no calendar or cycles)."""
    cfg = recommended_config(epochs)
    windows, _ = prepare_windows(request, cfg, progress=False)
    rows = []
    for n in threads_list:  # an explicit thread count: the load policy does not change it
        cfg_n = replace(cfg, threads=n)
        rec = train(windows, cfg_n).record
        with thread_choice(cfg_n, torch.device("cpu")):  # the GEMM rate on the same n threads
            rate = matmul_rate("cpu", size=matmul_size)
        rows.append((n, rec["timing"]["samples_per_s"], rate))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-epochs", type=int, default=15)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--no-threads", action="store_true", help="skip the CPU thread-count check")
    ap.add_argument("--tiny", action="store_true",
                    help="30 days, one repeat of at most 2 epochs (CI: the script runs and prints its tables)")
    args = ap.parse_args()
    request = Request(end="2020-01-30T23") if args.tiny else Request()
    repeats, max_epochs = (1, min(2, args.max_epochs)) if args.tiny else (args.repeats, args.max_epochs)

    kind = request.as_record()["kind"]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads, {os.cpu_count()} cores; data: "
          f"{request.source} ({kind}), {len(request.points)} points, {request.start} .. {request.end}"
          f"{' (tiny)' if args.tiny else ''}\n")
    rep = speed_benchmark(request, device=args.device, repeats=repeats, max_epochs=max_epochs,
                          progress=not args.tiny)
    print(format_report(rep))
    t = rep.table
    if {"published", "fast", "recommended"} <= set(t.index):
        print("\ntargets:")
        def said(v, fmt: str) -> str:  # a side not measured (target not reached, no steady epoch): said, not 'nan'
            return "not measured (see the notes above)" if pd.isna(v) else fmt.format(v)

        print(f"  fast vs published samples/s: {said(t.loc['fast', 'samples_per_s_vs_published'], '{:.2f}x')} (target >= 1.5x)")
        print(f"  recommended vs published time to target: {said(t.loc['recommended', 'time_to_target_speedup'], '{:.2f}x')} "
              f"(target >= 5x), test RMSE {t.loc['recommended', 'test_rmse_k']:.3f} K vs "
              f"{t.loc['published', 'test_rmse_k']:.3f} K")
        print(f"  recommended MFU: {said(t.loc['recommended', 'mfu'], '{:.0%}')} (target >= 30%)")
    if not args.no_threads and rep.device == "cpu" and (os.cpu_count() or 1) > 1:
        counts = sorted({1, max(1, (os.cpu_count() or 2) // 2), os.cpu_count() or 1})
        rows = thread_check(request, counts, epochs=2 if args.tiny else 3, matmul_size=512 if args.tiny else 2048)
        print("\nintra-op threads for the recommended setting (samples/s, matmul GFLOP/s):")
        for n, sps, rate in rows:
            print(f"  {n} thread(s): {sps:,.0f} samples/s, matmul {rate / 1e9:.1f} GFLOP/s")
    print(DONE)


if __name__ == "__main__":
    main()
