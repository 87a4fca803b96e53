"""Every knob of a training run, each with its help text written once (field metadata), the checks that reject
a bad value before any work starts, and the named settings a run starts from (``--preset``). The CLI builds its
options from these fields."""

from __future__ import annotations

import math
from dataclasses import asdict, astuple, dataclass, field, fields
from typing import Any

from ..datasets.study import STUDY_TEST_START
from ..machine.device import DEVICE_CHOICES, host_memory_bytes, local_rank_limit
from ..errors import ConfigError
from ..models import CELLS, ModelConfig
from ..rules import PYTHON, Rule, Spelling, check_fields, choice, number, whole
from ..windows import WindowConfig
from .evaluate import BLENDS
from .step import POINT_WEIGHTS

INPUT_PATHS = ("fast", "dataloader")
SAMPLE_TENSORS = ("once", "per_sample")
HEAPS = ("kept", "system")
LR_SCHEDULES = ("constant", "onecycle", "cosine")
AMP_MODES = ("off", "auto", "bf16", "fp16")
STRATEGIES = ("single", "dataparallel", "ddp")
SEED_MAX = 2**64 - 1  # torch.manual_seed takes seeds up to this
DEFAULT_FRACTIONS = (0.7, 0.15, 0.15)
# collective timeouts: shorter waits time out the ranks' first contact, longer overflow a process group's timedelta
MIN_TIMEOUT_S, MAX_TIMEOUT_S = 1.0, 7 * 86400.0
# DDP's gradient bucket, in bytes a C++ int64 to torch (above 8.8e12 MB its Reducer fails with a TypeError in every
# rank); 1e6 MB (about 1 TB) holds every gradient of any model here
MAX_BUCKET_CAP_MB = 1e6

# Named settings: what each changes from TrainConfig's defaults, which are the recommended one (PRESET_SOURCES).
PRESETS: dict[str, dict[str, Any]] = {
    "recommended": {},
    # the study's setting as its notebook ran it (PRESET_SOURCES; ../shared/DESIGN.md), its code's costs included:
    # each sample's tensors made in __getitem__, glibc's default heap, the loss read every step (rung 0, rungs.py)
    "published": dict(epochs=5, patience=None, batch_size=128, hidden=64, layers=2, window=24, lead_hours=1,
                      horizon=1, lr=1e-3, lr_schedule="constant", weight_decay=0.0, residual=False, calendar=False,
                      cycles=False, input_path="dataloader", num_workers=2, pin_memory=False,
                      persistent_workers=False, fused_adam=False, point_weights="none",
                      blend="off", split_dates=(STUDY_TEST_START, STUDY_TEST_START),
                      sample_tensors="per_sample", heap="system", loss_every=1, cuda_graph=False),
}

# Where each preset comes from, and where lstmnb keeps its own rule instead (every record's config.preset_source).
PRESET_SOURCES: dict[str, dict[str, Any]] = {
    "recommended": {"source": "measured by lstmnb (README, 'Skill at every point'; benchmarks/train_speed.py)",
                    "differences": []},
    "published": {
        "source": "the study's notebook Parallel_LSTM_Model_run_CARC.ipynb (github.com/yxie7333/cs596final; the "
                  "Colab run gpu_run.ipynb uses 4 DataLoader workers)",
        "differences": [
            "scaling: one mean and std over both points, fitted on the training part (std 9.91 K; the study fitted "
            "them over the whole file, test hours included: 10.01 K over the CARC notebook's 2020-2021 file, "
            "10.33 K over the Colab notebook's 2020-01..2021-06), so for the same error in kelvin lstmnb's scaled "
            "training loss is 2% (CARC) or 9% (Colab) above the study's",
            "windows stay within a point: 17,520 training samples per epoch (the study joined the two series end "
            "to end, so 24 of its 17,544 windows span both points)",
            "test windows may take inputs from the last hours of 2020 (the study windowed the test part alone): "
            "every model and baseline is scored on every hour of 2021-01..06 (the study computed no test metric, "
            "it plotted its forecasts; the CARC notebook's test part was the whole of 2021)",
            "the epoch's training loss is the mean over samples (the study's: the mean over batches, its last "
            "batch of 8 counting as much as a full one)",
            "timing: lstmnb times the epochs alone; the CARC notebook's clock also spans creating the model and "
            "moving it to the device (CUDA start-up on a GPU) and the pause between that cell and the epoch "
            "loop's (the Colab notebook timed the epoch loop)",
            "one device, unwrapped, as on CARC (1 GPU); the Colab notebook wrapped the model in nn.DataParallel "
            "whenever a GPU was visible, one GPU included",
        ],
    },
}


# The recommended learning rate by lead (measured on the synthetic sample, README "Skill at every point"): 4e-3 up to
# 6 h ahead; 5e-4 from 24 h, where 4e-3 stops improving validation after epoch 1 (5e-4: best epoch 6, the same test
# RMSE); log-linear between.
LR_BY_LEAD = ((6, 4e-3), (24, 5e-4))


def lead_learning_rate(lead_hours: int) -> float:
    """The recommended learning rate for ``lead_hours`` (``LR_BY_LEAD``)."""
    (l0, r0), (l1, r1) = LR_BY_LEAD
    if lead_hours <= l0:
        return r0
    if lead_hours >= l1:
        return r1
    f = (math.log(lead_hours) - math.log(l0)) / (math.log(l1) - math.log(l0))
    return math.exp(math.log(r0) + f * (math.log(r1) - math.log(r0)))


def knob(default: Any, help: str, rule: Rule | None = None) -> Any:
    """A TrainConfig field with its one help text (the CLI's option help) and its ``Rule`` (validate, the schema)."""
    return field(default=default, metadata={"help": help, "rule": rule})


@dataclass
class TrainConfig:
    """Every knob of one run. The record's ``config`` is this dataclass as a dict."""

    # where and how
    device: str = knob("auto", "auto (CUDA, then MPS, then CPU), cpu, cuda, cuda:N or mps",
        Rule("pattern", pattern=r"auto|cpu|mps|cuda(:\d+)?", says=DEVICE_CHOICES))
    strategy: str = knob("single", (
        "single device, dataparallel (nn.DataParallel) or ddp (DistributedDataParallel)"), choice(STRATEGIES))
    nproc: int | None = knob(None, "ddp outside torchrun: launch this many local processes (one per GPU, or gloo ranks "
        "on CPU); dataparallel: GPUs to use (default all)", whole(1, local_rank_limit))
    bucket_cap_mb: float = knob(25.0, (
        "ddp: gradient bucket size in MB, up to 1e6 (all-reduce of a full bucket overlaps the backward)"),
        number(positive=True, hi=MAX_BUCKET_CAP_MB, unit=" of MB",
               note="about 1 TB; one bucket that size holds every gradient"))
    grad_as_bucket_view: bool = knob(False, (
        "ddp: let gradients be views into the all-reduce buckets (saves memory and a copy)"))
    static_graph: bool = knob(False, "ddp: declare the graph identical every step (DDP skips per-step bookkeeping)")
    uneven_shards: bool = knob(False, "ddp, fast path: after the first epoch size each rank's batch from its measured "
        "throughput (mixed or unequal devices)")
    dist_timeout_s: float = knob(300.0, "ddp: seconds a collective may wait for the other ranks before the run fails",
        number(MIN_TIMEOUT_S, hi=MAX_TIMEOUT_S, says=f"{MIN_TIMEOUT_S:g} to {MAX_TIMEOUT_S:g} s"))
    input_path: str = knob("fast", "fast: whole training set as device tensors, shuffled index batches; dataloader: "
        "per-sample Dataset + DataLoader (the published setting)", choice(INPUT_PATHS))
    num_workers: int = knob(2, "DataLoader worker processes (dataloader path)", whole(0, local_rank_limit))
    sample_tensors: str = knob("once", "dataloader path: once (float32 windows built once, a sample is a view) or "
        "per_sample (each sample's tensors made from float64 values in the Dataset's __getitem__, as the study's code "
        "did)", choice(SAMPLE_TENSORS))
    pin_memory: bool = knob(True, "pinned host memory for DataLoader batches (CUDA only)")
    persistent_workers: bool = knob(True, "keep the DataLoader's workers alive between epochs (off: started afresh "
        "every epoch, as the study's DataLoader did)")
    heap: str = knob("kept", (
        "a CPU run's C heap on glibc: kept (freed memory kept for the next step) or system (glibc's default "
        "thresholds, as the study's runs had); set once per process: a later run cannot put it back"), choice(HEAPS))
    loss_every: int | None = knob(None, "steps between two reads of the loss on the host (the divergence check); none: "
        "every step on a CPU, every 100 on a GPU (the study read it every step: a host sync per step)", whole(1))
    amp: str = knob("off", "mixed precision on CUDA: off, auto (bf16 where supported, else fp16), bf16, fp16",
        choice(AMP_MODES))
    threads: int | None = knob(None, "torch intra-op threads on CPU (default: one per core, fewer when other processes "
        "keep the cores busy; the record's threads section says which and why)", whole(1, local_rank_limit))
    fused_adam: bool = knob(True, (
        "Adam's update as one fused kernel (measured no slower on CPU; fewer launches on GPUs)"))
    compile: bool = knob(False, "torch.compile the model (measured no faster on CPU: the LSTM is one library kernel)")
    cuda_graph: bool = knob(True, "CUDA: capture the training step once and replay it (on by default where it applies: "
        "one GPU, fast path, constant lr, amp off or bf16; elsewhere the run is eager and the record says why)")
    # optimisation
    epochs: int = knob(30, "training epochs (the cap: --patience stops earlier when validation stops improving)",
        whole(1))
    batch_size: int = knob(256, "samples per optimiser step (ddp: per rank, so a step takes batch_size x ranks; "
                                  "dataparallel: the whole step's, split over the GPUs)", whole(1))
    lr: float | None = knob(None, "Adam learning rate (default: by lead, 4e-3 up to 6 h ahead, 5e-4 from 24 h, "
                                  "log-linear between; the record keeps the rate used)",
        number(positive=True, note="omit it for the rate by lead"))
    lr_schedule: str = knob("constant", "constant, onecycle or cosine", choice(LR_SCHEDULES))
    weight_decay: float = knob(0.0, "Adam weight decay", number())
    grad_clip: float | None = knob(None, "clip the gradient norm to this value",
        number(positive=True, note="omit it for no clipping"))
    seed: int = knob(0, "random seed (runs on CPU are repeatable)", whole(0, SEED_MAX))
    # samples
    window: int = knob(24, "input window in hours", whole(1))
    lead_hours: int = knob(1, "hours from the last input to the first target", whole(1))
    horizon: int = knob(1, "target hours predicted at once", whole(1))
    calendar: bool = knob(True, "add hour-of-day and day-of-year inputs (sin/cos)")
    cycles: bool = knob(True, (
        "add each point's seasonal and diurnal cycles, fitted to the training part, at each input hour plus the "
        "lead as an input (the last one is the fitted cycle at the target hour)"))
    fractions: tuple[float, float, float] = knob(DEFAULT_FRACTIONS, (
        "train,val,test fractions of the time range (chronological)"))
    split_dates: tuple[str, str] | None = knob(None, "VAL_START,TEST_START dates instead of fractions (the same date "
        "twice: no validation part, as the published setting)")
    # model
    hidden: int = knob(64, "hidden units per layer", whole(1))
    layers: int = knob(1, "stacked recurrent layers", whole(1))
    dropout: float = knob(0.0, "dropout between layers", number(hi=1, open_hi=True, says="a number in [0, 1)"))
    cell: str = knob("lstm", "lstm or gru", choice(CELLS))
    residual: bool = knob(True, "forecast the change from the last observed value (starts at persistence; part of the "
        "recommended setting)")
    point_weights: str = knob("persistence", (
        "loss weight of each point's samples: none (plain MSE) or persistence (1 / the point's persistence MSE on "
        "the training part: a smooth ocean point counts as much as a stormy land point)"), choice(POINT_WEIGHTS))
    blend: str = knob("baselines", "the reported forecast: off (the network's), persistence or baselines (per point, "
        "the convex blend of the network with persistence, or with persistence and climatology, fitted on validation: "
        "never worse than persistence there)", choice(BLENDS))
    # stopping, checkpoints, bookkeeping
    target_rmse: float | None = knob(None, "validation RMSE (K) whose time-to-reach is reported",
        number(positive=True, unit=" of kelvin"))
    stop_at_target: bool = knob(False, "end the run at the first epoch whose validation RMSE reaches --target-rmse")
    patience: int | None = knob(5, "stop after this many epochs without validation improvement and restore the best "
        "weights (none: run every epoch)", whole(1))
    checkpoint: str | None = knob(None, "checkpoint file, written atomically after each epoch",
        Rule("name", note="leave it out"))
    resume: bool = knob(False, "continue the run in --checkpoint without repeating finished epochs; with no checkpoint "
        "there yet, start one (so one command serves a first run and every requeue of a batch job)")
    overwrite_checkpoint: bool = knob(False, (
        "let a new run replace the checkpoint already at --checkpoint (without it, a new run refuses that path)"))
    eval_batch_size: int = knob(8192, "batch size for validation and test predictions", whole(1))
    preset: str = knob("recommended", (
        "the setting the other options start from: recommended (measured fastest to a good forecast, early "
        "stopping) or published (the study's setting: 2-layer LSTM, batch 128, Adam 1e-3, DataLoader with 2 "
        "workers, 5 epochs, trained on 2020 and tested on 2021-01..06, no validation part)"), choice(tuple(PRESETS)))
    experiment: str = knob("train", "experiment name stored in the record", Rule("name"))
    profile: str | None = knob(None, "profile name stored in the record", Rule("name", note="leave it out"))
    progress: bool = knob(True, "show progress bars")

    def window_config(self) -> WindowConfig:
        return WindowConfig(window=self.window, lead_hours=self.lead_hours, horizon=self.horizon,
                            fractions=tuple(self.fractions), calendar=self.calendar, cycles=self.cycles,
                            split_dates=tuple(self.split_dates) if self.split_dates else None)

    @property
    def learning_rate(self) -> float:
        """The rate the optimiser uses: ``lr``, or the recommended rate for ``lead_hours`` when it is None."""
        return self.lr if self.lr is not None else lead_learning_rate(self.lead_hours)

    def as_record(self) -> dict[str, Any]:
        """The record's ``config``: every knob, the rate used (``lr_by_lead``: chosen by lead), ``preset_source``."""
        return {**asdict(self), "lr": self.learning_rate, "lr_by_lead": self.lr is None,
                "preset_source": PRESET_SOURCES.get(self.preset)}

    def model_config(self, n_features: int) -> ModelConfig:
        return ModelConfig(n_features=n_features, hidden=self.hidden, layers=self.layers, dropout=self.dropout,
                           horizon=self.horizon, cell=self.cell, residual=self.residual)

    def validate(self, say: Spelling = PYTHON) -> None:
        """Every value before any work starts: each field by its ``Rule``, then the rules between fields, a refusal
        spelled by ``say`` (``lr=0.0``, ``--lr 0``, ``parameter lr=0.0``); an unchanged config is checked once."""
        values = repr(astuple(self))
        if self.__dict__.get("_checked") == values:
            return
        check_fields(self, say)
        k = say.key
        if self.resume and not self.checkpoint:
            raise say.refuse("resume", True, f"needs a checkpoint path to resume from ({k('checkpoint')})")
        if self.overwrite_checkpoint and not self.checkpoint:
            raise say.refuse("overwrite_checkpoint", True, f"needs a checkpoint path to replace ({k('checkpoint')}); "
                             "without one no checkpoint is written: leave it out")
        if self.resume and self.overwrite_checkpoint:
            raise ConfigError(f"{say('resume', True)} continues the checkpoint and {say('overwrite_checkpoint', True)} "
                              "replaces it; choose one")
        if self.stop_at_target and self.target_rmse is None:
            raise say.refuse("stop_at_target", True, f"needs {k('target_rmse')} (the validation RMSE in K to stop at)")
        if self.dropout > 0 and self.layers == 1:
            raise say.refuse("dropout", self.dropout, f"acts between stacked layers, and {say('layers', 1)} has none; "
                             f"use {k('layers')} >= 2 or {k('dropout')} 0")
        if self.nproc is not None and self.strategy == "single":
            raise say.refuse("nproc", self.nproc, f"needs {say('strategy', 'ddp')} (processes) or 'dataparallel' "
                             "(GPUs); a single-device run starts one process")
        if self.uneven_shards and (self.strategy != "ddp" or self.input_path != "fast"):
            raise say.refuse("uneven_shards", True, f"needs {say('strategy', 'ddp')} and {say('input_path', 'fast')} "
                             f"(got {say('strategy', self.strategy)}, {say('input_path', self.input_path)})")
        self._check_splits(say)
        self.window_config().validate()
        self.model_config(1).validate()
        self._check_model_fits(say)
        self.__dict__["_checked"] = values

    def _check_model_fits(self, say: Spelling) -> None:
        """Weights, gradients and Adam's two moments (4 float32 copies) must fit in this machine's memory."""
        gates = 4 if self.cell == "lstm" else 3
        h = self.hidden
        params = gates * h * (1 + h + 2) + (self.layers - 1) * gates * h * (2 * h + 2) + (h + 1) * self.horizon
        need, have = 16 * params, host_memory_bytes()
        if need > have:
            raise ConfigError(f"{say('hidden', h)} with {say('layers', self.layers)} needs {need / 2**30:,.0f} GiB for "
                              f"the weights, gradients and Adam state alone; this machine has {have / 2**30:,.0f} GiB")

    def _check_splits(self, say: Spelling) -> None:
        fr, sd = self.fractions, self.split_dates
        if (not isinstance(fr, (tuple, list)) or len(fr) != 3
                or not all(isinstance(f, (int, float)) and math.isfinite(f) and f > 0 for f in fr)
                or abs(sum(fr) - 1) > 1e-6):
            raise say.refuse("fractions", tuple(fr) if isinstance(fr, list) else fr, "must be three positive "
                             "numbers (train, val, test) summing to 1, e.g. 0.7,0.15,0.15")
        if sd is None:
            return
        if tuple(fr) != DEFAULT_FRACTIONS:
            raise ConfigError(f"{say('split_dates', sd)} and {say('fractions', tuple(fr))} both given; "
                              "give one of them")
        if isinstance(sd, str) or not isinstance(sd, (tuple, list)) or len(sd) != 2:
            raise say.refuse("split_dates", sd, "must be two dates VAL_START,TEST_START, e.g. 2021-01-01,2021-04-01")
        import pandas as pd

        stamps = [pd.to_datetime(str(d), errors="coerce") for d in sd]  # NaT: not a date
        for d, ts in zip(sd, stamps):
            if not isinstance(d, str) or ts is pd.NaT:
                raise say.refuse("split_dates", sd, f": split date {d!r} is not a date like 2021-01-01 "
                                 "(VAL_START,TEST_START)")
        if not stamps[0] <= stamps[1]:
            raise say.refuse("split_dates", sd, ": the validation start must not come after the test start")
        if stamps[0] == stamps[1]:  # no validation part (the published setting): what needs one
            needs = [say(name, value) for name, value, off in (("patience", self.patience, None),
                     ("blend", self.blend, "off"), ("target_rmse", self.target_rmse, None)) if value != off]
            if needs:
                raise say.refuse("split_dates", sd, f"leaves no validation part, which {', '.join(needs)} need; "
                                 f"give an earlier validation start, or {say.key('patience')} {say.none}, "
                                 f"{say.key('blend')} off and no {say.key('target_rmse')}")

    def check_split_in(self, request, say: Spelling = PYTHON, given: Any = ...) -> None:
        """The split dates fall inside the request's time range (checked before any data is read). ``given``: the
        split dates as the user gave them (None: the preset's), for the message."""
        if not self.split_dates or request is None:
            return
        from ..data import parse_time

        start, end = parse_time(request.start), parse_time(request.end, end=True)
        for d in self.split_dates:
            if not start < parse_time(d) <= end:
                raise say.refuse("split_dates", self.split_dates if given is ... else given, f": split date {d!r} is "
                                 f"outside the data's time range {request.start}..{request.end}; both VAL_START,"
                                 f"TEST_START must fall after {say.key('start')} and by {say.key('end')}")

    def check_windows_fit(self, request, say: Spelling = PYTHON) -> None:
        """The window, lead and horizon fit every part of the request's hours as the run will split them (refused
        before any data is read, not once it is, as ``say`` spells them)."""
        if request is None or not isinstance(request.start, str) or not isinstance(request.end, str):
            return  # the source's own range: known once the store is open
        import pandas as pd

        from ..data import parse_time
        from ..windows import scored_ranges, split_parts

        times = pd.date_range(parse_time(request.start), parse_time(request.end, end=True), freq="h")
        scored_ranges(split_parts(times, self.window_config()), self.window_config(), say)

    def stops_after(self, history: list[dict[str, Any]], best: dict[str, Any]) -> str | None:
        """Why early stopping ends a run after ``history`` (None: it goes on): (``stop_at_target``) the target
        reached, or ``patience`` epochs without a new best validation RMSE (``best``: that epoch's)."""
        target = self.target_rmse
        if self.stop_at_target and target is not None and history and history[-1]["val_rmse_k"] <= target:
            return f"validation RMSE reached the target {target:.3f} K"
        p = self.patience
        if p and best.get("epoch") is not None and len(history) - best["epoch"] >= p:
            return (f"validation RMSE did not improve for {p} epochs; the best epoch's weights (epoch {best['epoch']}, "
                    f"{best['val_rmse_k']:.3f} K) are kept")
        return None

def knob_problem(name: str, value: Any) -> str | None:
    """Why ``value`` is refused by the rule of TrainConfig's field ``name`` (None: it passes); for a setting that
    gives that field, spelled its own way (a notebook's ``fit_epochs`` is an ``epochs``)."""
    return next(f.metadata["rule"] for f in fields(TrainConfig) if f.name == name).why(value)


def config_from_dict(values: dict[str, Any]) -> TrainConfig:
    """A TrainConfig from a mapping (profile, papermill parameters), rejecting unknown keys by name."""
    known = {f.name for f in fields(TrainConfig)}
    if unknown := sorted(set(values) - known):
        raise ConfigError(f"unknown training parameter(s) {unknown}; known: {sorted(known)}")
    return TrainConfig(**values)


def preset_config(name: str = "recommended", **overrides: Any) -> TrainConfig:
    """The TrainConfig of preset ``name`` with ``overrides`` on top (unknown names are an error)."""
    if name not in PRESETS:
        raise PYTHON.refuse("preset", name, knob_problem("preset", name))
    return config_from_dict({**PRESETS[name], "preset": name, **overrides})


def with_overrides(cfg: TrainConfig, **overrides: Any) -> TrainConfig:
    """A copy of ``cfg`` with the given fields replaced (unknown names are an error)."""
    return config_from_dict({**asdict(cfg), **overrides})
