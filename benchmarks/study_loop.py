"""Rung 0 of the ladder (`--preset published`, the study's code) against the study's loop as its notebook wrote it.

The loop is lstmnb's own re-implementation of the study's notebook (Parallel_LSTM_Model_run_CARC.ipynb,
github.com/yxie7333/cs596final): a per-sample `Dataset` that makes each window's tensors from float64 values in
`__getitem__`, `DataLoader(batch_size=128, shuffle=True, num_workers=2)`, `nn.LSTM(1, 64, num_layers=2)` +
`nn.Linear(64, 1)` on the last step, Adam 1e-3, `MSELoss`, `loss.item()` every step, `time.time()` around the
epoch loop. It reads the same shipped data as lstmnb and keeps windows within a point (as lstmnb does), so
both train on the same 17,520 samples in 137 steps an epoch; a second copy of the loop joins the two points'
series end to end, as the notebook did (17,544 samples, 138 steps: the last batch holds 8 samples, not 112).
That difference moves a run between regimes of glibc's heap: glibc's mmap and trim thresholds adapt to the
largest mapped block freed, and where they settle decides how much of each step's freed memory goes back to
the system and is faulted in again (the cost rung 2 of the ladder removes). Without DataLoader workers
(4 epochs, glibc's threshold probed after each), the first epoch's last batch of 112 samples freed a block
of some 21-25 MB that lifted them, and the later epochs took half the time; a last batch of 8 never did.
With the 2 workers, 15 epochs: 11.2-11.6 million faults on the joined series, 8.4-8.7 million on the
kept-apart one, and now and then a run of either trips them early (0.4-1.2 million, a third less time).
The table shows each run's minor page faults (its processes', DataLoader workers and process start included):
unlike seconds they do not move with the machine's load, and they name the regime a run landed in.
Every run is a fresh process on glibc's default heap (as the study's was: a heap kept by an earlier run
cannot be put back), the contenders alternate, and the medians of the rounds are compared. With
`--notebook PATH`, the study's notebook itself runs too, as written, with papermill (it trains 15 epochs and
reads `subset_temperature_2yrs.csv` beside it; fetch both from the study's repository, lstmnb does not ship
them): its printed "Execution Time" is its seconds. Beside other work the study's loop spins its threads:
run it on an idle machine.

    python benchmarks/study_loop.py [--rounds 5] [--epochs 5] [--notebook PATH --epochs 15]
    python benchmarks/study_loop.py --tiny      # CI: one short round, checks the script and its table

Target this project holds itself to on CPU: rung 0 within 10% of the study's loop (and of its notebook).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _tiny import DONE  # benchmarks/_tiny.py, beside this script

TINY_END, TINY_SPLIT, TINY_TRAIN_HOURS = "2020-01-30T23", "2020-01-21", 20 * 24


def study_loop(epochs: int, tiny: bool, joined: bool = False, seed: int = 0) -> dict:
    """The study's loop in this process: its seconds, mean loss per epoch, samples and steps per epoch."""
    import numpy as np
    import torch
    from torch import nn
    from torch.utils.data import ConcatDataset, DataLoader, Dataset

    from lstmnb.datasets.study import STUDY_TEST_START, study_values

    class HourlyWindows(Dataset):  # a window's tensors made per sample from float64 values, as the study's
        def __init__(self, series, window=24):
            self.series, self.window = series, window

        def __len__(self):
            return len(self.series) - self.window

        def __getitem__(self, i):
            x = torch.tensor(self.series[i:i + self.window], dtype=torch.float32).unsqueeze(-1)
            return x, torch.tensor(self.series[i + self.window], dtype=torch.float32)

    class StudyLSTM(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm, self.fc = nn.LSTM(1, 64, 2, batch_first=True), nn.Linear(64, 1)

        def forward(self, x):
            out, _ = self.lstm(x)
            return self.fc(out[:, -1, :])

    times, _, _, values = study_values()
    train_part = values[times < np.datetime64(STUDY_TEST_START)].astype(np.float64)
    train_part = train_part[:TINY_TRAIN_HOURS] if tiny else train_part
    scaled = (train_part - train_part.mean()) / (train_part.std() + 1e-8)  # one mean and std over both points
    points = [scaled[:, p] for p in range(scaled.shape[1])]
    data = HourlyWindows(np.concatenate(points)) if joined else ConcatDataset([HourlyWindows(s) for s in points])
    torch.manual_seed(seed)
    loader = DataLoader(data, batch_size=128, shuffle=True, num_workers=2)
    start = time.time()
    model = StudyLSTM()
    loss_fn, opt = nn.MSELoss(), torch.optim.Adam(model.parameters(), lr=1e-3)
    losses, steps = [], 0
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
    return {"seconds": time.time() - start, "losses": losses, "samples": len(data), "steps": steps}


def rung0(epochs: int, threads: int, tiny: bool, folder: Path, n: int) -> dict:
    """`lstmnb train --preset published` in a fresh process: its record's seconds of training."""
    out = folder / f"rung0-{n}.jsonl"
    cmd = [sys.executable, "-m", "lstmnb", "train", "--preset", "published", "--epochs", str(epochs), "--device",
           "cpu", "--threads", str(threads), "--no-progress", "--results", str(out)]
    if tiny:
        cmd += ["--end", TINY_END, "--split-dates", f"{TINY_SPLIT},{TINY_SPLIT}"]
    subprocess.run(cmd, capture_output=True, text=True, check=True)
    record = json.loads(out.read_text().splitlines()[-1])
    n_train = int(record["data"]["sizes"]["train"])
    return {"seconds": record["timing"]["train_s"], "losses": [e["train_loss"] for e in record["epochs"]],
            "samples": n_train, "steps": -(-n_train // 128)}


def notebook(path: Path, folder: Path, n: int) -> dict:
    """The study's notebook as written, run by papermill in its own folder: its printed seconds and losses."""
    out = folder / f"notebook-{n}.ipynb"
    subprocess.run([sys.executable, "-m", "papermill", str(path), str(out), "--cwd", str(path.parent),
                    "--kernel", "python3", "--no-progress-bar"], capture_output=True, text=True, check=True)
    text = "".join("".join(o.get("text", "")) for c in json.loads(out.read_text())["cells"]
                   for o in c.get("outputs", []))
    seconds = float(re.search(r"Execution Time: ([0-9.]+) seconds", text).group(1))
    losses = [float(v) for v in re.findall(r"Train Loss: ([0-9.]+)", text)]
    return {"seconds": seconds, "losses": losses, "samples": 17544, "steps": 138}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help=(
        "alternated rounds (default 5: on a shared machine one run of the same work varied by a third)"))
    ap.add_argument("--epochs", type=int, default=5, help="epochs per run (default 5; the notebook trains 15)")
    ap.add_argument("--notebook", type=Path, default=None, help="the study's notebook, run as written too")
    ap.add_argument("--tiny", action="store_true", help="one round of one epoch on 30 days (CI: the script runs)")
    ap.add_argument("--child", choices=("apart", "joined"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:  # one run of the study's loop in this fresh process
        print(json.dumps(study_loop(args.epochs, args.tiny, joined=args.child == "joined")))
        return
    import torch

    from lstmnb.machine.memory import page_faults

    rounds, epochs = (1, 1) if args.tiny else (args.rounds, args.epochs)
    threads = torch.get_num_threads()

    def loop(series: str):
        me = [sys.executable, __file__, "--child", series, "--epochs", str(epochs)] + (["--tiny"] if args.tiny else [])
        return lambda folder, n: json.loads(subprocess.run(me, capture_output=True, text=True, check=True)
                                            .stdout.strip().splitlines()[-1])

    rung, same = "rung 0 (--preset published)", "study loop"
    contenders = {same: loop("apart"), "study loop, series joined": loop("joined"),
                  rung: lambda f, n: rung0(epochs, threads, args.tiny, f, n)}
    if args.notebook is not None:
        contenders["study notebook"] = lambda f, n: notebook(args.notebook.resolve(), f, n)
    print(f"torch {torch.__version__}, {threads} intra-op threads, {os.cpu_count()} cores; {rounds} round(s) of "
          f"{epochs} epoch(s), alternating, each run a fresh process{' (tiny)' if args.tiny else ''}\n")
    runs: dict[str, list[dict]] = {name: [] for name in contenders}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for name in (list(contenders) if r % 2 == 0 else list(contenders)[::-1]):
                before = page_faults()  # this process waits: the difference is the run's (its processes')
                runs[name].append(contenders[name](Path(tmp), r))
                runs[name][-1]["faults"] = None if before is None else page_faults() - before
    print(f"{'':28} {'seconds (median)':>17} {'each round':>26} {'page faults (millions)':>24} "
          f"{'samples/epoch':>14} {'steps/epoch':>12} {'loss, epochs 1-5':>36}")
    medians = {name: statistics.median(x["seconds"] for x in results) for name, results in runs.items()}
    for name, results in runs.items():
        secs = ", ".join(f"{x['seconds']:.2f}" for x in results)
        faults = ", ".join("n/a" if x["faults"] is None else f"{x['faults'] / 1e6:.2f}" for x in results)
        losses = " ".join(f"{v:.4f}" for v in results[0]["losses"][:5])
        print(f"{name:28} {medians[name]:17.2f} {secs:>26} {faults:>24} {results[0]['samples']:14,} "
              f"{results[0]['steps']:12,} {losses:>36}")
    print(f"\nrung 0 / {same} (the same {runs[same][0]['samples']:,} samples): {medians[rung] / medians[same]:.2f}x "
          "the time (target: within 10%, i.e. 0.90x to 1.10x)")
    if "study notebook" in runs:
        nb = medians["study notebook"]
        print(f"rung 0 / study notebook: {medians[rung] / nb:.2f}x the time; study loop, series joined / study "
              f"notebook: {medians['study loop, series joined'] / nb:.2f}x (the same samples). Where the "
              "page faults differ by millions, the runs ran on glibc's heap in different regimes (see the top).")
    print(DONE)


if __name__ == "__main__":
    main()
