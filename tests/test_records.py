"""The run record: atomic appends, broken lines, merging files from several machines."""

import json
import multiprocessing as mp

import pytest
import torch

from lstmnb.records import append_record, append_record_once, load_records, new_record, read_records


def test_record_has_design_fields(tmp_path):
    rec = new_record("train", config={"batch_size": 64}, metrics={"test_rmse_k": 0.5})
    for key in ("schema", "run_id", "started", "experiment", "status", "reason", "device", "software", "profile"):
        assert key in rec
    assert rec["device"]["cpu_cores"] >= 1 and rec["software"]["torch"]
    assert len(rec["device"]["load_avg"]) == 3 and min(rec["device"]["load_avg"]) >= 0
    path = append_record(rec, tmp_path / "runs.jsonl")
    assert json.loads(path.read_text())["metrics"]["test_rmse_k"] == 0.5


def test_bad_status_rejected():
    with pytest.raises(ValueError, match="status"):
        new_record("train", status="great")


def test_skipped_cuda_record_names_no_device():
    rec = new_record("train", status="skipped", reason="no GPU", device="cuda")
    assert rec["device"]["kind"] == "cuda"
    if torch.cuda.is_available():  # a GPU machine: the record names the GPUs it has
        assert rec["device"]["count"] == torch.cuda.device_count() and rec["device"]["name"]
    else:
        assert rec["device"]["count"] == 0 and rec["device"]["name"] is None
        assert rec["device"]["note"] == "no CUDA device visible"


WRITERS, APPENDS = 8, 25


def _writer(path, k):
    for i in range(APPENDS):
        append_record({"experiment": "x", "writer": k, "i": i, "pad": "y" * 5000}, path)


def _run_all(target, args_list):
    procs = [mp.get_context("fork").Process(target=target, args=args) for args in args_list]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert [p.exitcode for p in procs] == [0] * len(procs)


def test_concurrent_appends_never_interleave(tmp_path):
    """8 processes x 25 appends of 5 KB lines at once: every record is there, whole, once."""
    path = tmp_path / "runs.jsonl"
    _run_all(_writer, [(path, k) for k in range(WRITERS)])
    recs = read_records(path)
    assert len(recs) == WRITERS * APPENDS
    assert sorted((r["writer"], r["i"]) for r in recs) == sorted(
        (k, i) for k in range(WRITERS) for i in range(APPENDS))


def _once_writer(path, k):
    for i in range(5):  # every process tries to record the same five runs
        append_record_once({"run_id": f"run{i}", "writer": k}, path)


def test_concurrent_appends_of_one_run_id_write_it_once(tmp_path):
    path = tmp_path / "runs.jsonl"
    _run_all(_once_writer, [(path, k) for k in range(WRITERS)])
    assert sorted(r["run_id"] for r in read_records(path)) == [f"run{i}" for i in range(5)]


def test_append_once_ignores_a_partial_line_with_the_run_id(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text('{"run_id": "abc", "experiment": "trai')  # a crash mid-line: not a record
    assert append_record_once({"run_id": "abc", "experiment": "train"}, path) == (path, True)
    assert append_record_once({"run_id": "abc", "experiment": "train"}, path) == (path, False)
    with pytest.warns(UserWarning):
        assert [r["run_id"] for r in read_records(path)] == ["abc"]


def test_broken_line_skipped_with_warning_good_records_kept(tmp_path):
    path = tmp_path / "runs.jsonl"
    append_record({"experiment": "a"}, path)
    with open(path, "a") as fh:
        fh.write('{"experiment": "half-writ')  # a crash mid-line
    append_record({"experiment": "b"}, path)  # starts on a fresh line
    with pytest.warns(UserWarning, match=r"runs.jsonl:2"):
        recs = read_records(path)
    assert [r["experiment"] for r in recs] == ["a", "b"]


def test_load_records_merges_folders(tmp_path):
    append_record({"experiment": "t", "device": {"kind": "cpu"}}, tmp_path / "m1" / "runs.jsonl")
    append_record({"experiment": "t", "device": {"kind": "cuda"}}, tmp_path / "m2" / "runs.jsonl")
    df = load_records([tmp_path])
    assert sorted(df["device.kind"]) == ["cpu", "cuda"]
    assert load_records([tmp_path / "nothing"]).empty
