"""Records written once per finished run: a finished run resumed again, and runs killed (SIGKILL, in a
process of their own) during training, during a checkpoint write, right after the final checkpoint and right after
the record, then resumed: exactly one record each, with the results of an uninterrupted run."""

import re
import signal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import run_child

from lstmnb import era5
from lstmnb.records import read_records
from lstmnb.training import TrainConfig, record_run, run, train
from lstmnb.training.checkpoints import checksum_path, read_checkpoint
from lstmnb.windows import make_windows


def _windows():
    t = pd.date_range("2020-03-01", periods=24 * 40, freq="h")
    rng = np.random.default_rng(1)
    v = 285 + 4 * np.sin(2 * np.pi * t.hour.to_numpy() / 24)[:, None] + rng.normal(0, 0.5, (len(t), 2))
    return make_windows(v, t, TrainConfig(window=12).window_config())


def cfg(**kw):
    base = dict(window=12, hidden=8, epochs=3, batch_size=32, progress=False, device="cpu", threads=1)
    return TrainConfig(**{**base, **kw})


def fit_and_record(windows, config, results):
    result = train(windows, config)
    record_run(result, config, results)
    return result


def test_resuming_a_finished_recorded_run_appends_nothing(tmp_path):
    w, ckpt, results = _windows(), str(tmp_path / "c.pt"), tmp_path / "runs.jsonl"
    with pytest.warns(UserWarning, match="^resume=True: no checkpoint at .* yet, so this is a new run"):  # none yet
        first = fit_and_record(w, cfg(checkpoint=ckpt, resume=True), results)
    assert first.recorded is None and read_checkpoint(ckpt)["recorded"]["run_id"] == first.record["run_id"]
    seen = []
    again = train(w, cfg(checkpoint=ckpt, resume=True), on_epoch_end=seen.append)
    record_run(again, cfg(checkpoint=ckpt, resume=True), results)
    assert seen == [] and again.recorded == str(results)  # nothing trained, nothing appended
    assert again.record == first.record
    assert [r["run_id"] for r in read_records(results)] == [first.record["run_id"]]
    # the stored weights are the run's: same forecasts as the model that was trained
    np.testing.assert_array_equal(again.forecast_kelvin(), first.forecast_kelvin())


def test_more_epochs_after_a_recorded_run_make_a_new_run(tmp_path):
    w, ckpt, results = _windows(), str(tmp_path / "c.pt"), tmp_path / "runs.jsonl"
    first = fit_and_record(w, cfg(epochs=2, checkpoint=ckpt), results)
    longer = fit_and_record(w, cfg(epochs=3, checkpoint=ckpt, resume=True), results)
    assert [e["epoch"] for e in longer.record["epochs"]] == [1, 2, 3]
    ids = [r["run_id"] for r in read_records(results)]
    assert ids == [first.record["run_id"], longer.record["run_id"]] and ids[0] != ids[1]


def test_a_run_that_stopped_early_stays_stopped_on_resume(tmp_path):
    w, ckpt = _windows(), str(tmp_path / "c.pt")
    stopped = train(w, cfg(epochs=30, lr=0.05, patience=1, checkpoint=ckpt))
    assert stopped.record["metrics"]["stopped_early"]
    seen = []
    resumed = train(w, cfg(epochs=30, lr=0.05, patience=1, checkpoint=ckpt, resume=True), on_epoch_end=seen.append)
    assert seen == [] and resumed.record["metrics"] == stopped.record["metrics"]
    assert resumed.record["run_id"] == stopped.record["run_id"]


def test_run_without_results_then_resumed_with_results_records_once(tmp_path):
    w, ckpt, results = _windows(), str(tmp_path / "c.pt"), tmp_path / "runs.jsonl"
    fit_and_record(w, cfg(checkpoint=ckpt), None)  # not recorded: the checkpoint is not marked
    assert "recorded" not in read_checkpoint(ckpt)
    for _ in range(2):
        fit_and_record(w, cfg(checkpoint=ckpt, resume=True), results)
    assert len(read_records(results)) == 1


# --- SIGKILL in a process of its own, then resume --------------------------------------------------------

REQUEST = dict(start="2020-01-01", end="2020-01-14")
CHILD = r"""
import os, signal, sys
import torch
from lstmnb import era5
from lstmnb.training import TrainConfig, run
from lstmnb.training import checkpoints, pipeline, trainer

fault, ckpt, results = sys.argv[1:4]
die = lambda: os.kill(os.getpid(), signal.SIGKILL)
cfg = TrainConfig(epochs=3, hidden=8, batch_size=32, progress=False, device="cpu", threads=1,
                  checkpoint=ckpt, resume=True)
on_epoch_end = None
if fault == "training":  # in the middle of epoch 2, after epoch 1's checkpoint
    steps = {"n": 0}
    step = trainer.Trainer.step
    def counting_step(self, xb, yb):
        if len(self.history) == 1:
            steps["n"] += 1
            if steps["n"] == 3:
                die()
        return step(self, xb, yb)
    trainer.Trainer.step = counting_step
elif fault.startswith("checkpoint-write"):  # this process's 2nd (or, "-first", 1st) checkpoint half written
    at = 1 if fault.endswith("-first") else 2
    from contextlib import contextmanager
    real, calls = checkpoints.atomic_path, {"n": 0}
    @contextmanager
    def half_written(path, **kw):
        calls["n"] += not str(path).endswith(".sha256")  # the checkpoint's writes, not its checksum's
        with real(path, **kw) as tmp:
            yield tmp
            if calls["n"] == at:  # killed before the rename, with half the bytes on disk
                with open(tmp, "r+b") as fh:
                    fh.truncate(os.path.getsize(tmp) // 2)
                die()
    checkpoints.atomic_path = half_written
elif fault == "after-final-checkpoint":
    on_epoch_end = lambda entry: die() if entry["epoch"] == 3 else None
elif fault == "after-record":  # the record is appended, the checkpoint not yet marked
    pipeline.mark_recorded = lambda *a: die()
run(era5.Request(start="2020-01-01", end="2020-01-14"), cfg, results=results, on_epoch_end=on_epoch_end)
"""


def _config(ckpt):
    return TrainConfig(epochs=3, hidden=8, batch_size=32, progress=False, device="cpu", threads=1,
                       checkpoint=ckpt, resume=True)


@pytest.fixture(scope="module")
def uninterrupted(sample_store_path, tmp_path_factory):
    results = tmp_path_factory.mktemp("whole") / "runs.jsonl"
    run(era5.Request(**REQUEST), TrainConfig(epochs=3, hidden=8, batch_size=32, progress=False, device="cpu",
                                             threads=1), results=results)
    return read_records(results)[0]


def _same_results(a, b):
    strip = ("train_s", "eval_s", "cumulative_s", "samples_per_s", "warmup")  # timing: a resumed run warms up again
    assert [{k: v for k, v in e.items() if k not in strip} for e in a["epochs"]] == \
           [{k: v for k, v in e.items() if k not in strip} for e in b["epochs"]]
    assert a["metrics"] == b["metrics"]


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["training", "checkpoint-write", "after-final-checkpoint", "after-record"])
def test_killed_run_resumed_leaves_one_record_equal_to_an_uninterrupted_run(fault, uninterrupted, tmp_path):
    ckpt, results = str(tmp_path / "c.pt"), tmp_path / "runs.jsonl"
    assert run_child(CHILD, fault, ckpt, str(results)) == -signal.SIGKILL  # its error output: in the report
    before = read_records(results) if results.exists() else []
    assert len(before) == (1 if fault == "after-record" else 0)
    if fault == "checkpoint-write":  # the half-written temporary is beside the intact previous checkpoint
        assert read_checkpoint(ckpt)["epoch"] == 1 and len(list(tmp_path.glob(".c.pt.*.tmp"))) == 1
        assert len(checksum_path(ckpt).read_text().splitlines()) == 2  # the old digest and the new one
    resumed = run(era5.Request(**REQUEST), _config(ckpt), results=results)
    assert (resumed.recorded is not None) == (fault == "after-record")
    again = run(era5.Request(**REQUEST), _config(ckpt), results=results)  # the same command once more
    assert again.recorded == str(results)
    records = read_records(results)
    assert len(records) == 1 and records[0]["run_id"] == resumed.record["run_id"] == again.record["run_id"]
    _same_results(records[0], uninterrupted)
    assert not list(tmp_path.glob(".*.tmp*"))  # no temporary left behind


@pytest.mark.slow
def test_two_saves_killed_in_a_row_leave_a_checkpoint_that_still_resumes(uninterrupted, tmp_path):
    """Issue 49: the checksum file kept its first line as the old digest, which after one killed save named bytes
    that never reached the path; a second killed save then left the intact checkpoint unlisted (exit 2 forever)."""
    ckpt, results = str(tmp_path / "c.pt"), tmp_path / "runs.jsonl"
    for fault in ("checkpoint-write", "checkpoint-write-first"):  # epoch 2's save killed, then again on --resume
        assert run_child(CHILD, fault, ckpt, str(results)) == -signal.SIGKILL
        assert read_checkpoint(ckpt)["epoch"] == 1  # the intact checkpoint still checks
        assert len(list(tmp_path.glob(".c.pt.*.tmp"))) == 1  # the last killed save's temporary lies beside it
    resumed = run(era5.Request(**REQUEST), _config(ckpt), results=results)
    records = read_records(results)
    assert len(records) == 1 and records[0]["run_id"] == resumed.record["run_id"]
    _same_results(records[0], uninterrupted)


# --- checkpoints carry a checksum of their content (issue 23) ---------------------------------------------

def _flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["rng-state", "weights", "last-byte"])
def test_a_flipped_bit_in_a_checkpoint_is_refused_and_the_file_left_as_it_is(tmp_path, where):
    import hashlib

    from lstmnb.errors import CheckpointError

    w, ckpt = _windows(), tmp_path / "c.pt"
    train(w, cfg(epochs=2, checkpoint=str(ckpt)))
    state, data = read_checkpoint(str(ckpt)), ckpt.read_bytes()
    found = {"rng-state": data.find(state["torch_rng"].numpy().tobytes()[1000:1064]) + 10,  # the bit
             "weights": data.find(state["model"]["head.weight"].numpy().tobytes()) + 1,
             "last-byte": len(data) - 1}  # the zip's comment length: covered by no CRC32 of torch.save's zip
    assert min(found.values()) > 0  # each lies in torch.save's bytes
    _flip(ckpt, found[where])
    damaged = hashlib.sha256(ckpt.read_bytes()).hexdigest()
    message = r"c.pt does not match the SHA-256 in c.pt.sha256 .*: one of them was changed after it was written"
    with pytest.raises(CheckpointError, match=message):
        read_checkpoint(str(ckpt))
    with pytest.raises(CheckpointError, match=message) as err:  # --resume refuses, before any epoch
        train(w, cfg(epochs=3, checkpoint=str(ckpt), resume=True))
    assert "\n" not in str(err.value)
    assert hashlib.sha256(ckpt.read_bytes()).hexdigest() == damaged  # left as it was found


def test_a_checkpoint_without_its_checksum_is_refused_in_one_line_and_the_advice_works(tmp_path):
    """Every save writes the checksum, so a file without one (an older lstmnb's, a foreign one, a copy made without
    it; before, it was read unverified, and issue 49's flipped byte was resumed from) is refused, left as it is."""
    import hashlib

    import torch

    from lstmnb.errors import CheckpointError

    w, ckpt = _windows(), tmp_path / "c.pt"
    train(w, cfg(epochs=1, checkpoint=str(ckpt)))
    torch.save(read_checkpoint(str(ckpt)), ckpt)  # the plain torch.save file older lstmnb wrote,
    checksum_path(ckpt).unlink()  # with no checksum beside it
    before = ckpt.read_bytes()
    with pytest.raises(CheckpointError, match=r"c.pt has no c.pt.sha256 beside it, so it cannot be verified") as err:
        train(w, cfg(epochs=2, checkpoint=str(ckpt), resume=True))
    message = str(err.value)
    assert "\n" not in message and message.endswith("give overwrite_checkpoint=True instead of resume=True")
    with pytest.raises(CheckpointError, match="already holds a file that is not a readable checkpoint"):
        train(w, cfg(epochs=2, checkpoint=str(ckpt)))  # a new run does not replace it either
    assert ckpt.read_bytes() == before and not checksum_path(ckpt).exists()  # no .sha256 written to vouch for it
    path, sums = re.search(r"\(sha256sum (\S+) > (\S+)\)", message).groups()  # the advice, for a trusted file
    Path(sums).write_text(f"{hashlib.sha256(Path(path).read_bytes()).hexdigest()}  {path}\n")  # as sha256sum writes
    resumed = train(w, cfg(epochs=2, checkpoint=str(ckpt), resume=True))
    assert [e["epoch"] for e in resumed.record["epochs"]] == [1, 2]


def test_the_command_reads_and_checks_the_checkpoint_once(tmp_path, monkeypatch):
    """Issue 51: `lstmnb train --resume` read the checkpoint and verified its checksum in the command's checks and
    again in the run; now the run reads it once, before the data, and hands it on."""
    from lstmnb import cli
    from lstmnb.training import checkpoints

    run_cmd = ["train", "--start", "2020-01-01", "--end", "2020-01-31", "--hidden", "8", "--device", "cpu",
               "--threads", "1", "--no-progress", "--no-record", "--checkpoint", str(tmp_path / "c.pt")]
    assert cli.main(run_cmd + ["--epochs", "1"]) == 0
    real, checked = checkpoints._check_digest, []
    monkeypatch.setattr(checkpoints, "_check_digest", lambda path, data, say: checked.append(path) or real(path, data, say))
    assert cli.main(run_cmd + ["--epochs", "2", "--resume"]) == 0
    assert len(checked) == 1 and read_checkpoint(str(tmp_path / "c.pt"))["epoch"] == 2
