"""Records whose config would crash the report fail the record schema (and are skipped with a warning);
price tables with a bad entry are refused in one line when `bench cost` loads them."""

from __future__ import annotations

import copy
import glob
import json
from pathlib import Path

import pytest

from lstmnb.cli import main
from lstmnb.records import BrokenRecordsWarning, append_record, load_records, new_record, read_records, scan_records
from lstmnb.report.compare import compared_runs

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(glob.glob(str(ROOT / "lstmnb" / "reference_records" / "*.jsonl")))
SHARED = sorted(glob.glob("/work/shared/records/*.jsonl"))


# --- the record schema's config rules ----------------------------------------------------------------

def _compared_record() -> dict:
    """A shipped finished single-device training run that the comparison (notebook 06's report) reads."""
    for line in (ROOT / "lstmnb" / "reference_records" / "h100-study-setting.jsonl").read_text().splitlines():
        if line.strip():
            return json.loads(line)
    raise AssertionError("no shipped record")


BAD_CONFIG = [
    ("batch_size", "big", "config.batch_size: 'big' is not an integer"),  # crashed settings.py (int())
    ("epochs", "x", "config.epochs: 'x' is not an integer"),  # crashed compare.py (int())
    ("lr", "fast", "config.lr: 'fast' is not a number or null"),  # crashed settings.py (format 'g')
    ("batch_size", 0, "config.batch_size: 0 is less than 1"),
    ("batch_size", 12.5, "config.batch_size: 12.5 is not an integer"),
    ("hidden", "64", "config.hidden: '64' is not an integer"),
    ("layers", True, "config.layers: True is not an integer"),
    ("window", None, "config.window: None is not an integer"),
    ("lead_hours", "1h", "config.lead_hours: '1h' is not an integer"),
    ("threads", 0, "config.threads: 0 is less than 1"),
    ("threads", "4", "config.threads: '4' is not an integer or null"),
    ("nproc", 1.5, "config.nproc: 1.5 is not an integer or null"),
    ("num_workers", -1, "config.num_workers: -1 is less than 0"),
    ("seed", "zero", "config.seed: 'zero' is not an integer"),
    ("residual", "yes", "config.residual: 'yes' is not a boolean"),
    ("cuda_graph", 1, "config.cuda_graph: 1 is not a boolean"),
    ("compile", "false", "config.compile: 'false' is not a boolean"),
    ("amp", False, "config.amp: False is not a string"),
    ("input_path", 3, "config.input_path: 3 is not a string"),
    ("device", None, "config.device: None is not a string"),
    ("strategy", ["ddp"], "config.strategy: ['ddp'] is not a string"),
    ("fractions", ["a", 0.2, 0.1], "config.fractions.0: 'a' is not a number"),
    ("split_dates", ["2021-01-01", 2021], "config.split_dates.1: 2021 is not a string"),
]


@pytest.mark.parametrize("field,value,why", BAD_CONFIG, ids=[f"{f}={v!r}" for f, v, _ in BAD_CONFIG])
def test_bad_config_type_is_skipped_and_the_report_does_not_crash(tmp_path, capsys, field, value, why):
    good = _compared_record()
    bad = copy.deepcopy(good)
    bad["run_id"] = "bad-one"
    bad["config"][field] = value
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")

    with pytest.warns(BrokenRecordsWarning, match="skipped 1 record that fails the record schema") as caught:
        records = read_records(path)
    assert [r["run_id"] for r in records] == [good["run_id"]]
    assert f"(field {why}" in str(caught[0].message)

    with pytest.warns(BrokenRecordsWarning):
        df = load_records(path)
    rows = compared_runs(df)  # notebook 06's comparison: setting and problem labels, epochs
    assert len(rows) == 1 and rows.iloc[0]["setting"]

    # the command line says it in one warning line and shows the good run only
    assert main(["results", str(path)]) == 0
    out, err = capsys.readouterr()
    warning = [line for line in err.splitlines() if "lstmnb: warning:" in line]
    assert len(warning) == 1 and "skipped 1 record that fails the record schema" in warning[0] and why in warning[0]
    assert "bad-one" not in out


def test_a_record_from_a_newer_lstmnb_is_skipped_with_what_to_do(tmp_path):
    from lstmnb.records import SCHEMA

    good = _compared_record()
    newer = {**copy.deepcopy(good), "run_id": "newer", "schema": SCHEMA + 1}
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(newer) + "\n")
    with pytest.warns(BrokenRecordsWarning, match=f"field schema: {SCHEMA + 1} is a newer record layout than this "
                                                  f"lstmnb reads \\({SCHEMA}\\); upgrade lstmnb"):
        assert [r["run_id"] for r in read_records(path)] == [good["run_id"]]


def test_the_schema_types_each_training_knob_as_its_rule_does():
    """The record schema's copy of TrainConfig's knobs (kept here so that records are read without torch) says
    what each field's Rule says (``rules.schema_of``): one rule, the copy cannot drift."""
    from lstmnb.record_schema import SCHEMA
    from lstmnb.rules import schema_of
    from lstmnb.training import TrainConfig

    typed, ruled = SCHEMA["properties"]["config"]["properties"], schema_of(TrainConfig)
    assert {name: typed[name] for name in ruled if name in typed} == {n: r for n, r in ruled.items() if n in typed}
    assert set(ruled) - set(typed) <= {"grad_as_bucket_view", "static_graph", "persistent_workers", "resume",
                                       "overwrite_checkpoint", "progress"}  # knobs no reader uses


@pytest.mark.parametrize("files", [SHIPPED, SHARED], ids=["shipped", "shared"])
def test_real_records_all_pass_the_config_rules(files):
    if not files:
        pytest.skip("no records there on this machine")
    found = scan_records(files)
    assert found.lines > 0 and found.invalid == 0 and found.broken == 0, found.faults
    assert len(found.records) == found.lines


def test_configs_as_the_writers_record_them_pass():
    """Every writer's config: a training run, the all-reduce sweep's plain asdict (lr null), the from-scratch
    and region experiments' own knobs, and nulls where a knob is left to its default."""
    import dataclasses

    from lstmnb.record_schema import record_problem
    from lstmnb.records import _jsonable
    from lstmnb.region.memory import MemoryCase
    from lstmnb.region.model import RegionConfig
    from lstmnb.region.shard import ShardConfig
    from lstmnb.scratch.fit import ScratchConfig
    from lstmnb.training import TrainConfig, preset_config

    configs = [TrainConfig().as_record(), dataclasses.asdict(TrainConfig()), preset_config("published").as_record(),
               TrainConfig(threads=4, nproc=2, strategy="ddp", patience=None, split_dates=("2021-01-01", "2021-01-01"),
                           grad_clip=1.0, target_rmse=0.9).as_record(),
               {**ScratchConfig().as_dict(), "repeats": 3}, dataclasses.asdict(MemoryCase()),
               {**dataclasses.asdict(RegionConfig()), **dataclasses.asdict(ShardConfig()), "world_size": 1,
                "repeats": 2},
               {}, None]
    for config in configs:
        record = json.loads(json.dumps(_jsonable(new_record("x", status="skipped", reason="r", config=config))))
        assert record_problem(record) is None, (config, record_problem(record))


# --- the price table's rules ---------------------------------------------------------------------------

def _timed(kind: str, name: str, wall_s: float, profile: str | None = None) -> dict:
    rec = new_record("scaling-strong", device="cpu", profile=profile, timing={"wall_s": wall_s},
                     metrics={"best_val_rmse_k": 1.0})
    rec["device"].update(kind=kind, name=name)
    return rec


@pytest.fixture
def runs(tmp_path):
    folder = tmp_path / "runs"
    append_record(_timed("cuda", "NVIDIA A100-SXM4-40GB", 3600), folder)
    append_record(_timed("cpu", "AMD EPYC", 3600), folder)
    return folder


BAD_TABLES = [
    ("match-int", "devices:\n  a100: {price_per_device_hour: 1.0, match: 5}\n", "devices.a100.match=5",
     "list of non-empty"),
    ("match-null-item", "devices:\n  a100: {price_per_device_hour: 1.0, match: [null]}\n", "devices.a100.match=[None]",
     "list of non-empty"),
    ("match-string", "devices:\n  a100: {price_per_device_hour: 1.0, match: A100}\n", "devices.a100.match='A100'",
     "[A100] for one"),
    ("match-empty-name", "devices:\n  a100: {price_per_device_hour: 1.0, match: [A100, '']}\n",
     "devices.a100.match=['A100', '']", "list of non-empty"),
    ("price-nan", "devices:\n  a100: {price_per_device_hour: .nan, match: [A100]}\n",
     "devices.a100.price_per_device_hour=nan", "number >= 0"),
    ("price-inf", "devices:\n  a100: {price_per_device_hour: .inf, match: [A100]}\n",
     "devices.a100.price_per_device_hour=inf", "number >= 0"),
    ("entry-unknown-key", "devices:\n  a100: {price_per_device_hour: 1.0, mach: [A100]}\n",
     "devices.a100 has unknown key(s) ['mach']", "allowed: price_per_device_hour, match, example, note"),
    ("table-unknown-key", "currency: EUR\ndevice:\n  a100: {price_per_device_hour: 1.0}\n"
     "devices:\n  a100: {price_per_device_hour: 1.0}\n", "unknown key(s) ['device']", "allowed: currency, devices"),
    ("entry-not-mapping", "devices:\n  a100: 3.5\n", "devices.a100=3.5", "must be a mapping"),
    ("example-text", "devices:\n  a100: {price_per_device_hour: 1.0, example: maybe}\n",
     "devices.a100.example='maybe'", "true or false"),
    ("currency-number", "currency: 5\ndevices:\n  a100: {price_per_device_hour: 1.0}\n", "currency=5", "USD"),
]


@pytest.mark.parametrize("text,field,valid", [t[1:] for t in BAD_TABLES], ids=[t[0] for t in BAD_TABLES])
def test_bad_price_table_is_refused_in_one_line(tmp_path, runs, capsys, text, field, valid):
    table = tmp_path / "my_prices.yaml"
    table.write_text(text)
    assert main(["bench", "cost", str(runs), "--prices", str(table)]) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("lstmnb bench cost: error: price table ") and str(table) in lines[0]
    assert field in lines[0] and valid in lines[0]
    assert "Traceback" not in err and not out


def test_good_price_table_still_works(tmp_path, runs, capsys):
    table = tmp_path / "my_prices.yaml"
    table.write_text("currency: EUR\ndevices:\n"
                     "  a100: {price_per_device_hour: 2.0, match: [carc-a100, A100], note: my rate}\n"
                     "  cpu: {price_per_device_hour: 0, example: false, match: [cpu]}\n"
                     "  free-gpu:\n    price_per_device_hour: 0.5\n")
    assert main(["bench", "cost", str(runs), "--prices", str(table)]) == 0
    out, err = capsys.readouterr()
    assert "EUR" in out and "a100" in out and "2.0" in out and "error" not in err
    assert main(["bench", "cost", str(runs)]) == 0  # the shipped table passes its own checks
    assert "example" in capsys.readouterr().out

