"""The ladder: the study's workload timed rung by rung, from the study's own code to lstmnb's fastest step.

Rung 0 is the study's code as its notebook ran it (``--preset published``); each later rung makes one change on the
one before (``RUNGS``: plain data, the report draws them too) and is no rung on a device where the change means nothing
(the heap is a CPU run's, a CUDA graph a GPU's). The last rung is the recommended setting, with its accuracy beside it.

``rung_of`` works out a record's rung (``ladder``: rung, name, change) from what the run did and on what data, so any
run of the study's workload finds its place, ``lstmnb train --preset published`` and older records included. It takes
the presets it compares with from its caller (``training.trainer.with_rung``): this module imports no training code.
``experiments.ladder`` runs each rung in a fresh process: a heap a run kept cannot be put back
(``machine.memory.keep_freed_heap``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .datasets.study import STUDY_TEST_START

BOTH, CPU, GPU = ("cpu", "cuda"), ("cpu",), ("cuda",)


@dataclass(frozen=True)
class Rung:
    rung: int
    name: str
    change: str  # what this rung changes on the one before, in a few words
    overrides: dict[str, Any]  # the change, as training options on top of the rungs before it
    devices: tuple[str, ...]  # where the change is one (elsewhere it is no change: not a rung there)


RUNGS: tuple[Rung, ...] = (
    Rung(0, "the study's code", "a tensor per sample in __getitem__, 2 DataLoader workers started afresh each "
         "epoch, pageable memory, glibc's default heap, the loss read back every step", {}, BOTH),
    Rung(1, "windows built once", "float32 windows built once; a sample is a view, no tensor made per sample",
         {"sample_tensors": "once"}, BOTH),
    Rung(2, "freed heap kept", "glibc keeps the freed C heap for the next step instead of faulting it in again",
         {"heap": "kept"}, CPU),
    Rung(3, "loss read every 100 steps", "the loss read back every 100 steps, not every step (no host sync per "
         "step)", {"loss_every": None}, GPU),
    Rung(4, "in-memory batches", "the training set in the device's memory, shuffled index batches, no DataLoader",
         {"input_path": "fast"}, BOTH),
    Rung(5, "CUDA graph", "the step captured once as a CUDA graph and replayed", {"cuda_graph": True}, GPU),
    Rung(6, "recommended setting", "another model and optimiser (lstmnb's recommended: 1 layer with a residual "
         "head, calendar and cycle inputs, batch 256, fused Adam 4e-3), the same data and epochs", {}, BOTH),
)

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
    return "published", {k: v for r in RUNGS[1:rung.rung + 1] for k, v in r.overrides.items()}


def _step(record: dict[str, Any], kind: str) -> dict[str, Any]:
    """What a record's step did, in the terms the rungs change (a missing knob: lstmnb's behaviour before it)."""
    cfg = record["config"]
    ran = record.get("memory")  # a run that ran says its heap (none said: glibc's own); a skipped one, its config's
    heap = (ran.get("heap") or {}).get("policy") if ran else cfg.get("heap")
    graph = record.get("cuda_graph")  # a skipped run has none: what it would have done
    used = graph.get("used") if graph else cfg.get("cuda_graph") and cfg.get("input_path") == "fast"
    return {"input": cfg.get("input_path"), "tensors": cfg.get("sample_tensors", "once"),
            "heap": (heap == "kept") if kind == "cpu" else None,
            "every": (cfg.get("loss_every") or 100) if kind == "cuda" else None,  # none said: every 100 steps
            "graph": bool(used) if kind == "cuda" else None}


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


def rung_of(record: dict[str, Any], presets: Mapping[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The record's rung (``{"rung", "name", "change"}``), or None where the run is not one of the ladder's.
    ``presets``: the ``published`` and ``recommended`` presets' config records (``TrainConfig.as_record``)."""
    cfg = record.get("config")
    if not isinstance(cfg, dict) or not _study_data(record) or any(cfg.get(k) != v for k, v in ONE_DEVICE.items()):
        return None
    device = record.get("device")
    kind = (device.get("kind") if isinstance(device, dict) else None) or str(cfg.get("device", "")).split(":")[0]
    if kind not in BOTH:
        return None
    name = "recommended" if cfg.get("preset") == "recommended" else "published"
    keys = WORKLOAD + (LOADER if cfg.get("input_path") == "dataloader" else ())
    if any(cfg.get(k) != presets[name][k] for k in keys):  # "lr": the learning rate used
        return None
    if name == "recommended":
        found = RUNGS[RECOMMENDED] if cfg.get("input_path") == "fast" else None
    else:
        step = _step(record, kind)  # against each rung's step as the published preset with its changes takes it
        found = next((r for r in rungs_on(kind) if r.rung != RECOMMENDED
                      and _step({"config": {**presets[name], **rung_options(r)[1]}}, kind) == step), None)
    return None if found is None else {"rung": found.rung, "name": found.name, "change": found.change}
