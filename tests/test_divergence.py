"""Divergence is an outcome (issue 23): a real non-finite weight or input mid-run ends the run at the first
bad step, the record says ``diverged`` with where and what to try, no later figure is computed from NaN,
and the checkpoint of the last finite epoch and the best weights stay as they were."""

import hashlib
import json

import numpy as np
import pandas as pd
import pytest
import torch

from lstmnb import cli
from lstmnb.record_schema import record_problem
from lstmnb.records import read_records
from lstmnb.training import TrainConfig, train
from lstmnb.training.checkpoints import read_checkpoint, save_checkpoint
from lstmnb.training.guards import Diverged, DivergenceGuard
from lstmnb.training.trainer import Trainer
from lstmnb.windows import make_windows


def _windows(**split):
    t = pd.date_range("2020-03-01", periods=24 * 30, freq="h")
    rng = np.random.default_rng(3)
    v = 285 + 4 * np.sin(2 * np.pi * t.hour.to_numpy() / 24)[:, None] + rng.normal(0, 0.5, (len(t), 1))
    return make_windows(v, t, TrainConfig(window=12, **split).window_config())


def cfg(**kw):
    base = dict(window=12, hidden=8, epochs=4, batch_size=32, progress=False, device="cpu", threads=1)
    return TrainConfig(**{**base, **kw})


def flip_exponent_bit(weight: torch.Tensor) -> None:
    """Flip the top exponent bit of the first element, as a memory or disk fault would: 0.1 becomes ~3e37."""
    with torch.no_grad():
        weight.view(-1).view(torch.int32)[0] ^= 1 << 30


def sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_a_weight_flipped_mid_run_ends_the_run_diverged_and_keeps_the_earlier_epoch(tmp_path):
    ckpt = tmp_path / "c.pt"
    config = cfg(checkpoint=str(ckpt), patience=5)
    tr = Trainer(_windows(), config, torch.device("cpu"))
    after_epoch_1 = {}

    def fault(entry):
        if entry["epoch"] == 1:
            after_epoch_1.update(sha=sha(ckpt), best=tr.best["state"]["head.weight"].clone())
            flip_exponent_bit(tr.core.head.weight)

    tr.fit("t", fault)
    record = tr.finish(None)
    assert record["status"] == "diverged" and record_problem(record) is None
    d = record["divergence"]
    assert (d["epoch"], d["step"], d["what"], d["value"]) == (2, 1, "training loss", "inf")
    assert [e["epoch"] for e in record["epochs"]] == [1] and "metrics" not in record and "skill" not in record
    assert record["reason"].startswith("the run diverged at epoch 2, step 1: the training loss is inf")
    # what to try, named as the caller gives settings (here Python's; the command's below)
    assert "try a lower lr (e.g. " in record["reason"] and "), grad_clip=1.0; " in record["reason"]
    assert f"{ckpt} keeps epoch 1" in record["reason"]
    assert "still improving" not in record["reason"]  # early stopping never reads a NaN as progress
    assert sha(ckpt) == after_epoch_1["sha"]  # the diverged epoch was never written
    assert read_checkpoint(str(ckpt))["epoch"] == 1
    # the best epoch's weights (epoch 1) are what the run hands back, finite
    assert torch.equal(tr.core.head.weight, after_epoch_1["best"]) and torch.isfinite(tr.core.head.weight).all()


def _expected_step(windows, config, sample: int, rank: int = 0, world: int = 1) -> int:
    """The first step that trains on ``sample``: the fast path draws epoch 1's permutation first."""
    n = windows.x["train"].shape[0]
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(config.seed))[: (n // world) * world]
    position = perm.tolist().index(sample)
    assert position % world == rank
    return (position // world) // config.batch_size + 1


def test_a_nan_input_stops_the_run_at_its_step_and_run_says_so(tmp_path):
    w = _windows()
    w.x["train"][57, 3, 0] = np.nan  # one value of one input window
    config = cfg()
    result = train(w, config)
    d = result.record["divergence"]
    assert result.record["status"] == "diverged" and result.record["epochs"] == []
    assert (d["epoch"], d["step"], d["what"]) == (1, _expected_step(w, config, 57), "training loss")
    assert "timing" not in result.record  # no epoch finished: no figure at all


class _FiniteLossNanGradient(torch.nn.Module):
    """A real network whose forecast is finite while every gradient is NaN: z + 0 * sqrt(z - z) is z, and its
    derivative holds 0 * (1 / (2 sqrt(0))) = 0 * inf, as when a gradient overflows behind a finite loss."""

    def __init__(self, features: int, config):
        super().__init__()
        self.lin, self.config = torch.nn.Linear(features, 1), config

    def forward(self, x):
        z = self.lin(x[:, -1, :])
        return z + 0 * torch.sqrt(z - z)


def test_without_a_validation_part_the_last_steps_non_finite_weights_end_the_run_diverged():
    # the published setting has no validation part: with one step per epoch, no later step's loss shows what
    # the last update did, and the run was recorded 'ok' with a test RMSE of NaN
    split = {"split_dates": ("2020-03-25", "2020-03-25")}
    w = _windows(**split)
    config = cfg(epochs=1, batch_size=w.sizes()["train"], blend="off", patience=None, **split)  # one step
    result = train(w, config, model=_FiniteLossNanGradient(w.x["train"].shape[-1], config.model_config(1)))
    d = result.record["divergence"]
    assert result.record["status"] == "diverged" and "metrics" not in result.record
    assert (d["epoch"], d["step"], d["what"]) == (1, None, "update of the epoch's last step (the weights it left)")
    assert "the update of the epoch's last step (the weights it left) is not finite" in result.record["reason"]
    # with a validation part, the validation forecast shows the same weights
    w = _windows()
    config = cfg(epochs=1, batch_size=w.sizes()["train"])
    result = train(w, config, model=_FiniteLossNanGradient(w.x["train"].shape[-1], config.model_config(1)))
    assert result.record["divergence"]["what"] == "validation forecast (RMSE)"


def test_a_study_that_needs_every_runs_figures_records_the_diverged_run_and_stops(tmp_path):
    from lstmnb.errors import DivergedError
    from lstmnb.training.guards import stop_if_diverged

    w = _windows()
    w.x["train"][5, 0, 0] = np.inf
    record = train(w, cfg(experiment="speed")).record
    with pytest.raises(DivergedError, match="^speed: the run diverged at epoch 1, step"):
        stop_if_diverged(record, tmp_path)
    assert [r["status"] for r in read_records(tmp_path)] == ["diverged"]


def test_the_guard_finds_the_first_bad_step_when_it_checks_late():
    guard = DivergenceGuard(torch.device("cpu"), every=4)  # as on a GPU: a check every few steps
    guard.start_epoch(3)
    for value in (0.5, 0.4):
        guard.see(torch.tensor(value))
    guard.norm(torch.tensor(float("nan")))  # the third step's clipped gradient norm
    guard.see(torch.tensor(0.3))
    with pytest.raises(Diverged):
        guard.see(torch.tensor(float("inf")))
    assert (guard.found["epoch"], guard.found["step"], guard.found["what"]) == (3, 3, "gradient norm")


def test_a_finite_run_is_untouched():
    result = train(_windows(), cfg(epochs=2, grad_clip=1.0))
    assert result.record["status"] == "ok" and "divergence" not in result.record


def test_lstmnb_train_resumed_from_a_damaged_weight_exits_1_with_one_line(tmp_path, capsys, sample_store_path):
    """The issue's case: a checkpoint whose head weight has a flipped exponent bit (written back with a valid
    checksum, as a run that went wrong would write it), resumed for more epochs."""
    ckpt, results = tmp_path / "c.pt", tmp_path / "runs.jsonl"
    argv = ["train", "--start", "2020-01-01", "--end", "2020-01-31", "--hidden", "8", "--no-progress", "--threads", "1",
            "--device", "cpu", "--checkpoint", str(ckpt), "--results", str(results)]
    assert cli.main(argv + ["--epochs", "2"]) == 0
    state = read_checkpoint(str(ckpt))
    flip_exponent_bit(state["model"]["head.weight"])
    save_checkpoint(str(ckpt), state)
    before = sha(ckpt)
    capsys.readouterr()
    assert cli.main(argv + ["--epochs", "4", "--resume"]) == 1
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("lstmnb train: error: the run diverged at epoch 3, step 1: the "
                                                   "training loss is inf (likely: weights already damaged in the "
                                                   "checkpoint it resumed from")
    assert "Traceback" not in err and "still improving" not in out + err and "a new run without --resume" in err
    assert "(status diverged) appended to" in out and err.rstrip().endswith(f"; recorded as diverged in {results}")
    assert sha(ckpt) == before  # the checkpoint it resumed from is as it was
    recs = read_records(results)
    assert [r["status"] for r in recs] == ["ok", "diverged"]
    assert recs[1]["divergence"]["epoch"] == 3 and [e["epoch"] for e in recs[1]["epochs"]] == [1, 2]
    assert json.dumps(recs[1], allow_nan=False)  # no NaN reached the file
    assert cli.main(["results", str(results)]) == 0
    assert "diverged" in capsys.readouterr().out  # `lstmnb results` shows it



def test_a_diverged_run_not_recorded_does_not_say_recorded(tmp_path, capsys, monkeypatch):
    # --no-record wrote nothing, yet its line ended "recorded as diverged"
    monkeypatch.setenv("LSTMNB_RESULTS", str(tmp_path / "results"))
    rc = cli.main(["train", "--start", "2020-01-01", "--end", "2020-01-31", "--hidden", "8", "--epochs", "1",
                   "--lr", "1e308", "--no-progress", "--device", "cpu", "--threads", "1", "--no-record"])
    out, err = capsys.readouterr()
    assert rc == 1 and err.count("\n") == 1 and err.startswith("lstmnb train: error: the run diverged at epoch 1")
    assert "recorded" not in err and "appended" not in out, (out, err)
    assert not (tmp_path / "results").exists()
    # a quarter of 1e308 would diverge again: the recommended rate is suggested instead
    assert "a lower --lr (e.g. 0.004, the recommended rate at a 1 h lead), --grad-clip 1;" in err, err


@pytest.mark.parametrize("argv", [
    ["skill", "--leads", "1,6"],
    ["region", "skill", "--box", "38,38.5,279,279.75", "--variants", "none,sparse", "--neighbours", "3"],
])
def test_studies_of_many_runs_stop_at_a_diverged_run_in_one_line(argv, tmp_path, capsys, sample_store_path):
    """A study that compares runs (a model per lead; region variants) records the run that diverged and stops
    there with its reason, exit 1: it read the missing metrics and ended in a KeyError traceback before."""
    results = tmp_path / "runs.jsonl"
    rc = cli.main(argv + ["--start", "2020-01-01", "--end", "2020-01-31", "--hidden", "8", "--epochs", "2",
                          "--lr", "1e30", "--no-progress", "--device", "cpu", "--threads", "1", "--results", str(results)])
    out, err = capsys.readouterr()
    assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "the run diverged at epoch 1" in err and "recorded as diverged" in err and "a lower --lr" in err
    assert [r["status"] for r in read_records(results)] == ["diverged"]

@pytest.mark.slow
def test_ddp_ranks_agree_to_stop_at_the_first_bad_step_of_any_rank():
    """Two gloo ranks; a NaN in one input window that rank 1 trains on: both ranks stop at its step (no
    rank waits in a collective) and rank 0 records it."""
    w = _windows()
    config = cfg(strategy="ddp", nproc=2, batch_size=16, epochs=3)
    sample = next(s for s in range(40, 200) if _position_rank(w, config, s) == 1)
    w.x["train"][sample, 0, 0] = np.nan
    result = train(w, config)
    d = result.record["divergence"]
    assert result.record["status"] == "diverged" and result.record["world_size"] == 2
    assert (d["epoch"], d["step"]) == (1, _expected_step(w, config, sample, rank=1, world=2))
    assert d["what"] == "training loss (on another rank)" and d["steps_per_check"] is None


def _position_rank(w, config, sample):
    n = w.x["train"].shape[0]
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(config.seed))[: (n // 2) * 2]
    return perm.tolist().index(sample) % 2 if sample in perm.tolist() else None


@pytest.mark.gpu
@pytest.mark.parametrize("cuda_graph", [True, False])
def test_on_a_gpu_the_late_check_still_names_the_first_bad_step(cuda_graph):
    """The CUDA graph path returns a copy of the captured loss after each replay; the guard keeps those on
    the device and checks every 100 steps, yet names the step where the flipped weight first acted."""
    config = cfg(device="cuda", cuda_graph=cuda_graph, grad_clip=1.0, threads=None)
    tr = Trainer(_windows(), config, torch.device("cuda"))
    assert tr.use_graph == cuda_graph and tr.guard.every == 100
    tr.fit("t", lambda e: flip_exponent_bit(tr.core.head.weight) if e["epoch"] == 1 else None)
    record = tr.finish(None)
    assert record["status"] == "diverged"
    assert (record["divergence"]["epoch"], record["divergence"]["step"]) == (2, 1)
    assert [e["epoch"] for e in record["epochs"]] == [1]
