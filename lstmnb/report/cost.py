"""Cost per run from a price table (YAML, user-editable; the shipped prices are examples)."""

from __future__ import annotations

import math
import os
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

from .devices import device_label
from .devices import get as _get

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
