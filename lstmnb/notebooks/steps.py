"""The steps the notebook series calls, kept here so that they are tested and the notebooks stay short: each takes
the notebook's parameters (plain values papermill can inject) and returns data (a request, config, table, figure,
records). Nothing needs Jupyter; in a Jupyter kernel, importing it makes figures show inline (``figures_inline``)."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd

from .. import data
from ..doctor import gpu_problem
from ..errors import ConfigError
from ..models import Forecaster, count_parameters, flops_per_sample
from ..paths import atomic_path
from ..records import Recorder
from ..report import runs_table
from ..training import preset_config, skipped_record, train, with_overrides
from ..training.guards import stop_if_diverged

# tqdm.auto warns once per kernel when ipywidgets is absent and falls back to a text bar, which is fine
warnings.filterwarnings("ignore", message="IProgress not found")

# matplotlib's built-in backends that draw to files only (matplotlib.backends.backend_registry, 3.9+)
FILE_ONLY_BACKENDS = frozenset({"agg", "cairo", "pdf", "pgf", "ps", "svg", "template"})


def figures_inline() -> bool:
    """In a Jupyter kernel whose matplotlib backend draws to files only (``MPLBACKEND=Agg`` exported, which ipykernel
    keeps), switch to inline as ``lstmnb notebooks run``'s ``--matplotlib=inline`` does; True if it switched."""
    if "ipykernel" not in sys.modules:  # not in a kernel (a script, pytest): nothing to show inline
        return False
    from IPython import get_ipython

    shell = get_ipython()  # None outside IPython: it has no kernel either
    if getattr(shell, "kernel", None) is None or matplotlib.get_backend().lower() not in FILE_ONLY_BACKENDS:
        return False
    shell.run_line_magic("matplotlib", "inline")
    return True


figures_inline()

# --- parameters -> request and config ------------------------------------------------------------

def make_request(source: str | None = None, points: Sequence[Sequence[float]] | None = ((40, 280), (20, 280)),
                 start: str = "2020-01-01", end: str = "2021-06-30",
                 variables: Sequence[str] = ("2m_temperature",), box: Sequence[float] | None = None):
    """A ``data.Request`` from notebook parameters (lists from papermill become tuples); ``source`` None: the
    study's real ERA5 for points, the synthetic sample for a box."""
    return data.Request(
        source=source, variables=tuple(variables),
        points=tuple(tuple(float(v) for v in p) for p in points) if points and box is None else None,
        box=tuple(float(v) for v in box) if box is not None else None, start=str(start), end=str(end))


def make_config(preset: str = "recommended", **knobs: Any):
    """A ``TrainConfig`` from notebook knobs on top of ``preset``; None values keep the preset's value, unknown names
    are an error. (A profile's measured ``recommended`` setting is applied on top with ``train.with_overrides``.)"""
    values = {k: tuple(v) if k in ("fractions", "split_dates") and isinstance(v, list) else v
              for k, v in knobs.items() if v is not None}
    cfg = preset_config(preset, **values)
    cfg.validate()
    return cfg


def _save(output_dir: str | Path | None, name: str, write) -> Path | None:
    """``write(tmp)``, then renamed onto ``<output_dir>/<name>`` (its folders created); None keeps files off disk."""
    if not output_dir:
        return None
    target = Path(output_dir) / name
    with atomic_path(target, suffix=target.suffix) as tmp:
        write(tmp)
    return target


def save_figure(fig, output_dir: str | Path | None, name: str) -> Path | None:
    """Write ``fig`` as ``<output_dir>/figures/<name>.png`` atomically; no-op without an output folder."""
    return _save(output_dir, f"figures/{name}.png", lambda tmp: fig.savefig(tmp, dpi=110, bbox_inches="tight"))


def save_table(df: pd.DataFrame, output_dir: str | Path | None, name: str) -> Path | None:
    """Write ``df`` as ``<output_dir>/tables/<name>.csv`` atomically; no-op without an output folder."""
    return _save(output_dir, f"tables/{name}.csv", df.to_csv)


def show_table(df: pd.DataFrame) -> None:
    """Display ``df`` without pandas' index column (its first columns name the rows): HTML that the site
    wraps in a box of its own where it is wider than the page, and the same table as plain text."""
    from IPython.display import display

    display({"text/plain": df.to_string(index=False, na_rep=""),
             "text/html": df.to_html(index=False, na_rep="", border=0, classes="dataframe report-table")}, raw=True)


# --- 01: the store and the series ----------------------------------------------------------------

def store_variables(ds) -> pd.DataFrame:
    """The store's data variables: long name, units, dims and shape."""
    rows = [{"variable": name, "long name": var.attrs.get("long_name", ""), "units": var.attrs.get("units", ""),
             "dims": " x ".join(var.dims), "shape": " x ".join(map(str, var.shape))}
            for name, var in ds.data_vars.items()]
    return pd.DataFrame(rows).set_index("variable") if rows else pd.DataFrame()


def series_frame(ds, variable: str = "2m_temperature") -> pd.DataFrame:
    """One column per point (kelvin), indexed by time, from a point extraction."""
    return pd.DataFrame(ds[variable].transpose("time", "point").values, index=pd.DatetimeIndex(ds["time"].values),
                        columns=[str(p) for p in ds["point"].values])


def daily_cycle(series: pd.DataFrame) -> pd.DataFrame:
    """Mean anomaly from each point's mean by hour of day (UTC): the diurnal cycle."""
    return (series - series.mean()).groupby(series.index.hour).mean().rename_axis("hour (UTC)")


def seasonal_cycle(series: pd.DataFrame) -> pd.DataFrame:
    """Monthly means per point (kelvin): the seasonal cycle over the extracted range."""
    return series.resample("MS").mean().rename_axis("month")


def plot_series(series: pd.DataFrame):
    """The hourly series per point, with daily means over it."""
    fig, ax = plt.subplots(figsize=(11, 3.6))
    for i, col in enumerate(series.columns):
        ax.plot(series.index, series[col], lw=0.3, color=f"C{i}", alpha=0.6)
        ax.plot(series[col].resample("D").mean(), lw=1.2, color=f"C{i}", label=f"{col} (daily mean)")
    ax.set(ylabel="2 m temperature (K)", title="hourly 2 m temperature")
    ax.legend(loc="best")
    fig.tight_layout()
    return fig


def plot_cycles(series: pd.DataFrame):
    """Diurnal cycle (anomaly by hour of day) and seasonal cycle (monthly mean) side by side."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.4))
    daily_cycle(series).plot(ax=ax1, marker=".")
    ax1.set(ylabel="anomaly (K)", title="daily cycle")
    seasonal_cycle(series).plot(ax=ax2, marker="o")
    ax2.set(ylabel="monthly mean (K)", title="seasonal cycle")
    fig.tight_layout()
    return fig


def save_subset(ds, output_dir: str | Path | None, name: str = "subset") -> Path | None:
    """Write the extracted series as a tidy CSV (time, point, latitude, longitude, variable, value)."""
    return _save(output_dir, f"{name}.csv", lambda tmp: data.to_frame(ds).to_csv(tmp, index=False))


# --- 02: windows, baselines, model --------------------------------------------------------------

def windows_table(windows) -> pd.DataFrame:
    """Samples, time span and baseline RMSE (K) of each split."""
    rows = []
    for split, n in windows.sizes().items():
        first, last = windows.split_times.get(split) or ("", "")  # no validation part: no hours
        base = windows.baselines[split]
        rows.append({"split": split, "samples": n, "from": first, "to": last,
                     "persistence RMSE (K)": base["persistence"]["rmse"],
                     "climatology RMSE (K)": base["climatology"]["rmse"]})
    return pd.DataFrame(rows).set_index("split")


def model_table(cfg, n_features: int, n_train: int | None = None) -> pd.DataFrame:
    """Parameters and FLOPs (per sample, and per epoch when ``n_train`` is given) of the forecaster."""
    mc = cfg.model_config(n_features)
    flops = flops_per_sample(mc, cfg.window)
    row = {"cell": mc.cell, "layers": mc.layers, "hidden": mc.hidden, "inputs": n_features, "window (h)": cfg.window,
           "parameters": count_parameters(Forecaster(mc)), "forward FLOPs/sample": flops["forward"],
           "training FLOPs/sample": flops["training"]}
    if n_train:
        row["training GFLOPs/epoch"] = float(f"{flops['training'] * n_train / 1e9:.3g}")  # 3 significant digits: an estimate
    return pd.DataFrame([row]).set_index("cell")


def forecast_frame(result, point: int = 0, days: float = 7) -> pd.DataFrame:
    """Truth, forecast and persistence (K) at one point over the first ``days`` of the test part (first target hour)."""
    w = result.windows
    pick = w.point_index["test"] == point
    if not pick.any():
        raise ConfigError(f"point={point} is not in the test part; points are 0..{len(w.points) - 1} ({w.points})")
    times = pd.DatetimeIndex(w.target_times["test"][pick], name="time")
    frame = pd.DataFrame({"truth": w.to_kelvin(w.y["test"][pick, 0]),
                          "forecast": result.forecast_kelvin("test")[pick, 0],
                          "persistence": w.to_kelvin(w.x["test"][pick, -1, 0])}, index=times)
    return frame[(times >= times[0]) & (times < times[0] + pd.Timedelta(days=days))]


def plot_forecast(frame: pd.DataFrame, title: str = ""):
    """Forecast vs truth (and persistence) over a test week."""
    fig, ax = plt.subplots(figsize=(11, 3.6))
    ax.plot(frame.index, frame["truth"], color="k", lw=1.4, label="truth")
    ax.plot(frame.index, frame["forecast"], color="C3", lw=1.1, label="LSTM forecast")
    ax.plot(frame.index, frame["persistence"], color="C0", lw=0.8, ls="--", label="persistence")
    ax.set(ylabel="2 m temperature (K)", title=title or "forecast vs truth, test week")
    ax.legend(loc="best")
    fig.tight_layout()
    return fig


# --- 03: the runs of an experiment ----------------------------------------------------------------

def runs_summary(records: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per record: ``report.runs_table``'s columns plus the warm-up and median epoch seconds,
    leaving out columns that no record fills."""
    df = pd.json_normalize(records, max_level=2)
    if df.empty:
        return df
    epoch_s = {"warm-up epoch s": "timing.warmup_epoch_s", "median epoch s": "timing.epoch_s_median"}
    table = runs_table(df).assign(**{name: df[key] for name, key in epoch_s.items() if key in df})
    return table.dropna(axis=1, how="all")


# --- 04/05: devices present, skipped runs --------------------------------------------------------

def eager_vs_graph(windows, data_info: dict[str, Any], base_cfg, epochs: int, *, results) -> tuple[pd.DataFrame, str]:
    """The same fast-path run eager and with the step captured as a CUDA graph: a table and one sentence
    saying why they differ (or why no graph was used). Both records are appended to ``results``."""
    recorder = Recorder(results)
    for name, on in (("eager", False), ("CUDA graph", True)):
        cfg = with_overrides(base_cfg, input_path="fast", cuda_graph=on, epochs=int(epochs),
                             experiment=f"graph-{'on' if on else 'off'}")
        record = train(windows, cfg, data_info=data_info).record
        stop_if_diverged(record, results)
        recorder.add(record)
    eager, graph = recorder.records
    table = pd.DataFrame({
        name: {"s/epoch (median)": r["timing"]["epoch_s_median"], "samples/s": r["timing"]["samples_per_s"],
               "test RMSE K": r["metrics"]["test_rmse_k"], "graph used": r["cuda_graph"]["used"]}
        for name, r in (("eager", eager), ("CUDA graph", graph))}).T
    return table, graph_sentence(graph, eager, base_cfg.batch_size)


def graph_sentence(graph: dict[str, Any], eager: dict[str, Any], batch_size: int) -> str:
    """Why the graph and eager runs differ, from their records: a speedup only where ``cuda_graph.used``, else why."""
    if not graph["cuda_graph"]["used"]:
        return f"No graph was captured: {graph['cuda_graph']['reason']}."
    ratio = graph["timing"]["samples_per_s"] / eager["timing"]["samples_per_s"]
    return (f"At batch {batch_size} each step does little arithmetic, so eager training spends most of its time "
            f"launching the step's many small kernels one by one from Python; a CUDA graph launches the whole "
            f"captured step at once, which here gives {ratio:.1f}x the samples/s at the same accuracy.")


def gpu_check(device: str = "cuda", min_gpus: int = 1) -> str | None:
    """None when ``min_gpus`` CUDA GPUs are usable for ``device``, else the reason in one line (`lstmnb doctor`'s)."""
    return gpu_problem(device, min_gpus)


def record_skipped(cfg, reason: str, results, **extra: Any) -> dict[str, Any]:
    """Append a ``skipped`` record (a reason, never a number) to ``results`` (None: do not) and return it."""
    return Recorder(results).add(skipped_record(cfg, reason, **extra))
