"""Notebook parameter values: ``-p KEY VALUE`` read as YAML, and every value of a series (profile and
overrides) checked before any kernel starts, with the same checks the CLI gives the same settings.

A value must have the kind of its notebook's default (a list where the default is a list, ...), and
the parameters the package knows are checked for range: the data request (source, points, start,
end, variables) as ``lstmnb.data.check_request`` does, the training knobs as ``TrainConfig.validate``
does (``recommended`` included), and the series' own counts, lists and choices here.
"""

from __future__ import annotations

import ast
import datetime as _dt
from typing import Any, Mapping

from ..errors import ConfigError

# TrainConfig fields that notebooks declare under the same name
TRAIN_KEYS = ("window", "lead_hours", "hidden", "layers", "batch_size", "lr", "seed", "num_workers", "threads",
              "device", "amp")
ONE_OR_MANY = ("results_paths",)  # one folder or a list of them (checked below, not by its default's kind)
REQUEST_KEYS = ("source", "points", "start", "end", "variables")
POSITIVE_INTS = ("fit_epochs", "repeats", "scaling_epochs", "batch_sweep_start", "batch_sweep_max", "forecast_days",
                 "scratch_window", "scratch_hours", "scratch_hidden", "scratch_epochs", "scratch_batch_size",
                 "scratch_repeats", "scratch_forecast_epochs", "step_count", "step_repeats", "ddp_ranks",
                 "ddp_repeats", "allreduce_max_bytes")
NON_NEGATIVE_INTS = ("forecast_point", "comm_split_steps")
POSITIVE_NUMBERS = ("scratch_lr", "allreduce_budget_s")
INT_LISTS = ("epochs_list", "world_sizes", "size_points", "step_batches")
CHOICES = {"scaling_mode": ("strong", "weak", "both"), "ddp_input_path": ("fast", "dataloader"), "scratch_optimizer": ("adam", "sgd"),
           "scratch_dtype": ("float64", "float32"), "scratch_data": ("airline", "era5")}
CHOICE_LISTS = {"input_paths": ("fast", "dataloader"), "strategies": ("dataparallel", "ddp"),
                "scratch_versions": ("loops", "numpy", "numba-cpu", "numba-cuda", "numba-cuda-block", "torch",
                                     "torch-cuda")}


def parse_value(text: str) -> Any:
    """A ``-p KEY VALUE`` value read as YAML: ``5`` -> 5, ``[5, 10]`` -> list, ``null`` -> None, ``cpu`` -> 'cpu';
    text that is not YAML, and dates (``2020-01-01``, or ``2021-13-45`` that YAML cannot read), stay text."""
    import yaml

    try:
        value = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError):  # YAML reads 2021-13-45 as a date and fails with ValueError
        return text
    return text if isinstance(value, (_dt.date, _dt.datetime)) else value


def default_value(declared: Mapping[str, Any]) -> Any:
    """A notebook parameter's default as a value (papermill gives its source text); Ellipsis if not a literal."""
    try:
        return ast.literal_eval(str(declared.get("default")))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return ...


def _kind_ok(value: Any, default: Any) -> bool:
    if value is None or default is None or default is ...:
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    for kind in (str, list, dict):
        if isinstance(default, kind):
            return isinstance(value, kind)
    return True


def _bad(key: str, value: Any, what: str) -> ConfigError:
    return ConfigError(f"parameter {key}={value!r} {what}")


def check_values(values: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> None:
    """Raise ConfigError naming the first parameter whose value is of the wrong kind or out of range.

    ``defaults``: each parameter's default value (``default_value``), for the kind check."""
    for key, value in values.items():
        default = ... if key in ONE_OR_MANY else (defaults or {}).get(key, ...)
        if not _kind_ok(value, default):
            raise _bad(key, value, f"must be a {type(default).__name__} like its default {default!r}")
    for key in POSITIVE_INTS + NON_NEGATIVE_INTS:
        lo = 1 if key in POSITIVE_INTS else 0
        if key in values and (isinstance(values[key], bool) or not isinstance(values[key], int) or values[key] < lo):
            raise _bad(key, values[key], f"must be a whole number >= {lo}")
    for key in POSITIVE_NUMBERS:
        v = values.get(key, 1)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
            raise _bad(key, v, "must be a positive number")
    for key in INT_LISTS:
        v = values.get(key, [1])
        if not isinstance(v, list) or not v or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in v):
            raise _bad(key, v, "must be a list of whole numbers >= 1, e.g. [1, 2]")
    for key, choices in CHOICES.items():
        if key in values and values[key] not in choices:
            raise _bad(key, values[key], f"is not one of {', '.join(choices)}")
    for key, choices in CHOICE_LISTS.items():
        v = values.get(key, [choices[0]])
        if not isinstance(v, list) or not v or any(x not in choices for x in v):
            raise _bad(key, v, f"must be a non-empty list of {', '.join(choices)}")
    if "results_paths" in values:
        rp = values["results_paths"]
        if not (isinstance(rp, str) or (isinstance(rp, list) and all(isinstance(x, str) and x.strip() for x in rp))):
            raise _bad("results_paths", rp, "must be a folder or a list of results files or folders, e.g. [results]")
    if "gpu" in values and not (isinstance(values["gpu"], str) and values["gpu"].startswith("cuda")):
        raise _bad("gpu", values["gpu"], "must be cuda or cuda:N")
    _check_request(values)
    _check_training(values)


def _check_request(values: Mapping[str, Any]) -> None:
    if not any(k in values for k in REQUEST_KEYS):
        return
    from ..data import Request, check_request

    kw: dict[str, Any] = {k: values[k] for k in ("source", "start", "end") if k in values}
    if "points" in values:
        pts = values["points"]
        if not isinstance(pts, list) or not all(isinstance(p, (list, tuple)) for p in pts):
            raise _bad("points", pts, "must be a list of [lat, lon] pairs, e.g. [[40, 280], [-33, 151]]")
        kw["points"] = tuple(tuple(p) for p in pts)
    if "variables" in values:
        kw["variables"] = tuple(values["variables"]) if isinstance(values["variables"], list) else values["variables"]
    try:
        check_request(Request(**kw))
    except ConfigError as exc:
        raise ConfigError(f"parameter {exc}") from None


def _check_training(values: Mapping[str, Any]) -> None:
    from ..training.config import config_from_dict

    known = {k: values[k] for k in TRAIN_KEYS if k in values}
    rec = values.get("recommended") or {}
    if not isinstance(rec, dict):
        raise _bad("recommended", rec, "must be a mapping of training settings (e.g. {batch_size: 256})")
    try:
        for part, kw in (("", known), ("recommended: ", {**known, **rec})):
            if kw:
                config_from_dict(kw).validate()
    except (ConfigError, TypeError) as exc:
        raise ConfigError(f"parameter {part}{exc}") from None
