"""Tables of parallel-training records (lstmnb.experiments): scaling, convergence, all-reduce, batch sweep.

Cost per run from a price table (YAML, user-editable; the shipped prices are examples).
"""

from __future__ import annotations

import math
import os
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

from .labels import column, device_label, get, with_device_labels

# --- DDP and DataParallel scaling, convergence, batch sweep, all-reduce -------------------------------------

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
            "backward pass did not hide; comm % = comm s / step s. One rank has nothing to exchange: no comm "
            "figure there (its step and compute times still show DDP's own bookkeeping).",
}


def scaling_table(runs: pd.DataFrame | list[dict[str, Any]]) -> pd.DataFrame:
    """One row per (mode, device, strategy, world size) of the scaling runs (records of experiment
    ``scaling-strong`` / ``scaling-weak``, from files via ``load_records`` or a list of records):
    epoch time, throughput, speedup and efficiency as ``SCALING_DEFINITIONS`` states them (medians
    over repeats), and the measured compute/communication split per step in ms where it was measured (no
    communication on one device)."""
    df = runs if isinstance(runs, pd.DataFrame) else pd.json_normalize(runs, max_level=2)
    if df.empty or "world_size" not in df:
        return pd.DataFrame()
    exp = column(df, "experiment").fillna("")
    df = df[(column(df, "status") == "ok") & exp.str.startswith("scaling-")].dropna(subset=["world_size"])
    if df.empty:
        return pd.DataFrame()
    df = with_device_labels(df)
    comm = column(df, "parallel.comm_split.comm_fraction").astype(float)
    frame = pd.DataFrame({
        "mode": df["experiment"].str.removeprefix("scaling-"), "device": df["device_label"],
        "strategy": column(df, "config.strategy").fillna("ddp"), "world_size": df["world_size"].astype(int),
        "per-device batch": column(df, "scaling.per_device_batch"), "global batch": column(df, "scaling.global_batch"),
        "epoch s": column(df, "timing.epoch_s_median"), "samples/s": column(df, "timing.samples_per_s"),
        "step ms": 1e3 * column(df, "parallel.comm_split.step_s").astype(float),
        "compute ms": 1e3 * column(df, "parallel.comm_split.compute_s").astype(float),
        "comm ms": 1e3 * column(df, "parallel.comm_split.comm_s").astype(float), "comm %": 100 * comm,
    }, index=df.index)
    frame.loc[frame["world_size"] == 1, ["comm ms", "comm %"]] = float("nan")  # one device exchanges nothing
    keys = ["mode", "device", "strategy", "world_size"]
    table = frame.groupby(keys, sort=False).median(numeric_only=True).reset_index()
    out = []
    for (mode, device, strategy), g in table.groupby(["mode", "device", "strategy"], sort=False):
        g = g.sort_values("world_size").copy()
        one = g[g["world_size"] == 1]
        if one.empty and mode == "weak":  # one device with this batch: the strong runs' one-device run, when its batch matches
            one = table[(table["mode"] == "strong") & (table["device"] == device) & (table["strategy"] == strategy)
                        & (table["world_size"] == 1) & (table["global batch"] == g["per-device batch"].iloc[0])]
        if one.empty:
            g["speedup"] = float("nan")
        elif mode == "strong":
            g["speedup"] = one["epoch s"].iloc[0] / g["epoch s"]
        else:
            g["speedup"] = g["samples/s"] / one["samples/s"].iloc[0]
        g["efficiency"] = g["speedup"] / g["world_size"]
        out.append(g)
    cols = keys + ["per-device batch", "global batch", "epoch s", "samples/s", "speedup", "efficiency",
                   "step ms", "compute ms", "comm ms", "comm %"]
    table = pd.concat(out)[cols]
    for name in ("per-device batch", "global batch", "samples/s"):  # counts and a rate: whole numbers
        table[name] = table[name].round().astype("Int64")
    return table.set_index(keys).sort_index()


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


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):  # powers of 1024: IEC units
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def batch_sweep_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Batch size against status, time per epoch, samples/s, peak memory and final validation RMSE."""
    rows = []
    for r in records:
        b = get(r, "sweep.batch_size") or get(r, "config.batch_size")
        rows.append({"batch size": b, "status": r.get("status"), "epoch s": get(r, "timing.epoch_s_median"),
                     "samples/s": get(r, "timing.samples_per_s"), "peak MB": get(r, "memory.peak_mb"),
                     "final val RMSE K": (r.get("epochs") or [{}])[-1].get("val_rmse_k"),
                     "reason": r.get("reason")})
    return pd.DataFrame(rows).set_index("batch size") if rows else pd.DataFrame()


# --- scaling and all-reduce from alternated repeats (04/05 on any machine) ------------------------

def _scaling_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for r in records:
        if r.get("status") != "ok" or not str(r.get("experiment", "")).startswith("scaling-"):
            continue
        n = int(r.get("world_size") or 1)
        par = r.get("parallel") or {}
        split = par.get("comm_split") or {}
        per_rank = get(r, "scaling.per_device_batch") or get(r, "config.batch_size")
        threads = par.get("threads_per_rank")
        row = {"ranks": n, "input path": get(r, "config.input_path"), "per-rank batch": per_rank,
               "global batch": per_rank * n if per_rank else None,
               "threads": threads * n if threads else float("nan"),
               "epoch s": get(r, "timing.epoch_s_median"), "samples/s": get(r, "timing.samples_per_s"),
               "step ms": 1e3 * split["step_s"] if split.get("step_s") else float("nan"),
               "compute ms": 1e3 * split["compute_s"] if split.get("compute_s") else float("nan"),
               "comm ms": 1e3 * split["comm_s"] if split.get("comm_s") is not None else float("nan"),
               "busy cores": get(r, "threads.busy_cores")}
        # one rank does the same work in both modes: its runs are the baseline of each
        modes = [get(r, "scaling.mode") or r["experiment"].removeprefix("scaling-")] if n > 1 else ["strong", "weak"]
        rows += [{"mode": m, **row} for m in modes]
    return rows


def scaling_repeat_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Strong and weak DDP scaling from repeated runs (``report.repeats``): per (mode, ranks) the medians of
    epoch time, samples/s and the measured step / compute / communication split, the input path, batches
    and threads, flags, and speedup and efficiency (as ``SCALING_DEFINITIONS``) only where the baseline
    (one rank) can carry one; ``note`` says why not where it cannot, or that it is rough."""
    from .repeats import median_of_repeats, speedup_note

    rows = _scaling_rows(records)
    if not rows:
        return pd.DataFrame()
    keys = ["mode", "ranks", "input path", "per-rank batch", "global batch"]
    table = median_of_repeats(rows, keys, "epoch s").reset_index()
    table.loc[table["ranks"] == 1, "comm ms"] = float("nan")  # one rank: nothing to exchange, the rest is noise
    table["comm %"] = 100 * table["comm ms"] / table["step ms"]
    table["speedup"] = table["efficiency"] = float("nan")
    table["note"] = ""
    for mode, g in table.groupby("mode", sort=False):
        one = g[g["ranks"] == 1]
        if one.empty:
            table.loc[g.index, "note"] = "no speedup: no one-rank run"
            continue
        base = one.iloc[0]
        ok, why = speedup_note(base, g)
        table.loc[g.index[g["ranks"] > 1], "note"] = why  # said once per mode, on the rows it concerns
        if not ok:
            continue
        if mode == "strong":
            speed = base["epoch s"] / g["epoch s"]
        else:
            speed = g["samples/s"] / base["samples/s"]
        table.loc[g.index, "speedup"] = speed
        table.loc[g.index, "efficiency"] = speed / g["ranks"]
    table["threads"] = table["threads"].round().astype("Int64")
    cols = keys + ["threads", "repeats", "epoch s", "samples/s", "speedup", "efficiency", "step ms", "compute ms",
                   "comm ms", "comm %", "spread %", "busy cores", "flag", "note"]
    return table[cols].set_index(["mode", "ranks"]).sort_index()


def allreduce_table(sweeps: list[dict[str, Any]], step_s: float | None = None) -> pd.DataFrame:
    """All-reduce time and bandwidth per message size (GB/s = 1e9 bytes/s; busbw = algbw x 2(n-1)/n) from
    one or more sweeps (each ``experiments.allreduce``'s output, ``busy_cores`` added by a caller that knows
    it) under the one timing rule (``repeats.median_of_repeats``): medians, flags, and the row at the model's
    gradient size marked (with its share of a training step of ``step_s`` seconds, when given)."""
    from .repeats import median_of_repeats

    rows, grad = [], None
    for sweep in sweeps:
        grad = sweep.get("gradient_bytes") or grad
        for r in sweep["rows"]:
            rows.append({"bytes": r["bytes"], "ranks": r["world_size"], "backend": r["backend"],
                         "time us": r["time_us"], "algbw GB/s": r["algbw_gbps"], "busbw GB/s": r["busbw_gbps"],
                         "busy cores": sweep.get("busy_cores")})
    if not rows:
        return pd.DataFrame()
    table = median_of_repeats(rows, ["bytes", "ranks", "backend"], "time us").reset_index()
    table.insert(0, "size", table["bytes"].map(_human_bytes))
    table["gradients of one step"] = table["bytes"] == (grad or 0) // 4 * 4
    if step_s:
        table["share of a step"] = (table["time us"] / 1e6 / step_s).where(table["gradients of one step"])
    return table.set_index("size")

# --- cost: the price table and each run's cost --------------------------------------------------------------

TABLE_KEYS = ("currency", "devices")  # a price table's keys
ENTRY_KEYS = ("price_per_device_hour", "match", "example", "note")  # the keys of one entry under devices


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_entry(where: str, name: Any, entry: Any) -> None:
    """One entry of a price table's ``devices``, or a one-line ConfigError naming the entry, field and value."""
    from ..errors import ConfigError

    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"price table {where}: devices key {_short(name)} must be a device or profile name (text)")
    if not isinstance(entry, dict):
        raise ConfigError(f"price table {where}: devices.{name}={_short(entry)} must be a mapping with "
                          f"price_per_device_hour (and optionally match, example, note)")
    unknown = sorted(map(str, set(entry) - set(ENTRY_KEYS)))
    if unknown:
        raise ConfigError(f"price table {where}: devices.{name} has unknown key(s) {unknown}; allowed: "
                          f"{', '.join(ENTRY_KEYS)}")
    price = entry.get("price_per_device_hour")
    if (not isinstance(price, (int, float)) or isinstance(price, bool) or not math.isfinite(price)
            or price < 0):
        raise ConfigError(f"price table {where}: devices.{name}.price_per_device_hour={_short(price)} must be a "
                          f"number >= 0 (finite: not .nan or .inf)")
    if "match" in entry:
        match = entry["match"]
        if (not isinstance(match, list)
                or not all(isinstance(m, str) and m.strip() for m in match)):
            raise ConfigError(f"price table {where}: devices.{name}.match={_short(match)} must be a list of non-empty "
                              "device or profile names in brackets, e.g. [carc-a100, A100], or [A100] for one")
    if "example" in entry and not isinstance(entry["example"], bool):
        raise ConfigError(f"price table {where}: devices.{name}.example={_short(entry['example'])} must be true "
                          "or false")
    if "note" in entry and not isinstance(entry["note"], (str, type(None))):
        raise ConfigError(f"price table {where}: devices.{name}.note={_short(entry['note'])} must be text")


def load_prices(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """The price table (YAML): the shipped examples, or a user's copy at ``path``; checked on load.

    The table: ``currency`` (default USD) and ``devices``, a mapping of name -> entry; an entry has
    ``price_per_device_hour`` (a finite number >= 0) and optionally ``match`` (a list of device or profile
    names, matched case-insensitively: ``[A100]``; a bare string is refused, since it is not a list of
    names), ``example`` (true or false) and ``note`` (text). Anything else, or a bad value, is a one-line
    ConfigError naming the table, the entry, the field and what is valid.
    """
    import yaml

    from ..errors import ConfigError

    if path is None:
        text = resources.files("lstmnb").joinpath("prices.yaml").read_text(encoding="utf-8")
        where = "lstmnb/prices.yaml"
    else:
        p = Path(path).expanduser()
        if not str(path).strip() or not p.is_file():
            raise ConfigError(f"price table {str(path)!r} is not a file; copy lstmnb/prices.yaml and pass its path")
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"price table {p} cannot be read as text ({type(exc).__name__})") from None
        where = str(p)
    try:
        prices = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"price table {where} is not valid YAML ({getattr(exc, 'problem', None) or type(exc).__name__}"
                          f"{line}); see lstmnb/prices.yaml for the format") from None
    if not isinstance(prices, dict):
        raise ConfigError(f"price table {where} holds a {type(prices).__name__}, not a mapping with 'devices' (name -> "
                          "price_per_device_hour); see lstmnb/prices.yaml for the format")
    unknown = sorted(map(str, set(prices) - set(TABLE_KEYS)))
    if unknown:
        raise ConfigError(f"price table {where} has unknown key(s) {unknown}; allowed: {', '.join(TABLE_KEYS)}")
    currency = prices.get("currency", "USD")
    if not isinstance(currency, str) or not currency.strip():
        raise ConfigError(f"price table {where}: currency={_short(currency)} must be a name such as USD or EUR")
    devices = prices.get("devices")
    if not isinstance(devices, dict) or not devices:
        raise ConfigError(f"price table {where} needs a 'devices' mapping of name -> price_per_device_hour")
    for name, entry in devices.items():
        _check_entry(where, name, entry)
    prices.setdefault("currency", "USD")
    return prices


def price_for(record: dict[str, Any], prices: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """The price entry for a record: by profile name, then device name, then device kind; (None, None) if none."""
    devices = prices["devices"]
    profile = (record.get("profile") or "").lower()
    name = (get(record, "device.name") or "").lower()
    kind = (get(record, "device.kind") or "").lower()
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
        wall = get(r, "timing.wall_s")
        if r.get("status") != "ok" or wall is None:
            continue
        n = int(r.get("world_size") or 1)
        key, entry = price_for(r, prices)
        price = entry["price_per_device_hour"] if entry else None
        hours = wall / 3600
        rows.append({
            "run_id": r.get("run_id"), "experiment": r.get("experiment"),
            "device": device_label(get(r, "device.kind"), get(r, "device.name")), "profile": r.get("profile"),
            "devices": n, "wall s": wall, "device-hours": n * hours, "price key": key,
            f"{cur}/device-hour": price, f"cost {cur}": n * hours * price if price is not None else None,
            "price source": ("example" if entry.get("example") else "user") if entry else "no price: add it",
            "best val RMSE K": get(r, "metrics.best_val_rmse_k"),
        })
    return pd.DataFrame(rows).set_index("run_id") if rows else pd.DataFrame()
