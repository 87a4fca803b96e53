"""Checkpoints people can open and keep (issue 32): a plain torch.save file that ``torch.load(path)`` opens,
its SHA-256 beside it and checked on --resume (a file without one refused: every save writes it), a kill while a checkpoint is replaced leaving a pair that checks, and a new run that never replaces an
existing checkpoint unless told (--resume continues, --overwrite-checkpoint replaces, else one line)."""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from lstmnb import cli
from lstmnb.errors import CheckpointError, ConfigError
from lstmnb.training import TrainConfig, train
from lstmnb.training.checkpoints import checksum_path, read_checkpoint, save_checkpoint
from lstmnb.windows import make_windows


def _windows():
    t = pd.date_range("2020-03-01", periods=24 * 30, freq="h")
    rng = np.random.default_rng(2)
    v = 285 + 4 * np.sin(2 * np.pi * t.hour.to_numpy() / 24)[:, None] + rng.normal(0, 0.5, (len(t), 1))
    return make_windows(v, t, TrainConfig(window=12).window_config())


def cfg(**kw):
    return TrainConfig(**{**dict(window=12, hidden=8, epochs=1, batch_size=32, progress=False, device="cpu",
                                 threads=1), **kw})


def _run_the_advice(message):
    """Run the ``sha256sum PATH > PATH.sha256`` a refusal advises (a plain hashlib copy where sha256sum is missing)."""
    path, sums = re.search(r"\(sha256sum (\S+) > (\S+)\)", message).groups()
    if shutil.which("sha256sum"):
        subprocess.run(f"sha256sum {path} > {sums}", shell=True, check=True)
    else:
        Path(sums).write_text(f"{hashlib.sha256(Path(path).read_bytes()).hexdigest()}  {path}\n")


def test_torch_load_opens_a_checkpoint_and_its_checksum_lies_beside_it(tmp_path):
    ckpt = tmp_path / "c.pt"
    result = train(_windows(), cfg(epochs=2, checkpoint=str(ckpt)))
    state = torch.load(ckpt)  # what a PyTorch user tries first: torch's default, weights_only loading
    assert state["epoch"] == 2 and state["run_id"] == result.record["run_id"]
    assert all(isinstance(v, torch.Tensor) for v in state["model"].values()) and "head.weight" in state["model"]
    digest, name = checksum_path(ckpt).read_text().split()
    assert name == "c.pt" and digest == hashlib.sha256(ckpt.read_bytes()).hexdigest()  # sha256sum -c's format


def test_resume_checks_the_checksum_beside_the_file(tmp_path):
    ckpt = tmp_path / "c.pt"
    train(_windows(), cfg(checkpoint=str(ckpt)))
    state = read_checkpoint(str(ckpt))
    state["history"][0]["train_loss"] = 0.0  # changed and saved by hand, without its checksum
    torch.save(state, ckpt)  # a whole zip again, every CRC32 right: its SHA-256 alone tells
    with pytest.raises(CheckpointError, match=r"c.pt does not match the SHA-256 in c.pt.sha256 .* the checkpoint "
                                              r"rewritten by hand"):
        train(_windows(), cfg(epochs=2, checkpoint=str(ckpt), resume=True))


@pytest.mark.parametrize("damage", ["not-a-digest", "one-digit"])
def test_a_damaged_checksum_file_beside_a_good_checkpoint_is_named_and_the_advice_works(tmp_path, damage):
    ckpt, sums = tmp_path / "c.pt", tmp_path / "c.pt.sha256"
    train(_windows(), cfg(checkpoint=str(ckpt)))
    good, text = ckpt.read_bytes(), sums.read_text()
    digit = "0" if text[5] != "0" else "1"
    sums.write_text("garbage\n" if damage == "not-a-digest" else text[:5] + digit + text[6:])
    expected = (r"the checksum file \S*c.pt.sha256 beside checkpoint \S*c.pt is damaged \(line 1 starts with "
                r"'garbage', not a SHA-256" if damage == "not-a-digest" else
                r"c.pt does not match the SHA-256 in c.pt.sha256 .*: one of them was changed after it was written")
    with pytest.raises(CheckpointError, match=expected) as err:
        train(_windows(), cfg(epochs=2, checkpoint=str(ckpt), resume=True))
    assert "\n" not in str(err.value) and f"write its checksum anew (sha256sum {ckpt} > {sums})" in str(err.value)
    assert ckpt.read_bytes() == good  # both left as they were
    _run_the_advice(str(err.value))  # what the message says to do when the checkpoint is trusted
    resumed = train(_windows(), cfg(epochs=2, checkpoint=str(ckpt), resume=True))
    assert [e["epoch"] for e in resumed.record["epochs"]] == [1, 2]
    assert sums.read_text().split()[0] == hashlib.sha256(ckpt.read_bytes()).hexdigest()  # a new one written


def test_a_file_that_is_no_checkpoint_gets_advice_that_works(tmp_path):
    ckpt = tmp_path / "garbage.pt"
    ckpt.write_bytes(b"not a checkpoint")
    checksum_path(ckpt).write_text(f"{hashlib.sha256(b'not a checkpoint').hexdigest()}  garbage.pt\n")  # its own
    with pytest.raises(CheckpointError, match=r"garbage.pt is corrupt or half-written \(.*\); delete it to start "
                                              r"over, or give overwrite_checkpoint=True instead of resume=True to replace it$"):
        train(_windows(), cfg(checkpoint=str(ckpt), resume=True))
    with pytest.raises(CheckpointError, match=r"already holds a file that is not a readable checkpoint; .*"
                                              r"overwrite_checkpoint=True replaces it, or delete it") as err:
        train(_windows(), cfg(checkpoint=str(ckpt)))
    assert "resume=True" not in str(err.value)  # resuming it cannot work
    assert ckpt.read_bytes() == b"not a checkpoint"
    replaced = train(_windows(), cfg(checkpoint=str(ckpt), overwrite_checkpoint=True))  # the advice works
    assert read_checkpoint(str(ckpt))["run_id"] == replaced.record["run_id"]


def test_a_kill_while_a_checkpoint_is_replaced_leaves_a_pair_that_checks(tmp_path, monkeypatch):
    """The checksum file lists both digests while the new checkpoint is renamed into place: stopped
    right before the rename (the old file) or right after it (the new file), the file still checks."""
    from lstmnb.training import checkpoints

    ckpt = tmp_path / "c.pt"
    train(_windows(), cfg(checkpoint=str(ckpt)))
    old = read_checkpoint(str(ckpt))
    new = {**old, "epoch": 99}
    real = checkpoints._write_digests
    calls = []

    def stop_after_first(path, digests):
        real(path, digests)
        calls.append(list(digests))
        if len(calls) == 1:
            raise KeyboardInterrupt  # killed between the checksum file and the rename

    monkeypatch.setattr(checkpoints, "_write_digests", stop_after_first)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(str(ckpt), new)
    assert len(calls[0]) == 2 and read_checkpoint(str(ckpt))["epoch"] == old["epoch"]  # the old file checks
    buf = io.BytesIO()
    torch.save(new, buf)
    ckpt.write_bytes(buf.getvalue())  # as if renamed just before the kill
    assert read_checkpoint(str(ckpt))["epoch"] == 99  # the new file checks too


def test_a_new_run_refuses_a_path_that_holds_a_checkpoint_naming_both(tmp_path):
    ckpt = tmp_path / "c.pt"
    first = train(_windows(), cfg(checkpoint=str(ckpt)))
    before = ckpt.read_bytes()
    with pytest.raises(CheckpointError) as err:
        train(_windows(), cfg(hidden=16, checkpoint=str(ckpt)))
    msg = str(err.value)
    assert "\n" not in msg and f"checkpoint={str(ckpt)!r} already holds run {first.record['run_id']}" in msg
    assert "hidden 8 there, 16 here" in msg and "resume=True continues" in msg
    assert msg.endswith("overwrite_checkpoint=True replaces it, or give another checkpoint path")
    assert ckpt.read_bytes() == before  # kept as it was

    replaced = train(_windows(), cfg(hidden=16, checkpoint=str(ckpt), overwrite_checkpoint=True))
    state = read_checkpoint(str(ckpt))
    assert state["run_id"] == replaced.record["run_id"] != first.record["run_id"] and state["key"]["hidden"] == 16

    resumed = train(_windows(), cfg(hidden=16, epochs=2, checkpoint=str(ckpt), resume=True))
    assert resumed.record["run_id"] == replaced.record["run_id"] and len(resumed.record["epochs"]) == 2


def test_resume_and_overwrite_together_are_refused():
    with pytest.raises(ConfigError, match="choose one"):
        cfg(checkpoint="c.pt", resume=True, overwrite_checkpoint=True).validate()


@pytest.mark.slow
def test_the_cli_refuses_in_one_line_before_any_work(tmp_path, capsys):
    ckpt = tmp_path / "c.pt"
    base = ["train", "--start", "2020-01-01", "--end", "2020-02-15", "--epochs", "1", "--no-record",
            "--checkpoint", str(ckpt), "--device", "cpu", "--threads", "1"]
    assert cli.main(base + ["--hidden", "8"]) == 0
    before = ckpt.read_bytes()
    capsys.readouterr()
    assert cli.main(base + ["--hidden", "16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds run" in err[0] and "hidden 8 there, 16 here" in err[0], err
    assert ckpt.read_bytes() == before
    assert cli.main(base + ["--hidden", "16", "--overwrite-checkpoint"]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_checkpoint(str(ckpt))["key"]["hidden"] == 16


def test_resume_refuses_a_checkpoint_trained_on_other_data(tmp_path, capsys):
    """The same settings on other points (or hours, or another source at the same points) would append
    epochs of one series to a run of another: refused in one line, the checkpoint left as it was."""
    ckpt = tmp_path / "c.pt"
    base = ["train", "--start", "2020-01-01", "--end", "2020-02-15", "--no-record", "--hidden", "8",
            "--checkpoint", str(ckpt), "--device", "cpu", "--threads", "1", "--no-progress"]
    assert cli.main(base + ["--epochs", "1"]) == 0
    before = ckpt.read_bytes()
    capsys.readouterr()
    for other, what in ((["--point", "40,280"], "points: checkpoint"), (["--end", "2020-02-10"], "checkpoint"),
                        (["--source", "sample"], "the same points and hours with other values: another --source?")):
        assert cli.main(base + ["--epochs", "2", "--resume", *other]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "was trained on other data (" in err[0] and what in err[0], err
        assert ckpt.read_bytes() == before
    capsys.readouterr()
    assert cli.main(base + ["--epochs", "2", "--resume"]) == 0  # the same data: it goes on
    # the first process's first epoch and the resumed one's: both warm-up, both in the printed warm-up time
    assert "; warm-up 2 epochs " in capsys.readouterr().out
    assert read_checkpoint(str(ckpt))["epoch"] == 2
    # a finished, recorded run: its result is not handed back for a request on other data either
    done = ["train", "--start", "2020-01-01", "--end", "2020-02-15", "--hidden", "8", "--device", "cpu", "--threads", "1",
            "--no-progress", "--checkpoint", str(tmp_path / "d.pt"), "--results", str(tmp_path / "runs.jsonl")]
    assert cli.main(done + ["--epochs", "1"]) == 0
    capsys.readouterr()
    assert cli.main(done + ["--epochs", "1", "--resume", "--point", "40,280"]) == 2
    assert "was trained on other data (points: checkpoint" in capsys.readouterr().err


def test_resuming_past_the_cap_says_no_epoch_was_run(tmp_path):
    ckpt = tmp_path / "c.pt"
    train(_windows(), cfg(epochs=3, checkpoint=str(ckpt)))
    again = train(_windows(), cfg(epochs=2, checkpoint=str(ckpt), resume=True)).record["metrics"]
    assert again["epochs_run"] == 3
    assert again["stop_reason"] == "the checkpoint already held 3 epochs, more than the 2 asked for: no epoch was run"


def test_a_resumed_run_keeps_its_own_warm_up_out_of_the_steady_timing(tmp_path):
    """The first epoch after --resume starts the process again (threads, allocator, a graph's capture): it is
    warm-up, as the run's first epoch is, and the steady median is taken over the other epochs only."""
    ckpt = tmp_path / "c.pt"
    train(_windows(), cfg(epochs=2, checkpoint=str(ckpt)))
    record = train(_windows(), cfg(epochs=4, checkpoint=str(ckpt), resume=True)).record
    epochs, timing = record["epochs"], record["timing"]
    assert [e["warmup"] for e in epochs] == [True, False, True, False]
    assert (timing["warmup_epochs"], timing["steady_epochs"]) == (2, 2)
    steady = [epochs[1], epochs[3]]
    assert timing["epoch_s_median"] == pytest.approx(sum(e["train_s"] for e in steady) / 2)
    assert timing["samples_per_s"] == pytest.approx(sum(e["samples_per_s"] for e in steady) / 2)
