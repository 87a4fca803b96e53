"""The ladder (rungs.py, experiments/ladder.py, report/ladder.py): every rung a recorded setting one
change from the one before, rung 0 the study's code, and the report's first screen built from the records with
every ratio in its first sentence made of two runs of one machine."""

import re
import sys

import numpy as np
import pytest
import torch

from lstmnb import report
from lstmnb.cli import build_parser
from lstmnb.cli.options import train_config_from_args
from lstmnb.experiments.ladder import ladder_experiment, rung_command
from lstmnb.records import load_records
from lstmnb.rungs import RUNGS
from lstmnb.training import preset_config
from lstmnb.rungs import rung_options
from lstmnb.training import skipped_record
from lstmnb.training.step import WindowDataset


def test_every_rung_is_one_change_and_its_record_names_it():
    """Each rung's command gives the config the ladder means (through the real command-line parser), and a
    record of that config is placed on that rung, on every device where the rung is one."""
    for rung in RUNGS:
        for device in rung.devices:
            args = build_parser().parse_args(["train", *rung_command(rung, device, 3, 2)])
            cfg = train_config_from_args(args)
            preset, overrides = rung_options(rung)
            assert cfg == preset_config(preset, epochs=3, device=device, threads=2, experiment="ladder",
                                        progress=False, **overrides)
            assert skipped_record(cfg, "not run here").get("ladder")["rung"] == rung.rung
    # one change each: rung k's options differ from rung k-1's in exactly its own change
    for before, after in zip(RUNGS[:-2], RUNGS[1:-1]):
        a, b = rung_options(before)[1], rung_options(after)[1]
        assert {k: v for k, v in b.items() if a.get(k, "missing") != v} == after.overrides


def test_rung_zero_is_the_studys_code_and_other_work_is_on_no_rung():
    cfg = preset_config("published", device="cpu")
    assert skipped_record(cfg, "x").get("ladder")["name"] == "the study's code"
    for other in (dict(hidden=32), dict(batch_size=256), dict(split_dates=None), dict(num_workers=4),
                  dict(pin_memory=True), dict(amp="bf16")):
        assert skipped_record(preset_config("published", device="cpu", **other), "x").get("ladder") is None, other
    # the recommended preset is rung 6 only on the study's split with the same model; not at another size
    _, rec = rung_options(RUNGS[-1])
    assert skipped_record(preset_config("recommended", device="cpu", **rec), "x").get("ladder")["rung"] == 6
    assert skipped_record(preset_config("recommended", device="cpu", hidden=8, **rec), "x").get("ladder") is None


def test_per_sample_tensors_are_made_from_float64_values_as_the_studys_dataset():
    x = np.arange(48, dtype=np.float32).reshape(2, 24, 1) / 7
    y = np.array([[1.5], [2.5]], dtype=np.float32)
    once, per = WindowDataset(x, y), WindowDataset(x, y, per_sample=True)
    assert per.x.dtype == np.float64
    a, b = once[1], per[1]
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])  # the same values reach the model
    assert a[0].data_ptr() == torch.from_numpy(x[1]).data_ptr()  # a view of the windows built once
    assert b[0].data_ptr() != per[1][0].data_ptr()  # a new tensor every time the sample is read


def _ratio(text: str) -> float:
    return float(re.search(r"([0-9.]+)x as fast", text).group(1))


@pytest.fixture(scope="module")
def cpu_ladder(tmp_path_factory):
    """The CPU ladder for real: every CPU rung once, one epoch, each a fresh `lstmnb train` process."""
    results = tmp_path_factory.mktemp("ladder") / "runs.jsonl"
    records = ladder_experiment(1, 1, ["cpu", "cuda"], results=results, threads=1)
    return records, load_records(results)  # as 06 reads them


@pytest.mark.slow
def test_the_cpu_ladder_runs_every_rung_in_a_fresh_process_and_records_it(cpu_ladder):
    records, df = cpu_ladder
    cpu = [r for r in records if r["device"]["kind"] == "cpu"]
    assert [r["ladder"]["rung"] for r in cpu] == [r.rung for r in RUNGS if "cpu" in r.devices]
    assert not [r for r in records if "_file" in r]  # no record written names a temporary file it came through
    assert df["_file"].str.endswith("runs.jsonl").all()  # read back: the results file itself
    assert all(r["status"] == "ok" and r["timing"]["train_s"] > 0 for r in cpu), [r.get("reason") for r in cpu]
    heaps = {r["ladder"]["rung"]: r["memory"]["heap"]["policy"] for r in cpu}
    assert heaps[0] == heaps[1] == "system"  # fresh processes: the study's heap, never one a rung before kept
    assert all(r["data"]["sizes"]["train"] == 17520 for r in cpu)  # the study's workload on every rung
    faults = {r["ladder"]["rung"]: r["memory"].get("page_faults") for r in cpu}
    if sys.platform != "win32":  # getrusage: the run's own page faults, DataLoader workers included
        assert all(isinstance(n, int) and n > 0 for n in faults.values()), faults
    if heaps[2] == "kept":  # glibc: the kept heap faults the LSTM's buffers in once, not again every step. Measured:
        # 31,000 pages with the kept heap, the DataLoader's workers included; with glibc's own thresholds 690,000 to
        # 810,000 in most fresh processes, but they adapt to the order of the frees and in some settle early at
        # 80,000-120,000: so no more than glibc's within a quarter, whichever regime it ran in
        assert faults[2] < 200_000 and faults[2] <= 1.25 * faults[1], faults
    # rungs 0-2 change how the batches are made and where the heap's memory goes, not the arithmetic: the same loss
    losses = {r["ladder"]["rung"]: r["epochs"][0]["train_loss"] for r in cpu}
    assert losses[0] == losses[1] == losses[2], losses
    gpu = [r for r in records if r["device"]["kind"] == "cuda"]
    assert [r["ladder"]["rung"] for r in gpu] == [r.rung for r in RUNGS if "cuda" in r.devices]
    if not torch.cuda.is_available():
        assert all(r["status"] == "skipped" and "CUDA" in r["reason"] for r in gpu)


@pytest.mark.slow
def test_first_screen_from_cpu_records_alone_says_how_to_get_the_gpu_half(cpu_ladder):
    records, df = cpu_ladder
    if torch.cuda.is_available():
        pytest.skip("this machine has the GPU half")
    screen = report.first_screen(df)
    assert screen.figure is not None and len(screen.figure.axes) == 1
    assert "04" in screen.note and "reference_records" in screen.note
    sentences = screen.markdown.split(". ")
    assert 1 <= len([s for s in sentences if s]) <= 4 and screen.markdown.startswith("On this machine")
    cpu = {r["ladder"]["rung"]: r["timing"]["train_s"] for r in records if r["device"]["kind"] == "cpu"}
    best = min((s, k) for k, s in cpu.items() if k < 6)
    if best[1] == 0:  # one epoch per rung on a busy machine: the study's code can come out fastest, and is said so
        assert "the study's code (rung 0) was the fastest rung" in screen.markdown, screen.markdown
    else:
        assert _ratio(screen.markdown) == pytest.approx(float(f"{cpu[0] / best[0]:.2g}"))  # same machine's runs
    # both sentences, whatever this machine measured: rung 0's time set below, then above, every other rung's
    rung0 = (df["ladder.rung"] == 0) & (df["device.kind"] == "cpu")
    for seconds, fastest in ((min(cpu.values()) / 2, True), (2 * max(cpu.values()), False)):
        moved = report.first_screen(df.assign(**{"timing.train_s": df["timing.train_s"].mask(rung0, seconds)}))
        assert ("the study's code (rung 0) was the fastest rung" in moved.markdown) == fastest, moved.markdown
        assert ("x as fast as the study's code" in moved.markdown) == (not fastest), moved.markdown
    # (b) with the reference records: this machine's CPU ladder still first, the H200's panel labelled
    with_ref = report.first_screen(df, report.load_reference_records())
    assert len(with_ref.figure.axes) == 2 and with_ref.markdown.startswith("On this machine")
    assert "reference records' machine" in with_ref.markdown and with_ref.note == ""
    table = report.ladder_table(screen.rows)
    assert list(table.rung) == [0, 1, 2, 4, 6] + [0, 1, 3, 4, 5, 6]
    assert table[table.device == "cuda"].seconds.isna().all()  # skipped: an empty slot, never a number
    if sys.platform != "win32":  # each CPU rung's page faults, in millions, beside its seconds
        faults = table[table.device == "cpu"]["page faults, millions (CPU)"]
        assert list(faults) == [pytest.approx(r["memory"]["page_faults"] / 1e6) for r in records
                                if r["device"]["kind"] == "cpu"]


def test_first_screen_of_one_machine_gpu_and_cpu_divides_its_own_runs():
    """(c) One machine's CPU and GPU records (the shipped H200 ladder of 2026-11-30 stands in): the first ratio is
    that machine's GPU over its own CPU at rung 0, recomputed here from the records; the H100 machine of the same
    host name and CPU model (2026-11-27) stays another machine, its runs never mixed into the H200's."""
    ref = report.load_reference_records()
    screen = report.first_screen(None, ref)
    assert screen.figure is not None and len(screen.figure.axes) == 1 and screen.note == ""
    ladder = ref[ref["ladder.rung"].notna() & (ref.status == "ok") & ref["started"].str.startswith("2026-11-30")]
    cpu, gpu = (ladder[ladder["device.kind"] == k].set_index("ladder.rung")["timing.train_s"] for k in ("cpu", "cuda"))
    assert sorted(cpu.index) == [0, 1, 2, 4, 6] and sorted(gpu.index) == [0, 1, 3, 4, 5, 6]  # every rung, once
    assert screen.markdown.startswith("On the reference records' machine (NVIDIA H200 and its host CPU")
    assert _ratio(screen.markdown) == pytest.approx(float(f"{cpu[0] / gpu[0]:.2g}"))
    assert "study's code (rung 0)" in screen.markdown and "study's claim" in screen.markdown
    assert screen.markdown.count(". ") <= 3
    rows = screen.rows
    assert set(rows.gpu.dropna()) == {"NVIDIA H200"} and rows.machine.str.startswith("vm (H200)").all()
    assert dict(zip(rows[rows.device == "cuda"].rung, rows[rows.device == "cuda"].seconds)) == dict(gpu)
    # the tables keep the two machines apart too: the CPU runs of each day go with that day's GPU
    every = report.ladder_rows(ref, "reference")
    assert set(every.machine.str.split(" · ").str[0]) == {"vm (H100)", "vm (H200)"}
    assert set(every[every.machine.str.startswith("vm (H100)")].gpu.dropna()) == {"NVIDIA H100 80GB HBM3"}


def test_replication_names_every_epoch_and_says_what_was_not_measured():
    rep = report.replication(None)
    assert list(rep.table.epoch) == [1, 2, 3, 4, 5] and (rep.table.verdict == "no rung-0 run here").all()
    assert "CPU 46.42 s; rung 0 (the study's code) on this machine's CPU: not measured here" in rep.markdown  # as published
    assert "A40 4.34 s; rung 0 (the study's code) on this machine's GPU: not measured here" in rep.markdown
