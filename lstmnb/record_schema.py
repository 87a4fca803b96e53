"""The run record's schema, as a JSON Schema (draft 2020-12) checked by ``jsonschema``: the types of the fields every
reader relies on, and what each kind of record must hold (``allOf``: one without figures says why in ``reason``, a
diverged run where in ``divergence``, a finished training run has ``timing`` and ``metrics``). The ``config`` knobs the
report reads are typed too (``_CONFIG``), none of them required. Fields the schema does not name are allowed, so
experiments may add their own; a named field present with the wrong type fails. ``records.read_records`` skips a
failing record with a warning naming the file, the line and the field.
"""

from __future__ import annotations

import functools
from typing import Any

STATUSES = ("ok", "oom", "skipped", "failed", "diverged")  # the record's status vocabulary
NO_FIGURES = ("oom", "skipped", "failed", "diverged")  # statuses that carry a reason instead of results

_NUM = {"type": ["number", "null"]}
_INT = {"type": ["integer", "null"]}
_STR = {"type": ["string", "null"]}
_OBJ = {"type": ["object", "null"]}


def _numbers(*names: str) -> dict[str, Any]:
    return {n: _NUM for n in names}


def _whole(lowest: int, null: bool = False) -> dict[str, Any]:
    """A whole number >= ``lowest`` (a null too where ``null``: a knob left to its default)."""
    return {"type": ["integer", "null"] if null else "integer", "minimum": lowest}


# The config knobs the readers use (the report's settings and problem labels, its tables and findings, the
# notebooks' lessons), typed as each TrainConfig field's Rule says (rules.schema_of(TrainConfig); a copy, so that
# records are read without torch: tests/test_record_and_price_checks.py keeps it equal), as every writer records
# them (TrainConfig.as_record; the all-reduce experiment's plain asdict, whose lr is null; the from-scratch and
# region experiments' own configs). Not required: older records and other configs lack some; other keys are free.
_CONFIG = {
    "type": ["object", "null"],
    "properties": {
        **{n: _whole(1) for n in ("batch_size", "epochs", "hidden", "layers", "window", "lead_hours", "horizon",
                                  "eval_batch_size", "world_size")},
        **{n: _whole(0) for n in ("num_workers", "seed")},
        **{n: _whole(1, null=True) for n in ("threads", "nproc", "patience", "loss_every")},
        "lr": _NUM, "target_rmse": _NUM, "grad_clip": _NUM,
        **{n: {"type": "number"} for n in ("weight_decay", "dropout", "bucket_cap_mb", "dist_timeout_s")},
        **{n: {"type": "boolean"} for n in ("residual", "compile", "cuda_graph", "calendar", "cycles", "fused_adam",
                                            "pin_memory", "lr_by_lead", "stop_at_target", "uneven_shards")},
        **{n: {"type": "string"} for n in ("device", "strategy", "input_path", "amp", "lr_schedule", "cell",
                                           "point_weights", "blend", "preset", "variant", "experiment",
                                           "sample_tensors", "heap")},
        "profile": _STR, "checkpoint": _STR,
        "fractions": {"type": "array", "items": {"type": "number"}},
        "split_dates": {"type": ["array", "null"], "items": {"type": "string"}},
    },
}
VERSION = 1  # the record layout this lstmnb writes and reads (each record's ``schema``)

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "lstmnb run record",
    "type": "object",
    "required": ["schema", "run_id", "started", "experiment", "status", "device"],
    "properties": {
        "schema": {"type": "integer", "minimum": 1, "maximum": VERSION},
        "run_id": {"type": "string", "minLength": 1},
        "started": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}"},  # ISO time
        "experiment": {"type": "string", "minLength": 1},
        "status": {"enum": list(STATUSES)},
        "reason": _STR, "profile": _STR,
        "device": {"type": "object", "required": ["kind"], "properties": {"kind": {"type": "string", "minLength": 1},
            "name": _STR, "hostname": _STR, "cpu_model": _STR, "count": _INT, "cpu_cores": _INT, "memory_gb": _NUM,
            "load_avg": {"type": ["array", "null"], "items": _NUM}}},
        "software": {"type": "object", "properties": {"torch": _STR, "cuda": _STR, "lstmnb": _STR,
                                                      "git_commit": _STR, "python": _STR}},
        # sections a run without figures may leave empty (a sweep's oom point made without data_info: null)
        "config": _CONFIG, "data": _OBJ, "model": _OBJ, "memory": _OBJ,
        "epochs": {"type": "array", "items": {"type": "object", "properties": {
            "epoch": {"type": "integer"}, "warmup": {"type": "boolean"},
            **_numbers("train_s", "eval_s", "cumulative_s", "train_loss", "val_loss", "val_rmse_k", "samples_per_s",
                       "seconds")}}},
        "timing": {"type": "object", "properties": {
            **_numbers("train_s", "eval_s", "wall_s", "warmup_epoch_s", "warmup_s", "epoch_s_median", "samples_per_s", "step_s"),
            "cumulative_s": {"type": "array", "items": _NUM}}},
        "metrics": {"type": "object", "properties": {
            **_numbers("test_rmse_k", "test_mae_k", "persistence_rmse_k", "climatology_rmse_k", "best_val_rmse_k"),
            "epochs_run": _INT, "stopped_early": {"type": ["boolean", "null"]}, "stop_reason": _STR}},
        "world_size": _INT, "parallel": _OBJ,
        "threads": {"type": "object", "required": ["used", "policy", "reason"],
                    "properties": {"used": {"type": "integer", "minimum": 1}, "policy": {"type": "string"},
                                   "reason": {"type": "string"}}},
        "cuda_graph": _OBJ,
        # the rung of the ladder the run stands on (rungs.py), where it is one
        "ladder": {"type": "object", "required": ["rung", "name"],
                   "properties": {"rung": {"type": "integer", "minimum": 0}, "name": {"type": "string"}}},
        "skill": _OBJ, "allreduce": {"type": "object"},
        "divergence": {"type": "object", "required": ["epoch", "what"],
                       "properties": {"epoch": {"type": "integer"}, "step": _INT, "what": {"type": "string"}}},
    },
    "allOf": [
        {"if": {"properties": {"status": {"enum": list(NO_FIGURES)}}, "required": ["status"]},
         "then": {"required": ["reason"], "properties": {"reason": {"type": "string", "minLength": 1}}}},
        {"if": {"properties": {"status": {"const": "diverged"}}, "required": ["status"]},
         "then": {"required": ["divergence"]}},
        {"if": {"properties": {"status": {"const": "ok"}}, "required": ["status", "epochs"]},
         "then": {"required": ["timing", "metrics"]}},
    ],
}


@functools.lru_cache(maxsize=None)
def _validator():
    import jsonschema

    cls = jsonschema.validators.validator_for(SCHEMA)
    cls.check_schema(SCHEMA)
    # a record is checked as built (tuples: a config's fractions, split_dates) and as read back (JSON lists)
    arrays = cls.TYPE_CHECKER.redefine("array", lambda _checker, value: isinstance(value, (list, tuple)))
    return jsonschema.validators.extend(cls, type_checker=arrays)(SCHEMA)


def record_problem(record: Any) -> str | None:
    """None when ``record`` is a valid run record; else one short phrase naming the first failing field
    and why (``status: 5 is not one of ok, oom, ...``)."""
    from jsonschema.exceptions import best_match

    error = best_match(_validator().iter_errors(record))
    if error is None:
        return None
    field = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "required":  # the missing field is named in the message, not the path
        missing = next((n for n in error.validator_value if isinstance(error.instance, dict) and n not in error.instance),
                       None)
        field = ".".join(filter(None, (field, missing)))  # a required field's name is text
        return f"{field or '(record)'}: missing"
    value = repr(error.instance)
    value = value if len(value) <= 40 else value[:37] + "..."
    if error.validator == "enum":
        why = f"{value} is not one of {', '.join(map(str, error.validator_value))}"
    elif error.validator == "type":
        kinds = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        why = f"{value} is not {' or '.join(k if k == 'null' else ('an ' if k[0] in 'aeiou' else 'a ') + k for k in kinds)}"
    elif error.validator == "pattern":
        why = f"{value} is not an ISO time like 2024-05-01T12:00:00+00:00"
    elif error.validator == "minimum":
        why = f"{value} is less than {error.validator_value}, the lowest it may be"
    elif error.validator == "maximum" and field == "schema":
        why = f"{value} is a newer record layout than this lstmnb reads ({VERSION}); upgrade lstmnb to read it"
    elif error.validator == "maximum":
        why = f"{value} is more than {error.validator_value}, the highest it may be"
    elif error.validator == "minLength":
        why = "empty"
    else:
        why = error.message if len(error.message) <= 80 else error.message[:77] + "..."
    return f"{field or '(record)'}: {why}"
