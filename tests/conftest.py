"""Shared fixtures. Every test session (each pytest-xdist worker's own) gets its own cache directory
(LSTMNB_CACHE), so tests never touch the user's cache and the embedded sample store is built at most once per
session. The workers' groups: XDIST_MARKER_GROUPS below."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# benchmarks/_loopback.py: the loopback HTTP servers the cloud tests and the extraction benchmark share
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    """Point LSTMNB_CACHE at a temporary folder for the whole session (sample store, extracts)."""
    old = os.environ.get("LSTMNB_CACHE")
    path = tmp_path_factory.mktemp("lstmnb-cache")
    os.environ["LSTMNB_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("LSTMNB_CACHE", None)
    else:
        os.environ["LSTMNB_CACHE"] = old


@pytest.fixture(scope="session")
def sample_store_path(_session_cache):
    """The embedded sample store (default extent), built once per session into the session cache."""
    from lstmnb.datasets.sample import sample_store

    return sample_store()


@pytest.fixture(scope="session")
def small_store(tmp_path_factory):
    """A ten-day sample store in the ARCO layout (both variables), quick to write and read."""
    from lstmnb.datasets.sample import write_sample

    path = tmp_path_factory.mktemp("stores") / "small.zarr"
    return write_sample(path, start="2020-01-01T00", end="2020-01-10T23", lat=(41.0, 19.0), lon=(279.0, 281.0))


@pytest.fixture(scope="session")
def wide_store(tmp_path_factory):
    """A two-day store 90 degrees square in 64 KB Blosc blocks (asked as 16 KB: Blosc multiplies by the
    item size when it splits blocks): each 521 KB chunk holds 8 blocks, so a point needs one of them, as
    on the public store (4 MB chunks of 512 KB blocks)."""
    from lstmnb.datasets.sample import write_sample

    path = tmp_path_factory.mktemp("stores") / "wide.zarr"
    return write_sample(path, start="2020-01-01T00", end="2020-01-02T23", lat=(80.0, -10.0), lon=(240.0, 330.0),
                        blocksize=16384)


def fake_secrets(folder: Path) -> tuple[dict[str, str], set[str]]:
    """Fake credentials (canaries, unique to this call) as environment variables, a fake service-account file
    in ``folder`` among them; returns (the variables, the canary strings that must never be written)."""
    import json
    import uuid

    tag = uuid.uuid4().hex
    canaries = {f"canary-{what}-{tag}" for what in ("aws", "token", "hf", "github", "plain", "key", "email", "id")}
    account = folder / "service-account.json"
    account.write_text(json.dumps({"type": "service_account", "client_email": f"canary-email-{tag}@x.invalid",
                                   "private_key": f"canary-key-{tag}", "private_key_id": f"canary-id-{tag}"}))
    return {"AWS_SECRET_ACCESS_KEY": f"canary-aws-{tag}", "GCS_OAUTH_TOKEN": f"canary-token-{tag}",
            "HF_TOKEN": f"canary-hf-{tag}", "GITHUB_TOKEN": f"canary-github-{tag}",
            "LSTMNB_UNRELATED_SETTING": f"canary-plain-{tag}", "GOOGLE_APPLICATION_CREDENTIALS": str(account)}, canaries


def leaks(texts: dict[str, bytes], canaries: set[str]) -> list[str]:
    """'name: canary' for each canary (``fake_secrets``) found in the bytes of ``texts`` (files, or what was printed)."""
    return [f"{name}: {c}" for name, data in texts.items() for c in canaries if c.encode() in data]


def written(*folders: Path) -> dict[str, bytes]:
    """Every file under ``folders``, by its path: their bytes, for ``leaks``."""
    return {str(p): p.read_bytes() for folder in folders for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="session")
def ci_series(tmp_path_factory):
    """Every notebook executed once with the `ci` profile, as on a machine without a GPU: the kernels see
    none (CUDA_VISIBLE_DEVICES empty), so on a GPU machine too these tests check what a laptop shows; the
    GPU notebooks on a GPU are `test_gpu.py`'s. Fake credentials are in the environment (``.canaries``,
    test_secrets.py), and the runner's lines are kept (``.said``). Run once per session: test_notebooks.py
    reads the whole series, test_notebook_render.py its site's line for 04 (which ran here with no GPU)."""
    from lstmnb import notebooks

    runs = tmp_path_factory.mktemp("runs")
    secrets, canaries = fake_secrets(tmp_path_factory.mktemp("secrets"))
    said: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        for name, value in secrets.items():
            mp.setenv(name, value)
        mp.setenv("CUDA_VISIBLE_DEVICES", "")
        mp.setenv("LSTMNB_RESULTS", str(runs / "default-results"))  # nothing written into the checkout's results/
        result = notebooks.run_series("ci", runs_dir=runs, echo=said.append, progress=False)
    result.canaries, result.said = canaries, said
    return result


def tiny_epochs_runs(input_paths: list[str]) -> list[dict]:
    """The epochs experiment of the published preset on 20 days of a small real series (window 12, hidden 4, one
    layer, split by fractions), epochs 1 and 2 on ``input_paths``, 3 alternated repeats, not recorded."""
    from test_train import _series

    from lstmnb import experiments
    from lstmnb.training import preset_config
    from lstmnb.windows import make_windows

    values, times = _series(24 * 20)
    cfg = preset_config("published", window=12, hidden=4, layers=1, epochs=1, input_path="fast", progress=False,
                        device="cpu", split_dates=None, num_workers=0)
    windows = make_windows(values, times, cfg.window_config())
    return experiments.epochs_experiment(windows, {}, cfg, [1, 2], input_paths, results=None, repeats=3)


def waiting_notebook(path: Path, seconds: int, busy: bool = True) -> None:
    """A notebook that prints "first cell done", then computes for ``seconds`` (a parameter): a series
    that is surely running when a test stops it. ``busy=False`` waits in short sleeps instead, for a test
    that waits long for something else (a core left to the other pytest-xdist worker)."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell(f"seconds = {seconds}")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# Wait"), params,
                nbformat.v4.new_code_cell("print('first cell done', flush=True)"),
                nbformat.v4.new_code_cell("import time\nend = time.monotonic() + seconds\nwhile time.monotonic() < end:\n"
                                          + ("    sum(range(10000))  # busy, as training is" if busy else "    time.sleep(0.05)"))]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def _exec_as_main(code: str, argv: list[str], environ: dict[str, str]) -> None:
    os.environ.clear()
    os.environ.update(environ)  # the caller's now, not the process server's when it started
    sys.argv = ["-c", *argv]
    exec(compile(code, "<child>", "exec"), {"__name__": "__main__"})


def run_child(code: str, *argv: str, timeout_s: float = 300) -> int:
    """The exit status of ``python -c code *argv`` (negative: killed by that signal), run in a process started as
    lstmnb starts its own (machine.processes: on Linux forked from a server that imported torch once, which takes
    milliseconds where a fresh Python takes seconds), with this process's environment."""
    import multiprocessing

    from lstmnb.machine import processes

    processes.preload("lstmnb.training")
    context = multiprocessing.get_context(processes.START_METHOD)
    child = context.Process(target=_exec_as_main, args=(code, list(argv), dict(os.environ)))
    child.start()
    child.join(timeout_s)
    if child.exitcode is None:
        child.kill()
        child.join()
        raise AssertionError(f"the child ran past {timeout_s} s and was killed")
    return child.exitcode


def write_v3(source, path, codecs: str = "blosc"):
    """Copy a store to zarr format 3 (consolidated): "blosc" as ``wide_store``, "bitshuffle" (Blosc that is
    read whole), "zstd", or "sharded"."""
    import xarray as xr
    from zarr.codecs import BloscCodec, ZstdCodec

    ds = xr.open_zarr(str(source), chunks=None)
    for v in ds.variables:
        ds[v].encoding.clear()
    one_hour = (1, ds.sizes["latitude"], ds.sizes["longitude"])
    enc = {"blosc": {"chunks": one_hour, "compressors": [BloscCodec(cname="lz4", clevel=5, shuffle="shuffle",
                                                                      blocksize=16384)]},
           "bitshuffle": {"chunks": one_hour, "compressors": [BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle",
                                                                            blocksize=16384)]},
           "zstd": {"chunks": one_hour, "compressors": [ZstdCodec()]},
           "sharded": {"chunks": one_hour, "shards": (4, *one_hour[1:])}}[codecs]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # consolidated metadata is not in the v3 spec yet
        ds.to_zarr(path, zarr_format=3, consolidated=True, encoding={v: enc for v in ds.data_vars})
    return path


# --- GCS emulator (cloud code path without the cloud) --------------------------------------------

def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GcsEmulator:
    """A running ``gcp-storage-emulator`` on loopback, with a fast uploader for local stores."""

    def __init__(self, port: int, proc):
        self.port, self.proc = port, proc
        self.url = f"http://127.0.0.1:{port}"

    def request(self, method: str, path: str, body: bytes = b"", headers: dict | None = None):
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def make_bucket(self, name: str) -> None:
        status, body = self.request("POST", "/storage/v1/b", f'{{"name": "{name}"}}'.encode(),
                                    {"Content-Type": "application/json"})
        assert status in (200, 409), body

    def upload_dir(self, local, bucket: str, prefix: str) -> int:
        """Upload every file under ``local`` as ``prefix/<relative path>`` (simple media uploads)."""
        import http.client
        from pathlib import Path
        from urllib.parse import quote

        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        n = 0
        for f in sorted(Path(local).rglob("*")):
            if f.is_file():
                name = quote(f"{prefix}/{f.relative_to(local).as_posix()}", safe="")
                conn.request("POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}",
                             body=f.read_bytes(), headers={"Content-Type": "application/octet-stream"})
                resp = conn.getresponse()
                resp.read()
                assert resp.status == 200, (f, resp.status)
                n += 1
        conn.close()
        return n


@pytest.fixture(scope="session")
def gcs_emulator():
    """Start gcp-storage-emulator (in memory) on a loopback port and point gcsfs at it for the session."""
    import shutil
    import socket
    import subprocess
    import time

    # on PATH, or beside this Python (a venv's tools when its python is run without activating it)
    exe = shutil.which("gcp-storage-emulator") or shutil.which("gcp-storage-emulator", path=os.path.dirname(sys.executable))
    if exe is None:
        pytest.skip("gcp-storage-emulator is not installed (pip install '.[test]')")
    port = _free_port()
    proc = subprocess.Popen([exe, "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("gcp-storage-emulator did not start")
            time.sleep(0.1)
    saved = {"STORAGE_EMULATOR_HOST": os.environ.get("STORAGE_EMULATOR_HOST")}
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
    try:
        yield GcsEmulator(port, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def cloud_store(gcs_emulator, tmp_path_factory):
    """(gs:// URL, local path) of the same three-day ARCO-layout store, uploaded to the emulator."""
    from lstmnb.datasets.sample import write_sample

    local = write_sample(tmp_path_factory.mktemp("cloud") / "era5.zarr", start="2020-01-01T00",
                         end="2020-01-03T23", lat=(41.0, 19.0), lon=(279.5, 280.5))
    gcs_emulator.make_bucket("lstmnb-test")
    gcs_emulator.upload_dir(local, "lstmnb-test", "ar/era5.zarr")
    return "gs://lstmnb-test/ar/era5.zarr", local


# pytest-xdist (pyproject's addopts: -n 2 --dist loadgroup) runs tests on two worker processes, each with its own
# session: its own LSTMNB_CACHE and temporary folders, its own session fixtures, loopback ports of its own. Tests
# that must not run beside each other, or that share an expensive fixture (set up once per worker that runs its
# users), get one xdist_group, and one worker runs each group's tests in turn:
XDIST_MARKER_GROUPS = {  # marker -> group
    "slurm": "local SLURM clusters (carc/local_slurm.sh) share one bridge and network for their nodes",
    "gpu": "one GPU: a test's memory caps and timings must not see another test's work on it",
}
XDIST_FIXTURE_GROUPS = {  # session fixture -> group
    "ci_series": "ci_series",      # the whole notebook series (about 3 minutes), executed once
    "gcs_emulator": "gcs",         # the GCS emulator and the store uploaded to it
    "cloud_store": "gcs",
}
# module-scoped fixtures that train or extract for many seconds: their users run on one worker, grouped by module
XDIST_MODULE_FIXTURES = {
    "test_skill_defaults": "runs", "test_ladder": "cpu_ladder", "test_faults": "uninterrupted",
    "test_sample": "column", "test_report_conclusions": "runs",
    "test_report_timing_quality": "runs", "test_report_page": "own", "test_report_findings": "own_records",
    "test_region_grid": "small_box", "test_region_skill": "small_box",
}


def _xdist_group(item) -> str | None:
    """A test's one group: by marker, else by session fixture, else by module-scoped fixture."""
    for marker in XDIST_MARKER_GROUPS:
        if item.get_closest_marker(marker) is not None:
            return marker
    for fixture, group in XDIST_FIXTURE_GROUPS.items():
        if fixture in item.fixturenames:
            return group
    module = item.module.__name__
    return module if XDIST_MODULE_FIXTURES.get(module) in item.fixturenames else None


def pytest_itemcollected(item):
    """Each test's xdist group (above), as a marker, and as the suffix ``@group`` of its node id, which is what
    xdist's scheduler reads. xdist 3.8 writes that suffix into ``item._nodeid``, which pytest 9.2 no longer reads
    (its node ids are structured: pytest-xdist issue 1386, open): without this, groups are silently ignored."""
    group = _xdist_group(item)
    if group is None:
        return
    item.add_marker(pytest.mark.xdist_group(group))
    if getattr(item.config.option, "loadgroup", False) and hasattr(item, "_id"):  # in a worker, with loadgroup
        from _pytest.nodeid import coerce_node_id

        item._id = coerce_node_id(f"{item.nodeid}@{group}")


def pytest_collection_modifyitems(config, items):
    """`gpu` tests run real CUDA where a GPU is; elsewhere they are skipped with the reason."""
    # the marker, not the keyword: keywords hold every parent's name, so a checkout in a folder called
    # "gpu" would make every test a gpu test
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    from lstmnb.machine.device import no_cuda_reason

    skip = pytest.mark.skip(reason=f"gpu test: {no_cuda_reason()}")
    for item in gpu_items:
        item.add_marker(skip)
