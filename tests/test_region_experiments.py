"""Region mode from the command line: `lstmnb region skill|memory|scaling` on small real areas, each case
a run record with its threads section (experiments/region*.py), region rows in `lstmnb results`, and their
bad input as one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from lstmnb.cli import main
from lstmnb.records import read_records
from lstmnb.region.grid import record_maps

BOX = ["--box", "39.5,40,279,279.75"]  # 3 x 4 cells


def _area(store, box=BOX) -> list[str]:
    return ["--source", str(store), *box, "--start", "2020-01-01", "--end", "2020-01-10", "--window", "12",
            "--hidden", "8"]


def test_region_skill_records_every_run_with_each_cells_scores(small_store, tmp_path, capsys):
    rc = main(["region", "skill", *_area(small_store), "--epochs", "2", "--batch-size", "64", "--neighbours", "3,5",
               "--device", "cpu", "--no-progress", "--results", str(tmp_path), "--plot", str(tmp_path / "skill.png")])
    out = capsys.readouterr().out
    assert rc == 0, out
    recs = read_records(tmp_path)
    assert [(r["region"]["variant"], r["region"]["neighbours"]) for r in recs] == [
        ("none", 0), ("sparse", 3), ("sparse", 5), ("dense", recs[1]["region"]["neighbours"] if recs[1]["region"]["chosen"]
                                                    else 5)]
    assert sum(r["region"]["chosen"] for r in recs[1:3]) == 1
    for r in recs:
        assert r["experiment"] == "region-skill" and r["status"] == "ok" and len(r["epochs"]) == 2
        assert r["data"]["shape"] == [3, 4] and len(r["skill"]["per_point"]) == 12
        assert r["threads"]["used"] >= 1 and r["threads"]["policy"] and r["metrics"]["stop_reason"]
        assert r["config"]["preset"] == "recommended" and r["config"]["patience"] == 5  # the point model's stopping
        maps = record_maps(r)  # the cells' scores, pooled over their targets, are the run's pooled figures
        for name, key in (("model", "test_rmse_k"), ("persistence", "persistence_rmse_k"),
                          ("climatology", "climatology_rmse_k")):
            assert maps.attrs[f"pooled_rmse_{name}"] == pytest.approx(r["metrics"][key], rel=1e-6)
        assert set(r["skill"]["per_point"][0]) >= {"mse_skill_vs_persistence", "mse_skill_vs_climatology"}
    # every variant is scored on the same targets: the baselines agree across records
    assert len({round(r["metrics"]["persistence_rmse_k"], 9) for r in recs}) == 1
    assert "3 x 4 cells, test period 2020-01-09 .. 2020-01-10, 1 h ahead" in out
    assert "MSE skill score vs none" in out and "upstream" in out and "downstream" in out
    assert "the point model on average" in out and "ran all 2 epochs" in out and "threads: " in out
    assert (tmp_path / "skill.png").stat().st_size > 10_000
    # `lstmnb results` shows the region rows' box, variables and their own figures
    assert main(["results", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    assert "39.5,40,279,279.75" in table and "2m_temperature" in table and "region variant" in table
    assert "cells" in table.splitlines()[0]


def test_region_skill_mixes_every_weather_variable(small_store, tmp_path, capsys):
    rc = main(["region", "skill", *_area(small_store), "--variable", "2m_temperature", "--variable",
               "surface_pressure", "--variants", "sparse", "--neighbours", "4", "--epochs", "1", "--batch-size", "64",
               "--no-progress", "--results", str(tmp_path)])
    assert rc == 0, capsys.readouterr()
    (rec,) = read_records(tmp_path)
    assert rec["region"]["n_mixed"] == 2 and rec["data"]["features"][:2] == ["2m_temperature", "surface_pressure"]
    assert rec["model"]["flops_per_sample"]["forward"] > 0


@pytest.mark.parametrize("box", [BOX, ["--box", "40,40,279,279"]], ids=["3x4", "one-cell"])
def test_region_skill_with_variants_none_prints_its_tables(small_store, tmp_path, capsys, box):
    """The point model alone (the one-cell box's refusal suggests it): no mix to set against none, so no
    upstream/downstream table, but the skill table, the threads and the record, end to end."""
    rc = main(["region", "skill", *_area(small_store, box), "--variants", "none", "--epochs", "1", "--batch-size",
               "64", "--no-progress", "--results", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    (rec,) = read_records(tmp_path)
    assert rec["region"]["variant"] == "none" and rec["status"] == "ok"
    table = out[out.index("cells, test period"):]
    assert all(row in table for row in ("none", "persistence", "climatology", "MSE skill score vs none"))
    assert "upstream" not in out and "threads: " in out and "1 record(s) appended" in out


@pytest.mark.slow
def test_region_memory_records_each_case_with_its_threads(tmp_path, capsys):
    rc = main(["region", "memory", "--sides", "4,300", "--variants", "sparse", "--budget-gb", "0.5", "--steps", "1",
               "--window", "6", "--hidden", "8", "--target", "5x6", "--threads", "1", "--results", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    recs = read_records(tmp_path)
    assert [(r["status"], r["region"]["cells"], r["region"]["target"]) for r in recs] == [
        ("ok", 16, False), ("skipped", 90_000, False), ("ok", 30, True)]
    assert "over the 0.5 GiB budget: not run" in recs[1]["reason"] and recs[1]["memory"]["measured_bytes"] is None
    for r in (recs[0], recs[2]):
        assert r["memory"]["measured_bytes"] > 0 and r["timing"]["step_s"] > 0 and r["memory"]["within_budget"]
        assert r["region"]["peak_mib"] == pytest.approx(r["memory"]["measured_bytes"] / 2**20)
    assert all(r["threads"]["used"] == 1 and r["threads"]["policy"] == "explicit" for r in recs)
    assert all(r["config"]["threads"] == 1 for r in recs)  # what each measuring process ran
    assert "largest square area within 0.5 GiB, sparse" in out and "within the 0.5 GiB budget" in out
    assert main(["results", str(tmp_path)]) == 0
    assert "peak MiB" in capsys.readouterr().out


@pytest.mark.slow
def test_region_scaling_compares_equal_total_threads(small_store, tmp_path, capsys):
    rc = main(["region", "scaling", *_area(small_store), "--world-sizes", "1,2", "--modes", "tiles", "--steps", "3",
               "--batch-size", "4", "--repeats", "1", "--results", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    one1, one2, tiles = read_records(tmp_path)
    # one process of N threads against N ranks of one thread: the same total
    assert [(r["region"]["mode"], r["threads"]["ranks"], r["threads"]["per_rank"], r["threads"]["total"])
            for r in (one1, one2, tiles)] == [("one process", 1, 1, 1), ("one process", 1, 2, 2), ("tiles", 2, 1, 2)]
    assert all(r["threads"]["comparison"].startswith("equal total threads") and r["threads"]["free_now"] >= 1
               and r["threads"]["used"] == r["threads"]["per_rank"] for r in (one1, one2, tiles))
    assert "world_size" not in tiles  # the report's multi-device findings are about DDP and DataParallel runs
    assert tiles["timing"]["one_process_step_s"] == one2["timing"]["step_s"]
    if one2["timing"]["step_s"] > one1["timing"]["step_s"]:  # the 2-thread baseline was slowed by busy cores
        assert tiles["region"]["speedup"] is None and "ran slower than one of 1" in tiles["region"]["speedup_withheld"]
    else:
        assert tiles["region"]["speedup"] == pytest.approx(one2["timing"]["step_s"] / tiles["timing"]["step_s"])
    np.testing.assert_allclose(tiles["metrics"]["losses"], one1["metrics"]["losses"], rtol=1e-5)
    np.testing.assert_allclose(one2["metrics"]["losses"], one1["metrics"]["losses"], rtol=1e-5)
    assert tiles["region"]["rank_cells"] == [8, 4]  # three rows over two ranks: 2 and 1 rows of 4 cells
    area_bytes = one1["region"]["rank_held_bytes"][0]  # the one process holds the whole area's series
    assert tiles["region"]["rank_held_bytes"] == [area_bytes * 2 // 3, area_bytes // 3]
    assert min(tiles["region"]["bytes_sent_per_step"]) > 0  # the halo rows cross between the bands
    assert "N gloo ranks of one thread against one process of N threads" in out and "cores free now: " in out
    assert main(["results", str(tmp_path)]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert all(w in header for w in ("box", "region mode", "cells", "step s", "speedup"))


@pytest.mark.parametrize("args, message", [
    (["skill", "--point", "40,280"], "region mode works on a box of cells, not on points"),
    (["skill", "--variants", "sparse,gru"], "'gru' not known; choose from sparse,none,dense"),
    (["skill", "--neighbours", "-1"], "--neighbours -1: each k must be a whole number >= 1"),
    (["skill", "--dropout", "0.2"], "unrecognized arguments: --dropout 0.2"),  # the region model has none
    # a 2 x 2 box on the defaults (k = 8, 24) and a one-cell box: refused with what to do once the box is read,
    # before any training (the extraction's progress bar aside, hence --no-progress here)
    (["skill", "--box", "39.75,40,279,279.25", "--end", "2020-01-10", "--no-progress"],
     "--neighbours 8: a box of 4 cells gives each cell 1..3 neighbours; give each k in 1..3 (e.g. --neighbours 3), a "
     "larger box, or --variants none"),
    (["skill", "--box", "40,40,279,279", "--end", "2020-01-10", "--no-progress"], "the box holds 1 cell, which has no neighbours"),
    (["memory", "--target", "60by168"], "--target '60by168' is not ROWSxCOLS"),
    (["memory", "--sides", "1,10"], "sides must be whole numbers >= 2"),
    (["memory", "--target", "60x168", "--budget-gb", "0.05"],
     "--target 60x168: the sparse step needs"),
    (["memory", "--threads", "0"], "--threads 0 must be a whole number >= 1"),
    # a budget over this machine's memory, and areas off the synthetic grid: refused before any case runs
    (["memory", "--budget-gb", "100000"], "--budget-gb 100000: this machine has "),
    (["memory", "--budget-gb", "1e300"], "--budget-gb 1e+300: this machine has "),
    (["memory", "--sides", "10,2000"], "--sides 10,2000: an area of 2000 rows of the synthetic grid (0.25 degree "
     "cells from 60N) leaves -90..90 latitude; give sides of at most 601"),
    (["memory", "--target", "10x1441"], "--target 10x1441: an area of 1441 columns of 0.25 degrees goes round the "
     "globe more than once; give at most 601 rows and 1440 columns"),
    (["scaling", "--world-sizes", "0,2"], "--world-sizes 0,2: ranks must be in 1.."),
    # more ranks than cores: said before the one-process case runs, naming the option this command has
    (["scaling", "--world-sizes", "1,4096"], "--world-sizes 1,4096: ranks must be in 1.."),
    (["scaling", "--repeats", "0"], "--repeats 0 must be a whole number >= 1"),
    (["scaling", "--window", "0"], "--window 0 must be a whole number >= 1"),  # its training knobs, as typed too
    # a box too small for the k or the ranks asked: said once the box is read, before any run, with what to give
    (["scaling", "--box", "40,40,279,279", "--end", "2020-01-10", "--world-sizes", "1"],
     "the box holds 1 cell, too small for the sparse mix: it has no neighbours (k >= 1); give a larger box"),
    (["scaling", "--box", "40,40,279,279", "--end", "2020-01-10"], "the box holds 1 cell, too small for the sparse mix"),
    (["scaling", "--box", "40,40,279,280", "--end", "2020-01-10"],
     "--neighbours 8: a box of 5 cells (1 x 5) is too small: it gives each cell 1..4 neighbours; give k in 1..4 "
     "(e.g. --neighbours 4), or a larger box"),
    (["scaling", "--box", "40,40,279,281", "--end", "2020-01-10", "--world-sizes", "1,2"],
     "--world-sizes 1,2: a box of 1 row of cells is too small for 2 tiles ranks (one band of rows each); give "
     "--world-sizes up to 1, a box of at least 2 rows, or --modes windows"),
    # windows mode: too few training windows for the ranks, once the data is read
    (["scaling", "--box", "39.75,40,279,279.25", "--neighbours", "3", "--end", "2020-01-02", "--window", "33",
      "--modes", "windows"],
     "--world-sizes 2: the training part holds 1 window(s), so some ranks would get none; use fewer ranks"),
    (["scaling", "--lr", "-1"], "--lr -1.0 must be a positive number"),  # this command's own --lr, no rate by lead
])
def test_bad_region_input_is_one_line(small_store, tmp_path, capsys, args, message):
    argv = ["region", *args, "--results", str(tmp_path)]
    if args[0] != "memory":
        argv += ["--source", str(small_store)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "runs.jsonl").exists()


def test_the_box_checks_name_the_arguments_as_python_gives_them():
    """The studies are shared with the notebooks: called from Python, the box's refusals name the arguments there."""
    from lstmnb import era5
    from lstmnb.errors import ConfigError
    from lstmnb.experiments.region import check_scaling_area, region_memory
    from lstmnb.experiments.region_skill import region_windows
    from lstmnb.training import preset_config

    with pytest.raises(ConfigError, match=r"^neighbours=8: a box of 3 cells \(1 x 3\) is too small: it gives each cell "
                                          r"1..2 neighbours; give k in 1..2 \(e.g. neighbours=2\), or a larger box$"):
        check_scaling_area((1, 3), 8, [1], ("tiles",))
    with pytest.raises(ConfigError, match=r"^world_sizes=\(1, 2\): a box of 1 row of cells is too small for 2 tiles "
                                          r"ranks \(one band of rows each\); give world_sizes up to 1, a box of at least "
                                          r"2 rows, or modes=\('windows',\)$"):
        check_scaling_area((1, 5), 4, [1, 2], ("tiles",))
    with pytest.raises(ConfigError, match=r"e.g. box=\(39, 39.5, 279, 279.5\) \(3 x 3 cells\)$"):
        check_scaling_area((1, 1), 8, [1], ("windows",))
    with pytest.raises(ConfigError, match=r"not on points; give box=\(lat_min, lat_max, lon_min, lon_max\)$"):
        region_windows(era5.Request(), preset_config())
    with pytest.raises(ConfigError, match=r"^target=\(60, 168\): the sparse step needs [\d,]+ MiB by the memory model, "
                                          r"over the budget_bytes=1000 budget"):
        region_memory([4], target=(60, 168), budget_bytes=1000)


@pytest.mark.slow
def test_a_target_measured_over_the_budget_is_marked_so(tmp_path, capsys):
    """The memory model leaves out the runtime's own memory until it is measured: a target it puts just under
    the budget can measure over it, and is then said to be over, not 'ok'."""
    from lstmnb.region.memory import MemoryCase, predict_bytes

    case = MemoryCase(ny=5, nx=6, window=6, hidden=8, steps=1)
    budget_gb = (predict_bytes(case)["total"] + 1) / 2**30  # the step alone fits; with the runtime it does not
    rc = main(["region", "memory", "--sides", "4", "--variants", "sparse", "--budget-gb", repr(budget_gb), "--steps",
               "1", "--window", "6", "--hidden", "8", "--target", "5x6", "--results", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    target = read_records(tmp_path)[-1]
    assert target["region"]["target"] and target["memory"]["within_budget"] is False
    assert target["memory"]["measured_bytes"] > target["memory"]["budget_bytes"]
    assert "over budget" in out and "OVER the" in out
