"""Notebook parameter values out of range are refused by `notebooks.check_series` before any kernel starts
(one line naming the parameter, the value and what is valid), with the package's own check of the same
setting; the values the notebooks and the shipped profiles give still pass."""

from __future__ import annotations

import dataclasses

import pytest

from lstmnb import notebooks
from lstmnb.machine.device import cpu_cores
from lstmnb.doctor import kernel_problem
from lstmnb.errors import ConfigError, DeviceError
from lstmnb.notebooks.params import check_values, default_value
from lstmnb.profiles import load_profile, profile_names


@pytest.fixture(autouse=True)
def _clean_place(tmp_path, monkeypatch):
    """Run where ./results is the default results folder, and nothing lands in the repository."""
    monkeypatch.delenv("LSTMNB_RESULTS", raising=False)
    monkeypatch.chdir(tmp_path)


def refused(tmp_path, overrides, match, only=None):
    with pytest.raises(ConfigError, match=match) as info:
        notebooks.check_series("ci", overrides=overrides, only=only, runs_dir=tmp_path / "runs")
    assert "\n" not in str(info.value) and str(info.value).startswith("parameter ")
    assert not (tmp_path / "runs").exists()  # nothing was created


def accepted(tmp_path, overrides, only=None):
    notebooks.check_series("ci", overrides=overrides, only=only, runs_dir=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


# --- 08: region mode --------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, match", [
    ({"region_epochs": 0}, r"region_epochs=0 must be a whole number >= 1"),
    ({"region_epochs": -3}, r"region_epochs=-3 must be a whole number >= 1"),
    ({"region_epochs": None}, r"region_epochs=None must be a whole number >= 1"),  # preset_config refuses None
    ({"region_shard_steps": 0}, r"region_shard_steps=0 must be a whole number >= 1"),
    ({"region_repeats": 0}, r"region_repeats=0 must be a whole number >= 1"),
    ({"region_budget_gb": -1}, r"region_budget_gb=-1 must be a positive number"),
    ({"heading_deg": float("nan")}, r"heading_deg=nan must be a finite number"),
    ({"heading_deg": float("inf")}, r"heading_deg=inf must be a finite number"),
    ({"region_neighbours": [-1]}, r"region_neighbours=\[-1\] must be a list of whole numbers >= 1"),
    ({"region_sides": [0]}, r"region_sides=\[0\] must be a list of whole numbers >= 2"),
    ({"region_sides": [1, 8]}, r"region_sides=\[1, 8\] must be a list of whole numbers >= 2"),
    ({"region_world_sizes": [0]}, r"region_world_sizes=\[0\] must be a list of whole numbers >= 1"),
    # as `lstmnb region memory --budget-gb, --sides`: the machine's memory, the synthetic grid
    ({"region_budget_gb": 100000}, r"^parameter region_budget_gb=100000: this machine has [\d.,]+ GiB of memory; give "
                                   r"parameter region_budget_gb=[\d.]+ or less$"),
    ({"region_sides": [4, 2000]}, r"region_sides=\[4, 2000\]: an area of 2000 rows of the synthetic grid .* "
                                  r"leaves -90..90 latitude; give at most 601 rows"),
    ({"region_variants": ["foo"]}, r"region_variants=\['foo'\] must be a non-empty list of sparse, none, dense"),
    ({"region_box": [1, 2]}, r"^parameter region_box 1,2: a box must be 4 numbers LAT_MIN,LAT_MAX,LON_MIN,LON_MAX$"),
    ({"region_box": [95, 100, 0, 1]}, r"^parameter region_box 95,100,0,1: latitude 95 is outside -90..90$"),
    ({"region_box": [41, 40, 279, 280]}, r"^parameter region_box 41,40,279,280: lat_min 41 is above lat_max 40"),
    ({"region_box": None}, r"region_box=None must be 4 numbers \[lat_min, lat_max, lon_min, lon_max\]"),
])
def test_region_values_out_of_range_are_refused(tmp_path, overrides, match):
    refused(tmp_path, overrides, match)


def test_region_world_sizes_are_bounded_by_the_cores(tmp_path):
    n = cpu_cores() + 1  # `lstmnb region scaling --world-sizes`: one core per one-thread rank
    refused(tmp_path, {"region_world_sizes": [1, n]},
            rf"^parameter region_world_sizes=\[1, {n}\]: ranks must be in 1..{n - 1} \(this machine's cores")


# --- 02-05: training settings ------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, match", [
    ({"skill_leads": [0]}, r"skill_leads=\[0\] must be a list of whole numbers >= 1"),
    ({"skill_leads": [-1]}, r"skill_leads=\[-1\] must be a list of whole numbers >= 1"),
    ({"skill_leads": [1, 1]}, r"^parameter skill_leads=\[1, 1\] repeats 1; give each lead once, e.g. 1$"),
    ({"split_dates": ["a", "b"]}, r"split_dates=\['a', 'b'\]: split date 'a' is not a date like 2021-01-01"),
    ({"split_dates": ["2021-01-01"]}, r"split_dates=\['2021-01-01'\] must be two dates VAL_START,TEST_START"),
    ({"split_dates": ["2020-01-16", "2020-01-10"]}, r"split_dates=.*validation start must not come after the test"),
    ({"fit_split_dates": ["2030-01-01", "2030-02-01"]},
     r"fit_split_dates=\['2030-01-01', '2030-02-01'\]: split date '2030-01-01' is outside the data's time range "
     r"2020-01-01..2020-01-21"),
    # 02's recommended preset stops early on validation: the same date twice leaves none
    ({"fit_split_dates": ["2020-01-15", "2020-01-15"]}, r"fit_split_dates=\[.*\] leaves no validation part"),
    ({"preset": "foo"}, r"preset='foo' is not one of recommended, published"),
    ({"gpu": "cudaXYZ"}, r"gpu='cudaXYZ' must be cuda or cuda:N"),
    ({"gpu": "cpu"}, r"gpu='cpu' must be cuda or cuda:N"),
    ({"world_sizes": [100000]}, r"world_sizes=\[100000\] must be whole numbers in 1..\d+"),
    ({"ddp_ranks": 100000}, r"ddp_ranks=100000 must be a whole number in 2..\d+"),
    ({"ddp_ranks": 1}, r"ddp_ranks=1 must be a whole number in 2..\d+"),  # 05's all-reduce sweep needs two
    ({"epochs_list": [10**12]}, r"epochs_list=\[1000000000000\] must be a whole number >= 1 and <= 2147483647"),
    ({"fit_epochs": 10**12}, r"fit_epochs=1000000000000 must be a whole number >= 1 and <= 2147483647"),
    ({"size_points": [10**6]}, r"^parameter size_points=1000000 must be between 1 and the box's 801 grid cells$"),
])
def test_training_values_out_of_range_are_refused(tmp_path, overrides, match):
    refused(tmp_path, overrides, match)


def test_ddp_ranks_are_bounded_by_the_devices_they_run_on(tmp_path):
    import torch

    from lstmnb.machine.device import local_rank_limit

    n = cpu_cores() + 1  # without n GPUs 05 runs its DDP ranks on the CPU, one core each
    if n > local_rank_limit() or torch.cuda.device_count() >= n:
        pytest.skip("this machine runs that many ranks on its GPUs")
    refused(tmp_path, {"ddp_ranks": n}, rf"ddp_ranks={n}: .*only {n - 1} CPU core\(s\).*give ddp_ranks at most {n - 1}")


def test_a_gpu_this_machine_lacks_is_no_error_for_the_notebooks_that_record_it_skipped(tmp_path):
    accepted(tmp_path, {"gpu": "cuda:7"})
    accepted(tmp_path, {"split_dates": notebooks.parse_value("[2020-01-10, 2020-01-15]")})


def test_parse_value_reads_dates_in_a_list_as_text():
    assert notebooks.parse_value("[2020-01-10, 2020-01-15]") == ["2020-01-10", "2020-01-15"]
    assert notebooks.parse_value("{a: 2021-01-01}") == {"a": "2021-01-01"}
    assert notebooks.parse_value("2021-01-01") == "2021-01-01"
    assert notebooks.parse_value("[2021-13-01, 2021-02-01, 5]") == ["2021-13-01", "2021-02-01", 5]  # YAML refuses it


def test_split_dates_are_given_as_the_command_line_gives_them_and_a_bad_one_is_named(tmp_path):
    from lstmnb.notebooks.params import parse_override

    assert parse_override("split_dates", "2020-01-10,2020-01-15") == ["2020-01-10", "2020-01-15"]
    assert parse_override("fit_split_dates", "2020-01-10, 2020-01-15") == ["2020-01-10", "2020-01-15"]
    assert parse_override("end", "2020-01-10,2020-01-15") == "2020-01-10,2020-01-15"  # only the split dates
    accepted(tmp_path, {"split_dates": parse_override("split_dates", "2020-01-10,2020-01-15")})
    refused(tmp_path, {"split_dates": parse_override("split_dates", "[2021-13-01, 2021-02-01]")},
            r"split date '2021-13-01' is not a date like 2021-01-01")


# --- 07: the from-scratch LSTM ------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, match", [
    ({"scratch_clip": -5}, r"scratch_clip=-5 must be a positive number, or null \(no clipping\)"),
    ({"scratch_clip": float("nan")}, r"scratch_clip=nan must be a positive number, or null"),
    ({"scratch_data": "era5", "scratch_hours": 10**9},
     r"scratch_hours=1000000000 is more than the default ERA5 .* give 1..\d+"),
    ({"scratch_window": 21}, r"scratch_window=21: the shortest part of the airline series .* give a window below 21$"),
])
def test_scratch_values_out_of_range_are_refused(tmp_path, overrides, match):
    refused(tmp_path, overrides, match)


# --- names and paths ----------------------------------------------------------------------------------

def test_names_and_paths_are_refused(tmp_path):
    refused(tmp_path, {"experiment": ""}, r"experiment='' is empty; give an experiment name", only="06")
    refused(tmp_path, {"results": ""}, r"results='' is empty; give a results folder or .jsonl file")
    refused(tmp_path, {"results": "  "}, r"results='  ' is empty")
    refused(tmp_path, {"profile": "nope"}, r"profile='nope': unknown profile 'nope'; choose from .*ci")
    (tmp_path / "a-file").write_text("")
    refused(tmp_path, {"output_dir": str(tmp_path / "a-file" / "x")}, r"output_dir=.*a-file.*cannot be written")
    missing = str(tmp_path / "nonexistent" / "x")
    refused(tmp_path, {"results_paths": [missing]}, r"results_paths=\[.*'\]: results path .*nonexistent.* does not "
            r"exist; give results files \(.jsonl\) or folders", only="06")
    refused(tmp_path, {"results_paths": missing}, r"results_paths=.*does not exist", only="06")
    assert not (tmp_path / "a-file" / "x").exists() and not (tmp_path / "nonexistent").exists()


def test_legitimate_names_and_paths_pass(tmp_path):
    (tmp_path / "records").mkdir()
    accepted(tmp_path, {"experiment": None, "results_paths": [str(tmp_path / "records")]}, only="06")
    accepted(tmp_path, {"output_dir": None}, only="06")  # the notebooks keep their files off disk
    accepted(tmp_path, {"output_dir": ""}, only="06")
    accepted(tmp_path, {"profile": "cpu", "results": None})
    # the series' own results folder is written by its earlier notebooks: 06 may name it before it exists
    mine = str(tmp_path / "mine")
    accepted(tmp_path, {"results": mine, "results_paths": [mine]}, only="02,06")
    assert not (tmp_path / "mine").exists()


# --- what the notebooks and the profiles give still passes ----------------------------------------------

@pytest.mark.parametrize("path", notebooks.find_notebooks(), ids=lambda p: p.stem)
def test_every_notebooks_own_defaults_pass(path):
    defaults = {k: default_value(v) for k, v in notebooks.notebook_parameters(path).items()}
    literal = {k: v for k, v in defaults.items() if v is not ...}  # papermill injects only what is given
    if cpu_cores() < 2:  # 05's DDP ranks and 08's sharding need a core per rank: such a machine cannot run them
        literal.pop("ddp_ranks", None), literal.pop("region_world_sizes", None)
    check_values(literal, defaults)


@pytest.mark.parametrize("name", profile_names())
def test_every_shipped_profile_passes(tmp_path, name):
    prof = load_profile(name)
    every = {k: default_value(v) for nb in notebooks.find_notebooks()
             for k, v in notebooks.notebook_parameters(nb).items()}
    check_values(prof.parameters, every)
    if kernel_problem(prof.kernel) is not None:
        pytest.skip(f"kernel {prof.kernel!r} is not installed here: its values were checked above")
    try:
        notebooks.check_series(name, runs_dir=tmp_path / "runs")
    except DeviceError:  # a GPU profile on a machine without that GPU: the rest of its values still pass
        notebooks.check_series(name, overrides={"device": "auto"}, runs_dir=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("overrides, only, match", [
    # 02's own fit_split_dates (the study's 2020-10-01, 2021-01-01) past a shortened end
    ({"end": "2020-06-30", "fit_split_dates": ...}, "02",
     r"fit_split_dates=\['2020-10-01', '2021-01-01'\]: split date '2020-10-01' is outside .*notebook 02_model"),
    # 03-05's None is the published preset's split, 2021-01-01 twice
    ({"end": "2020-06-30", "split_dates": None}, "03", r"split_dates=None: split date '2021-01-01' is outside .*"
                                                       r"\(None: the published preset's split\); notebook 03_cpu"),
])
def test_each_notebooks_split_is_checked_against_the_range_it_reads(tmp_path, overrides, only, match):
    """What a notebook will see (a given value, else its own default) decides: the series stops before 01 runs,
    not at the first training cell."""
    prof = load_profile("ci")  # ... drops the profile's value: the notebook's own default applies
    mine = dataclasses.replace(prof, parameters={k: v for k, v in {**prof.parameters, **overrides}.items() if v is not ...})
    with pytest.raises(ConfigError, match=match):
        notebooks.check_series(mine, only=only, runs_dir=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()
    accepted(tmp_path, {"end": "2020-06-30", "split_dates": ["2020-03-01", "2020-03-01"]}, only="03")
