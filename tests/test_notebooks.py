"""The notebook series through the papermill runner: profiles, notebook hygiene, bad input, and every
notebook executed with the `ci` profile on a real kernel (CPU only: 04's GPU experiments and 05's
DataParallel record `skipped`; 05's DDP runs for real over gloo)."""

from __future__ import annotations

import html
from pathlib import Path

import nbformat
import pandas as pd
import pytest
import torch
import yaml
from conftest import waiting_notebook

from lstmnb import cli, notebooks, records
from lstmnb.errors import ConfigError, DeviceError, NotebookError
from lstmnb.profiles import load_profile, profile_names

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
SERIES = ["01_data_access", "02_model", "03_cpu_baseline", "04_single_gpu", "05_multi_gpu", "06_analysis"]


@pytest.fixture(autouse=True)
def _results_env(tmp_path, monkeypatch):
    """Nothing a test runs may write into the repository's results/."""
    monkeypatch.setenv("LSTMNB_RESULTS", str(tmp_path / "default-results"))


def outputs(nb_path: Path) -> list[dict]:
    """Every output of every code cell of an executed notebook."""
    nb = nbformat.read(nb_path, as_version=4)
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def output_text(nb_path: Path) -> str:
    parts = []
    for o in outputs(nb_path):
        if o.get("output_type") == "stream":
            parts.append(o["text"])
        for key in ("text/markdown", "text/plain"):
            if key in o.get("data", {}):
                parts.append(o["data"][key])
    return "\n".join(parts)


def images(nb_path: Path) -> int:
    return sum("image/png" in o.get("data", {}) for o in outputs(nb_path))


# --- notebooks and profiles, without a kernel ----------------------------------------------------

@pytest.mark.parametrize("name", SERIES)
def test_notebook_shape(name):
    """Opening markdown, Colab-only install cell (one line, hidden from the report), one parameters cell,
    and no stored outputs. What it shows, needs and takes opens the notebook (06: its first screen, a cell whose
    code the HTML hides, comes first after the cells the HTML leaves out, then the replication and the study's
    published comparison, then what the page shows)."""
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nbformat.validate(nb)
    cells = nb.cells
    assert cells[0].cell_type == "markdown"
    intro = next(i for i, c in enumerate(cells) if c.cell_type == "markdown" and "What it shows" in c.source)
    for words in ("What it shows", "What it needs", "How long it takes"):
        assert words in cells[intro].source
    if name == "06_analysis":  # the first screen opens the page; the Overview follows the study's sections
        tags = [set(c.get("metadata", {}).get("tags", [])) for c in cells[1:4]]
        assert all("remove-cell" in t for t in tags[:-1]) and tags[-1] == {"remove-input"}, name
        assert "report.first_screen(" in cells[3].source
        headings = [c.source.splitlines()[0] for c in cells[4:intro] if c.cell_type == "markdown"]
        assert headings == ["## Does lstmnb reproduce the study?", "## The study's published comparison"]
    elif intro:
        tags = [set(c.get("metadata", {}).get("tags", [])) for c in cells[1:intro]]
        assert all("remove-cell" in t for t in tags[:-1]) and tags[-1] == {"remove-input"}, name
    assert cells[1].cell_type == "code" and '"google.colab" in sys.modules' in cells[1].source
    assert len(cells[1].source.splitlines()) == 1 and "remove-cell" in cells[1].metadata.get("tags", [])
    tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1 and cells.index(tagged[0]) == 2
    for c in cells:
        if c.cell_type == "code":
            assert c.outputs == [] and c.execution_count is None, f"{name}: outputs must be stripped"
    params = notebooks.notebook_parameters(NOTEBOOKS / f"{name}.ipynb")
    assert {"profile", "label", "output_dir"} <= set(params)


def test_profiles_load_and_every_key_reaches_a_notebook():
    names = profile_names()
    assert {"cpu", "colab-t4", "carc-p100", "carc-v100", "carc-a40", "carc-a100", "ci"} <= set(names)
    declared = set().union(*(notebooks.notebook_parameters(p) for p in notebooks.find_notebooks(NOTEBOOKS)))
    for name in names:
        prof = load_profile(name)
        assert prof.kernel and prof.cell_timeout_s > 0 and prof.label
        unknown = set(prof.parameters) - declared
        assert not unknown, f"profile {name}: {unknown} is no notebook's parameter"
        assert "recommended" in prof.parameters  # the place for the measured fast setting
    ci = load_profile("ci")
    assert ci.parameters["device"] == "cpu" and "{run_dir}" in ci.parameters["results"]
    assert load_profile("carc-a40").parameters["device"] == "cuda"


def test_profile_from_a_file(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump({"label": "my box", "kernel": "python3", "parameters": {"epochs_list": [1]}}))
    prof = load_profile(str(path))
    assert prof.name == "site" and prof.parameters == {"epochs_list": [1]}
    path.write_text(yaml.safe_dump({"label": "x", "kernal": "python3"}))
    with pytest.raises(NotebookError, match="unknown key.*kernal"):
        load_profile(str(path))


def test_select_notebooks():
    available = notebooks.find_notebooks(NOTEBOOKS)
    assert [p.stem for p in notebooks.select_notebooks(available, "03,01")] == ["01_data_access", "03_cpu_baseline"]
    assert [p.stem for p in notebooks.select_notebooks(available, ["06_analysis.ipynb"])] == ["06_analysis"]
    assert len(notebooks.select_notebooks(available, None)) == len(available) >= 6


def test_parse_value():
    assert notebooks.parse_value("5") == 5
    assert notebooks.parse_value("[5, 10]") == [5, 10]
    assert notebooks.parse_value("cuda") == "cuda"
    assert notebooks.parse_value("null") is None
    assert notebooks.parse_value("0.01") == 0.01


def test_overrides_go_only_to_notebooks_that_declare_them():
    nbs = notebooks.select_notebooks(notebooks.find_notebooks(NOTEBOOKS), "01,03")
    plan = notebooks.plan_parameters(nbs, {"device": "cpu", "source": "sample"}, {"epochs_list": [1]})
    first, third = (plan[p] for p in nbs)
    assert "epochs_list" not in first and third["epochs_list"] == [1]
    assert "device" not in third  # 03 is the CPU baseline: it has no device knob


# --- bad input: one clear error before any kernel starts -----------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"profile": "gpu-cluster"}, r"unknown profile 'gpu-cluster'; choose from .*ci.*cpu"),
    ({"profile": "ci", "only": "09"}, r"unknown notebook '09'; choose from 01_data_access"),
    ({"profile": "ci", "only": "06", "overrides": {"epochs_list": [1]}},
     r"'epochs_list' not declared by 06_analysis; their parameters: .*results_paths"),
    ({"profile": "ci", "overrides": {"epochs": 5}}, r"'epochs' not declared by 01_data_access, .*epochs_list"),
    ({"profile": "ci", "kernel": "no-such-kernel"},
     r"kernel 'no-such-kernel' is not installed \(installed: .*python3.*python -m ipykernel install --user --name no-such-kernel"),
])
def test_bad_input_is_refused_before_running(tmp_path, kwargs, message):
    profile = kwargs.pop("profile")
    with pytest.raises(NotebookError, match=message):
        notebooks.run_series(profile, runs_dir=tmp_path / "runs", echo=None, progress=False, **kwargs)
    assert not (tmp_path / "runs").exists()  # nothing was started


def test_a_device_this_machine_lacks_is_refused_before_running(tmp_path, capsys):
    # cuda:99 is on no machine: no CUDA at all here, too few GPUs on a GPU node; either way one line, and
    # no kernel started (before this check, 01 ran and the series stopped in 02's first training cell)
    with pytest.raises(DeviceError, match=r"^profile 'ci': device='cuda:99'.*(no usable CUDA GPU|only \d+ CUDA)"):
        notebooks.run_series("ci", overrides={"device": "cuda:99"}, runs_dir=tmp_path / "runs", echo=None,
                             progress=False)
    assert not (tmp_path / "runs").exists()
    code = cli.main(["notebooks", "run", "--profile", "ci", "--runs-dir", str(tmp_path), "-p", "device", "cuda:99"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "pass -p device auto" in err
    with pytest.raises(ConfigError, match=r"device='tpu' is not one of auto, cpu, cuda"):
        notebooks.check_series("ci", overrides={"device": "tpu"}, runs_dir=tmp_path / "runs")


def test_a_gpu_profile_is_refused_only_where_a_selected_notebook_trains_on_its_device(tmp_path, capsys):
    # 06 reads records and declares no device: a cluster's profile analyses its records on a laptop too,
    # and the refusal's own advice (-p device auto) holds wherever it is given
    prof, selected, *_ = notebooks.check_series("colab-t4", only="06", runs_dir=tmp_path / "runs")
    assert prof.parameters["device"] == "cuda" and [nb.stem for nb in selected] == ["06_analysis"]
    notebooks.check_series("colab-t4", only="02", overrides={"device": "auto"}, runs_dir=tmp_path / "runs")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match=r"^profile 'colab-t4': device='cuda'.*pass -p device auto$"):
            notebooks.check_series("colab-t4", only="06,02", runs_dir=tmp_path / "runs")
        # quickstart has no -p: its refusal names what it does have
        assert cli.main(["quickstart", "--profile", "colab-t4", "--runs-dir", str(tmp_path / "runs")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.rstrip().endswith("or use --profile quick (CPU)"), err
    assert not (tmp_path / "runs").exists()


def test_zero_cell_timeout_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"^cell_timeout_s=0 must be a whole number of seconds >= 1 \(a cell.s limit\)$"):
        notebooks.run_series("ci", cell_timeout_s=0, runs_dir=tmp_path / "runs", echo=None, progress=False)
    assert not (tmp_path / "runs").exists()


def test_cli_reports_bad_input_in_one_line(tmp_path, capsys):
    code = cli.main(["notebooks", "run", "--profile", "ci", "--runs-dir", str(tmp_path), "-p", "nosuch", "1"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("lstmnb notebooks run: error: parameter(s) 'nosuch' not declared") and err.count("\n") == 1


def test_cli_list(capsys):
    assert cli.main(["notebooks", "list"]) == 0
    out = capsys.readouterr().out
    for name in SERIES + ["carc-v100", "colab-t4", "ci"]:
        assert name in out


# --- the series on a real kernel -----------------------------------------------------------------

# ci_series (conftest.py): every notebook executed once with the `ci` profile, shared with test_notebook_render.py

@pytest.mark.slow
def test_ci_series_runs_every_notebook(ci_series):
    present = [p.stem for p in notebooks.find_notebooks(NOTEBOOKS)]
    assert [r.name for r in ci_series.runs] == present  # 07 too, when it exists
    assert ci_series.ok
    run_dir = ci_series.run_dir
    assert run_dir.parent.name == "ci"
    skipped = {r.name: r.reason for r in ci_series.runs if r.status == "skipped"}
    assert "04_single_gpu" in skipped and "no usable CUDA GPU" in skipped["04_single_gpu"]  # no GPU experiment ran
    assert "05_multi_gpu" not in skipped  # DDP ran on this CPU, as gloo ranks
    # the rendered report: the site, 06 its front page, every other notebook a page; no other HTML
    assert ci_series.site == run_dir / "site" / "index.html"
    index = ci_series.site.read_text()
    assert f"<td>ran; its runs skipped ({html.escape(skipped['04_single_gpu'])})</td>" in index
    for r in ci_series.runs:
        assert r.status in ("ok", "skipped") and r.seconds > 0
        assert r.notebook == run_dir / f"{r.name}.ipynb" and r.notebook.exists()
        if not r.name.startswith("06"):
            assert (run_dir / "site" / f"{r.name}.html").stat().st_size > 10_000
    assert not list(run_dir.glob("*.html"))
    assert not list(run_dir.glob(".*running*"))


@pytest.mark.slow
def test_ci_series_records(ci_series):
    df = records.load_records(ci_series.results)
    assert ci_series.results == ci_series.run_dir / "results"
    assert set(df["profile"]) == {"ci"}
    ok = df[(df["status"] == "ok") & (df["experiment"] == "epochs")]
    # 03: epochs [1, 2] x input paths [fast, dataloader], each its own CPU run, 3 repeats (the ci profile's)
    assert sorted(zip(ok["config.input_path"], ok["config.epochs"])) == sorted(
        [("dataloader", 1), ("dataloader", 2), ("fast", 1), ("fast", 2)] * 3)
    assert set(ok["device.kind"]) == {"cpu"} and (ok["timing.train_s"] > 0).all()
    assert len(df[(df["experiment"] == "fit") & (df["status"] == "ok")]) == 1  # 02's short fit
    # 03 also times the profile's recommended fast setting on the fast path
    rec = df[(df["status"] == "ok") & (df["experiment"] == "epochs-recommended")]
    assert sorted(rec["config.epochs"]) == [1, 1, 1, 2, 2, 2]
    assert (rec["config.batch_size"] == 128).all() and rec["config.residual"].all()
    skipped = df[df["status"] == "skipped"]
    assert skipped["reason"].str.len().gt(0).all()  # every skipped record (07's too) says why
    for column in ("timing.train_s", "metrics.test_rmse_k"):
        assert column not in skipped or skipped[column].isna().all()  # and carries no number
    # 04: epochs and batch sweep; 05: DataParallel and DDP
    gpu = skipped[skipped["experiment"].isin(["epochs", "batch-sweep", "scaling-weak"])]
    assert sorted(gpu["experiment"]) == ["batch-sweep", "epochs", "scaling-weak", "scaling-weak"]
    assert sorted(gpu[gpu["experiment"] == "scaling-weak"]["config.strategy"]) == ["dataparallel", "ddp"]
    assert gpu["reason"].str.contains("no usable CUDA GPU").all()
    # 05: DDP for real on this CPU, one repeat of one rank, two ranks splitting the batch, two ranks a batch each
    ddp = df[(df["status"] == "ok") & df["experiment"].str.startswith("scaling-")]
    # and Amdahl's law checked on 4 ranks (amdahl_ranks) where the machine has 4 cores
    from lstmnb.machine.device import cpu_cores

    more = [("scaling-strong", 4, 32)] if cpu_cores() >= 4 else []
    assert sorted(zip(ddp["experiment"], ddp["world_size"].astype(int), ddp["config.batch_size"])) == sorted([
        ("scaling-strong", 1, 128), ("scaling-strong", 2, 64), ("scaling-weak", 2, 128), *more])
    assert set(ddp["parallel.backend"]) == {"gloo"} and set(ddp["device.kind"]) == {"cpu"}
    assert ddp["threads.busy_cores"].notna().all()


@pytest.mark.slow
def test_ci_series_tables_and_figures(ci_series):
    run_dir = ci_series.run_dir
    figures = {p.stem for p in (run_dir / "figures").glob("*.png")}
    assert {"01_series", "01_cycles", "02_forecast_week", "03_replication", "06_loss_curves"} <= figures
    # 03's runs in 06's form, one table per input path, and the published CPU column under the published problem alone
    assert len(list((run_dir / "tables").glob("03_epochs_*.csv"))) == 3
    study = pd.read_csv(run_dir / "tables" / "03_epochs_published-problem-published-setting-DataLoader-path.csv")
    assert list(study.columns) == ["epochs", "CPU · published"] and study["epochs"].tolist() == [5, 10, 15]
    assert "06_first_screen" not in figures  # the ci profile runs no ladder: the first screen says how to get one
    assert (run_dir / "01_subset.csv").stat().st_size > 1000
    (name,) = [p.name for p in (run_dir / "tables").glob("06_epochs_2020-01-01..2020-01-21*DataLoader*.csv")]
    table = (run_dir / "tables" / name).read_text().splitlines()
    assert table[0].startswith("epochs,CPU (") and [line.split(",")[0] for line in table[1:]] == ["1", "2"]
    for name, n_images in (("01_data_access", 2), ("02_model", 1), ("03_cpu_baseline", 1), ("06_analysis", 1)):
        assert images(run_dir / f"{name}.ipynb") >= n_images, name
    assert {"04_step_times", "05_ddp_scaling", "05_allreduce", "05_amdahl"} <= figures  # measured on this CPU
    assert images(run_dir / "04_single_gpu.ipynb") == 1 and images(run_dir / "05_multi_gpu.ipynb") == 3
    assert "**Skipped: no usable CUDA GPU" in output_text(run_dir / "04_single_gpu.ipynb")  # said in a visible cell
    text = output_text(run_dir / "05_multi_gpu.ipynb")
    assert "**DataParallel and multi-GPU DDP skipped: no usable CUDA GPU" in text
    assert "Strong scaling to 2 ranks" in text and "only 1 repeat(s)" in text  # what it showed, flagged
    # the whole program and the ring by hand ran: equal weights, the ring's sums and bytes, Amdahl's share
    assert "2 ranks by hand vs 1 process, whole batch" in text and "equal within float tolerance" in text
    assert "The ring all-reduce by hand on 3 ranks gave `dist.all_reduce`'s sums" in text
    # 05's own tables: 2 ranks by hand equal DDP and one process; the ring on a K that 3 ranks do not divide
    same = pd.read_csv(run_dir / "tables" / "05_same_weights.csv", index_col=0)
    assert same["equal within float tolerance"].all() and same["largest weight difference"].iloc[0] <= 1e-6
    ring = pd.read_csv(run_dir / "tables" / "05_ring.csv", index_col=0)
    assert list(ring.index) == [3] and (ring["K values"] % ring.index != 0).all()
    assert (ring["max |ring - all_reduce|"] <= 1e-5).all()  # sums of N float32 values in another order
    # the programs 05 wrote are kept beside its tables (none left in the system's temporary folder)
    assert sorted(p.name for p in (run_dir / "05_programs").glob("*.py")) == ["ddp_by_hand.py", "ring.py", "ring_check.py"]
    # chunks of K/N rounded: each of the 2 (N - 1) sends is off by at most one value
    off = (ring["bytes sent per rank"] - ring["2(N-1)K/N x 4 bytes"]).abs()
    assert (off <= 2 * (ring.index - 1) * 4).all()
    assert "Amdahl's law from these runs: " in text and "serial share s = " in text
    assert "ms per step, synchronised" in output_text(run_dir / "04_single_gpu.ipynb")
    assert "Reference, not measured here" in output_text(run_dir / "04_single_gpu.ipynb")
    analysis = output_text(run_dir / "06_analysis.ipynb")
    assert "published" in analysis and "measured here" in analysis
    assert "published" in (run_dir / "site" / "index.html").read_text()


@pytest.mark.slow
def test_ci_series_05_scaling_is_06s_for_the_same_runs(ci_series):
    """05's DDP runs on 2 real gloo ranks: its scaling table (as 05 saved it) is the one 06 builds from the
    records (``report.scaling_table``): the same epoch times and the same communication share."""
    import numpy as np

    from lstmnb.report import scaling_table

    from lstmnb.machine.device import cpu_cores

    table = pd.read_csv(ci_series.run_dir / "tables" / "05_ddp_scaling.csv", index_col=[0, 1])
    more = [("strong", 4)] if cpu_cores() >= 4 else []  # Amdahl's law checked on 4 ranks where there are 4 cores
    assert list(table.index) == [("strong", 1), ("strong", 2), *more, ("weak", 1), ("weak", 2)]
    assert [table.loc[key, "global batch"] for key in table.index] == [128] * (3 + len(more)) + [256]
    assert (table["input path"] == "fast").all()
    assert table["flag"].str.contains("only 1 repeat").all()
    one = table[table.index.get_level_values("ranks") == 1]  # one rank exchanges nothing: no comm figure
    assert one["comm ms"].isna().all() and one["comm %"].isna().all() and (one["step ms"] > 0).all()
    assert np.isfinite(table.loc[("strong", 2), "comm ms"])
    strong = table.xs("strong", level=0)
    if np.isfinite(strong.loc[2, "speedup"]):
        assert strong.loc[2, "speedup"] == pytest.approx(strong.loc[1, "epoch s"] / strong.loc[2, "epoch s"])
        assert strong.loc[2, "efficiency"] == pytest.approx(strong.loc[2, "speedup"] / 2)
    else:
        assert strong.loc[2, "note"].startswith("no speedup")
    # 06's table from the records: the comm share is the median of each run's comm / step, in both
    runs = [r for r in records.read_records(ci_series.results) if r.get("status") == "ok"
            and r["experiment"].startswith("scaling-")]
    fraction = [r["parallel"]["comm_split"]["comm_fraction"] for r in runs
                if r["world_size"] == 2 and r["scaling"]["mode"] == "strong"]
    assert table.loc[("strong", 2), "comm %"] == pytest.approx(100 * np.median(fraction))
    loaded = scaling_table(records.load_records(ci_series.results))
    for column in ("comm %", "epoch s"):
        assert loaded[column].to_numpy() == pytest.approx(table[column].to_numpy(), nan_ok=True)
    allreduce = pd.read_csv(ci_series.run_dir / "tables" / "05_allreduce.csv")
    assert {1024, 16384} <= set(allreduce["bytes"]) and (allreduce["time us"] > 0).all()
    assert allreduce["gradients of one step"].sum() == 1
    text = output_text(ci_series.run_dir / "05_multi_gpu.ipynb")
    assert "Weak scaling to 2 ranks" in text and "all-reduce" in text


@pytest.mark.slow
def test_analysis_of_an_empty_results_folder_says_so(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = notebooks.run_series("ci", only="06", runs_dir=tmp_path / "runs", echo=None, progress=False,
                                  overrides={"results_paths": [str(empty)]})
    nb = result.run_dir / "06_analysis.ipynb"
    assert "**No run records found in" in output_text(nb)
    # no ladder records: no first-screen figure, and no other figure to draw
    assert not list((result.run_dir / "figures").glob("*.png"))


@pytest.mark.slow
def test_failing_notebook_stops_the_series_and_keeps_what_ran(tmp_path, capsys):
    """02 fails in a cell (one the checks before the series cannot foresee: added here after its parameters); a
    short notebook runs before it (the series' 01 runs in the `ci` series)."""
    series = tmp_path / "series"
    series.mkdir()
    for path in notebooks.find_notebooks(NOTEBOOKS)[1:]:
        (series / path.name).write_bytes(path.read_bytes())
    waiting_notebook(series / "01_first.ipynb", 0)
    nb = nbformat.read(series / "02_model.ipynb", as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell("from lstmnb.training import TrainConfig\n"
                                                      "TrainConfig(window=0).validate()"))
    nbformat.write(nb, series / "02_model.ipynb")
    runs = tmp_path / "runs"
    code = cli.main(["notebooks", "run", "--profile", "ci", "--notebooks", str(series), "--only", "01,02,06",
                     "--runs-dir", str(runs), "--no-progress"])
    captured = capsys.readouterr()
    assert code == 2
    err = captured.err.strip().splitlines()
    assert len(err) == 1
    assert "notebook 02_model failed in cell" in err[0] and "ConfigError" in err[0] and "window=0" in err[0]
    (run_dir,) = (runs / "ci").iterdir()
    assert (run_dir / "01_first.ipynb").exists() and (run_dir / "site" / "01_first.html").exists()
    assert (run_dir / "02_model.ipynb").exists()  # the failed notebook, with its traceback
    assert not (run_dir / "06_analysis.ipynb").exists()
    assert "failed" in captured.out and "not run" in captured.out  # the summary table


@pytest.mark.slow
def test_cell_timeout_names_the_cell(tmp_path):
    with pytest.raises(NotebookError) as info:
        notebooks.run_series("ci", only="03", runs_dir=tmp_path, echo=None, progress=False, cell_timeout_s=1,
                             overrides={"end": "2020-06-30", "epochs_list": [20], "input_paths": ["fast"]})
    message = str(info.value)
    assert "notebook 03_cpu_baseline failed in cell " in message and "(In [" in message
    assert "CellTimeoutError" in message and "after 1 second" in message
    assert info.value.series.runs[0].status == "failed"
    assert info.value.series.runs[0].notebook.exists() and info.value.series.site.exists()


@pytest.mark.slow
def test_quickstart_trains_and_prints_the_results_table(tmp_path, capsys):
    code = cli.main(["quickstart", "--epochs", "1", "--no-notebooks", "--results", str(tmp_path / "results")])
    out = capsys.readouterr().out
    assert code == 0
    assert "persistence" in out and "climatology" in out and "training" in out
    (rec,) = records.read_records(tmp_path / "results")
    assert rec["experiment"] == "quickstart" and rec["status"] == "ok" and rec["device"]["kind"] == "cpu"
    assert len(rec["epochs"]) == 1
    assert f"record {rec['run_id']} appended to {tmp_path / 'results' / 'runs.jsonl'}" in out


def test_quickstart_help_states_the_default_runs_epoch_cap_as_the_run_has_it(capsys):
    """The default run on the study's data ran all of the preset's epochs (validation still improving at
    the cap, three runs on 2 cores), so the help names that cap and does not promise that early stopping
    usually ends the run sooner (it said so, and a newcomer's quickstart printed 'ran all 30 epochs')."""
    from lstmnb.training import preset_config

    assert cli.main(["quickstart", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    cap = preset_config(device="cpu").epochs
    assert f"the preset's, {cap};" in help_text and f"it ran all {cap} here)" in help_text
    assert "usually ends it sooner" not in help_text


# --- every notebook: code that fits the page, and the shape of a cookbook ------------------------------

EVERY = sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
@pytest.mark.parametrize("name", EVERY)
def test_code_cells_fit_the_page(name):
    """The site shows code cells without sideways scrolling up to 100 characters a line; a cell the site
    leaves out (tagged remove-cell: Colab's install line) may be longer."""
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    long = [(i, line) for i, c in enumerate(nb.cells) if c.cell_type == "code"
            and "remove-cell" not in c.metadata.get("tags", []) for line in c.source.splitlines()
            if len(line) > 100]
    assert not long, f"{name}: {len(long)} code line(s) over 100 characters, the first in cell {long[0][0]}"


@pytest.mark.parametrize("name", EVERY)
def test_every_notebook_has_the_shape_of_a_cookbook(name):
    """Overview, Prerequisites (the earlier notebooks it builds on) and Time to learn open it; a Summary
    and two or three "Try this" exercises close it (Project Pythia's cookbooks)."""
    cells = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4).cells
    intro = next(c.source for c in cells if c.cell_type == "markdown" and "## Overview" in c.source)
    heads = [line for line in intro.splitlines() if line.startswith("## ")]
    assert heads == ["## Overview", "## Prerequisites", "## Time to learn"], name
    prereq = intro.split("## Prerequisites")[1].split("## Time to learn")[0]
    assert name.startswith("01") or "`0" in prereq, f"{name}: Prerequisites names no earlier notebook"
    assert "minutes" in intro.split("## Time to learn")[1]
    summary, tries = cells[-2], cells[-1]
    assert summary.cell_type == "markdown" and summary.source.startswith("## Summary\n")
    assert tries.cell_type == "markdown" and tries.source.startswith("## Try this\n")
    exercises = [line for line in tries.source.splitlines() if line[:3] in ("1. ", "2. ", "3. ", "4. ")]
    assert 2 <= len(exercises) <= 3, f"{name}: {len(exercises)} exercises"
