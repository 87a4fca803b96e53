"""The run record: atomic appends, broken lines, merging files from several machines."""

import json
import multiprocessing as mp
import shutil
import subprocess

import pytest
import torch

from lstmnb.records import append_record, append_record_once, commit_of, load_records, new_record, read_records


def rec(**fields):
    """The smallest valid record (the schema's required fields), with ``fields`` on top."""
    return {"schema": 1, "run_id": "r0", "started": "2024-05-01T12:00:00+00:00", "experiment": "x", "status": "ok",
            "device": {"kind": "cpu"}, **fields}


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
        append_record(rec(writer=k, i=i, pad="y" * 5000), path)


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
        append_record_once(rec(run_id=f"run{i}", writer=k), path)


def test_concurrent_appends_of_one_run_id_write_it_once(tmp_path):
    path = tmp_path / "runs.jsonl"
    _run_all(_once_writer, [(path, k) for k in range(WRITERS)])
    assert sorted(r["run_id"] for r in read_records(path)) == [f"run{i}" for i in range(5)]


def test_append_once_ignores_a_partial_line_with_the_run_id(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text('{"run_id": "abc", "experiment": "trai')  # a crash mid-line: not a record
    assert append_record_once(rec(run_id="abc", experiment="train"), path) == (path, True)
    assert append_record_once(rec(run_id="abc", experiment="train"), path) == (path, False)
    with pytest.warns(UserWarning):
        assert [r["run_id"] for r in read_records(path)] == ["abc"]


def test_broken_line_skipped_with_warning_good_records_kept(tmp_path):
    path = tmp_path / "runs.jsonl"
    append_record(rec(experiment="a"), path)
    with open(path, "a") as fh:
        fh.write('{"experiment": "half-writ')  # a crash mid-line
    append_record(rec(experiment="b"), path)  # starts on a fresh line
    with pytest.warns(UserWarning, match=r"runs.jsonl:2"):
        recs = read_records(path)
    assert [r["experiment"] for r in recs] == ["a", "b"]


def test_a_byte_order_mark_at_the_head_of_a_results_file_keeps_its_first_record(tmp_path):
    """Issue 49: a file saved by an editor that writes a UTF-8 BOM lost its first record to json's own message."""
    import warnings

    path = tmp_path / "runs.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (json.dumps(rec(experiment="a")) + "\n").encode())
    append_record(rec(experiment="b"), path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r["experiment"] for r in read_records(path)] == ["a", "b"]


def test_load_records_merges_folders(tmp_path):
    append_record(rec(device={"kind": "cpu"}), tmp_path / "m1" / "runs.jsonl")
    append_record(rec(device={"kind": "cuda"}), tmp_path / "m2" / "runs.jsonl")
    df = load_records([tmp_path])
    assert sorted(df["device.kind"]) == ["cpu", "cuda"]
    assert load_records([tmp_path / "nothing"]).empty


# --- records are checked against the schema when read (issue 23) ------------------------------------------

@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_commit_says_dirty_when_the_code_under_it_differs_from_that_commit(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                       check=True, capture_output=True)

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "code.py").write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("a\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "first")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert commit_of(pkg) == head
    (tmp_path / "notes.txt").write_text("b\n")  # outside the package: its code is still the commit's
    (pkg / "new.py").write_text("")  # untracked: not imported by the committed code
    assert commit_of(pkg) == head
    (pkg / "code.py").write_text("x = 2\n")
    assert commit_of(pkg) == head + "-dirty"
    outside = tmp_path.parent / f"{tmp_path.name}-plain"
    outside.mkdir()
    assert commit_of(outside) is None


def test_the_shipped_reference_records_pass_the_schema():
    from importlib import resources
    from pathlib import Path

    from lstmnb.record_schema import record_problem
    from lstmnb.records import scan_records

    files = sorted(Path(str(resources.files("lstmnb").joinpath("reference_records"))).glob("*.jsonl"))
    shared = Path(__file__).resolve().parents[2] / "shared" / "records"  # ../shared beside the checkout, where present
    files += sorted(shared.glob("*.jsonl")) if shared.is_dir() else []
    found = scan_records(files)
    assert found.lines >= 46 and (found.broken, found.invalid) == (0, 0)
    assert all(record_problem(r) is None for r in found.records)


@pytest.mark.parametrize("change, field", [
    ({"status": 5}, "status: 5 is not one of ok, oom, skipped, failed, diverged"),
    ({"started": 12345}, "started: 12345 is not a string"),
    ({"experiment": ["a"]}, "experiment: ['a'] is not a string"),
    ({"device": "cpu"}, "device: 'cpu' is not an object"),
    ({"status": "skipped", "reason": None}, "reason: None is not a string"),
    ({"status": "failed"}, "reason: missing"),
    ({"status": "diverged", "reason": "loss nan"}, "divergence: missing"),
    ({"epochs": [{"epoch": 1, "train_s": 1.0}]}, "timing: missing"),  # an ok training run has its timing
    ({"metrics": {"test_rmse_k": "0.5"}}, "metrics.test_rmse_k: '0.5' is not a number or null"),
])
def test_a_record_of_the_wrong_shape_is_skipped_naming_file_line_and_field(tmp_path, change, field):
    path = tmp_path / "runs.jsonl"
    for r in (rec(run_id="good"), rec(run_id="bad", **change), rec(run_id="good2")):
        with path.open("a") as fh:
            fh.write(json.dumps(r) + "\n")
    with pytest.warns(UserWarning) as caught:
        recs = read_records(path)
    assert [r["run_id"] for r in recs] == ["good", "good2"]
    (message,) = [str(w.message) for w in caught]
    assert message.startswith(f"{path}:2: skipped 1 record that fails the record schema") and field in message


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.mark.parametrize("command", [["results"], ["results", "--by", "machine"], ["bench", "cost"]])
def test_readers_tell_corrupt_from_empty_from_missing(tmp_path, capsys, command):
    """One line each: the issue's reader printed a warning, then 'run `lstmnb train` first' for a corrupt file."""
    from lstmnb import cli

    bad = _write(tmp_path / "bad.jsonl", [json.dumps(rec(status=5, started=12345)), "not json at all", "null"])
    empty = _write(tmp_path / "empty.jsonl", [])
    (tmp_path / "nothing").mkdir()
    expected = {bad: "holds no valid run record: all 3 line(s) are corrupt (2 not a JSON object, 1 failing the record schema; "
                     f"the first: {bad}:1, field status: 5 is not one of ok, oom, skipped, failed, diverged)",
                empty: "is empty: no run records yet; run `lstmnb train` first",
                tmp_path / "nothing": "holds no results file (.jsonl); run `lstmnb train` first"}
    where = " ".join(command[:2]) if command[0] == "bench" else "results"
    for target, message in expected.items():
        assert cli.main(command + [str(target)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"lstmnb {where}: error: no run records: {target} ")
        assert err.rstrip().endswith(message)
    assert "run `lstmnb train` first" not in expected[bad]  # corrupt is not 'nothing recorded yet'


def test_wrong_types_never_reach_the_tables(tmp_path, capsys):
    """The issue's file: `results` showed started 12345, experiment [a] and status 5, `--by machine` an
    'unknown host' column, and `bench cost` dropped the record without a word."""
    from lstmnb import cli

    good = new_record("train", timing={"train_s": 2.0, "wall_s": 3.0}, metrics={"test_rmse_k": 0.5},
                      epochs=[{"epoch": 1, "train_s": 2.0}])
    path = _write(tmp_path / "runs.jsonl", [json.dumps(good), json.dumps(rec(run_id="w", started=12345, experiment=["a"],
                                                                             status=5, device={"kind": 3}))])
    for command in (["results"], ["results", "--by", "machine"], ["bench", "cost"]):
        assert cli.main(command + [str(path)]) == 0
        out, err = capsys.readouterr()
        assert "12345" not in out and "['a']" not in out and "unknown host" not in out
        assert err.count("\n") == 1 and f"{path}:2: skipped 1 record that fails the record schema" in err
