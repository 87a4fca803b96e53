"""Outputs and messages (issue 15): a write that fails after the work prints the work first; southern
latitudes and western longitudes need no `=`; errors describe what is there (a store's longitudes
across 0, a read-only cache, a results file with broken lines in one line)."""

from __future__ import annotations

import argparse

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from lstmnb import cli, paths, records
from lstmnb.cli.options import train_config_from_args
from lstmnb.data import Request, StoreRef, make_plan
from lstmnb.data.plan import lon_span
from lstmnb.errors import DataError, OutputError


# --- negative numbers after --point and --box ------------------------------------------------------------

@pytest.mark.parametrize("argv, points, box", [
    (["--point", "-33,151"], [(-33.0, 151.0)], None),
    (["--point", "-33.9,-70.5", "--point", "40,280"], [(-33.9, -70.5), (40.0, 280.0)], None),
    (["--point=-33,151"], [(-33.0, 151.0)], None),
    (["--box", "-35,-30,150,152"], None, (-35.0, -30.0, 150.0, 152.0)),
    (["--box", "-.5,.5,-1,1"], None, (-0.5, 0.5, -1.0, 1.0)),
])
def test_negative_coordinates_need_no_equals_sign(argv, points, box):
    parser = cli.build_parser("data")
    args = parser.parse_args(cli.join_negative_values(["data", *argv], cli.value_options(parser)))
    assert args.points == points and args.box == box


def test_a_southern_point_reaches_the_store_check(capsys, sample_store_path):
    """`--point -33,151` is read as a point (not "expected one argument"): outside the sample's grid it is
    refused by the store check, naming the point and what the store covers."""
    assert cli.main(["data", "--source", "sample", "--point", "-33,151", "--start", "2020-01-01", "--end", "2020-01-02",
                     "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "point (-33, 151) is outside this store's grid (latitude 19..41" in err


def _long_options(parser, path: list[str]) -> set[str]:
    for name in path:  # down the sub-commands
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = sub.choices[name]
    return {o for a in parser._actions for o in a.option_strings if o.startswith("--")}


@pytest.mark.parametrize("path, offered, not_offered", [
    (["train"], {"--checkpoint", "--overwrite-checkpoint", "--nproc", "--bucket-cap-mb"}, set()),
    (["bench", "scaling"], {"--bucket-cap-mb", "--static-graph"}, {"--checkpoint", "--overwrite-checkpoint"}),
    (["skill"], set(), {"--overwrite-checkpoint", "--resume", "--bucket-cap-mb", "--static-graph", "--nproc"}),
    (["bench", "size"], set(), {"--overwrite-checkpoint", "--bucket-cap-mb", "--uneven-shards"}),
    (["bench", "batch-sweep"], set(), {"--overwrite-checkpoint", "--dist-timeout-s", "--grad-as-bucket-view"}),
    (["region", "skill"], set(), {"--overwrite-checkpoint", "--bucket-cap-mb"}),
])
def test_a_sub_command_offers_only_the_options_it_acts_on(path, offered, not_offered):
    """A study of many single-device runs has no checkpoint of one run and starts no DDP ranks: options for
    those would be accepted and do nothing."""
    options = _long_options(cli.build_parser(path[0]), path)
    assert offered <= options and not (not_offered & options), (offered - options, not_offered & options)
    assert "--epochs" in options


def test_an_optional_knob_is_turned_off_with_none_as_its_help_says():
    parser = cli.build_parser("train")
    args = parser.parse_args(["train", "--patience", "none", "--threads", "None", "--lr", "2e-3"])
    assert args.patience is None and args.threads is None and args.lr == 2e-3
    assert train_config_from_args(args).patience is None
    with pytest.raises(SystemExit):  # anything else is still an int
        parser.parse_args(["train", "--patience", "never"])


def test_an_unknown_option_is_named_by_its_sub_command_with_the_nearest_one(capsys):
    assert cli.main(["skill", "--lead-hours", "6"]) == 2
    err = capsys.readouterr().err
    assert err == ("lstmnb skill: error: unrecognized arguments: --lead-hours 6; did you mean --leads? "
                   "(see `lstmnb skill --help`)\n")
    assert cli.main(["bench", "allreduce", "--qqq"]) == 2
    assert capsys.readouterr().err.startswith("lstmnb bench allreduce: error: unrecognized arguments: --qqq (see")


def test_joining_leaves_other_arguments_alone():
    opts = {"--point", "--lr"}
    assert cli.join_negative_values(["train", "--lr", "-1", "--no-progress", "--", "--point", "-3,4"], opts) == \
        ["train", "--lr=-1", "--no-progress", "--", "--point", "-3,4"]
    assert cli.join_negative_values(["notebooks", "run", "-p", "lat", "-33"], opts) == \
        ["notebooks", "run", "-p", "lat", "-33"]


# --- argparse errors in one line ------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["train", "--batch-size", "big"], ["bench", "scaling", "--mode", "x"],
                                  ["notebooks", "run", "--only"], ["scratch", "bench", "--nope"], ["--nope"]])
def test_parse_errors_are_one_line_not_the_usage_block(capsys, argv):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: " in err and "usage:" not in err and "--help`" in err


# --- a write that fails after the work ------------------------------------------------------------------

@pytest.mark.slow
def test_training_prints_its_results_when_the_record_cannot_be_written(tmp_path, capsys, sample_store_path):
    """The results file passes the check up front, but the disk is full when the record is appended
    (/dev/full): the epochs table and metrics are printed, then the record as a line to keep, then one
    error line naming the file; exit status 1 (the work ran; only its record is missing)."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this machine")
    full = tmp_path / "full.jsonl"
    full.symlink_to("/dev/full")
    # on the CPU wherever it runs: a GPU run may add a warning line of its own to stderr
    code = cli.main(["train", "--start", "2020-01-01", "--end", "2020-01-21", "--epochs", "1", "--hidden", "8",
                     "--window", "12", "--device", "cpu", "--no-progress", "--results", str(full)])
    out, err = capsys.readouterr()
    assert code == 1
    assert "epoch" in out and "persistence" in out and "climatology" in out  # the epochs and metrics tables
    kept = json.loads(out.strip().splitlines()[-1])  # the record, as the last line, ready to append by hand
    assert kept["status"] == "ok" and kept["config"]["hidden"] == 8
    assert err.count("\n") == 1 and f"could not be appended to {full}: disk full (No space left" in err


def test_a_failed_plot_write_names_the_file_and_keeps_exit_status_one(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lstmnb.cli.options import save_plot

    fig = plt.figure()
    target = tmp_path / "gone" / "p.png"
    (tmp_path / "gone").write_text("a file where the folder should be")  # appeared after the check
    with pytest.raises(OutputError, match=r"--plot .*p.png could not be written") as info:
        save_plot(fig, str(target))
    plt.close(fig)
    assert info.value.exit_status == 1


# --- the checks themselves ------------------------------------------------------------------------------

def test_check_writable_creates_nothing(tmp_path):
    before = sorted(tmp_path.rglob("*"))
    assert paths.check_writable(tmp_path / "a" / "b" / "r.jsonl", "file") == tmp_path / "a" / "b" / "r.jsonl"
    paths.check_writable(tmp_path / "new-folder", "folder")
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("make, kind, message", [
    (lambda t: t / "d", "file", "is a folder"),
    (lambda t: t / "f", "folder", "is a file, not a folder"),
    (lambda t: t / "f" / "x.jsonl", "file", "f is a file, not a folder"),
    (lambda t: "", "file", "path is empty"),
])
def test_check_writable_refuses_the_wrong_kind(tmp_path, make, kind, message):
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match=message):
        paths.check_writable(make(tmp_path), kind)


def test_cache_dir_on_a_file_is_one_clear_error(tmp_path, monkeypatch):
    (tmp_path / "f").write_text("x")
    monkeypatch.setenv("LSTMNB_CACHE", str(tmp_path / "f" / "cache"))
    with pytest.raises(OutputError, match=r"cache folder .*f/cache cannot be created: a file stands where a folder is needed"):
        paths.cache_dir()


def test_a_read_only_place_is_reported_as_read_only(tmp_path):
    """A real failed write (into a chmod 555 folder, or a read-only system folder as root) reads
    'read-only', not '(disk full?)'."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        for folder in (ro, Path("/sys")):
            try:
                (folder / "x").write_text("x")
            except OSError as exc:
                assert paths.why_not_written(exc).startswith("read-only")
                return
            (folder / "x").unlink()
        pytest.skip("no read-only folder here")
    finally:
        ro.chmod(0o755)


# --- messages -------------------------------------------------------------------------------------------

def _store(lon: np.ndarray) -> xr.Dataset:
    lat = np.array([41.0, 40.75, 40.5])
    time = pd.date_range("2020-01-01", periods=4, freq="h")
    data = np.zeros((time.size, lat.size, lon.size), dtype=np.float32)
    return xr.Dataset({"2m_temperature": (("time", "latitude", "longitude"), data)},
                      coords={"time": time, "latitude": lat, "longitude": lon})


def test_a_store_across_the_0_meridian_is_described_as_it_is():
    lon = np.concatenate([np.arange(350.0, 360.0, 0.25), np.arange(0.0, 2.01, 0.25)])
    assert lon_span(lon) == "350..2 (0..360, across 0)"
    assert lon_span(np.arange(0.0, 360.0, 0.25)) == "0..359.75 (0..360, all longitudes)"
    assert lon_span(np.arange(279.0, 281.01, 0.25)) == "279..281 (0..360)"
    ref = StoreRef("test", "/nowhere", False)
    with pytest.raises(DataError, match=r"longitude 350\.\.2 \(0\.\.360, across 0\)"):
        make_plan(_store(lon), ref, Request(source="sample", points=((40.5, 180.0),), start="2020-01-01T00", end="2020-01-01T03"))
    plan = make_plan(_store(lon), ref, Request(source="sample", points=((40.5, -5.0),), start="2020-01-01T00", end="2020-01-01T03"))
    assert plan.targets  # inside the wrapped span: found


def test_broken_lines_of_a_results_file_are_one_warning_line(tmp_path, capsys):
    from test_report import run_record

    good = json.dumps(run_record("cpu", "Intel", 5, "fast", 10.0))
    garbage = [os.urandom(60).hex()[: 20 + i] for i in range(35)]
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join([garbage[0], good, *garbage[1:]]) + "\n")
    assert cli.main(["results", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err.count("\n") == 1
    assert err.startswith(f"lstmnb: warning: {path}:1: skipped 35 broken record lines, the first at line 1")
    assert "UserWarning" not in err and "warnings.warn" not in err
    assert "Intel" in out or "cpu" in out.lower()  # the good record is shown
    assert records.BrokenRecordsWarning  # importable for callers that filter it


def test_a_warning_the_libraries_repeat_is_said_once_in_one_line(tmp_path, capsys):
    # torch warns at every DataLoader it builds when the workers outnumber the cores (training and
    # validation loaders, again after any warnings filter change): the command says it once
    from lstmnb.machine.device import cpu_cores

    argv = ["train", "--start", "2020-01-01", "--end", "2020-01-20", "--epochs", "2", "--hidden", "8", "--device",
            "cpu", "--threads", "1", "--no-progress", "--no-record", "--input-path", "dataloader",
            "--num-workers", str(cpu_cores() + 1)]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "worker processes" in line]
    assert len(said) == 1 and said[0].startswith("lstmnb: warning: This DataLoader will create"), err
    from lstmnb.errors import one_line_warnings

    show, out = one_line_warnings("lstmnb rank 1"), tmp_path / "w.txt"
    with out.open("w") as fh:
        for text in ("a\n  b", "a b", "c"):
            show(UserWarning(text), UserWarning, "x.py", 1, file=fh)
    assert out.read_text() == "lstmnb rank 1: warning: a b\nlstmnb rank 1: warning: c\n"
