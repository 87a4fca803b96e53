"""The ladder: the study's workload timed rung by rung, from the study's own code to lstmnb's fastest step.

Rung 0 is the study's code as its notebook ran it (``--preset published``): a tensor made per sample in the
Dataset's ``__getitem__``, a shuffled DataLoader with 2 workers started afresh each epoch and pageable
memory, glibc's default heap, the loss read back every step. Each later rung makes one change on the one
before; a change that means nothing on a device (the heap is a CPU run's, a CUDA graph a GPU's) is not a
rung there. The last rung is the recommended setting: another model and optimiser, on the same data and
epochs, labelled as such with its accuracy beside it.

A record says its rung (``ladder``: rung, name, change), worked out here from what the run did (its config,
the heap its record states, whether a CUDA graph was used) and on what data, so that any run of the study's
workload finds its place, ``lstmnb train --preset published`` included, and older records too (where a
knob is missing, the behaviour lstmnb had before it existed). ``experiments.ladder`` runs every rung in a
fresh process: the heap of a process cannot be put back once a run kept it (``memory.keep_freed_heap``).
"""

from __future__ import annotations

from typing import Any

from ..datasets.study import STUDY_TEST_START
from ..rungs import BOTH, RUNGS, Rung
from .config import preset_config

RECOMMENDED = RUNGS[-1].rung
# what the recommended rung changes from the recommended preset: the study's split (no validation part), so the
# same epochs train on the same hours and are scored on the same test hours
RECOMMENDED_OVERRIDES = {"patience": None, "blend": "off", "split_dates": (STUDY_TEST_START, STUDY_TEST_START)}

# the workload: the knobs a rung's record must share with its preset (the study's model and optimiser for rungs
# 0-5, the recommended one for the last); the DataLoader's, where a run uses one; one device, float32
WORKLOAD = ("batch_size", "hidden", "layers", "window", "lead_hours", "horizon", "lr", "lr_schedule", "weight_decay",
            "residual", "calendar", "cycles", "point_weights", "cell", "dropout", "grad_clip", "fused_adam")
LOADER = ("num_workers", "pin_memory", "persistent_workers")
ONE_DEVICE = {"strategy": "single", "amp": "off", "compile": False}
TEST_PART = ["2021-01-01 00:00:00", "2021-06-30 23:00:00"]


def rungs_on(kind: str) -> list[Rung]:
    """The rungs of a device kind ('cpu' or 'cuda'), in order."""
    return [r for r in RUNGS if kind in r.devices]


def rung_options(rung: Rung) -> tuple[str, dict[str, Any]]:
    """(preset, overrides) of ``rung``: the published preset with every change up to it, or the recommended
    preset on the study's split."""
    if rung.rung == RECOMMENDED:
        return "recommended", dict(RECOMMENDED_OVERRIDES)
    changes: dict[str, Any] = {}
    for r in RUNGS[1:rung.rung + 1]:
        changes.update(r.overrides)
    return "published", changes


def _step(record: dict[str, Any], kind: str) -> dict[str, Any]:
    """What a record's step did, in the terms the rungs change (a missing knob: lstmnb's behaviour before it)."""
    cfg = record["config"]
    ran = record.get("memory")  # a run that ran says its heap (none said: glibc's own); a skipped one, its config's
    heap = (ran.get("heap") or {}).get("policy") if ran else cfg.get("heap")
    every = cfg.get("loss_every")
    graph = record.get("cuda_graph")  # a skipped run has none: what it would have done
    used = graph.get("used") if graph else cfg.get("cuda_graph") and cfg.get("input_path") == "fast"
    return {
        "input": cfg.get("input_path"), "tensors": cfg.get("sample_tensors", "once"),
        "heap": (heap == "kept") if kind == "cpu" else None,
        "every": (every or (1 if kind == "cpu" else 100)) if kind == "cuda" else None,
        "graph": bool(used) if kind == "cuda" else None,
    }


def _expected(rung: Rung, kind: str) -> dict[str, Any]:
    """The step of ``rung`` on a device kind, as ``_step`` describes a record's."""
    _, o = rung_options(rung)
    return {"input": o.get("input_path", "dataloader"), "tensors": o.get("sample_tensors", "per_sample"),
            "heap": o.get("heap") == "kept" if kind == "cpu" else None,
            "every": (o.get("loss_every", 1) or 100) if kind == "cuda" else None,
            "graph": bool(o.get("cuda_graph")) if kind == "cuda" else None}


def _study_data(record: dict[str, Any]) -> bool:
    """Trained on the study's data with its split: every hour of 2020 in training, none in validation, and
    scored on 2021-01..06. A record without a data section (a skipped run) is judged by its config."""
    cfg, data = record["config"], record.get("data")
    if list(cfg.get("split_dates") or []) != [STUDY_TEST_START, STUDY_TEST_START]:
        return False
    if not data:
        return True
    times = data.get("split_times") or {}
    return data.get("source") == "study" and times.get("val") is None and list(times.get("test") or []) == TEST_PART


def rung_of(record: dict[str, Any]) -> dict[str, Any] | None:
    """The record's rung (``{"rung", "name", "change"}``), or None where the run is not one of the ladder's."""
    cfg = record.get("config")
    if not isinstance(cfg, dict) or not _study_data(record):
        return None
    if any(cfg.get(k) != v for k, v in ONE_DEVICE.items()):
        return None
    device = record.get("device")
    kind = (device.get("kind") if isinstance(device, dict) else None) or str(cfg.get("device", "")).split(":")[0]
    if kind not in BOTH:
        return None
    preset = preset_config("recommended" if cfg.get("preset") == "recommended" else "published")
    keys = WORKLOAD + (LOADER if cfg.get("input_path") == "dataloader" else ())
    if any(cfg.get(k) != getattr(preset, k) for k in keys if k != "lr") or cfg.get("lr") != preset.learning_rate:
        return None
    if preset.preset == "recommended":
        found = [RUNGS[RECOMMENDED]] if cfg.get("input_path") == "fast" else []
    else:
        step = _step(record, kind)
        found = [r for r in rungs_on(kind) if r.rung != RECOMMENDED and _expected(r, kind) == step]
    if not found:
        return None
    r = found[0]
    return {"rung": r.rung, "name": r.name, "change": r.change}
