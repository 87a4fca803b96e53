"""Tables and plots from run records: epochs, results vs baselines, runs, speedups.

A leaf module: it reads records (dicts or the DataFrame from ``records.load_records``) and never
trains or extracts anything.
"""

from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd


def epochs_table(record: dict[str, Any]) -> pd.DataFrame:
    """One row per epoch: seconds, cumulative seconds, losses, validation RMSE (K), samples/s."""
    df = pd.DataFrame(record.get("epochs") or [])
    if df.empty:
        return df
    cols = ["epoch", "train_s", "cumulative_s", "train_loss", "val_loss", "val_rmse_k", "samples_per_s"]
    return df[[c for c in cols if c in df]].set_index("epoch")


def metrics_table(record: dict[str, Any]) -> pd.DataFrame:
    """Test RMSE and MAE in kelvin of the model beside persistence and climatology."""
    m = record.get("metrics") or {}
    rows = []
    for name, key in (("LSTM" if (record.get("config") or {}).get("cell", "lstm") == "lstm" else "GRU", "test"),
                      ("persistence", "persistence"), ("climatology", "climatology")):
        rmse, mae = m.get(f"{key}_rmse_k"), m.get(f"{key}_mae_k")
        if rmse is not None:
            rows.append({"model": name, "test RMSE (K)": rmse, "test MAE (K)": mae})
    df = pd.DataFrame(rows).set_index("model") if rows else pd.DataFrame()
    if len(df) > 1:
        model_rmse = df["test RMSE (K)"].iloc[0]
        skill = 1 - model_rmse / df["test RMSE (K)"]
        skill.iloc[0] = float("nan")
        df["model skill vs row"] = skill  # 1 - RMSE_model / RMSE_baseline: > 0 means the model is better
    return df


def runs_table(df: pd.DataFrame) -> pd.DataFrame:
    """A compact view of many records (from ``load_records``): one row per run."""
    if df.empty:
        return df
    cols = {
        "started": "started", "experiment": "experiment", "status": "status", "device.kind": "device",
        "device.name": "device name", "profile": "profile", "config.input_path": "input",
        "config.batch_size": "batch", "config.epochs": "epochs", "timing.train_s": "train s",
        "timing.samples_per_s": "samples/s", "metrics.test_rmse_k": "test RMSE K",
        "metrics.persistence_rmse_k": "persistence K", "metrics.climatology_rmse_k": "climatology K",
        "device.load_avg": "load (1/5/15 min)",
        "reason": "reason",
    }
    present = {k: v for k, v in cols.items() if k in df}
    return df[list(present)].rename(columns=present)


def format_table(df: pd.DataFrame, floatfmt: str = "{:,.3f}") -> str:
    """Plain-text rendering for the terminal."""
    if df.empty:
        return "(no rows)"
    return df.to_string(float_format=lambda v: floatfmt.format(v))


# --- devices -------------------------------------------------------------------------------------

DEVICE_ORDER = ("CPU", "T4", "P100", "V100", "A40", "A100")
# short labels for the GPUs the published experiment (and the CARC cluster) used; others keep their name
_GPU_LABEL = re.compile(r"\b(T4|P100|V100|A40|A100|H100|H200)\b", re.IGNORECASE)


def device_label(kind: str | None, name: str | None) -> str:
    """Short column label of a device: 'CPU', 'T4', 'P100', 'V100', 'A40', 'A100'; unknown GPUs keep their name.

    ``kind`` and ``name`` are a record's ``device.kind`` and ``device.name`` (e.g. 'cuda', 'Tesla T4').
    """
    kind = (kind or "").lower()
    if kind == "cpu":
        return "CPU"
    if kind == "mps":
        return "MPS"
    if name:
        match = _GPU_LABEL.search(str(name))
        return match.group(1).upper() if match else str(name)
    return kind.upper() or "unknown"


def order_devices(labels) -> list[str]:
    """Labels in the published column order (CPU, T4, P100, V100, A40, A100), others after, sorted."""
    labels = list(dict.fromkeys(labels))
    known = [d for d in DEVICE_ORDER if d in labels]
    return known + sorted(l for l in labels if l not in DEVICE_ORDER)


def with_device_labels(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of a records DataFrame with a ``device_label`` column (see ``device_label``)."""
    out = df.copy()
    kinds, names = _column(out, "device.kind"), _column(out, "device.name")
    out["device_label"] = [device_label(k if isinstance(k, str) else None, n if isinstance(n, str) else None)
                           for k, n in zip(kinds, names)]
    return out


def _column(df: pd.DataFrame, name: str, default: Any = None) -> pd.Series:
    return df[name] if name in df else pd.Series(default, index=df.index)


def ok_single_runs(df: pd.DataFrame, experiment: str | None = None, input_path: str | None = None) -> pd.DataFrame:
    """Finished single-device runs (status ok), optionally of one experiment and one input path."""
    if df.empty:
        return df
    keep = _column(df, "status") == "ok"
    keep &= _column(df, "config.strategy", "single").fillna("single") == "single"
    if experiment is not None:
        keep &= _column(df, "experiment") == experiment
    if input_path is not None:
        keep &= _column(df, "config.input_path") == input_path
    return with_device_labels(df[keep])


# --- the published experiment's table: epochs x devices ------------------------------------------

def epochs_device_table(df: pd.DataFrame, *, experiment: str | None = "epochs",
                        input_path: str | None = None) -> pd.DataFrame:
    """Training seconds in the published form: rows = epochs, columns = devices present (CPU, T4, ...).

    Each cell is the median training seconds over the ok single-device runs with that many epochs on
    that device, so repeats and records merged from several machines combine.
    """
    value = "timing.train_s"
    runs = ok_single_runs(df, experiment, input_path)
    if runs.empty or value not in runs or "config.epochs" not in runs:
        return pd.DataFrame()
    runs = runs.dropna(subset=[value, "config.epochs"])
    if runs.empty:
        return pd.DataFrame()
    table = runs.pivot_table(index="config.epochs", columns="device_label", values=value, aggfunc="median")
    table = table[order_devices(table.columns)]
    table.index = table.index.astype(int)
    table.index.name = "epochs"
    table.columns.name = "device"
    return table


def speedup_table(table: pd.DataFrame, baseline: str = "CPU") -> pd.DataFrame:
    """Speedup of each device over ``baseline`` (baseline seconds / device seconds), per row."""
    if table.empty or baseline not in table:
        return pd.DataFrame()
    return table.rdiv(table[baseline], axis=0)


def throughput_table(df: pd.DataFrame, experiment: str | None = "epochs") -> pd.DataFrame:
    """Median training samples per second by device (rows) and input path (columns)."""
    runs = ok_single_runs(df, experiment)
    if runs.empty or "timing.samples_per_s" not in runs:
        return pd.DataFrame()
    runs = runs.assign(input_path=_column(runs, "config.input_path", "fast").fillna("fast"))
    table = runs.pivot_table(index="device_label", columns="input_path", values="timing.samples_per_s",
                             aggfunc="median")
    table = table.loc[order_devices(table.index)]
    table.index.name, table.columns.name = "device", "samples/s by input path"
    return table


def rmse_by_device(df: pd.DataFrame, experiment: str | None = "epochs") -> pd.DataFrame:
    """Test RMSE (K) of the model per device (median over runs) beside persistence and climatology."""
    runs = ok_single_runs(df, experiment)
    cols = {"metrics.test_rmse_k": "model RMSE (K)", "metrics.persistence_rmse_k": "persistence RMSE (K)",
            "metrics.climatology_rmse_k": "climatology RMSE (K)"}
    if runs.empty or "metrics.test_rmse_k" not in runs:
        return pd.DataFrame()
    present = [c for c in cols if c in runs]
    table = runs.groupby("device_label")[present].median().rename(columns=cols)
    table.insert(0, "runs", runs.groupby("device_label").size())
    table = table.loc[order_devices(table.index)]
    if "persistence RMSE (K)" in table:
        table["beats persistence"] = table["model RMSE (K)"] < table["persistence RMSE (K)"]
    if "climatology RMSE (K)" in table:
        table["beats climatology"] = table["model RMSE (K)"] < table["climatology RMSE (K)"]
    table.index.name = "device"
    return table


def loss_curves(df: pd.DataFrame, experiment: str | None = "epochs") -> pd.DataFrame:
    """Per-epoch losses of every ok single-device run, long form (one row per run and epoch)."""
    runs = ok_single_runs(df, experiment)
    if runs.empty or "epochs" not in runs:
        return pd.DataFrame()
    rows = []
    for _, run in runs.iterrows():
        for entry in run["epochs"] if isinstance(run["epochs"], list) else []:
            rows.append({"run_id": run.get("run_id"), "device": run["device_label"],
                         "input_path": run.get("config.input_path"), "epochs": run.get("config.epochs"),
                         "val_persistence_rmse_k": run.get("metrics.val_persistence_rmse_k"),
                         **{k: entry.get(k) for k in ("epoch", "train_loss", "val_loss", "val_rmse_k")}})
    return pd.DataFrame(rows)


def status_table(df: pd.DataFrame) -> pd.DataFrame:
    """Count of records by experiment, device and status; skipped and failed runs keep their reason."""
    if df.empty:
        return df
    out = with_device_labels(df).assign(reason=_column(df, "reason").fillna(""))
    return (out.groupby(["experiment", "device_label", "status", "reason"]).size()
            .rename("records").reset_index().rename(columns={"device_label": "device"}))


# --- published reference figures -----------------------------------------------------------------

PUBLISHED = "published"
MEASURED = "measured here"


def load_published() -> dict[str, Any]:
    """The published reference figures shipped as package data (a copy of ../shared/published_figures.yaml)."""
    import yaml

    return yaml.safe_load(resources.files("lstmnb").joinpath("published_figures.yaml").read_text(encoding="utf-8"))


def published_epochs_table(published: dict[str, Any] | None = None) -> pd.DataFrame:
    """The published epochs x devices table (seconds of training), in the same shape as ours."""
    pub = (published or load_published())["era5_lstm_gpu_benchmark"]
    table = pd.DataFrame.from_dict(pub["epochs"], orient="index")
    table = table[[d for d in pub.get("devices", table.columns) if d in table]]
    table.index = table.index.astype(int)
    table.index.name, table.columns.name = "epochs", "device"
    return table.sort_index()


def side_by_side(ours: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """Our table and the published one per device: columns (device, 'measured here' | 'published')."""
    parts = {}
    if not ours.empty:
        parts[MEASURED] = ours
    if not published.empty:
        parts[PUBLISHED] = published
    if not parts:
        return pd.DataFrame()
    both = pd.concat(parts, axis=1, names=["source", "device"])
    both = both.swaplevel(axis=1)
    devices = order_devices([d for d, _ in both.columns])
    sources = [s for s in (MEASURED, PUBLISHED) if s in parts]
    cols = [(d, s) for d in devices for s in sources if (d, s) in both.columns]
    return both[cols]


def published_tables(published: dict[str, Any] | None = None) -> dict[str, pd.DataFrame]:
    """The other published figures as tables, keyed by a title that says they are published."""
    pub = published or load_published()
    out: dict[str, pd.DataFrame] = {}
    if "from_scratch_versions" in pub:
        p = pub["from_scratch_versions"]
        t = pd.DataFrame({"seconds (5 epochs)": p["versions"], "speedup vs sequential": p.get("speedup_vs_sequential", {})})
        t.index.name = "version"
        out[f"{PUBLISHED}: from-scratch LSTM versions ({p['task']})"] = t
    if "dataparallel_resnet18" in pub:
        p = pub["dataparallel_resnet18"]
        t = pd.DataFrame.from_dict(p["dataparallel_per_gpu_batch"], orient="index")
        t.index.name, t.columns.name = "per-GPU batch", "GPUs"
        out[f"{PUBLISHED}: DataParallel ResNet-18, {p['unit']}"] = t
    if "distributed_rnn_cost" in pub:
        p = pub["distributed_rnn_cost"]
        t = pd.DataFrame(p["runs"]).set_index("setup")
        out[f"{PUBLISHED}: distributed RNN on AWS, {p['unit']}"] = t
    if "multi_gpu_spatiotemporal" in pub:
        p = pub["multi_gpu_spatiotemporal"]
        out[f"{PUBLISHED}: multi-GPU spatio-temporal network, {p['unit']}"] = pd.DataFrame(p["rows"]).set_index("model")
    return out


# --- plots ---------------------------------------------------------------------------------------

def _device_bars(ours: pd.DataFrame, published: pd.DataFrame | None, *, height: float, empty: str, title: str,
                 ylabel: str, line: float | None = None):
    """Bars by device, one per epochs value, of an epochs x devices table: ours, and the published one
    beside it when given. ``title`` may use {source}; ``line`` draws a reference line at that value."""
    import matplotlib.pyplot as plt

    panels = [(MEASURED, ours)] + ([(PUBLISHED, published)] if published is not None and not published.empty else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), height), squeeze=False)
    for ax, (source, table) in zip(axes[0], panels):
        if table.empty:
            ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes)
        else:
            table.T.plot.bar(ax=ax, rot=0)
            if line is not None:
                ax.axhline(line, color="grey", lw=0.8)
            ax.legend(title="epochs")
        ax.set(title=title.format(source=source), xlabel="device", ylabel=ylabel)
    fig.tight_layout()
    return fig


def plot_epochs_tables(ours: pd.DataFrame, published: pd.DataFrame | None = None):
    """Grouped bars of training seconds by epochs and device: ours, and the published table beside it."""
    return _device_bars(ours, published, height=4, empty="no runs", title="{source}",
                        ylabel="training seconds (total)")


def plot_speedups(ours: pd.DataFrame, published: pd.DataFrame | None = None):
    """Speedup over CPU per device and epochs, ours beside the published one."""
    return _device_bars(ours, published, height=3.6, empty="no CPU baseline", title="speedup vs CPU, {source}",
                        ylabel="x faster than CPU", line=1.0)


def plot_loss_curves(curves: pd.DataFrame):
    """Training loss and validation RMSE per epoch, one line per run, coloured by device."""
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
    if curves.empty:
        for ax in (ax1, ax2):
            ax.text(0.5, 0.5, "no runs", ha="center", va="center", transform=ax.transAxes)
        return fig
    colours = {d: f"C{i}" for i, d in enumerate(order_devices(curves["device"]))}
    seen: set[str] = set()
    for run_id, run in curves.groupby("run_id", sort=False):
        device = run["device"].iloc[0]
        label = device if device not in seen else None
        seen.add(device)
        style = "-" if run["input_path"].iloc[0] != "dataloader" else "--"
        ax1.plot(run["epoch"], run["train_loss"], style, color=colours[device], label=label, alpha=0.8)
        ax2.plot(run["epoch"], run["val_rmse_k"], style, color=colours[device], label=label, alpha=0.8)
    pers = curves["val_persistence_rmse_k"].dropna() if "val_persistence_rmse_k" in curves else pd.Series()
    if not pers.empty:  # the baseline every model result is shown beside
        ax2.axhline(pers.median(), color="grey", lw=1, ls=":", label="persistence")
        ax2.legend(loc="upper right")
    from matplotlib.ticker import MaxNLocator

    for ax in (ax1, ax2):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax1.set(xlabel="epoch", ylabel="training loss (MSE, scaled)", yscale="log", title="training loss")
    ax2.set(xlabel="epoch", ylabel="validation RMSE (K)", title="validation RMSE (dashed: DataLoader path)")
    ax1.legend(title="device")
    fig.tight_layout()
    return fig


def input_paths(df: pd.DataFrame, experiment: str | None = "epochs") -> list[str]:
    """Input paths with finished runs of ``experiment``, the published one (dataloader) last."""
    runs = ok_single_runs(df, experiment)
    if runs.empty:
        return []
    paths = set(_column(runs, "config.input_path", "fast").fillna("fast"))
    return sorted(paths, key=lambda p: (p == "dataloader", p))


# --- parallel training: scaling, convergence, all-reduce, batch sweep, cost (lstmnb.experiments records) ---

SCALING_DEFINITIONS = {
    "strong": "strong scaling: the global batch is fixed and split over N devices (each takes global/N). "
              "speedup = t1 / tN with t the median steady epoch time (the warm-up epoch left out); "
              "efficiency = speedup / N (1.0 is perfect: N devices, N times faster).",
    "weak": "weak scaling: each device keeps its batch, so the global batch grows N-fold and an epoch has "
            "N times fewer steps. scaled speedup = throughput_N / throughput_1 (samples/s); "
            "efficiency = scaled speedup / N = step time at 1 device / step time at N devices "
            "(1.0: adding devices costs no time per step).",
    "comm": "compute vs communication: the same training steps timed with DDP's gradient all-reduce "
            "(step s) and under no_sync() (compute s); comm s = the difference, the all-reduce time the "
            "backward pass did not hide; comm % = comm s / step s.",
}


def _get(record: dict[str, Any], dotted: str, default: Any = None) -> Any:
    value: Any = record
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return default
        value = value[part]
    return value


def scaling_table(runs: pd.DataFrame | list[dict[str, Any]]) -> pd.DataFrame:
    """One row per (mode, device, strategy, world size) of the scaling runs (records of experiment
    ``scaling-strong`` / ``scaling-weak``, from files via ``load_records`` or a list of records):
    epoch time, throughput, speedup and efficiency as ``SCALING_DEFINITIONS`` states them (medians
    over repeats), and the measured compute/communication split per step where it was measured."""
    df = runs if isinstance(runs, pd.DataFrame) else pd.json_normalize(runs, max_level=2)
    if df.empty or "world_size" not in df:
        return pd.DataFrame()
    exp = _column(df, "experiment").fillna("")
    df = df[(_column(df, "status") == "ok") & exp.str.startswith("scaling-")].dropna(subset=["world_size"])
    if df.empty:
        return pd.DataFrame()
    df = with_device_labels(df)
    comm = _column(df, "parallel.comm_split.comm_fraction").astype(float)
    frame = pd.DataFrame({
        "mode": df["experiment"].str.removeprefix("scaling-"), "device": df["device_label"],
        "strategy": _column(df, "config.strategy").fillna("ddp"), "world_size": df["world_size"].astype(int),
        "per-device batch": _column(df, "scaling.per_device_batch"), "global batch": _column(df, "scaling.global_batch"),
        "epoch s": _column(df, "timing.epoch_s_median"), "samples/s": _column(df, "timing.samples_per_s"),
        "step s": _column(df, "parallel.comm_split.step_s"), "compute s": _column(df, "parallel.comm_split.compute_s"),
        "comm s": _column(df, "parallel.comm_split.comm_s"), "comm %": 100 * comm,
    }, index=df.index)
    keys = ["mode", "device", "strategy", "world_size"]
    table = frame.groupby(keys, sort=False).median(numeric_only=True).reset_index()
    out = []
    for (mode, _, _), g in table.groupby(["mode", "device", "strategy"], sort=False):
        g = g.sort_values("world_size").copy()
        one = g[g["world_size"] == 1]
        if one.empty:
            g["speedup"] = float("nan")
        elif mode == "strong":
            g["speedup"] = one["epoch s"].iloc[0] / g["epoch s"]
        else:
            g["speedup"] = g["samples/s"] / one["samples/s"].iloc[0]
        g["efficiency"] = g["speedup"] / g["world_size"]
        out.append(g)
    cols = keys + ["per-device batch", "global batch", "epoch s", "samples/s", "speedup", "efficiency",
                   "step s", "compute s", "comm s", "comm %"]
    return pd.concat(out)[cols].set_index(keys).sort_index()


def convergence_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Validation loss and RMSE per epoch with cumulative wall seconds, one block per (experiment, world size)."""
    rows = []
    for r in records:
        if r.get("status") != "ok":
            continue
        for e in r.get("epochs") or []:
            rows.append({"experiment": r.get("experiment"), "world_size": int(r.get("world_size") or 1),
                         "epoch": e["epoch"], "cumulative_s": e["cumulative_s"], "val_loss": e["val_loss"],
                         "val_rmse_k": e["val_rmse_k"]})
    return pd.DataFrame(rows)


def plot_convergence(records: list[dict[str, Any]]):
    """Validation loss against epoch and against wall time, one line per (experiment, world size)."""
    import matplotlib.pyplot as plt

    table = convergence_table(records)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for (exp, n), g in table.groupby(["experiment", "world_size"]):
        label = f"{exp}, {n} device{'s' if n > 1 else ''}"
        ax1.plot(g["epoch"], g["val_loss"], marker="o", label=label)
        ax2.plot(g["cumulative_s"], g["val_loss"], marker="o", label=label)
    ax1.set(xlabel="epoch", ylabel="validation loss (MSE, scaled)", title="convergence per epoch")
    ax2.set(xlabel="wall seconds (training + validation)", ylabel="validation loss (MSE, scaled)",
            title="convergence in wall time")
    ax1.legend(fontsize="small")
    fig.tight_layout()
    return fig


def allreduce_table(rows: list[dict[str, Any]], gradient_bytes: int | None = None,
                    step_s: float | None = None) -> pd.DataFrame:
    """All-reduce time and bandwidth per buffer size (GB/s = 1e9 bytes/s; busbw = algbw x 2(n-1)/n).

    With ``step_s`` (a training step's time), the row at the model's gradient size also says which
    fraction of a step one all-reduce of the gradients takes on this link.
    """
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame(rows)
    df["size"] = df["bytes"].map(_human_bytes)
    if gradient_bytes:
        df["gradient size"] = df["bytes"] == gradient_bytes // 4 * 4
        if step_s:
            df["share of a step"] = (df["time_us"] / 1e6 / step_s).where(df["gradient size"])
    cols = ["size", "bytes", "world_size", "backend", "time_us", "algbw_gbps", "busbw_gbps", "gradient size",
            "share of a step"]
    return df[[c for c in cols if c in df]].set_index("size")


def _human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def batch_sweep_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Batch size against status, time per epoch, samples/s, peak memory and final validation RMSE."""
    rows = []
    for r in records:
        b = _get(r, "sweep.batch_size") or _get(r, "config.batch_size")
        rows.append({"batch size": b, "status": r.get("status"), "epoch s": _get(r, "timing.epoch_s_median"),
                     "samples/s": _get(r, "timing.samples_per_s"), "peak MB": _get(r, "memory.peak_mb"),
                     "final val RMSE K": (r.get("epochs") or [{}])[-1].get("val_rmse_k"),
                     "reason": r.get("reason")})
    return pd.DataFrame(rows).set_index("batch size") if rows else pd.DataFrame()


def load_prices(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """The price table (YAML): the shipped examples, or a user's copy at ``path``; checked on load."""
    import yaml

    from .errors import ConfigError

    if path is None:
        text = resources.files("lstmnb").joinpath("prices.yaml").read_text(encoding="utf-8")
        where = "lstmnb/prices.yaml"
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"price table {path} cannot be read ({exc.strerror})") from None
        where = str(path)
    prices = yaml.safe_load(text) or {}
    devices = prices.get("devices")
    if not isinstance(devices, dict) or not devices:
        raise ConfigError(f"price table {where} needs a 'devices' mapping of name -> price_per_device_hour")
    for name, entry in devices.items():
        price = entry.get("price_per_device_hour") if isinstance(entry, dict) else None
        if not isinstance(price, (int, float)) or isinstance(price, bool) or price < 0:
            raise ConfigError(f"price table {where}: devices.{name}.price_per_device_hour={price!r} must be a "
                              f"number >= 0")
    prices.setdefault("currency", "USD")
    return prices


def price_for(record: dict[str, Any], prices: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """The price entry for a record: by profile name, then device name, then device kind; (None, None) if none."""
    devices = prices["devices"]
    profile = (record.get("profile") or "").lower()
    name = (_get(record, "device.name") or "").lower()
    kind = (_get(record, "device.kind") or "").lower()
    if profile in devices:
        return profile, devices[profile]
    for key, entry in devices.items():
        for m in entry.get("match") or []:
            if m.lower() == profile and profile:
                return key, entry
    if kind != "cpu":
        for key, entry in devices.items():
            if any(m.lower() in name for m in entry.get("match") or [] if m.lower() != "cpu"):
                return key, entry
    if kind in devices:
        return kind, devices[kind]
    return None, None


def cost_table(records: list[dict[str, Any]], prices: dict[str, Any] | None = None) -> pd.DataFrame:
    """Cost per run: devices x wall hours x price per device-hour, with the price's source marked.

    Devices are the run's ``world_size`` (DDP ranks, DataParallel GPUs), else 1. Runs without timing
    (skipped, oom) are left out; a device with no price shows an empty cost and says so.
    """
    prices = prices or load_prices()
    cur = prices.get("currency", "USD")
    rows = []
    for r in records:
        wall = _get(r, "timing.wall_s")
        if r.get("status") != "ok" or wall is None:
            continue
        n = int(r.get("world_size") or 1)
        key, entry = price_for(r, prices)
        price = entry["price_per_device_hour"] if entry else None
        hours = wall / 3600
        rows.append({
            "run_id": r.get("run_id"), "experiment": r.get("experiment"),
            "device": device_label(_get(r, "device.kind"), _get(r, "device.name")), "profile": r.get("profile"),
            "devices": n, "wall s": wall, "device-hours": n * hours, "price key": key,
            f"{cur}/device-hour": price, f"cost {cur}": n * hours * price if price is not None else None,
            "price source": ("example" if entry.get("example") else "user") if entry else "no price: add it",
            "best val RMSE K": _get(r, "metrics.best_val_rmse_k"),
        })
    return pd.DataFrame(rows).set_index("run_id") if rows else pd.DataFrame()


def plot_cost(table: pd.DataFrame):
    """Cost against wall time per run (log-log), labelled by device and device count."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    cost_col = next((c for c in table.columns if c.startswith("cost ")), None)
    if table.empty or cost_col is None:
        ax.set_title("no priced runs")
        return fig
    for _, row in table.dropna(subset=[cost_col]).iterrows():
        ax.scatter(row["wall s"], row[cost_col])
        ax.annotate(f"{row['device']} x{row['devices']}", (row["wall s"], row[cost_col]), fontsize="small",
                    xytext=(3, 3), textcoords="offset points")
    examples = (table["price source"] == "example").any()
    ax.set(xscale="log", yscale="log", xlabel="wall seconds", ylabel=cost_col,
           title="cost vs time" + (" (example prices)" if examples else ""))
    fig.tight_layout()
    return fig
