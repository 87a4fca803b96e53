"""Print the from-scratch LSTM versions table on this machine, and where numba-cpu's gain comes from.

    python benchmarks/scratch_versions.py                 # airline, 30 epochs, 5 alternated repeats
    python benchmarks/scratch_versions.py --data era5     # the study's real ERA5 at 40N 280E (shipped with lstmnb)
    python benchmarks/scratch_versions.py --results results  # also append the run records
    # the GPU setting of issue 13 (target: numba-cuda-block >= 5x numpy)
    python benchmarks/scratch_versions.py --data era5 --hours 4368 --hidden 64 --batch-size 256 --epochs 5 \
        --dtype float32 --versions numpy,numba-cpu,numba-cuda,numba-cuda-block,torch-cuda
    python benchmarks/scratch_versions.py --tiny          # CI: airline, hidden 8, 1 epoch, 1 repeat, a few calls

Part 1 is the versions table (`lstmnb scratch bench`): N epochs per version from the same weights, the
versions alternated over repeats, median run time, compile time apart. Part 2 times one batch gradient
(forward + BPTT) of numpy and of numba-cpu with 1 and with all threads, and torch with 1 and all threads,
alternated, medians of many calls: it separates what compilation buys from what the threads buy. The
load average is printed before and after: on a shared machine other processes take cores away, and
multithreaded code suffers most (threads wait for each other at every barrier). Part 3, where a GPU
version can start, times one optimiser step of each GPU version (synchronised), alternated, medians: what a
thread per sample, a thread per hidden unit and cuDNN each cost per batch; a version that cannot start
prints its reason instead.
"""

from __future__ import annotations

import os

# numba's 'omp' threading layer and torch each bring an OpenMP runtime whose idle threads busy-wait;
# in one process on 2 cores they starve each other and OpenBLAS (measured here: numpy's batch gradient
# 10x slower, torch on 2 threads 200x slower). Passive waiting must be chosen before they load.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import psutil  # noqa: E402
from _tiny import DONE  # noqa: E402  (benchmarks/_tiny.py, beside this script)


def per_batch_times(data, config, rounds: int, calls: int) -> dict[str, float]:
    """Median milliseconds per batch gradient for numpy, numba-cpu and torch at 1 and all threads."""
    import numba
    import torch

    from lstmnb.scratch import LSTMShape, init_params, loss_and_grad_numpy
    from lstmnb.scratch.numba_cpu import NumbaCPUGrad
    from lstmnb.scratch.torch_lstm import torch_model

    X = np.ascontiguousarray(data.X["train"], dtype=np.float64)
    y = np.ascontiguousarray(data.y["train"], dtype=np.float64)
    shape = LSTMShape(X.shape[2], config.hidden, y.shape[1])
    theta = init_params(shape, config.seed)
    idx = np.random.default_rng(0).permutation(len(X))[: config.batch_size]
    all_threads = numba.config.NUMBA_NUM_THREADS
    torch_threads = torch.get_num_threads()

    def numba_fn(n):
        numba.set_num_threads(n)
        return NumbaCPUGrad(X, y, shape, config.batch_size, np.float64)

    grad1, grad_all = numba_fn(1), numba_fn(all_threads)
    model = torch_model(theta, shape)
    Xt, yt = torch.from_numpy(X.copy()), torch.from_numpy(y.copy())
    it = torch.from_numpy(idx)

    def torch_step():
        model.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(Xt[it]), yt[it]).backward()

    def run_numba(g, n):
        numba.set_num_threads(n)
        g(theta, idx)

    def run_torch(n):
        torch.set_num_threads(n)
        torch_step()

    contenders = {
        "numpy": lambda: loss_and_grad_numpy(theta, X[idx], y[idx], shape),
        "numba-cpu, 1 thread": lambda: run_numba(grad1, 1),
        f"numba-cpu, {all_threads} threads": lambda: run_numba(grad_all, all_threads),
        "torch, 1 thread": lambda: run_torch(1),
        f"torch, {torch_threads} threads": lambda: run_torch(torch_threads),
    }
    times: dict[str, list[float]] = {k: [] for k in contenders}
    for fn in contenders.values():  # warm-up (compilation, caches)
        for _ in range(3):
            fn()
    for _ in range(rounds):  # alternate, so a busy moment of the machine hits every contender
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - t0) / calls * 1e3)
    numba.set_num_threads(all_threads)
    torch.set_num_threads(torch_threads)
    return {k: statistics.median(v) for k, v in times.items()}


def gpu_step_times(data, config, rounds: int, calls: int) -> dict[str, float | str]:
    """Median milliseconds per optimiser step (device synchronised) of each GPU version that can start
    here, or the reason it cannot."""
    from lstmnb.scratch import LSTMShape, init_params
    from lstmnb.scratch.bench import GPU_VERSIONS, skip_reason
    from lstmnb.scratch.fit import engine_start, make_engine

    X, y = data.X["train"], data.y["train"]
    shape = LSTMShape(X.shape[2], config.hidden, y.shape[1])
    theta = init_params(shape, config.seed, config.dtype)
    idx = np.random.default_rng(0).permutation(len(X))[: config.batch_size]
    engines: dict = {}
    out: dict[str, float | str] = {}
    for version in GPU_VERSIONS:
        reason = skip_reason(version, config)
        if reason is None:
            try:
                with engine_start(version):
                    engines[version] = make_engine(version, shape, X, y, theta, config)
                    for _ in range(3):  # compilation, cuDNN plans, caches
                        engines[version].step(idx)
                    engines[version].sync()
            except Exception as exc:  # noqa: BLE001 - a benchmark reports what failed and goes on
                reason = str(exc)
        if reason is not None:
            out[version] = reason
    times: dict[str, list[float]] = {v: [] for v in engines}
    for _ in range(rounds):
        for version, engine in engines.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                engine.step(idx)
            engine.sync()
            times[version].append((time.perf_counter() - t0) / calls * 1e3)
    out.update({v: statistics.median(t) for v, t in times.items()})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="airline")
    ap.add_argument("--window", type=int, default=None)
    ap.add_argument("--hours", type=int, default=24 * 42, help="era5: hours of the series (default 1008)")
    ap.add_argument("--dtype", default="float64", help="float64 (default) or float32")
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--versions", default=None, help="comma-separated (default: all)")
    ap.add_argument("--rounds", type=int, default=15, help="part 2: alternated rounds (default 15)")
    ap.add_argument("--calls", type=int, default=40, help="part 2: batch gradients per round (default 40)")
    ap.add_argument("--results", default=None, help="append the versions' run records here (default: none)")
    ap.add_argument("--tiny", action="store_true", help="hidden 8, 1 epoch, 1 repeat, 1 round of 2 calls (CI: the "
                                                        "script runs and prints its tables)")
    args = ap.parse_args()
    if args.tiny:
        args.hidden, args.epochs, args.repeats, args.rounds, args.calls = 8, 1, 1, 1, 2

    import numba

    from lstmnb.machine.device import cpu_model
    from lstmnb.scratch.bench import format_versions, versions_table
    from lstmnb.scratch.data import default_window, load_data
    from lstmnb.scratch.fit import VERSIONS, ScratchConfig

    window = args.window or default_window(args.data)
    config = ScratchConfig(data=args.data, window=window, hours=args.hours, hidden=args.hidden, epochs=args.epochs,
                           batch_size=args.batch_size, dtype=args.dtype)
    data = load_data(config.data, config.window, config.hours)
    versions = args.versions.split(",") if args.versions else list(VERSIONS)
    print(f"{cpu_model()}, {os.cpu_count()} logical cores; numba threads {numba.config.NUMBA_NUM_THREADS}; "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}; load average {psutil.getloadavg()[0]:.2f}")
    print(f"data {data.info['source']} {data.sizes()}, window {window}, hidden {config.hidden}, "
          f"batch {config.batch_size}, {config.dtype}, {config.epochs} epochs, {args.repeats} repeats (median run_s)\n")
    table = versions_table(versions, config, repeats=args.repeats, data=data, record=args.results is not None,
                           record_path=args.results)
    print(format_versions(table))

    print(f"\none batch gradient (forward + BPTT, float64), batch {config.batch_size}, median ms over {args.rounds} "
          f"alternated rounds of {args.calls} calls:")
    t = per_batch_times(data, config, args.rounds, args.calls)
    for name, ms in t.items():
        print(f"  {name:<22} {ms:8.3f} ms   {t['numpy'] / ms:5.2f}x numpy")
    n = numba.config.NUMBA_NUM_THREADS
    one, many = t["numba-cpu, 1 thread"], t[f"numba-cpu, {n} threads"]
    print(f"numba-cpu: compiled code alone {t['numpy'] / one:.2f}x numpy; threads {one / many:.2f}x on {n} threads "
          f"(parallel efficiency {one / many / n:.0%}); together {t['numpy'] / many:.2f}x numpy")

    print(f"\none optimiser step on the GPU ({config.dtype}), batch {config.batch_size}, median ms over "
          f"{args.rounds} alternated rounds of {args.calls} steps:")
    for name, ms in gpu_step_times(data, config, args.rounds, args.calls).items():
        print(f"  {name:<17} {ms:8.3f} ms" if isinstance(ms, float) else f"  {name:<17} skipped: {ms}")
    print(f"load average after: {psutil.getloadavg()[0]:.2f}")
    print(DONE)


if __name__ == "__main__":
    main()
