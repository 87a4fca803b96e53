"""The core pipeline end to end on the embedded sample, through the Python API and the `lstmnb` command."""

import os
import subprocess
import sys

import pytest

from lstmnb import era5
from lstmnb.cli import main
from lstmnb.records import read_records
from lstmnb.training import TrainConfig, run


@pytest.mark.slow
def test_short_cpu_training_on_the_sample_beats_persistence(sample_store_path, tmp_path):
    # the published setting, three epochs: the LSTM must beat persistence at 1 h lead on test RMSE
    result = run(era5.Request(), TrainConfig(epochs=3, progress=False, device="cpu"), results=tmp_path)
    m = result.record["metrics"]
    assert m["test_rmse_k"] < m["persistence_rmse_k"] < m["climatology_rmse_k"]
    assert result.record["data"]["points"] == [[40.0, 280.0], [20.0, 280.0]]
    assert read_records(tmp_path)[0]["run_id"] == result.record["run_id"]


def test_cli_train_prints_table_and_appends_record(sample_store_path, tmp_path, capsys):
    rc = main(["train", "--start", "2020-01-01", "--end", "2020-02-29", "--epochs", "2", "--hidden", "8",
               "--results", str(tmp_path), "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "val_rmse_k" in out and "persistence" in out and "climatology" in out
    rec = read_records(tmp_path)
    assert len(rec) == 1 and rec[0]["config"]["hidden"] == 8 and len(rec[0]["epochs"]) == 2
    assert rec[0]["data"]["start"] == "2020-01-01"
    assert main(["results", str(tmp_path)]) == 0
    assert "test RMSE K" in capsys.readouterr().out


# `lstmnb` as a user runs it, in its own process: a rule of the config, the device (which only a process started
# without a visible GPU can be refused) and the data's dates; test_bad_input.py refuses every other bad value
# through the same `main` in this process
@pytest.mark.parametrize("args, message", [
    (["--epochs", "0"], "--epochs 0 must be a whole number >= 1"),
    (["--device", "cuda"], "no usable CUDA GPU"),
    (["--start", "1990-01-01", "--end", "1990-02-01"], "time range 1990-01-01T00..1990-02-01T23 is outside"),
])
def test_cli_bad_input_one_line_nonzero(sample_store_path, tmp_path, args, message):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU visible: --device cuda is refused on a GPU machine too
    proc = subprocess.run([sys.executable, "-m", "lstmnb", "train", "--no-progress", "--results", str(tmp_path),
                           *args], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and message in err[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "runs.jsonl").exists()  # nothing recorded for a run that did not happen


def test_results_on_empty_folder_is_a_clear_error(tmp_path, capsys):
    assert main(["results", str(tmp_path)]) == 2
    assert "no run records" in capsys.readouterr().err


def test_help_is_readable():
    proc = subprocess.run([sys.executable, "-m", "lstmnb", "train", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and "--batch-size" in proc.stdout and "published" in proc.stdout


def test_commands_that_do_not_train_do_not_import_torch(tmp_path):
    """`lstmnb --help`, `lstmnb data` and `lstmnb results` skip torch's import (about a second): the training
    options are built only for the command that trains, and records are read without it; the command
    that trains, and the whole parser, still have them."""
    from lstmnb.cli import build_parser

    probe = ("import contextlib, sys\nfrom lstmnb.cli import main\nwith contextlib.suppress(SystemExit):\n"
             "    main(sys.argv[1:])\nprint('torch imported' if 'torch' in sys.modules else 'no torch')")
    from lstmnb.records import append_record, new_record

    append_record(new_record("train", metrics={"test_rmse_k": 0.5}), tmp_path / "r")  # reading it needs no torch
    for args in (["--help"], ["data", "--status"], ["results", "--help"], ["results", str(tmp_path / "r")]):
        proc = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "LSTMNB_CACHE": str(tmp_path)})
        assert proc.stdout.strip().endswith("no torch"), (args, proc.stdout[-300:], proc.stderr[-300:])
    proc = subprocess.run([sys.executable, "-m", "lstmnb", "bench", "scaling", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "--hidden" in proc.stdout
    args = build_parser().parse_args(["bench", "scaling", "--hidden", "16"])
    assert args.hidden == 16


def test_every_training_knob_has_its_help_once_and_the_cli_shows_it():
    import dataclasses

    from lstmnb.cli import build_parser

    fields = dataclasses.fields(TrainConfig)
    assert [f.name for f in fields if not f.metadata.get("help")] == []
    train = next(a for a in build_parser()._subparsers._group_actions[0].choices.items() if a[0] == "train")[1]
    helps = {a.dest: a.help for a in train._actions}
    for f in fields:  # the option's help is the field's, plus its default (and the published preset's value)
        assert helps[f.name].startswith(f"{f.metadata['help']} (default: {f.default}")


def test_training_options_are_typed_from_the_config_annotations():
    import dataclasses

    from lstmnb.cli import build_parser
    from lstmnb.cli.options import int_list, option_type, train_config_from_args

    parser = build_parser()
    assert train_config_from_args(parser.parse_args(["train"])) == TrainConfig()  # every default kept
    args = parser.parse_args(["train", "--patience", "3", "--strategy", "ddp", "--nproc", "2", "--threads", "4", "--grad-clip", "0.5",
                              "--target-rmse", "1.5", "--split-dates", "2020-06-01,2020-09-01", "--bucket-cap-mb",
                              "10", "--checkpoint", "c.pt", "--no-progress", "--no-residual"])
    cfg = train_config_from_args(args)
    assert (cfg.patience, cfg.nproc, cfg.threads) == (3, 2, 4) and type(cfg.patience) is int
    assert (cfg.grad_clip, cfg.target_rmse, cfg.bucket_cap_mb) == (0.5, 1.5, 10.0) and type(cfg.grad_clip) is float
    assert cfg.split_dates == ("2020-06-01", "2020-09-01")
    assert cfg.checkpoint == "c.pt" and cfg.progress is False and cfg.residual is False
    changed = {f.name for f in dataclasses.fields(cfg) if getattr(cfg, f.name) != f.default}
    assert changed == {"patience", "strategy", "nproc", "threads", "grad_clip", "target_rmse", "split_dates",
                       "bucket_cap_mb", "checkpoint", "progress", "residual"}
    # the split by fractions instead (beside --split-dates it is refused: test_bad_input)
    assert train_config_from_args(parser.parse_args(["train", "--fractions", "0.6,0.2,0.2"])).fractions == (0.6, 0.2, 0.2)
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--patience", "1.5"])  # int | None parses as int, not str
    assert option_type("x", tuple[int, ...]) is int_list and option_type("x", bool | None) is bool
    with pytest.raises(TypeError, match="TrainConfig.x: no command-line option type"):
        option_type("x", dict[str, int])


def test_results_experiment_is_a_prefix(tmp_path, capsys):
    from test_report import run_record, write_jsonl

    recs = [run_record("cpu", "cpu", 1, "fast", 1.0, experiment=e)
            for e in ("scaling-strong", "scaling-weak", "quickstart")]
    for rec in recs:
        rec["timing"]["wall_s"] = 10.0  # what `bench cost` prices
    write_jsonl(tmp_path / "runs.jsonl", recs)
    assert main(["results", str(tmp_path), "--experiment", "scaling"]) == 0
    out = capsys.readouterr().out
    assert "scaling-strong" in out and "scaling-weak" in out and "quickstart" not in out
    assert "None" not in out and "18000" in out and "18,000.000" not in out  # samples/s whole; nothing as None
    assert main(["results", str(tmp_path), "--experiment", "fit"]) == 2
    assert "no run records of experiment fit* in" in capsys.readouterr().err
    assert main(["bench", "cost", str(tmp_path), "--experiment", "scaling-w"]) == 0
    out = capsys.readouterr().out
    assert "scaling-weak" in out and "scaling-strong" not in out


def test_save_plot_takes_the_format_from_the_suffix(tmp_path, capsys):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lstmnb.cli.options import save_plot

    fig, _ = plt.subplots()
    save_plot(fig, str(tmp_path / "out.d" / "plot"))  # no suffix: PNG
    assert (tmp_path / "out.d" / "plot").read_bytes().startswith(b"\x89PNG")
    save_plot(fig, str(tmp_path / "plot.svg"))
    assert b"<svg" in (tmp_path / "plot.svg").read_bytes()
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["out.d", "plot", "plot.svg"]  # no temporaries left
    assert f"plot       {tmp_path / 'plot.svg'}" in capsys.readouterr().out


def test_results_by_machine_and_the_columns_that_tell_runs_apart(capsys):
    """The shipped H100 reference records: one row per device column with its provenance; per run, the
    lead, preset, lr, residual, source and the epochs actually run."""
    from pathlib import Path

    import lstmnb

    paths = [str(Path(lstmnb.__file__).parent / "reference_records")]
    assert main(["results", *paths, "--by", "machine"]) == 0
    out = capsys.readouterr().out
    assert "H100" in out and "dc6aa31" in out and "vm" in out
    assert main(["results", *paths, "--last", "3"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    for column in ("source", "lead h", "lr", "residual", "epochs run"):
        assert column in header, column


def test_windows_and_config_must_agree_on_the_inputs():
    """A model sized from the windows' features would train on inputs the record's config does not name."""
    import numpy as np
    import pandas as pd

    from lstmnb.errors import ConfigError
    from lstmnb.training import TrainConfig
    from lstmnb.training.pipeline import check_windows
    from lstmnb.windows import make_windows

    t = pd.date_range("2020-01-01", periods=24 * 20, freq="h")
    w = make_windows(280 + np.sin(np.arange(len(t)) / 5.0), t, TrainConfig(window=6).window_config())
    check_windows(w, TrainConfig(window=6))
    with pytest.raises(ConfigError, match=r"built with calendar True \(config False\), cycles True \(config False\)"):
        check_windows(w, TrainConfig(window=6, calendar=False, cycles=False))
