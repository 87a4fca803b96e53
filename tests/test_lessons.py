"""04 and 05 on any machine: medians of alternated repeats and their flags, the guard on speedups, a step's
time against its batch (05's DDP scaling on real gloo ranks: the `ci` series, test_notebooks.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lstmnb.machine.device import busy_while
from lstmnb.errors import ConfigError
from lstmnb.models import flops_per_sample
from lstmnb.notebooks import amdahl, lessons
from lstmnb.report.repeats import flag_text, median_of_repeats, speedup_note, spread
from lstmnb.training import TrainConfig, preset_config
from test_parallel import synthetic_windows

pytestmark = [pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::UserWarning")]


def test_spread_and_flags():
    assert spread([1.0, 1.1, 0.9]) == pytest.approx(0.2 / 0.9)
    assert spread([2.0, 2.0, 2.0]) == 0.0
    assert np.isnan(spread([]))
    assert flag_text(3, 0.1, 0.2) == ""
    assert flag_text(3, 0.25, None) == "repeats differ 25%"
    assert flag_text(2, 0.0, 1.4) == "only 2 repeat(s); 1.4 cores busy elsewhere"


def test_median_of_repeats_takes_medians_and_flags_per_row():
    rows = [{"batch": b, "threads": 2, "step ms": t, "busy cores": busy}
            for b, t, busy in [(16, 1.0, 0.0), (64, 2.0, 0.1), (16, 1.05, 0.0), (64, 3.0, 0.0), (16, 0.95, 0.1),
                               (64, 2.1, 0.9)]]
    table = median_of_repeats(rows, ["batch"], "step ms")
    assert table.loc[16, "step ms"] == pytest.approx(1.0) and table.loc[64, "step ms"] == pytest.approx(2.1)
    assert table.loc[16, "repeats"] == 3 and table.loc[16, "flag"] == ""
    assert table.loc[64, "spread %"] == pytest.approx(100 * 1.0 / 2.0)
    assert table.loc[64, "flag"] == "repeats differ 50%; 0.9 cores busy elsewhere"


def test_no_speedup_over_a_baseline_slower_than_the_same_work_on_fewer_threads():
    base = pd.Series({"threads": 2, "samples/s": 1000.0, "flag": ""})
    others = pd.DataFrame({"threads": [2, 1], "samples/s": [1800.0, 1200.0]})
    ok, why = speedup_note(base, others)
    assert not ok and why == "no speedup: the baseline ran slower than the same work on 1 thread(s)"
    ok, why = speedup_note(base, others.iloc[:1])
    assert ok and why == ""
    ok, why = speedup_note(pd.Series({"threads": 2, "samples/s": 1000.0, "flag": "repeats differ by 30%"}), others.iloc[:1])
    assert ok and why.startswith("rough: the baseline is flagged")


def test_ring_allreduce_bytes_and_bad_values():
    assert lessons.ring_allreduce_bytes(1000, 2) == 4000  # 2 (N-1)/N K values of 4 bytes
    assert lessons.ring_allreduce_bytes(1000, 4) == 6000
    assert lessons.ring_allreduce_bytes(1000, 1) == 0
    with pytest.raises(ConfigError, match="repeats=0 must be a whole number >= 1"):
        lessons.check_repeats(0)
    with pytest.raises(ConfigError, match="scaling_days=3 must be None or a whole number of days >= 14"):
        lessons.scaling_request("study", [[40, 280]], "2020-01-01", 3, preset_config("published"))


def test_scaling_request_cuts_the_training_part():
    cfg = preset_config("published")
    request, cut = lessons.scaling_request("study", [[40, 280], [20, 280]], "2020-01-01", 61, cfg)
    assert (request.start, request.end) == ("2020-01-01", "2020-03-01")
    assert cut.split_dates == ("2020-02-24", "2020-02-24") and cut.layers == 2 and cut.batch_size == 128
    assert lessons.scaling_request("study", [[40, 280]], "2020-01-01", None, cfg) == (None, cfg)


def test_source_code_is_the_package_source():
    from lstmnb.training.step import optimizer_step

    text = lessons.source_code(optimizer_step)
    assert text.startswith("def optimizer_step(") and "loss.backward()" in text


def test_busy_while_returns_the_result_and_a_core_count():
    out, busy = busy_while(sum, [1, 2, 3])
    assert out == 6 and (busy is None or busy >= 0)


def test_fixed_step_cost_recovers_a_line():
    table = pd.DataFrame({"step ms": [1.0 + 0.01 * b for b in (16, 64, 256)]}, index=pd.Index([16, 64, 256], name="batch"))
    fit = lessons.fixed_step_cost(table)
    assert fit["fixed_ms"] == pytest.approx(1.0) and fit["per_sample_us"] == pytest.approx(10.0)
    assert fit["fixed_share_smallest"] == pytest.approx(1.0 / 1.16)
    with pytest.raises(ConfigError, match="two batch sizes"):
        lessons.fixed_step_cost(table.iloc[:1])


def test_step_times_are_real_steps_of_the_trainer():
    cfg = TrainConfig(device="cpu", hidden=8, window=12, layers=2, batch_size=32, progress=False)
    windows = synthetic_windows(cfg, days=20)
    rows = lessons.step_times(windows, cfg, "cpu", [8, 32], steps=2, repeats=2, min_s=0)
    assert list(rows["batch"]) == [8, 32, 8, 32]  # alternated within each repeat
    assert (rows["steps"] == 2).all()  # no time floor: the steps asked for
    assert (rows["step ms"] > 0).all() and (rows["threads"] >= 1).all()
    flops = flops_per_sample(cfg.model_config(windows.n_features), cfg.window)["training"]
    np.testing.assert_allclose(rows["GFLOP/s"], flops * rows["batch"] / (rows["step ms"] / 1e3) / 1e9)
    table = lessons.step_time_table(rows)
    assert list(table.index) == [8, 32] and (table["repeats"] == 2).all() and (table["steps"] == 2).all()
    assert table["flag"].str.contains("only 2 repeat").all()
    with pytest.raises(ConfigError, match=r"batch size\(s\) \[100000\] exceed"):
        lessons.step_times(windows, cfg, "cpu", [100000], steps=1, repeats=1)


def test_short_steps_are_timed_long_enough_to_outlast_a_hiccup():
    cfg = TrainConfig(device="cpu", hidden=8, window=12, batch_size=8, progress=False)
    windows = synthetic_windows(cfg, days=20)
    rows = lessons.step_times(windows, cfg, "cpu", [4], steps=2, repeats=1, min_s=1.5)
    # a step of this tiny model takes about a millisecond, far under the 0.75 s at which 2 steps would fill
    # the floor, even on a busy machine: more steps than asked for
    assert int(rows["steps"].iloc[0]) > 2
    with pytest.raises(ConfigError, match="min_s=-1"):
        lessons.step_times(windows, cfg, "cpu", [4], steps=2, repeats=1, min_s=-1)


def test_reference_step_table_is_the_h100_records_of_the_study_setting():
    """04 sets the reader's device beside the H100 records of 2026-11-27 on the study's data (the study's
    setting eager and as a graph, the recommended setting's batch sweep), not the synthetic ones of 11-22."""
    ref = lessons.reference_step_table()
    assert set(ref.index.get_level_values(0)) == {lessons.STUDY_SETTING, lessons.SWEEP_SETTING}
    study = ref.xs(lessons.STUDY_SETTING, level=0)
    eager, graph = study.xs(False, level=0), study.xs(True, level=0)
    assert list(eager.index) == [128] == list(graph.index)  # the study's batch, never the former 64
    # 5 epochs of 137 steps: the eager runs' 0.482 and 0.439 s per epoch, the graph's 0.0338 and 0.0339 s
    assert eager.loc[128, "step ms"] == pytest.approx(1e3 * (0.482132 + 0.439109) / 2 / 137, rel=1e-3)
    assert graph.loc[128, "step ms"] < eager.loc[128, "step ms"] / 10  # the graph's lesson, from the records
    assert list(ref.xs(lessons.SWEEP_SETTING, level=0).index.get_level_values("batch")) == [32, 128, 512, 2048, 8192]
    assert "2026-11-27" in lessons.REFERENCE_LABEL and "study's setting" in lessons.REFERENCE_LABEL
    text = lessons.what_04_showed(pd.DataFrame({"step ms": [1.0, 2.0], "GFLOP/s": [0.5, 4.0], "flag": ["", ""]},
                                               index=[16, 256]), {"fixed_ms": 0.9, "per_sample_us": 4.0,
                                                                  "fixed_share_smallest": 0.9}, ref, "cpu")
    assert "batch 16 and 2.00 ms at batch 256: 16x the samples for 2.0x the time" in text
    assert "another machine's" in text and "05_multi_gpu" in text
    sync = pd.DataFrame([[9.61, 9.70]], index=["cpu, batch 128"], columns=["no sync", "synchronised"])
    text = lessons.what_04_showed(pd.DataFrame({"step ms": [1.0, 2.0], "GFLOP/s": [0.5, 4.0], "flag": ["", ""]},
                                               index=[16, 256]), {"fixed_ms": 0.9, "per_sample_us": 4.0,
                                                                  "fixed_share_smallest": 0.9}, ref, "cpu", sync)
    assert "a step (cpu, batch 128) took 9.610 ms; read after the device had finished, 9.700 ms: on a CPU" in text


@pytest.mark.slow
def test_a_flagged_all_reduce_row_is_read_as_rough():
    ar = pd.DataFrame({"bytes": [1024, 201988], "time us": [1581.0, 564.0], "busbw GB/s": [0.0006, 0.358],
                       "gradients of one step": [False, True], "flag": ["", "repeats differ 560%"]},
                      index=pd.Index(["1 KiB", "197.3 KiB"], name="size"))
    text = lessons.what_05_showed(pd.DataFrame(), ar)
    assert "One step's gradients (197.3 KiB) took 564 µs" in text
    assert "Flagged: repeats differ 560%; read these times as rough." in text
    ar["flag"] = ""
    assert "Flagged" not in lessons.what_05_showed(pd.DataFrame(), ar)


def test_step_sentence_follows_the_numbers():
    table = pd.DataFrame({"step ms": [1.0, 1.04, 1.16, 3.56]}, index=pd.Index([1, 4, 16, 256], name="batch"))
    fit = lessons.fixed_step_cost(table)
    slope = (3.56 - 1.0) / 255  # ms per sample, smallest batch to the fastest per sample (256)
    assert fit["per_sample_us"] == pytest.approx(slope * 1e3) and fit["fixed_ms"] == pytest.approx(1.0 - slope)
    text = lessons.step_sentence(table, fit)
    assert "about 0.99 ms whatever its batch" in text and "equal near batch 99" in text
    assert "costs more again" not in text  # the largest batch is the fastest per sample


def test_a_batch_past_the_fastest_per_sample_does_not_set_the_per_sample_cost():
    """04's CPU run of 2026-11-25: batch 1024 ran at 64 GFLOP/s against 99 at 256; a slope through it put the
    crossing near batch 11 instead of 22."""
    table = pd.DataFrame({"step ms": [1.55, 1.85, 2.96, 6.04, 18.76, 115.0]},
                         index=pd.Index([1, 4, 16, 64, 256, 1024], name="batch"))
    fit = lessons.fixed_step_cost(table)
    assert fit["best_batch"] == 256 and fit["per_sample_us"] == pytest.approx((18.76 - 1.55) / 255 * 1e3)
    text = lessons.step_sentence(table, fit)
    assert "equal near batch 22" in text and "Above batch 256 a sample costs more again" in text


def test_flag_lines_name_each_flagged_row():
    from lstmnb.report.repeats import flag_lines

    table = pd.DataFrame({"flag": ["", "repeats differ 30%"], "note": ["", "rough: the baseline is flagged"]},
                         index=pd.MultiIndex.from_tuples([("strong", 1), ("strong", 2)]))
    assert flag_lines(table, "{0}, {1} rank(s)") == ("- strong, 2 rank(s): repeats differ 30%; rough: the baseline "
                                                     "is flagged")
    assert flag_lines(table.iloc[:1]) == ""


@pytest.mark.parametrize("only, key, value, message", [
    ("05", "ddp_repeats", 0, "parameter ddp_repeats=0 must be a whole number >= 1"),
    ("05", "ddp_input_path", "disk", "ddp_input_path"),
    ("04", "step_batches", [0, 4], r"parameter step_batches=\[0, 4\] must be a list of whole numbers >= 1"),
])
def test_bad_lesson_parameters_are_refused_before_any_kernel(tmp_path, only, key, value, message):
    from lstmnb import notebooks

    with pytest.raises(ConfigError, match=message):
        notebooks.run_series("ci", only=only, runs_dir=tmp_path / "runs", echo=None, progress=False,
                             overrides={key: value})
    assert not (tmp_path / "runs").exists()


def _shares(t1, step, comm_pct, ranks=2):
    """A ``report.scaling_table``-shaped frame: the one-rank step t1, the N-rank step and its comm %."""
    index = pd.MultiIndex.from_tuples([("strong", 1), ("strong", ranks)], names=["mode", "ranks"])
    return pd.DataFrame({"device": "CPU", "strategy": "ddp", "step ms": [t1, step], "comm %": [np.nan, comm_pct]},
                        index=index)


def test_amdahl_from_the_measured_speedup_and_06s_comm_share():
    # 1.5x on 2 ranks, the all-reduce 10% of the 2-rank step (the share 06 prints)
    fit, table = amdahl.amdahl_table(_shares(10.0, 7.0, 10.0), 2, pd.Series({1: 1.0, 2: 1.5}),
                                     predict=(1, 2, 4, 8))
    assert fit["serial share"] == pytest.approx(1 / 3)  # (2 / 1.5 - 1) / (2 - 1): Karp-Flatt
    assert fit["comm share of s"] == pytest.approx(2 * 0.1 / 1.5) and fit["from"] == "measured speedup"
    assert fit["bound"] == pytest.approx(3.0)
    assert table.loc[1, "Amdahl"] == pytest.approx(1.0) and table.loc[1, "comm growing as N - 1"] == 1.0
    assert table.loc[2, "Amdahl"] == pytest.approx(1.5)  # the measured speedup, by construction
    assert table.loc[2, "comm growing as N - 1"] == pytest.approx(1.5)
    assert table.loc[4, "Amdahl"] == pytest.approx(2.0)  # 1 / (1/3 + 2/3 / 4)
    # 0.2 of t1 serial apart from the all-reduce (1/15 of t1 on 2 ranks, 3x that on 4)
    assert table.loc[4, "comm growing as N - 1"] == pytest.approx(1 / (0.2 + 0.8 / 4 + 3 / 15))
    assert table.loc[2, "measured"] == 1.5 and np.isnan(table.loc[8, "measured"])
    # no measured speedup (a baseline that cannot carry one): the step times stand in
    fit, _ = amdahl.amdahl_table(_shares(10.0, 8.0, 10.0), 2, pd.Series({1: 1.0, 2: np.nan}))
    assert fit["from"] == "step times" and fit["serial share"] == pytest.approx(0.6)  # 2 x 0.8 - 1
    # slower on 2 ranks than on 1: no gain at all, s = 1
    fit, table = amdahl.amdahl_table(_shares(10.0, 12.0, 20.0), 2)
    assert fit["serial share"] == 1.0 and (table["Amdahl"] == 1.0).all()
    assert "allows no speedup on any number of ranks" in lessons.what_05_showed(pd.DataFrame(), pd.DataFrame(),
                                                                                amdahl=(fit, table))
    with pytest.raises(ConfigError, match="ranks=1"):
        amdahl.amdahl_table(_shares(10.0, 7.0, 10.0), 1)


def test_measurable_ranks_are_those_the_cores_allow():
    from lstmnb.machine.device import cpu_cores

    more, why = lessons.measurable_ranks("cpu", [2, 3, cpu_cores() + 1], 2)
    assert more == [n for n in [3] if n <= cpu_cores()]
    assert f"{cpu_cores() + 1} ranks need that many core(s), this machine has {cpu_cores()}" in why
    assert lessons.measurable_ranks("cpu", [1], 2) == ([], "")


def test_a_rough_point_is_marked_in_the_figure_itself():
    """04's figure writes 'rough' beside each flagged median and sets the reader's device beside the H100
    records of the study's setting; 05's Amdahl figure draws both predictions and the measured speedups."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lstmnb.notebooks import lesson_plots

    table = pd.DataFrame({"step ms": [2.0, 1.7, 10.5], "GFLOP/s": [3.4, 16.0, 43.0], "flag": ["busy", "", ""]},
                         index=pd.Index([1, 4, 64], name="batch"))
    fig = lesson_plots.plot_step_times(table, lessons.reference_step_table(), "cpu")
    steps_ax = fig.axes[0]
    assert [t.get_text() for t in steps_ax.texts] == ["rough"]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert sum("study's setting" in s and "another machine" in s for s in labels) == 2  # eager and graph
    plt.close(fig)
    fit, amdahl_table = amdahl.amdahl_table(_shares(10.0, 7.0, 10.0), 2, pd.Series({1: 1.0, 2: 1.5}))
    fig = lesson_plots.plot_amdahl(amdahl_table, fit)
    assert len(fig.axes[0].lines) == 5  # ideal, Amdahl, the growing all-reduce, the bound, measured
    plt.close(fig)
