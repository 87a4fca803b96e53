"""Region mode from the command line: `lstmnb region skill|memory|scaling` on small real areas, each case
a run record (experiments/region.py), and their bad input as one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from lstmnb.cli import main
from lstmnb.records import read_records
from lstmnb.region.grid import record_maps

BOX = ["--box", "39.5,40,279,279.75"]  # 3 x 4 cells


def _area(store) -> list[str]:
    return ["--source", str(store), *BOX, "--start", "2020-01-01", "--end", "2020-01-10", "--window", "12",
            "--hidden", "8"]


def test_region_skill_records_every_variant_with_each_cells_scores(small_store, tmp_path, capsys):
    rc = main(["region", "skill", *_area(small_store), "--epochs", "2", "--steps", "3", "--batch-size", "4",
               "--results", str(tmp_path), "--plot", str(tmp_path / "skill.png")])
    out = capsys.readouterr().out
    assert rc == 0, out
    recs = read_records(tmp_path)
    assert [r["config"]["variant"] for r in recs] == ["sparse", "none", "dense"]
    for r in recs:
        assert r["experiment"] == "region-skill" and r["status"] == "ok" and len(r["epochs"]) == 2
        assert r["data"]["shape"] == [3, 4] and len(r["skill"]["per_point"]) == 12
        maps = record_maps(r)  # the cells' scores, pooled over their targets, are the run's pooled figures
        for name, key in (("model", "test_rmse_k"), ("persistence", "persistence_rmse_k"),
                          ("climatology", "climatology_rmse_k")):
            assert maps.attrs[f"pooled_rmse_{name}"] == pytest.approx(r["metrics"][key], rel=1e-6)
        assert r["metrics"]["mean_cell_rmse_k"] == pytest.approx(float(maps["model"].mean()), rel=1e-6)
    # every variant is scored on the same targets: the baselines agree across records
    assert len({round(r["metrics"]["persistence_rmse_k"], 9) for r in recs}) == 1
    assert "3 x 4 cells, test part, 1 h ahead" in out and "lower RMSE than none" in out
    assert (tmp_path / "skill.png").stat().st_size > 10_000


def test_region_skill_takes_every_variable_as_an_input(small_store, tmp_path, capsys):
    rc = main(["region", "skill", *_area(small_store), "--variable", "2m_temperature", "--variable",
               "surface_pressure", "--variants", "sparse", "--epochs", "1", "--steps", "2", "--batch-size", "4",
               "--results", str(tmp_path)])
    assert rc == 0, capsys.readouterr()
    (rec,) = read_records(tmp_path)
    assert rec["config"]["n_features"] == 2 and rec["config"]["n_static"] == 2


@pytest.mark.slow
def test_region_memory_records_each_case_and_skips_the_area_over_budget(tmp_path, capsys):
    rc = main(["region", "memory", "--sides", "4,300", "--variants", "sparse", "--budget-gb", "0.5", "--steps", "1",
               "--window", "6", "--hidden", "8", "--target", "5x6", "--results", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    recs = read_records(tmp_path)
    assert [(r["status"], r["region"]["cells"], r["region"]["target"]) for r in recs] == [
        ("ok", 16, False), ("skipped", 90_000, False), ("ok", 30, True)]
    assert "over the 0.5 GiB budget: not run" in recs[1]["reason"] and recs[1]["memory"]["measured_bytes"] is None
    for r in (recs[0], recs[2]):
        assert r["memory"]["measured_bytes"] > 0 and r["timing"]["step_s"] > 0
    assert "largest square area within 0.5 GiB, sparse" in out and "target 5 x 6 (30 cells), sparse: peak" in out


@pytest.mark.slow
def test_region_scaling_records_one_process_once_and_ranks_that_match_it(small_store, tmp_path, capsys):
    rc = main(["region", "scaling", *_area(small_store), "--world-sizes", "1,2", "--modes", "tiles", "--steps", "3",
               "--batch-size", "4", "--results", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    one, two = read_records(tmp_path)
    assert (one["region"]["mode"], one["config"]["world_size"], two["region"]["mode"], two["config"]["world_size"]) == \
        ("one process", 1, "tiles", 2)
    assert "world_size" not in two  # the report's multi-device findings are about DDP and DataParallel runs
    np.testing.assert_allclose(two["metrics"]["losses"], one["metrics"]["losses"], rtol=1e-5)
    assert two["metrics"]["loss_rel_diff_vs_one"] < 1e-5
    assert two["region"]["cells"] == [8, 4]  # three rows over two ranks: 2 and 1 rows of 4 cells
    assert min(two["region"]["bytes_sent_per_step"]) > 0  # the halo rows cross between the bands
    assert "gloo ranks on this CPU" in out


@pytest.mark.parametrize("args, message", [
    (["skill", "--point", "40,280"], "region mode works on a box of cells, not on points"),
    (["skill", "--variants", "sparse,gru"], "'gru' not known; choose from sparse,none,dense"),
    (["skill", "--neighbours", "-1"], "neighbours=-1"),
    (["memory", "--target", "60by168"], "--target '60by168' is not ROWSxCOLS"),
    (["memory", "--sides", "1,10"], "sides must be whole numbers >= 2"),
    (["scaling", "--world-sizes", "0,2"], "--world-sizes 0,2: ranks must be in 1.."),
    (["scaling", *BOX, "--world-sizes", "4", "--end", "2020-01-10"], "world_size=4 must be a whole number in 1..3"),
])
def test_bad_region_input_is_one_line(small_store, tmp_path, capsys, args, message):
    argv = ["region", *args, "--results", str(tmp_path)]
    if args[0] != "memory":
        argv += ["--source", str(small_store)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "runs.jsonl").exists()
