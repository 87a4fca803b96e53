"""The run record: atomic appends, broken lines, merging files from several machines."""

import json
import multiprocessing as mp

import pytest
import torch

from lstmnb.records import append_record, load_records, new_record, read_records


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


def _writer(path, k):
    for i in range(20):
        append_record({"experiment": "x", "writer": k, "i": i, "pad": "y" * 5000}, path)


def test_concurrent_appends_never_interleave(tmp_path):
    path = tmp_path / "runs.jsonl"
    procs = [mp.get_context("fork").Process(target=_writer, args=(path, k)) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    recs = read_records(path)
    assert len(recs) == 60
    assert sorted((r["writer"], r["i"]) for r in recs) == sorted((k, i) for k in range(3) for i in range(20))


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
