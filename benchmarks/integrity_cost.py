"""What the integrity checks cost: a checkpoint's SHA-256 (written with it, checked on every read) and the
sample store's CRC32 file list (checked the first time a process uses the store).

Checkpoints: the same state written and read as lstmnb did before checksums (``torch.save`` to a
temporary renamed into place, ``torch.load``) and with ``save_checkpoint``/``read_checkpoint`` (the
same file, plus its SHA-256 written beside it in ``<path>.sha256`` and checked on read), alternated,
medians of the repeats, for the default model and a larger one.
Sample store (the synthetic one: the biggest store lstmnb builds): the sizes of all its files against their
sizes and CRC32s, alternated. Run it where the sample store is built (it is built first if not):

    python benchmarks/integrity_cost.py [--repeats 7] [--hidden 64,512]
    python benchmarks/integrity_cost.py --tiny      # CI: one pass, the default model only; checks the script runs
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time
from pathlib import Path

import psutil
import torch

from _tiny import DONE  # benchmarks/_tiny.py, beside this script


def _median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def checkpoint_state(hidden: int, layers: int) -> dict:
    """A checkpoint's state as the Trainer writes it: weights, Adam's state after one step, RNG, history."""
    from lstmnb.models import Forecaster, ModelConfig
    from lstmnb.training.checkpoints import CHECKPOINT_FORMAT

    core = Forecaster(ModelConfig(n_features=5, hidden=hidden, layers=layers))
    opt = torch.optim.Adam(core.parameters())
    core(torch.randn(8, 24, 5)).sum().backward()
    opt.step()
    return {"format": CHECKPOINT_FORMAT, "key": {}, "epoch": 1, "run_id": "bench", "model": core.state_dict(),
            "optimizer": opt.state_dict(), "scheduler": None, "generator": torch.Generator().get_state(),
            "torch_rng": torch.get_rng_state(), "history": [{"epoch": 1}], "best": {"epoch": 1}}


def bench_checkpoints(hiddens: list[int], repeats: int) -> None:
    from lstmnb.paths import atomic_path
    from lstmnb.training.checkpoints import read_checkpoint, save_checkpoint

    def save_unchecked(path: Path, state: dict) -> None:  # save_checkpoint before checksums
        with atomic_path(path) as tmp:
            torch.save(state, tmp)

    print(f"{'model':>22} {'MB':>6} {'write s, before':>15} {'with sha256':>11} {'read s, before':>14} "
          f"{'with sha256':>11} {'sha256 alone s':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        plain, ours = Path(tmp) / "plain.pt", Path(tmp) / "ours.pt"
        for hidden in hiddens:
            state = checkpoint_state(hidden, 2 if hidden > 64 else 1)
            w = {"plain": [], "ours": []}
            r = {"plain": [], "ours": []}
            for rep in range(repeats):  # alternated, so the machine's load hits both alike
                for name in (("plain", "ours") if rep % 2 == 0 else ("ours", "plain")):
                    if name == "plain":
                        w[name].append(_median_s(lambda: save_unchecked(plain, state), 1))
                        r[name].append(_median_s(lambda: torch.load(plain, weights_only=False), 1))
                    else:
                        w[name].append(_median_s(lambda: save_checkpoint(str(ours), state), 1))
                        r[name].append(_median_s(lambda: read_checkpoint(str(ours)), 1))
            data = ours.read_bytes()
            sha = _median_s(lambda: hashlib.sha256(data).hexdigest(), repeats)
            label = f"hidden {hidden}, {2 if hidden > 64 else 1} layer(s)"
            print(f"{label:>22} {len(data) / 1e6:6.2f} {statistics.median(w['plain']):15.4f} "
                  f"{statistics.median(w['ours']):11.4f} {statistics.median(r['plain']):14.4f} "
                  f"{statistics.median(r['ours']):11.4f} {sha:14.4f}")


def bench_sample(repeats: int) -> None:
    from lstmnb.datasets.arco_layout import files_of as _files
    from lstmnb.datasets.sample import sample_store

    store = sample_store()

    def sizes() -> int:
        return sum(os.stat(os.path.join(root, n)).st_size for root, _, names in os.walk(store) for n in names)

    t = {"sizes": [], "sizes+crc32": []}
    for rep in range(repeats):
        for name in (("sizes", "sizes+crc32") if rep % 2 == 0 else ("sizes+crc32", "sizes")):
            t[name].append(_median_s(sizes if name == "sizes" else (lambda: _files(store)), 1))
    n = len(_files(store))
    print(f"\nsample store (synthetic data) {store}: {n:,} files")
    for name, values in t.items():
        print(f"  {name:>12}: median {statistics.median(values):.3f} s over {repeats} passes (page cache warm)")
    print(f"  ratio: {statistics.median(t['sizes+crc32']) / statistics.median(t['sizes']):.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--hidden", default="64,512", help="hidden sizes of the checkpointed models")
    ap.add_argument("--tiny", action="store_true", help="one pass, hidden 64 only (CI: the script runs and prints "
                                                        "its tables)")
    args = ap.parse_args()
    if args.tiny:
        args.repeats, args.hidden = 1, "64"
    print(f"load average at the start: {', '.join(f'{v:.2f}' for v in psutil.getloadavg())} "
          f"on {os.cpu_count()} logical CPU(s)\n")
    bench_checkpoints([int(h) for h in args.hidden.split(",")], args.repeats)
    bench_sample(args.repeats)
    print(f"\nload average at the end: {', '.join(f'{v:.2f}' for v in psutil.getloadavg())}")
    print(DONE)


if __name__ == "__main__":
    main()
