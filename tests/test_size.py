"""The problem-size experiment on this machine: real runs on the CPU, GPU rows skipped (or run) honestly."""

from __future__ import annotations

import pytest
import torch

from lstmnb.data import Request
from lstmnb.datasets.study import STUDY_POINTS
from lstmnb.errors import ConfigError
from lstmnb.experiments import size
from lstmnb.training import TrainConfig


def test_grid_points_start_with_the_published_two_and_stay_in_the_box():
    pts = size.grid_points(8)
    assert pts[:2] == STUDY_POINTS and len(set(pts)) == 8
    assert all(19 <= lat <= 41 and 279 <= lon <= 281 for lat, lon in pts)
    assert size.grid_points(1) == STUDY_POINTS[:1]
    with pytest.raises(ConfigError, match="^points=900 must be between 1 and the box's 801 grid cells"):
        size.grid_points(900)


def test_size_experiment_records_every_point_and_variant(tmp_path):
    request = Request(start="2020-01-01", end="2020-01-12")
    # mixed precision is the GPU variants' (torch's autocast on the CPU is another matter): the CPU's runs in float32
    cfg = TrainConfig(window=12, hidden=8, epochs=2, batch_size=64, progress=False, amp="fp16")
    recs = size.size_experiment(request, cfg, size.SizeConfig(points=(2, 4)), results=tmp_path)
    assert [(r["size"]["points"], r["size"]["variant"]) for r in recs] == [
        (n, v) for n in (2, 4) for v in size.VARIANTS]
    cpu = [r for r in recs if r["size"]["variant"] == "cpu"]
    assert all(r["status"] == "ok" and r["device"]["kind"] == "cpu" and r["config"]["amp"] == "off" for r in cpu)
    assert all(r["data"]["source"] == "sample" and r["data"]["kind"] == "synthetic" for r in cpu)  # sizes need an area
    assert cpu[1]["size"]["train_samples"] == 2 * cpu[0]["size"]["train_samples"]  # twice the points, twice the samples
    gpu = [r for r in recs if r["size"]["variant"] != "cpu"]
    if not torch.cuda.is_available():
        assert all(r["status"] == "skipped" and "no usable CUDA GPU" in r["reason"] and "timing" not in r for r in gpu)
    table = size.size_table(recs)
    assert list(table.index) == [2, 4] and table[("samples/s", "cpu")].gt(0).all()
    assert (tmp_path / "runs.jsonl").read_text().count("\n") == len(recs)


def test_speedup_and_crossover_from_records():
    def rec(n, variant, sps):
        return {"status": "ok", "size": {"points": n, "variant": variant},
                "timing": {"samples_per_s": sps, "epoch_s_median": 1000 / sps}}

    recs = [rec(2, "cpu", 100), rec(2, "cuda-eager", 80), rec(2, "cuda-graph", 150),
            rec(32, "cpu", 100), rec(32, "cuda-eager", 400), rec(32, "cuda-graph", 1200)]
    table = size.size_table(recs)
    assert table.loc[32, ("speedup vs cpu", "cuda-graph")] == pytest.approx(12.0)
    assert size.crossover(table) == {"cuda-eager": 32, "cuda-graph": 2}
    text = size.format_size_table(table)
    assert text.loc[2, "speedup vs cpu cuda-eager"] == "0.80x"


def test_the_command_says_its_data_is_the_synthetic_sample(tmp_path, capsys):
    from lstmnb.cli import main

    assert main(["bench", "size", "--points", "2", "--variants", "cpu", "--epochs", "2", "--end", "2020-01-10",
                 "--hidden", "8", "--window", "12", "--no-progress", "--results", str(tmp_path)]) == 0
    assert "data: sample (synthetic data) at every size" in capsys.readouterr().out


def test_bench_size_offers_no_point_or_box_that_it_would_ignore(capsys):
    """The sizes' grid points are bench size's own (--points): --point and --box were offered in its --help and
    ignored without a word. They are not options of bench size now: refused in one line, before any work."""
    from lstmnb import cli

    parser = cli.build_parser("bench")
    size = next(a for a in parser._actions if a.dest == "command").choices["bench"]
    size = next(a for a in size._actions if a.dest == "bench_kind").choices["size"]
    options = {o for a in size._actions for o in a.option_strings}
    assert "--points" in options and not {"--point", "--box"} & options
    for extra in (["--point", "40,280"], ["--box", "30,50,270,290"]):
        assert cli.main(["bench", "size", "--points", "2", *extra]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and extra[0] in err, err

