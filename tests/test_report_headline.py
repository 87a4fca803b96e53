"""The report's first screen and the words around it, checked on the report's data (not pixels) from mixed
records: a real CPU training run made here, CPU runs of the published setting from a laptop with the GPU
runs it had to skip, a Colab T4 with no CPU run, lstmnb's reference records (real H100 runs) and the
published figures.

What must hold: the headline ratio is each device over a CPU like for like (its own machine's, or for a published GPU the study's CPU run, never called its own); no text
divides a device by another machine's CPU without naming both machines; the T4 note stands wherever the
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

from lstmnb import records, report
from test_report import run_record, write_jsonl

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
    h = report.headline(own, published, reference)
    text, table = report.findings(own, published, reference)
    return {"rows": rows, "headline": h, "findings": text, "table": table,
            "seconds": report.seconds_chart(rows, published), "speedup": report.speedup_chart(rows, published),
            "epochs": report.epochs_tables(rows, report.device_notes(published))}


def entry(h, column, panel="like for like"):
    hit = h.entries[(h.entries["column"] == column) & (h.entries["panel"] == panel)]
    assert len(hit) == 1, (column, panel, h.entries[["column", "panel"]])
    return hit.iloc[0]


def test_headline_ratio_is_like_for_like_over_the_same_machines_cpu(page, published):
    h = page["headline"]
    assert h.epochs == 15 and h.ok
    # at 15 epochs the shipped H100 records hold the one-layer batch-64 runs on the synthetic sample only (the
    # study's setting ran 5 epochs): no like-for-like run there
    row = entry(h, "H100 · vm · reference")
    assert row["state"] == "no run" and pd.isna(row["seconds"]) and "layers 1, synthetic data" in row["why"]
    pub = published["era5_lstm_gpu_benchmark"]["epochs"][15]
    a40 = entry(h, "A40 · published")
    assert a40["x_own_cpu"] == pytest.approx(pub["CPU"] / pub["A40"]) and a40["machine"] == "CARC cluster"
    # the sentence says the like-for-like ratios first, before any other figure
    sentence = h.sentence
    assert sentence.startswith("**Like for like** (15 epochs at the [published setting](#published-setting)")
    first = sentence.index(f"A40 {pub['CPU'] / pub['A40']:.3g}x")
    assert first < sentence.index("**at its fastest setting**")
    assert "H100 " not in sentence[:sentence.index("**at its fastest setting**")]  # not like for like
    assert "The fastest like for like is the T4 (measured here, 4 s)" in sentence  # the Colab T4's record
    # the laptop's CPU against the study's CPU run: the same workload on two machines, both named
    assert ("CPU · laptop took 135 s for 15 epochs, the study's CPU run (platform not stated) 146.41 s: 8% less time "
            "here") in sentence
    # the fastest setting: against the same machine's CPU at that CPU's fastest setting, never the study's CPU
    # (the H100's reference records of the published problem have no CPU run of it on their machine, so no
    # fastest-setting row either)
    assert not ((h.entries["column"] == "H100 · vm · reference") & (h.entries["panel"] == "fastest setting")).any()
    # the laptop's CPU is like for like, but its machine has no GPU measured: no ratio
    laptop = entry(h, "CPU · laptop")
    assert laptop["seconds"] == pytest.approx(135.0) and laptop["x_own_cpu"] == 1.0
    colab = entry(h, "T4 · colab")
    assert colab["state"] == "measured" and pd.isna(colab["x_own_cpu"])  # no CPU on Colab: no ratio at all


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
    texts = [page["headline"].sentence, page["findings"]]
    texts += list(page["speedup"].data["group"] + " " + page["speedup"].data["label"])
    texts += [" ".join(map(str, r)) for r in page["table"].reset_index().itertuples(index=False)]
    pieces = [p for t in texts for p in re.split(r"(?<=[;.])\s|\n", t)]
    checked = 0
    for ratio, gpu_machine, cpu_machine in _cross_machine_ratios(page["rows"]):
        for piece in pieces:
            if re.search(rf"(?<![\d.]){re.escape(ratio)}", piece):
                assert gpu_machine in piece and cpu_machine in piece, (ratio, piece)
                # the study's CPU run is no GPU machine's own CPU (the study does not say where it ran)
                assert "own machine" not in piece, (ratio, piece)
                checked += 1
    assert checked >= 1  # the published T4 over the study's CPU is said, with both machines
    t4 = page["speedup"].data[page["speedup"].data["device"] == "T4"]  # the chart's bar, and the table's row
    assert page["table"].loc[f"T4 · published{report.NOTE_MARK}", "machine"] == (
        "Google Colab (its ratio: over the study's CPU run, platform not stated)")
    assert list(t4["same_machine"]) == [False] and "platform not stated" in t4["label"].iloc[0]
    assert "Google Colab" in t4["group"].iloc[0]


def test_the_t4_note_stands_with_the_t4_figures(page, own, reference, published):
    note = report.device_notes(published)["T4"]
    assert note.startswith(f"{report.NOTE_MARK} T4 (published: 6.62 s for 5, 98.2 s for 10")
    assert "CPU-like" in note
    assert "T4" in published["era5_lstm_gpu_benchmark"]["notes"]  # the shared file's own word on it
    h = page["headline"]
    assert h.notes["T4"] == note and entry(h, "T4 · published")["note"] == report.NOTE_MARK
    assert f"T4{report.NOTE_MARK} " in h.sentence
    assert note in page["findings"] and f"T4 · published{report.NOTE_MARK}" in page["table"].index
    assert note in page["seconds"].notes and note in page["speedup"].notes
    tables = {title: (table, notes) for title, table, notes in page["epochs"]}
    published_dl = tables["published problem, published setting, DataLoader path: training seconds"]
    assert f"T4 · published{report.NOTE_MARK}" in published_dl[0].columns and note in published_dl[1]
    # without the published figures there is no T4, and no note
    bare = report.headline(own, None, reference)
    assert bare.notes == {} and report.NOTE_MARK not in bare.sentence
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

    texts = [page["headline"].sentence, page["findings"], *page["headline"].machines, *page["headline"].machines.values()]
    table = page["table"]
    texts += list(table.columns) + list(table.index) + [str(v) for v in table.to_numpy().ravel()]
    for title, t, _ in page["epochs"]:
        texts += [title, *t.columns]
    prov = report.provenance_table(own, reference, published)
    texts += list(prov.columns) + list(prov.index) + [str(v) for v in prov.to_numpy().ravel()]
    figures = [report.plot_headline(page["headline"]), report.plot_seconds(page["seconds"]),
               report.plot_speedup(page["speedup"]), report.plot_samples_per_s(report.samples_chart(page["rows"]))]
    for fig in figures:
        texts += _figure_texts(fig)
        plt.close(fig)
    bad = [b for t in texts for b in _reference_uses(str(t))]
    assert not bad, bad
    assert any("reference records" in t for t in texts)  # the word is there, with its one meaning


def test_skipped_devices_are_counted_as_skipped(page):
    h = page["headline"]
    cuda = entry(h, "CUDA · laptop")
    assert cuda["state"] == "skipped" and pd.isna(cuda["seconds"]) and "no CUDA GPU visible" in cuda["why"]
    assert "CUDA · laptop" not in set(page["rows"]["column"])  # never a comparison row
    found = page["findings"].splitlines()[0]
    assert "CUDA on laptop skipped, not measured (1 record: no CUDA GPU visible on this machine)" in found
    assert "CPU on laptop measured (3 finished runs)" in found and "6 records from 3 machines" in found
    assert "CUDA · laptop" not in page["table"].index
    # only-skipped records: nothing measured at all, and the sentence says so
    skipped = pd.DataFrame([{"status": "skipped", "reason": "no usable CUDA GPU", "device.kind": "cuda",
                             "device.hostname": "box", "experiment": "epochs"}])
    bare = report.headline(skipped, None, None)
    assert not bare.ok and list(bare.entries["state"]) == ["skipped"]
    assert report.findings(skipped)[0].startswith("- **Found:** measured here: 1 record from 1 machine (box: CPU "
                                                  "not stated): CUDA skipped, not measured")


def test_own_records_without_a_like_for_like_run_say_of_how_many_epochs(published):
    skipped = pd.DataFrame([{"status": "skipped", "reason": "no usable CUDA GPU", "device.kind": "cuda",
                             "device.hostname": "box", "experiment": "epochs"}])
    sentence = report.headline(skipped, published, None).sentence
    assert "*Your own records have no like-for-like run of 15 epochs yet*" in sentence


def test_one_figure_reads_the_same_everywhere(page):
    """The laptop's CPU, DataLoader, 15 epochs (135 s; 5 epochs 45 s): the same figure in every place."""
    assert entry(page["headline"], "CPU · laptop")["seconds"] == pytest.approx(135.0)
    # the findings table compares at the epochs most columns have: 5, where the H100 reference has its pair
    assert page["table"].loc["CPU · laptop", "epochs"] == 5 and page["table"].loc["CPU · laptop", "like for like s"] == "45"
    tables = {title: t for title, t, _ in page["epochs"]}
    loader = tables["published problem, published setting, DataLoader path: training seconds"]
    assert loader.loc[15, "CPU · laptop"] == "135" and loader.loc[5, "CPU · laptop"] == "45"
    chart = page["seconds"].data
    point = chart[(chart["column"] == "CPU · laptop") & (chart["setting"] == report.LIKE_FOR_LIKE)
                  & (chart["epochs"] == 15)]
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


LONG_REASON = ("numba.cuda cannot start: CudaSupportError: Error at driver init: CUDA driver library cannot be "
               "found. If you are sure that a CUDA driver is installed, try setting NUMBA_CUDA_DRIVER")


@pytest.fixture(scope="module")
def crowded(tmp_path_factory, published, reference):
    """A machine whose 15-epoch CPU run is not at the published setting (a long setting label) and whose
    CUDA rows were skipped for several long reasons (as when notebook 07's engines were skipped too)."""
    root = tmp_path_factory.mktemp("crowded")
    recs = [run_record("cpu", "AMD EPYC", e, "fast", 8.0 * e, host="box") for e in (5, 15)]
    for i, reason in enumerate((LONG_REASON, "torch-cuda cannot start: " + LONG_REASON, "no CUDA GPU visible")):
        skipped = run_record("cuda", None, 15, "dataloader", i, status="skipped", host="box")
        recs.append({**skipped, "reason": reason})
    write_jsonl(root / "runs.jsonl", recs)
    own = records.load_records(root)
    return report.headline(own, published, reference)


@pytest.mark.parametrize("which", ["page", "crowded"])
def test_every_text_inside_a_headline_panel_stays_there_and_overlaps_no_other(which, request):
    """Long settings and several skip reasons once ran over the speedup column and over the next rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h = request.getfixturevalue("page")["headline"] if which == "page" else request.getfixturevalue("crowded")
    assert which == "page" or (h.entries["state"] == "skipped").any()
    fig = report.plot_headline(h)
    renderer = fig.canvas.get_renderer()
    inside = 0
    for ax in fig.axes:
        box = ax.get_window_extent(renderer)
        extents = [(t.get_text(), t.get_window_extent(renderer)) for t in ax.texts]
        extents = [(t, e) for t, e in extents if e.x0 < box.x1]  # the speedup column stands right of the panel
        for i, (text, extent) in enumerate(extents):
            assert box.x0 <= extent.x0 and extent.x1 <= box.x1, text
            assert box.y0 <= extent.y0 and extent.y1 <= box.y1, text
            assert not any(extent.overlaps(other) for _, other in extents[i + 1:]), text
            inside += 1
    plt.close(fig)
    assert inside >= len(h.entries)  # every row's value or reason, and the group headers
