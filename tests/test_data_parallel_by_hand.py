"""05's whole data-parallel program and its ring all-reduce, run as the notebook's cells write them, on 3
real gloo ranks (no mocks): gradients averaged by hand give the weights of plain training on the whole batches; the
ring gives dist.all_reduce's sums and each rank sends 2 (N - 1) K / N values. The same programs on 2 ranks (by
hand against DDP too), and the ring on a K that the ranks do not divide, run in 05 itself in the `ci` series
(test_notebooks.py checks its tables), so they are not run twice."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from lstmnb import era5, train
from lstmnb.models import Forecaster, ModelConfig
from lstmnb.notebooks.lessons import ring_allreduce_bytes

NB = Path(__file__).resolve().parents[1] / "notebooks" / "05_multi_gpu.ipynb"
BATCH, STEPS = 96, 3  # 96 divides among 2 and 3 ranks: equal shards


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> Path:
    """The cells of 05 that write a program (``%%writefile "{work}/NAME"``), written as they would be."""
    folder = tmp_path_factory.mktemp("programs")
    names = []
    for cell in nbformat.read(NB, as_version=4).cells:
        first, _, body = cell.source.partition("\n")
        if cell.cell_type == "code" and first.startswith("%%writefile"):
            name = first.split("/")[-1].strip('"')
            (folder / name).write_text(body + "\n")
            names.append(name)
    assert names == ["ddp_by_hand.py", "ring.py", "ring_check.py"]
    # the teaching code fits the page: the program in about 40 lines of code, the ring in about 25
    def code_lines(name):
        return [line for line in (folder / name).read_text().splitlines() if line.strip()]

    assert len(code_lines("ddp_by_hand.py")) <= 44 and len(code_lines("ring.py")) <= 25
    return folder


def run(*args) -> None:
    done = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def weights(programs: Path, ranks: int, mode: str) -> dict[str, torch.Tensor]:
    out = programs / f"weights-{ranks}"
    run(programs / "ddp_by_hand.py", ranks, mode, out, BATCH, STEPS)
    return torch.load(f"{out}-{mode}.pt")


@pytest.fixture(scope="module")
def plain_training() -> dict[str, torch.Tensor]:
    """The reference: the program's batches, whole, in a plain training loop in this process (no ranks)."""
    w, _ = train.prepare_windows(era5.Request(), train.preset_config("published"), progress=False)
    x, y = (torch.as_tensor(a[: BATCH * STEPS]) for a in (w.x["train"], w.y["train"]))
    torch.manual_seed(0)
    model = Forecaster(ModelConfig(hidden=64, layers=2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for xb, yb in zip(x.split(BATCH), y.split(BATCH)):
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.state_dict()


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [3])
def test_gradients_averaged_by_hand_on_3_ranks_equal_plain_training(programs, plain_training, ranks):
    """Divided by 3, not by 2: the series checks 2 ranks by hand against DDP and one process (its table)."""
    by_hand = weights(programs, ranks, "by-hand")
    torch.manual_seed(0)
    start = Forecaster(ModelConfig(hidden=64, layers=2)).state_dict()  # the study's model, as it starts
    assert set(by_hand) == set(plain_training) == set(start)
    for k in start:
        torch.testing.assert_close(by_hand[k], plain_training[k], rtol=1e-4, atol=1e-5)  # float rounding only
    assert any(not torch.equal(by_hand[k], start[k]) for k in start)  # it trained: every step moved them


@pytest.mark.slow
@pytest.mark.parametrize("ranks, k", [(3, 6000)])
def test_ring_allreduce_equals_dist_all_reduce_and_sends_2_n_minus_1_k_over_n(programs, ranks, k):
    out = programs / f"ring-{ranks}-{k}.json"
    run(programs / "ring_check.py", ranks, k, 3, 2, out)  # 3 alternated repeats of 2 calls each
    rows = json.loads(out.read_text())
    assert sorted(r["rank"] for r in rows) == list(range(ranks))
    for r in rows:
        assert r["max |ring - all_reduce|"] <= 1e-5  # sums of N float32 values in another order
        assert r["ring us"] > 0 and r["all_reduce us"] > 0  # timed; never compared here
        if k % ranks == 0:
            assert r["bytes sent"] == ring_allreduce_bytes(k, ranks)
        else:  # chunks of K/N rounded: each of the 2 (N - 1) sends is off by at most one value
            assert abs(r["bytes sent"] - ring_allreduce_bytes(k, ranks)) <= 2 * (ranks - 1) * 4
    assert sum(r["bytes sent"] for r in rows) == 2 * (ranks - 1) * k * 4  # all chunks, twice round the ring
