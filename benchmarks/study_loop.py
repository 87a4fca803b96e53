"""The study's training loop as its notebook wrote it, beside `--preset published`: the same work, timed.

The loop is lstmnb's own re-implementation of the study's notebook (Parallel_LSTM_Model_run_CARC.ipynb):
a per-sample `Dataset` that builds each window's tensors in `__getitem__`, `DataLoader(batch_size=128,
shuffle=True, num_workers=2)`, `nn.LSTM(1, 64, num_layers=2)` + `nn.Linear(64, 1)` on the last step, Adam
1e-3, `MSELoss`, `loss.item()` every step, `time.time()` around the epoch loop. It reads the same embedded
data as lstmnb, and keeps windows within a point (as lstmnb does: the study joined the two series end to
end), so both train on the same 17,520 samples in 137 steps per epoch. The two alternate, each round on
the same torch threads and the same C heap (lstmnb's CPU runs keep freed memory for the next step,
`lstmnb.memory.keep_freed_heap`, for the whole process: it is set before either loop runs), and the
medians of the rounds are compared.

    python benchmarks/study_loop.py [--rounds 3] [--epochs 5]
    python benchmarks/study_loop.py --tiny      # CI: one short round, checks the script and its table

Target this project holds itself to on CPU: `--preset published` within 10% of the loop's time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import ConcatDataset, DataLoader, Dataset

from _tiny import DONE  # benchmarks/_tiny.py, beside this script
from lstmnb.data import Request
from lstmnb.datasets.study import STUDY_TEST_START, study_values
from lstmnb.memory import keep_freed_heap
from lstmnb.training import prepare_windows, preset_config, train


class HourlyWindows(Dataset):
    """Windows of ``window`` hours of one series and the hour after, built per sample (as the study's)."""

    def __init__(self, series: np.ndarray, window: int = 24):
        self.series, self.window = series, window

    def __len__(self) -> int:
        return len(self.series) - self.window

    def __getitem__(self, i: int):
        x = torch.tensor(self.series[i:i + self.window], dtype=torch.float32).unsqueeze(-1)
        return x, torch.tensor(self.series[i + self.window], dtype=torch.float32)


class StudyLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(1, 64, 2, batch_first=True)
        self.fc = nn.Linear(64, 1)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.fc(out[:, -1, :])


def study_loop(epochs: int, train_hours: int | None = None, seed: int = 0) -> tuple[float, list[float], int, int]:
    """(seconds of the epoch loop, mean loss per epoch, samples per epoch, steps per epoch) of the study's loop."""
    times, _, _, values = study_values()
    train_part = values[times < np.datetime64(STUDY_TEST_START)].astype(np.float64)
    if train_hours:
        train_part = train_part[:train_hours]
    scaled = (train_part - train_part.mean()) / (train_part.std() + 1e-8)  # one mean and std over both points
    data = ConcatDataset([HourlyWindows(scaled[:, p]) for p in range(scaled.shape[1])])
    torch.manual_seed(seed)
    loader = DataLoader(data, batch_size=128, shuffle=True, num_workers=2)
    model = StudyLSTM()
    loss_fn, opt = nn.MSELoss(), torch.optim.Adam(model.parameters(), lr=1e-3)
    losses, steps = [], 0
    start = time.time()
    for _ in range(epochs):
        model.train()
        total, steps = 0.0, 0
        for xb, yb in loader:
            opt.zero_grad()
            loss = loss_fn(model(xb).squeeze(), yb)
            loss.backward()
            opt.step()
            total += loss.item()
            steps += 1
        losses.append(total / steps)
    return time.time() - start, losses, len(data), steps


def preset_run(windows, epochs: int, threads: int) -> tuple[float, list[float], int, int]:
    """The same figures for `--preset published` (the record's seconds of training, summed over epochs)."""
    cfg = preset_config("published", epochs=epochs, device="cpu", threads=threads, progress=False)
    record = train(windows, cfg).record
    n = int(record["data"]["sizes"]["train"])
    return (record["timing"]["train_s"], [e["train_loss"] for e in record["epochs"]], n, -(-n // cfg.batch_size))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds (default 3)")
    ap.add_argument("--epochs", type=int, default=5, help="epochs per run (default 5, as the study's table)")
    ap.add_argument("--tiny", action="store_true", help="one round of one epoch on 30 days (CI: the script runs)")
    args = ap.parse_args()
    rounds, epochs = (1, 1) if args.tiny else (args.rounds, args.epochs)
    threads = torch.get_num_threads()
    keep_freed_heap()  # process-wide, so set before either loop: both run on the heap the preset's runs set
    train_hours = 30 * 24 if args.tiny else None
    request = Request(end="2020-01-30T23") if args.tiny else Request()
    cfg = preset_config("published", epochs=epochs, device="cpu", threads=threads, progress=False)
    if args.tiny:  # 30 days cannot reach 2021: the first 20 days train, the rest test
        cfg = preset_config("published", epochs=epochs, device="cpu", threads=threads, progress=False,
                            split_dates=("2020-01-21", "2020-01-21"))
        train_hours = 20 * 24
    windows, _ = prepare_windows(request, cfg, progress=False)
    print(f"torch {torch.__version__}, {threads} intra-op threads, {os.cpu_count()} cores; {rounds} round(s) of "
          f"{epochs} epoch(s), alternating{' (tiny)' if args.tiny else ''}\n")
    runs: dict[str, list] = {"study loop": [], "--preset published": []}
    for r in range(rounds):
        order = ("study loop", "--preset published") if r % 2 == 0 else ("--preset published", "study loop")
        for name in order:
            torch.set_num_threads(threads)
            runs[name].append(study_loop(epochs, train_hours) if name == "study loop"
                              else preset_run(windows, epochs, threads))
    print(f"{'':20} {'seconds (median)':>17} {'each round':>22} {'samples/epoch':>14} {'steps/epoch':>12} "
          f"{'last loss':>10}")
    medians = {}
    for name, results in runs.items():
        secs = [r[0] for r in results]
        medians[name] = statistics.median(secs)
        print(f"{name:20} {medians[name]:17.2f} {', '.join(f'{s:.2f}' for s in secs):>22} {results[0][2]:14,} "
              f"{results[0][3]:12,} {results[-1][1][-1]:10.4f}")
    same = {(r[2], r[3]) for results in runs.values() for r in results}
    ratio = medians["--preset published"] / medians["study loop"]
    print(f"\nsame work: {'yes' if len(same) == 1 else 'NO'} (samples and steps per epoch: {sorted(same)})")
    print(f"--preset published / study loop: {ratio:.2f}x the time (target: within 10%, i.e. <= 1.10x)")
    print(DONE)


if __name__ == "__main__":
    main()
