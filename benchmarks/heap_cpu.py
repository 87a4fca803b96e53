"""A CPU run's C heap kept for its next step (`lstmnb.machine.memory.keep_freed_heap`) against glibc's own thresholds.

glibc's malloc gives freed memory back to the system once more than its trim threshold lies free at the
heap's top, and maps blocks from its mmap threshold up afresh. For the published setting's two-layer LSTM its
adaptive thresholds settle where every step gives back and faults in again megabytes of the LSTM's buffers;
lstmnb's CPU runs set the thresholds once per process (mmap 32 MiB, trim 64 MiB). The setting is process-wide
and cannot be undone, so each run here is a fresh process: `kept` (`heap=kept`, lstmnb's default) and `glibc`
(`heap=system`, as the study's runs and `--preset published`), alternating, on the study's real ERA5 (shipped with lstmnb), on `--threads` threads. For each it
prints every run's training seconds per epoch, and the training seconds, minor page faults and CPU seconds of
its steady epochs (the first, warm-up epoch left out: it pays the process's start-up in both variants), the
medians, and whether the training losses are the same bit for bit (they must be: only where memory comes from
differs).

    python benchmarks/heap_cpu.py [--repeats 5] [--epochs 3] [--preset published] [--threads 1]
    python benchmarks/heap_cpu.py --tiny      # CI: 30 days, one repeat of 2 epochs each

Only glibc systems (Linux) set anything; elsewhere both variants are the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from _tiny import DONE  # benchmarks/_tiny.py, beside this script

VARIANTS = ("kept", "glibc")


def child(variant: str, preset: str, epochs: int, threads: int, tiny: bool) -> None:
    """One run in this process; prints its figures as one JSON line."""
    import resource

    from lstmnb.data import Request
    from lstmnb.training import preset_config, prepare_windows, train

    extra = {"split_dates": ("2020-01-21", "2020-01-21")} if tiny and preset == "published" else {}
    cfg = preset_config(preset, epochs=epochs, patience=None, device="cpu", threads=threads, progress=False,
                        heap="kept" if variant == "kept" else "system", **extra)
    windows, _ = prepare_windows(Request(end="2020-01-30T23") if tiny else Request(), cfg, progress=False)
    ends = []  # this process's page faults and CPU time at each epoch's end: the steady epochs' share of them
    record = train(windows, cfg, on_epoch_end=lambda e: ends.append(resource.getrusage(resource.RUSAGE_SELF))).record
    epochs = record["epochs"]
    warm = sum(bool(e["warmup"]) for e in epochs)
    r0, r1 = ends[warm - 1], ends[-1]  # from the last warm-up epoch's end to the last epoch's
    print(json.dumps({"train_s": [e["train_s"] for e in epochs],
                      "steady_s": sum(e["train_s"] for e in epochs[warm:]),
                      "loss": [e["train_loss"] for e in epochs],
                      "faults": r1.ru_minflt - r0.ru_minflt,
                      "cpu_s": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
                      "heap": record["memory"].get("heap")}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5, help="fresh processes per variant, alternating (default 5)")
    ap.add_argument("--epochs", type=int, default=3, help="epochs per run, at least 2: the first is the warm-up")
    ap.add_argument("--preset", default="published", choices=("published", "recommended"))
    ap.add_argument("--threads", type=int, default=1, help="torch threads of every run (default 1)")
    ap.add_argument("--tiny", action="store_true", help="30 days, one repeat of 2 epochs (CI: the script runs)")
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    repeats, epochs = (1, 2) if args.tiny else (args.repeats, args.epochs)
    if epochs < 2:
        ap.error(f"--epochs {epochs}: at least 2 (the first is the warm-up, left out of the figures)")
    if args.child:
        child(args.child, args.preset, epochs, args.threads, args.tiny)
        return
    print(f"{args.preset} setting, {epochs} epoch(s), {args.threads} thread(s), {os.cpu_count()} cores; {repeats} fresh "
          f"process(es) per variant, alternating{' (tiny)' if args.tiny else ''}\n", flush=True)
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for r in range(repeats):
        for variant in (VARIANTS if r % 2 == 0 else VARIANTS[::-1]):
            cmd = [sys.executable, __file__, "--child", variant, "--preset", args.preset, "--epochs", str(epochs),
                   "--threads", str(args.threads), *(["--tiny"] if args.tiny else [])]
            got = subprocess.run(cmd, capture_output=True, text=True, check=True)
            run = json.loads(got.stdout.strip().splitlines()[-1])
            runs[variant].append(run)
            print(f"  {variant:6} epochs {', '.join(f'{s:.2f}' for s in run['train_s'])} s; steady epochs "
                  f"{run['steady_s']:.2f} s, {run['faults']:,} page faults, {run['cpu_s']:.2f} CPU s", flush=True)
    print(f"\nsteady epochs (the warm-up epoch left out):\n{'':8} {'training s (median)':>20} {'page faults':>12} "
          f"{'CPU s':>7}")
    med = {}
    for variant, rs in runs.items():
        med[variant] = [statistics.median(x["steady_s"] for x in rs), statistics.median(x["faults"] for x in rs),
                        statistics.median(x["cpu_s"] for x in rs)]
        print(f"{variant:8} {med[variant][0]:20.2f} {med[variant][1]:12,.0f} {med[variant][2]:7.2f}")
    same = len({json.dumps(x["loss"]) for rs in runs.values() for x in rs}) == 1
    print(f"\nkept / glibc: {med['kept'][0] / med['glibc'][0]:.2f}x the training time, "
          f"{med['kept'][2] / med['glibc'][2]:.2f}x the CPU time; training losses the same bit for bit: "
          f"{'yes' if same else 'NO'}; heap: {runs['kept'][0]['heap']}")
    print(DONE)


if __name__ == "__main__":
    main()
