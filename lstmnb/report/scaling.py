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

from .labels import device_label, get, present

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


def convergence_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Validation loss and RMSE per epoch with cumulative wall seconds, one block per (experiment, world size)."""
    return pd.DataFrame([{"experiment": r.get("experiment"), "world_size": int(r.get("world_size") or 1),
                          **{k: e[k] for k in ("epoch", "cumulative_s", "val_loss", "val_rmse_k")}}
                         for r in records if r.get("status") == "ok" for e in r.get("epochs") or []])


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):  # powers of 1024: IEC units
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024


def batch_sweep_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Batch size against status, time per epoch, samples/s, peak memory and final validation RMSE."""
    rows = [{"batch size": get(r, "sweep.batch_size") or get(r, "config.batch_size"), "status": r.get("status"),
             "epoch s": get(r, "timing.epoch_s_median"), "samples/s": get(r, "timing.samples_per_s"),
             "peak MB": get(r, "memory.peak_mb"), "final val RMSE K": (r.get("epochs") or [{}])[-1].get("val_rmse_k"),
             "reason": r.get("reason")} for r in records]
    return pd.DataFrame(rows).set_index("batch size") if rows else pd.DataFrame()


def _scaling_rows(runs: pd.DataFrame | list[dict[str, Any]]) -> list[dict[str, Any]]:
    # records or load_records' rows, flattened in full to dotted keys; a missing field (NaN) left out
    flat = pd.json_normalize(runs.to_dict("records") if isinstance(runs, pd.DataFrame) else runs)
    rows = []
    for r in ({k: v for k, v in row.items() if present(v)} for row in flat.to_dict("records")):
        experiment = str(r.get("experiment") or "")
        if r.get("status") != "ok" or not experiment.startswith("scaling-"):
            continue
        n = int(r.get("world_size") or 1)
        split = {k: r.get(f"parallel.comm_split.{k}") for k in ("step_s", "compute_s", "comm_s", "comm_fraction")}
        per_rank = r.get("scaling.per_device_batch") or r.get("config.batch_size")
        threads = r.get("parallel.threads_per_rank")
        share = split.get("comm_fraction")
        if share is None and split.get("comm_s") is not None and split.get("step_s"):
            share = split["comm_s"] / split["step_s"]
        row = {"device": device_label(r.get("device.kind"), r.get("device.name")),
               "strategy": r.get("config.strategy") or "ddp", "ranks": n,
               "input path": r.get("config.input_path"), "per-rank batch": per_rank,
               "global batch": per_rank * n if per_rank else None,
               "threads": threads * n if threads else float("nan"),
               "epoch s": float(r.get("timing.epoch_s_median") or "nan"),
               "samples/s": float(r.get("timing.samples_per_s") or "nan"),
               "step ms": 1e3 * split["step_s"] if split.get("step_s") else float("nan"),
               "compute ms": 1e3 * split["compute_s"] if split.get("compute_s") else float("nan"),
               "comm ms": 1e3 * split["comm_s"] if split.get("comm_s") is not None else float("nan"),
               "comm %": 100 * share if share is not None else float("nan"),
               "busy cores": r.get("threads.busy_cores")}
        # one rank does the same work in both modes: its runs are the baseline of each
        modes = [r.get("scaling.mode") or experiment.removeprefix("scaling-")] if n > 1 else ["strong", "weak"]
        rows += [{"mode": m, **row} for m in modes]
    return rows


def scaling_table(runs: pd.DataFrame | list[dict[str, Any]]) -> pd.DataFrame:
    """Strong and weak scaling (DDP or DataParallel) of the ``scaling-*`` runs (records or ``load_records``'s
    DataFrame) under ``repeats.median_of_repeats``, per (mode, ranks): epoch time, samples/s, the step /
    compute / comm split (``comm %``: median of each run's comm / step; none on one rank), flags; speedup and
    efficiency (``SCALING_DEFINITIONS``) only over a sound one-rank run of the same device, strategy and batch
    (global for strong, per-rank for weak), else ``note`` says why (or that it is rough)."""
    from .repeats import median_of_repeats, speedup_note

    rows = _scaling_rows(runs)
    if not rows:
        return pd.DataFrame()
    keys = ["mode", "device", "strategy", "ranks", "input path", "per-rank batch", "global batch"]
    table = median_of_repeats(rows, keys, "epoch s").reset_index()
    table.loc[table["ranks"] == 1, ["comm ms", "comm %"]] = float("nan")  # one rank: nothing to exchange
    table["speedup"] = table["efficiency"] = float("nan")
    table["note"] = ""
    for (mode, _, _), g in table.groupby(["mode", "device", "strategy"], sort=False):
        same = "global batch" if mode == "strong" else "per-rank batch"
        one = g[(g["ranks"] == 1) & g[same].isin(g.loc[g["ranks"] > 1, same])]
        if one.empty:
            table.loc[g.index[g["ranks"] > 1], "note"] = "no speedup: no one-rank run of the same batch"
            continue
        base = one.iloc[0]
        ok, why = speedup_note(base, g)
        table.loc[g.index[g["ranks"] > 1], "note"] = why  # said once per group, on the rows it concerns
        if not ok:
            continue
        speed = base["epoch s"] / g["epoch s"] if mode == "strong" else g["samples/s"] / base["samples/s"]
        table.loc[g.index, "speedup"] = speed.where((g["ranks"] > 1) | (g.index == one.index[0]))
        table.loc[g.index, "efficiency"] = table.loc[g.index, "speedup"] / g["ranks"]
    for name in ("threads", "per-rank batch", "global batch"):
        table[name] = table[name].round().astype("Int64")
    cols = keys + ["threads", "repeats", "epoch s", "samples/s", "speedup", "efficiency", "step ms", "compute ms",
                   "comm ms", "comm %", "spread %", "busy cores", "flag", "note"]
    return table[cols].set_index(["mode", "ranks"]).sort_index(kind="stable")


def allreduce_table(sweeps: list[dict[str, Any]], step_s: float | None = None) -> pd.DataFrame:
    """All-reduce time and bandwidth per message size (GB/s = 1e9 bytes/s; busbw = algbw x 2(n-1)/n) of
    ``experiments.allreduce`` sweeps (``busy_cores`` added by a caller that knows it) under
    ``repeats.median_of_repeats``, the model's gradient size marked (its share of a ``step_s`` step if given)."""
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
# the keys of one entry under devices: (is the value valid, what is)
ENTRY_RULES = {
    "price_per_device_hour": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                              and v >= 0, "a number >= 0 (finite: not .nan or .inf)"),
    "match": (lambda v: isinstance(v, list) and all(isinstance(m, str) and m.strip() for m in v),
              "a list of non-empty device or profile names in brackets, e.g. [carc-a100, A100], or [A100] for one"),
    "example": (lambda v: isinstance(v, bool), "true or false"),
    "note": (lambda v: v is None or isinstance(v, str), "text"),
}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def load_prices(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """The price table (YAML: the shipped examples, or a user's copy at ``path``), checked: ``currency``
    (default USD) and ``devices``, name -> entry (``ENTRY_RULES``; ``match`` names are case-insensitive).
    Anything else is a one-line ConfigError naming the table, entry, field and what is valid."""
    import yaml

    from ..errors import ConfigError

    where = "lstmnb/prices.yaml" if path is None else str(Path(path).expanduser())
    if path is None:
        text = resources.files("lstmnb").joinpath("prices.yaml").read_text(encoding="utf-8")
    elif not str(path).strip() or not Path(where).is_file():
        raise ConfigError(f"price table {str(path)!r} is not a file; copy lstmnb/prices.yaml and pass its path")
    else:
        try:
            text = Path(where).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"price table {where} cannot be read as text ({type(exc).__name__})") from None
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
    currency = prices.setdefault("currency", "USD")
    if not isinstance(currency, str) or not currency.strip():
        raise ConfigError(f"price table {where}: currency={_short(currency)} must be a name such as USD or EUR")
    devices = prices.get("devices")
    if not isinstance(devices, dict) or not devices:
        raise ConfigError(f"price table {where} needs a 'devices' mapping of name -> price_per_device_hour")
    for name, entry in devices.items():
        at = f"price table {where}: devices.{name}"
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"price table {where}: devices key {_short(name)} must be a device or profile name (text)")
        if not isinstance(entry, dict):
            raise ConfigError(f"{at}={_short(entry)} must be a mapping with price_per_device_hour (and optionally "
                              "match, example, note)")
        unknown = sorted(map(str, set(entry) - set(ENTRY_RULES)))
        if unknown:
            raise ConfigError(f"{at} has unknown key(s) {unknown}; allowed: {', '.join(ENTRY_RULES)}")
        for key, (valid, what) in ENTRY_RULES.items():
            if (key in entry or key == "price_per_device_hour") and not valid(entry.get(key)):
                raise ConfigError(f"{at}.{key}={_short(entry.get(key))} must be {what}")
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
    """Cost per timed run: devices (``world_size``, else 1) x wall hours x price per device-hour, the price's
    source marked; a device with no price shows an empty cost and says so."""
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
