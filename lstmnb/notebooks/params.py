"""Notebook parameter values: ``-p KEY VALUE`` read as YAML, and every value of a series (profile and overrides)
checked before any kernel starts. A value must have the kind of its notebook's default; the parameters the package
knows are checked for range: the data request as ``lstmnb.data.check_request``, the training knobs as
``TrainConfig.validate`` (``recommended`` included), the series' own counts, lists and choices here. Where a CLI
option, config or experiment already checks a setting, that check is called (``_reuse``): each rule has one home."""

from __future__ import annotations

import ast
import math
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import ConfigError, LstmnbError
from ..paths import check_writable, results_dir
from ..profiles import load_profile
from ..region import VARIANTS as REGION_VARIANTS  # a leaf: only the names, no torch
from ..rules import choice, number, parameter, whole

# TrainConfig fields that notebooks declare under the same name
TRAIN_KEYS = ("window", "lead_hours", "hidden", "layers", "batch_size", "lr", "seed", "num_workers", "threads",
              "device", "amp")
ONE_OR_MANY = ("results_paths",)  # one folder or a list of them (checked below, not by its default's kind)
REQUEST_KEYS = ("source", "points", "start", "end", "variables")
# the series' own counts, numbers and choices, by what each accepts (ScratchConfig's scratch_* knobs and ddp_ranks are
# checked in ``_check_settings``); a count is at most INT_MAX, an epochs count as TrainConfig's epochs
RULES = {
    **dict.fromkeys(("fit_epochs", "repeats", "scaling_epochs", "batch_sweep_start", "batch_sweep_max",
                     "forecast_days", "scratch_repeats", "scratch_forecast_epochs", "step_count", "step_repeats",
                     "ddp_repeats", "allreduce_max_bytes", "region_epochs", "region_shard_steps", "region_repeats",
                     "program_steps", "ring_repeats", "ring_calls", "ladder_epochs"), whole(1)),
    **dict.fromkeys(("forecast_point", "comm_split_steps", "ladder_rounds"), whole(0)),
    **dict.fromkeys(("allreduce_budget_s", "region_budget_gb"), number(positive=True)),
    "heading_deg": number(-math.inf, says="a finite number"),  # a direction: any finite angle (it wraps)
    "scaling_mode": choice(("strong", "weak", "both")),
    "ddp_input_path": choice(("fast", "dataloader")),
    "scratch_dtype": choice(("float64", "float32")),
}
# lists of whole numbers, by their least (2 for ranks, and for sides as `lstmnb region memory --sides` takes them)
INT_LISTS = {**dict.fromkeys(("epochs_list", "world_sizes", "step_batches", "skill_leads", "region_neighbours",
                              "region_world_sizes"), 1), "region_sides": 2, "ring_ranks": 2, "amdahl_ranks": 2}
CHOICE_LISTS = {"input_paths": ("fast", "dataloader"), "strategies": ("dataparallel", "ddp"),
                "scratch_versions": ("loops", "numpy", "numba-cpu", "numba-cuda", "numba-cuda-block", "torch",
                                     "torch-cuda"),
                "region_variants": REGION_VARIANTS}


def parse_value(text: str) -> Any:
    """A ``-p KEY VALUE`` value read as YAML the way papermill reads ``-y`` (its loader keeps dates as text):
    ``5`` -> 5, ``[5, 10]`` -> list, ``null`` -> None, ``cpu`` -> 'cpu', ``2021-01-01`` -> '2021-01-01', else text."""
    import yaml
    from papermill.iorw import NoDatesSafeLoader

    try:
        return yaml.load(text, Loader=NoDatesSafeLoader)
    except yaml.YAMLError:
        return text


def parse_override(key: str, text: str) -> Any:
    """``-p KEY VALUE``: ``parse_value``, and the split dates also as the command line's ``--split-dates``
    takes them (``2021-01-01,2021-04-01``, beside the YAML list ``[2021-01-01, 2021-04-01]``)."""
    value = parse_value(text)
    if key in {k for k, _ in SPLIT_KEYS} and isinstance(value, str) and "," in value:
        return [part.strip() for part in value.split(",")]
    return value


def default_value(declared: Mapping[str, Any]) -> Any:
    """A notebook parameter's default as a value (papermill gives its source text); Ellipsis if not a literal."""
    try:
        return ast.literal_eval(str(declared.get("default")))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return ...


def _kind_ok(value: Any, default: Any) -> bool:
    if value is None or default is None or default is ...:
        return True
    if isinstance(default, (int, float)) and isinstance(value, bool) != isinstance(default, bool):
        return False  # True is no number here, nor 1 a flag
    for kind, accepted in ((bool, bool), (int, int), (float, (int, float)), (str, str), (list, list), (dict, dict)):
        if isinstance(default, kind):
            return isinstance(value, accepted)
    return True


def _bad(key: str, value: Any, what: str) -> ConfigError:
    return parameter().refuse(key, value, what)


def check_values(values: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> None:
    """Raise ConfigError naming the first parameter whose value is of the wrong kind or out of range; ``defaults``:
    each parameter's default value (``default_value``), for the kind check."""
    for key, value in values.items():
        default = ... if key in ONE_OR_MANY else (defaults or {}).get(key, ...)
        if not _kind_ok(value, default):
            raise _bad(key, value, f"must be a {type(default).__name__} like its default {default!r}")
    for key, rule in RULES.items():
        if key in values and (why := rule.why(values[key])):
            raise _bad(key, values[key], why)
    for key, lo in INT_LISTS.items():
        v = values.get(key, [lo])
        if not isinstance(v, list) or not v or any(isinstance(n, bool) or not isinstance(n, int) or n < lo for n in v):
            raise _bad(key, v, f"must be a list of whole numbers >= {lo}, e.g. [{lo}, {lo + 1}]")
    for n in values.get("epochs_list") or ():  # each an epochs of TrainConfig
        if why := whole(1).why(n):
            raise _bad("epochs_list", values["epochs_list"], why)
    for key, choices in CHOICE_LISTS.items():
        v = values.get(key, [choices[0]])
        if not isinstance(v, list) or not v or any(x not in choices for x in v):
            raise _bad(key, v, f"must be a non-empty list of {', '.join(choices)}")
    if "results_paths" in values:
        rp = values["results_paths"]
        if not (isinstance(rp, str) or (isinstance(rp, list) and all(isinstance(x, str) and x.strip() for x in rp))):
            raise _bad("results_paths", rp, "must be a folder or a list of results files or folders, e.g. [results]")
    if "gpu" in values:  # well-formed is enough: 04 and 05 record their GPU runs as skipped where it is absent
        from ..training.config import knob_problem

        gpu = values["gpu"]
        if knob_problem("device", gpu) or not gpu.strip().lower().startswith("cuda"):
            raise _bad("gpu", gpu, "must be cuda or cuda:N")
    _check_request(values)
    _check_training(values)
    _check_settings(values)
    _check_paths(values)


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
    check_request(Request(**kw), say=parameter())


def _check_training(values: Mapping[str, Any]) -> None:
    """The training knobs a notebook declares under TrainConfig's names, and ``recommended``'s mapping of them,
    by TrainConfig's own rules (``parameter lr=0.0 must be ...``, ``parameter recommended: batch_size=0 ...``)."""
    from ..training.config import config_from_dict

    known = {k: values[k] for k in TRAIN_KEYS if k in values}
    rec = values.get("recommended") or {}
    if not isinstance(rec, dict):
        raise _bad("recommended", rec, "must be a mapping of training settings (e.g. {batch_size: 256})")
    for part, kw in (("", known), ("recommended: ", {**known, **rec})):
        if kw:
            try:
                cfg = config_from_dict(kw)
            except ConfigError as exc:  # an unknown key
                raise ConfigError(f"parameter {part}{exc}") from None
            cfg.validate(parameter(part))


# --- the package's own checks of the settings a parameter gives ----------------------------------------

def _reuse(key: str, value: Any, check: Callable[..., Any], *args: Any) -> Any:
    """``check(*args)``, the package's own check of the setting ``key`` gives, its refusal restated as the parameter's
    (``parameter ddp_ranks=4: 4 ranks on this node, ...``): for checks that take no ``Spelling``."""
    try:
        return check(*args)
    except LstmnbError as exc:
        raise ConfigError(f"parameter {key}={value!r}: {exc}") from None


def _check_settings(values: Mapping[str, Any]) -> None:
    """The notebook settings that a CLI option, a config or an experiment already checks, by that check."""
    if "region_box" in values:  # 08's area, checked as `lstmnb region --box` is (lstmnb.data.check_request)
        from ..data import Request, check_request

        box = values["region_box"]
        if not isinstance(box, list):
            raise _bad("region_box", box, "must be 4 numbers [lat_min, lat_max, lon_min, lon_max]")
        kw = {k: values[k] for k in ("source", "start", "end") if k in values}
        check_request(Request(box=tuple(box), points=None, **kw), say=parameter(box="region_box"))
    from ..training.config import knob_problem

    if "skill_leads" in values:  # as `lstmnb ... --leads` (each once)
        from ..experiments.skill import check_leads

        check_leads(values["skill_leads"], parameter(leads="skill_leads"))
    if "preset" in values and (why := knob_problem("preset", values["preset"])):
        raise _bad("preset", values["preset"], why)
    if "world_sizes" in values:  # 05 caps them at the GPUs present; `lstmnb bench scaling`'s range
        from ..experiments.scaling import ScalingConfig

        ScalingConfig(world_sizes=values["world_sizes"], mode="weak").validate(None, parameter())
    if "ddp_ranks" in values:  # as `lstmnb bench allreduce --world-size`: 05's all-reduce sweep runs on them
        from ..experiments.allreduce import AllreduceConfig
        from ..training.parallel import check_world_size
        from .lessons import ddp_device

        ranks = values["ddp_ranks"]
        AllreduceConfig(world_size=ranks, device="cpu", max_bytes=1024).validate(parameter(world_size="ddp_ranks"))
        kind = "cpu" if ddp_device(values.get("gpu", "cuda"), ranks)[0] == "cpu" else "cuda"  # where 05 runs them
        _reuse("ddp_ranks", ranks, check_world_size, kind, ranks, "ddp_ranks")
    if "size_points" in values:  # as `lstmnb bench size --points`
        from ..experiments.size import SizeConfig, grid_points

        pts, say = values["size_points"], parameter(points="size_points")
        SizeConfig(points=pts).validate(say)
        for n in pts:
            grid_points(n, say=say)
    if "region_world_sizes" in values:  # as `lstmnb region scaling --world-sizes`: one core per rank
        from ..experiments.region import check_world_sizes

        check_world_sizes(values["region_world_sizes"], parameter(world_sizes="region_world_sizes"))
    if "region_budget_gb" in values or "region_sides" in values:  # as `lstmnb region memory --budget-gb, --sides`
        from ..region.memory_checks import check_areas, check_budget

        if "region_budget_gb" in values:
            check_budget(values["region_budget_gb"], str(values.get("device", "cpu")),
                         parameter(budget_gb="region_budget_gb"))
        if "region_sides" in values:
            check_areas([(n, n) for n in values["region_sides"]], f"parameter region_sides={values['region_sides']!r}")
    _check_scratch(values)
    experiment = values.get("experiment")  # 06: None shows every experiment; as `lstmnb results --experiment`
    if experiment is not None and not (isinstance(experiment, str) and experiment.strip()):
        raise _bad("experiment", experiment, "is empty; give an experiment name, e.g. epochs (null: every experiment)")
    if values.get("profile") is not None:  # recorded in each record: a profile that exists, as `--profile`
        _reuse("profile", values["profile"], load_profile, values["profile"])


# the notebook parameters holding split dates, with the preset whose config they go into (None: the notebook's
# own ``preset`` parameter, 02's, recommended by default)
SPLIT_KEYS = (("split_dates", "published"), ("fit_split_dates", None))


def check_dates_per_notebook(defaults: Mapping[str, Mapping[str, Any]], given: Mapping[str, Any]) -> None:
    """Each notebook's split (given, else its own default; None in 03-05: the published preset's), as TrainConfig
    checks it and inside the time range that notebook reads (given start/end, else its own), so that e.g. ``-p end
    2020-01-21`` is refused before 01 runs. ``defaults``: per notebook name, its parameters' default values."""
    from ..data import Request
    from ..training.config import preset_config

    for name, own in defaults.items():
        seen = {k: given.get(k, v) for k, v in own.items()}
        for key, preset in SPLIT_KEYS:
            if key not in seen or seen[key] is ...:
                continue
            sd, preset = seen[key], preset or seen.get("preset", "recommended")
            cfg = preset_config(preset) if sd is None else preset_config(
                preset, split_dates=tuple(sd) if isinstance(sd, list) else sd)
            cfg.validate(parameter(split_dates=key))
            if not isinstance(seen.get("start"), str) or not isinstance(seen.get("end"), str):
                continue
            why = "" if sd is not None else f" (None: the {preset} preset's split)"
            request = Request(start=seen["start"], end=seen["end"])
            try:
                cfg.check_split_in(request, parameter(split_dates=key), given=sd)
            except LstmnbError as exc:
                raise ConfigError(f"{exc}{why}; notebook {name} reads it") from None
            if isinstance(seen.get("window"), int) and isinstance(seen.get("lead_hours", 1), int):
                cfg = replace(cfg, window=seen["window"], lead_hours=seen.get("lead_hours", cfg.lead_hours))
                try:
                    cfg.check_windows_fit(request, parameter())
                except LstmnbError as exc:
                    raise ConfigError(f"{exc}; notebook {name} reads {seen['start']}..{seen['end']}") from None


def _check_scratch(values: Mapping[str, Any]) -> None:
    """07's ``scratch_*`` settings, as ``ScratchConfig.validate`` checks them (``lstmnb scratch``'s options)."""
    if not any(k.startswith("scratch_") for k in values):
        return
    from ..scratch.fit import ScratchConfig

    names = {f.name: f"scratch_{f.name}" for f in fields(ScratchConfig)}
    ScratchConfig(**{f: values[k] for f, k in names.items() if k in values}).validate(parameter(**names))


def _check_paths(values: Mapping[str, Any]) -> None:
    """The folders a series writes and reads: output_dir writable (as the runner checks results), results
    not blank, and every results_paths entry present (as `lstmnb results PATH` requires)."""
    results = values.get("results")
    if isinstance(results, str) and not results.strip():  # `--results` must not be empty either (cli.checks)
        raise _bad("results", results, "is empty; give a results folder or .jsonl file (null: ./results, or "
                                       "$LSTMNB_RESULTS)")
    out = values.get("output_dir")
    if isinstance(out, str) and out:  # None or '': the notebooks keep their files off disk
        _reuse("output_dir", out, check_writable, out, "folder", "folder")
    if "results_paths" in values:
        paths = values["results_paths"]
        # the series' own results folder is written by its earlier notebooks: it need not exist yet
        own = None if isinstance(results, str) and "{run_dir}" in results else results_dir() if not results \
            else Path(results)
        for p in [paths] if isinstance(paths, str) else paths:
            if (own is None or Path(p).expanduser().resolve() != own.expanduser().resolve()) \
                    and not Path(p).expanduser().exists():  # as `lstmnb results PATH` requires
                raise _bad("results_paths", paths, f": results path {p!r} does not exist; give results files "
                                                   "(.jsonl) or folders")
