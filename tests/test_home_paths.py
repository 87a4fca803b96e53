"""``~`` in a path option is the user's home, for the work as for the checks before it. cmd and PowerShell
pass ``~`` to a program as typed (so does bash in ``--results=~/r``); the checks expanded it while the work
wrote to, or read from, a folder named ``~`` in the current one."""

from __future__ import annotations

import json
import os

import pytest

from lstmnb import cli


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A home folder of its own (HOME; USERPROFILE as Windows names it) and another current folder."""
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    monkeypatch.setenv("USERPROFILE", str(folder))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return folder


def _record(reason: str) -> dict:
    return {"schema": 1, "run_id": reason, "started": "2026-01-01T00:00:00+00:00", "experiment": "train",
            "status": "skipped", "reason": reason, "device": {"kind": "cpu"}}


def test_results_read_from_a_folder_given_with_a_tilde(home, capsys):
    (home / "r").mkdir()
    (home / "r" / "runs.jsonl").write_text(json.dumps(_record("in-home-r")) + "\n", encoding="utf-8")
    assert cli.main(["results", "~/r"]) == 0, capsys.readouterr().err
    assert "in-home-r" in capsys.readouterr().out


def test_the_default_results_folder_from_the_environment_expands_a_tilde(home, monkeypatch, capsys):
    (home / "env").mkdir()
    (home / "env" / "runs.jsonl").write_text(json.dumps(_record("in-home-env")) + "\n", encoding="utf-8")
    monkeypatch.setenv("LSTMNB_RESULTS", "~/env")
    assert cli.main(["results"]) == 0, capsys.readouterr().err
    assert "in-home-env" in capsys.readouterr().out


@pytest.mark.slow
def test_train_writes_its_record_and_checkpoint_where_the_check_looked(home, capsys):
    code = cli.main(["train", "--start", "2020-01-01", "--end", "2020-01-21", "--epochs", "1", "--hidden", "8",
                     "--window", "12", "--device", "cpu", "--no-progress", "--results=~/r", "--checkpoint", "~/c.pt"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert (home / "r" / "runs.jsonl").is_file() and (home / "c.pt").is_file()
    assert not os.path.exists("~"), "written to a folder named '~' in the current folder"
    assert str(home / "r" / "runs.jsonl") in out  # where the record went, as the home path it is
