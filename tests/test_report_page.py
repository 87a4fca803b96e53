"""The report's comparison across machines and the words around it, checked on the report's data (not pixels) from mixed
records: a real CPU training run made here, CPU runs of the published setting from a laptop with the GPU
runs it had to skip, a Colab T4 with no CPU run, lstmnb's reference records (real H100 runs) and the
published figures.

What must hold: no text divides a device by another machine's CPU without naming both machines; the
study's published comparison ranks its devices per epochs count and names its flagged ones, never ranking them; the T4 note stands wherever the
T4's figures do; `reference` means the shipped records only; skipped devices are never counted as
measured; one figure reads the same in every place."""

from __future__ import annotations

import json
import re
import statistics
import warnings
from pathlib import Path

import pandas as pd
import pytest
from test_report import run_record, write_jsonl

from lstmnb import records, report

REFERENCE_DIR = Path(report.__file__).resolve().parent.parent / "reference_records"


def raw_reference() -> list[dict]:
    return [json.loads(line) for f in sorted(REFERENCE_DIR.glob("*.jsonl")) for line in f.read_text().splitlines() if line]


def reference_seconds(kind: str, input_path: str, epochs: int = 15) -> float:
    """Median training seconds of the reference runs at the published setting and problem (plain dicts)."""
    return statistics.median(
        r["timing"]["train_s"] for r in raw_reference()
        if r["status"] == "ok" and r["config"]["strategy"] == "single" and r["device"]["kind"] == kind
        and r["config"]["epochs"] == epochs and r["config"]["input_path"] == input_path
        and r["config"]["batch_size"] == 64 and not r["config"]["cuda_graph"] and len(r["data"]["points"]) == 2
        and r["experiment"] not in ("batch-sweep", "speed"))


@pytest.fixture(scope="module")
def published():
    return report.load_published()


@pytest.fixture(scope="module")
def reference():
    return report.load_reference_records()


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """The user's records: a real 1-epoch CPU run made here (a small problem), a laptop's CPU runs of the
    published setting with the GPU run it skipped, and a Colab T4 with no CPU run."""
    from test_train import _series

    from lstmnb.training import preset_config, train
    from lstmnb.windows import make_windows

    root = tmp_path_factory.mktemp("results")
    values, times = _series(24 * 30)
    cfg = preset_config("published", window=12, hidden=4, epochs=1, input_path="fast", progress=False, device="cpu",
                        split_dates=None)  # 30 days: the split by fractions, not at 2021-01-01
    records.append_record(train(make_windows(values, times, cfg.window_config()), cfg).record, root / "here" / "runs.jsonl")
    laptop = [run_record("cpu", "Intel(R) Core(TM) i7", e, "dataloader", 9.0 * e, host="laptop") for e in (5, 10, 15)]
    laptop += [run_record("cuda", None, 15, "dataloader", 0, status="skipped", host="laptop")]
    colab = [run_record("cuda", "Tesla T4", 15, "dataloader", 4.0, host="colab")]
    write_jsonl(root / "laptop" / "runs.jsonl", laptop)
    write_jsonl(root / "colab" / "runs.jsonl", colab)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return records.load_records(root)


@pytest.fixture(scope="module")
def page(own, reference, published):
    """Everything the first screen and the findings show, as data."""
    rows = report.comparison_rows(own, reference, published)
    text, table = report.findings(own, published, reference)
    return {"rows": rows, "findings": text, "table": table,
            "epochs": report.epochs_tables(rows, report.device_notes(published))}


def _cross_machine_ratios(rows: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(ratio as text, GPU machine, CPU machine) of every GPU over a CPU of another machine (or source),
    at the same problem, epochs and setting."""
    out = []
    for _, gpu in rows[rows["device"] != "CPU"].iterrows():
        cpus = rows[(rows["device"] == "CPU") & (rows["problem"] == gpu["problem"]) & (rows["epochs"] == gpu["epochs"])
                    & (rows["setting"] == gpu["setting"])
                    & ((rows["machine"] != gpu["machine"]) | (rows["source"] != gpu["source"]))]
        for _, cpu in cpus.iterrows():
            out.append((f"{cpu['seconds'] / gpu['seconds']:.3g}x", gpu["machine"], cpu["machine"]))
    return out


def test_no_text_divides_by_another_machines_cpu_without_naming_both(page):
    texts = [page["findings"]]
    texts += [" ".join(map(str, r)) for r in page["table"].reset_index().itertuples(index=False)]
    pieces = [p for t in texts for p in re.split(r"(?<=[;.])\s|\n", t)]
    for ratio, gpu_machine, cpu_machine in _cross_machine_ratios(page["rows"]):
        for piece in pieces:
            if re.search(rf"(?<![\d.]){re.escape(ratio)}", piece):
                assert gpu_machine in piece and cpu_machine in piece, (ratio, piece)
                # the study's CPU run is no GPU machine's own CPU (the study does not say where it ran)
                assert "own machine" not in piece, (ratio, piece)
    t4_row = page["table"].loc[f"T4 · published{report.NOTE_MARK}"]
    assert t4_row["machine"] == "Google Colab"
    # the published T4 over the study's CPU is said in the study's comparison only, under a column naming that CPU
    at = report.published_comparison(report.load_published()).table
    assert report.OVER_STUDY_CPU == "x the study's one CPU run" and report.OVER_STUDY_CPU in at.columns


def test_the_t4_note_stands_with_the_t4_figures(page, own, reference, published):
    note = report.device_notes(published)["T4"]
    assert note.startswith(f"{report.NOTE_MARK} T4 (published: 6.62 s for 5, 98.2 s for 10")
    assert "CPU-like" in note
    assert "T4" in published["era5_lstm_gpu_benchmark"]["notes"]  # the shared file's own word on it
    assert note in page["findings"] and f"T4 · published{report.NOTE_MARK}" in page["table"].index
    tables = {title: (table, notes) for title, table, notes in page["epochs"]}
    published_dl = tables["published problem, published setting, DataLoader path: training seconds"]
    assert f"T4 · published{report.NOTE_MARK}" in published_dl[0].columns and note in published_dl[1]
    # without the published figures there is no T4, and no note
    assert report.NOTE_MARK not in report.findings(own, None, reference)[0]


def test_the_study_and_the_published_setting_are_defined_once(published):
    text = report.published_setting_definition(published)
    assert text.startswith('<a id="published-setting"></a>**The published setting**')
    for fact in ("USC CSCI-596 course project", "lat 40 and 20, lon 280", "2020-01-01..2021-06-30", "24 h window",
                 "64 hidden units", "2-layer LSTM", "batch 128", "trained on 2020, tested from 2021-01-01", "Adam at learning rate 0.001", "DataLoader with 2 workers",
                 "PyTorch 2.5 and CUDA 11.8"):
        assert fact in text, fact


REFERENCE_WORD = re.compile(r"\breference\b")


def _reference_uses(text: str) -> list[str]:
    """Uses of the word that do not mean the shipped records: not 'reference records', not a column's
    '· reference', not the source value alone."""
    if text.strip() == report.REFERENCE:
        return []
    bad = []
    for m in REFERENCE_WORD.finditer(text):
        before, after = text[:m.start()], text[m.end():]
        if after.startswith(" records") or before.endswith("· ") or after.startswith(" (lstmnb"):
            continue
        bad.append(text[max(0, m.start() - 40):m.end() + 40])
    return bad


def _figure_texts(fig) -> list[str]:
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text) if t.get_text()]


def test_reference_means_the_shipped_records_only(page, own, reference, published):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    texts = [page["findings"], *report.machine_descriptions(own), *report.machine_descriptions(own).values(),
             report.published_comparison(published, own).markdown]
    table = page["table"]
    texts += list(table.columns) + list(table.index) + [str(v) for v in table.to_numpy().ravel()]
    for title, t, _ in page["epochs"]:
        texts += [title, *t.columns]
    prov = report.provenance_table(own, reference, published)
    texts += list(prov.columns) + list(prov.index) + [str(v) for v in prov.to_numpy().ravel()]
    screen = report.first_screen(own, reference, published)
    texts += [screen.markdown, *_figure_texts(screen.figure)]
    plt.close(screen.figure)
    bad = [b for t in texts for b in _reference_uses(str(t))]
    assert not bad, bad
    assert any("reference records" in t for t in texts)  # the word is there, with its one meaning


def test_skipped_devices_are_counted_as_skipped(page):
    assert "CUDA · laptop" not in set(page["rows"]["column"])  # never a comparison row
    found = page["findings"].splitlines()[0]
    assert "CUDA on laptop skipped, not measured (1 record: no CUDA GPU visible on this machine)" in found
    assert "CPU on laptop measured (3 finished runs)" in found and "6 records from 3 machines" in found
    assert "CUDA · laptop" not in page["table"].index
    # only-skipped records: nothing measured at all, and the sentence says so
    skipped = pd.DataFrame([{"status": "skipped", "reason": "no usable CUDA GPU", "device.kind": "cuda",
                             "device.hostname": "box", "experiment": "epochs"}])
    assert report.findings(skipped)[0].startswith("- **Found:** measured here: 1 record from 1 machine (box: CPU "
                                                  "not stated): CUDA skipped, not measured")


def test_one_figure_reads_the_same_everywhere(page):
    """The laptop's CPU, DataLoader, 15 epochs (135 s; 5 epochs 45 s): the same figure in every place."""
    # the findings table compares at the epochs most columns have: 5, where the H100 reference has its pair
    assert page["table"].loc["CPU · laptop", "epochs"] == 5 and page["table"].loc["CPU · laptop", "like for like s"] == "45"
    tables = {title: t for title, t, _ in page["epochs"]}
    loader = tables["published problem, published setting, DataLoader path: training seconds"]
    assert loader.loc[15, "CPU · laptop"] == "135" and loader.loc[5, "CPU · laptop"] == "45"
    rows = page["rows"]
    point = rows[(rows["column"] == "CPU · laptop") & (rows["setting"] == report.LIKE_FOR_LIKE) & (rows["epochs"] == 15)]
    assert point["seconds"].tolist() == pytest.approx([135.0])
    assert report.MEDIAN_RULE.startswith("Every time, samples/s and RMSE shown for a device is the median")


def test_epochs_tables_keep_problems_and_input_paths_apart(page):
    titles = [title for title, _, _ in page["epochs"]]
    assert titles[0] == "published problem, published setting, DataLoader path: training seconds"
    for title, table, _ in page["epochs"]:
        published_columns = [c for c in table.columns if "· published" in c]
        if title != titles[0]:
            assert not published_columns, title  # the study's row beside the DataLoader path only
        assert not table.columns.nlevels > 1 and table.isna().sum().sum() == 0  # flat headers, '—' for missing
    first = page["epochs"][0][1]
    assert first.loc[5, "T4 · colab"] == "—" and first.loc[15, "CPU · laptop"] == "135"
    assert "window 12, hidden 4, split 70/15/15, published setting, fast input path: training seconds" in titles  # here


def test_machines_with_one_host_name_stay_apart(tmp_path):
    recs = [run_record("cpu", "Intel(R) Core(TM) i7", 15, "dataloader", 135.0, host="vm"),
            run_record("cpu", "AMD EPYC", 15, "dataloader", 60.0, host="vm")]
    recs[0]["device"]["cpu_model"], recs[1]["device"]["cpu_model"] = "Intel(R) Core(TM) i7", "AMD EPYC"
    df = records.load_records(write_jsonl(tmp_path / "runs.jsonl", recs))
    assert set(report.comparison_rows(df)["column"]) == {"CPU · vm (Intel(R) Core(TM) i7)", "CPU · vm (AMD EPYC)"}
    described = report.machine_descriptions(df)
    assert described == {"vm (Intel(R) Core(TM) i7)": "vm: Intel Core i7; 2026-01-01",
                         "vm (AMD EPYC)": "vm: AMD EPYC; 2026-01-01"}


def test_the_studys_comparison_ranks_its_devices_and_names_the_flagged_ones(published):
    """No records: the headline count is the study's longest (15); each GPU over the study's one CPU run."""
    comparison = report.published_comparison(published)
    table, pub = comparison.table, published["era5_lstm_gpu_benchmark"]["epochs"]
    assert comparison.epochs == 15 and list(table["epochs"].drop_duplicates()) == [15, 5, 10]
    at15 = table[table["epochs"] == 15]
    assert list(at15["device"]) == ["A40", "V100", "CPU", f"T4{report.NOTE_MARK}", f"P100{report.NOTE_MARK}"]
    assert list(at15["rank"][:3]) == [1, 2, 3] and set(at15["rank"][3:]) == {f"left out ({report.NOTE_MARK} flagged)"}
    a40 = at15.iloc[0]
    assert a40[report.OVER_STUDY_CPU] == pytest.approx(round(pub[15]["CPU"] / pub[15]["A40"], 2))
    assert at15[at15["device"].str.startswith(("T4", "P100", "CPU"))][report.OVER_STUDY_CPU].isna().all()
    text = comparison.markdown
    assert text.startswith("At 15 epochs (the study's longest; these records hold no like-for-like run of a count the "
                           "study timed), fastest first: "
                           "A40 9.58 s, V100 11.89 s, CPU 146.41 s.")
    assert f"Left out of the ranking: T4{report.NOTE_MARK} and P100{report.NOTE_MARK}" in text
    for device in ("T4", "P100"):
        assert report.device_notes(published)[device] in text
    assert "tied" not in text  # A40 9.58 s against the flagged P100's 10.04 s is never called a tie
    assert "it is not any GPU's own machine's CPU" in text and report.published_comparison(None, None).table.empty


def test_the_studys_comparison_opens_at_the_longest_count_the_records_share(published, tmp_path):
    """A quick profile's records hold 5 epochs of the published setting: the section opens at 5, and a tie
    is said only between devices that are not flagged."""
    quick = [run_record("cpu", "AMD EPYC", 5, "dataloader", 40.0, host="box")]
    df = records.load_records(write_jsonl(tmp_path / "runs.jsonl", quick))
    comparison = report.published_comparison(published, df)
    assert comparison.epochs == 5 and comparison.markdown.startswith("At 5 epochs (the longest count both the study "
                                                                     "and these records have)")
    import copy

    close = copy.deepcopy(published)
    close["era5_lstm_gpu_benchmark"]["epochs"][5].update(V100=4.5, P100=4.35)  # V100 within 10% of the A40
    text = report.published_comparison(close, df).markdown
    assert "A40 and V100 tied: under 10% apart" in text and "P100 tied" not in text
