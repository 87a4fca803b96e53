"""What differs on macOS and Windows beyond what tests/test_portable.py takes away, each simulated on Linux:
the loopback interface's name and Windows' TCPStore for local DDP ranks, the CPU memory cap (Linux only),
output to a console or pipe whose encoding is not UTF-8, and the byte a results writer locks on Windows."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import psutil
import pytest

from lstmnb.training.parallel import groups


def _addr(family, address):
    return SimpleNamespace(family=family, address=address, netmask=None, broadcast=None, ptp=None)


MACOS_INTERFACES = {"en0": [_addr(socket.AF_INET, "192.168.1.7")],
                    "lo0": [_addr(socket.AF_INET6, "::1"), _addr(socket.AF_INET, "127.0.0.1")]}


def test_local_ranks_use_the_loopback_interface_by_its_own_name(monkeypatch):
    """gloo finds the interface GLOO_SOCKET_IFNAME names, or fails ('Unable to find address for: lo'):
    macOS calls its loopback lo0, Linux lo."""
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: MACOS_INTERFACES)
    assert groups.local_rendezvous_environment() == {"GLOO_SOCKET_IFNAME": "lo0"}
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: {"en0": MACOS_INTERFACES["en0"]})
    assert groups.local_rendezvous_environment() == {}  # no loopback found: gloo's own choice


def test_local_ranks_on_windows_take_tcpstore_without_libuv_and_gloos_own_interface(monkeypatch):
    """torch 2.4 and 2.5 default TCPStore to libuv, which their Windows builds lack."""
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: pytest.fail("not asked on Windows"))
    assert groups.local_rendezvous_environment() == {"USE_LIBUV": "0"}


@pytest.mark.parametrize("encoding", ["cp932", "ascii"])
def test_commands_print_through_a_stream_that_lacks_their_characters(encoding):
    """`lstmnb notebooks list` prints the notebooks' headings ('Data access \u00b7 ...'), `lstmnb results` its
    tables' em dashes: on a Windows pipe in the Japanese code page (or an ASCII locale) each raised
    UnicodeEncodeError with a traceback; now the character the stream lacks prints as '?'."""
    env = dict(os.environ, PYTHONIOENCODING=encoding)
    out = subprocess.run([sys.executable, "-m", "lstmnb", "notebooks", "list"], env=env, capture_output=True,
                         timeout=300)
    assert out.returncode == 0 and b"Traceback" not in out.stderr, out.stderr.decode(errors="replace")[-2000:]
    assert b"01_data_access" in out.stdout and b"?" in out.stdout


@pytest.mark.parametrize("system", ["darwin", "win32"])
def test_a_cpu_memory_cap_off_linux_is_one_line_before_any_point(monkeypatch, system):
    """The cap is RLIMIT_DATA over the process's VmData now: on macOS (no VmData) the limit was the cap alone,
    on Windows there is no such limit; both are refused before a point's process starts."""
    from lstmnb import experiments
    from lstmnb.errors import ConfigError
    from lstmnb.training import TrainConfig
    from lstmnb.windows import make_windows

    def no_point(*args, **kwargs):
        pytest.fail("a capped point started")

    monkeypatch.setattr(experiments.sweep, "_capped_point", no_point)
    monkeypatch.setattr(sys, "platform", system)
    cfg = TrainConfig(device="cpu", hidden=8, window=24, epochs=1, progress=False)
    hours = np.arange(24 * 40)
    values = 280 + 8 * np.sin(2 * np.pi * hours / 24)
    windows = make_windows(values, pd.date_range("2020-01-01", periods=hours.size, freq="h"), cfg.window_config())
    with pytest.raises(ConfigError, match=r"memory_cap_mb on cpu needs Linux .*; not on "):
        experiments.batch_sweep(windows, cfg, experiments.SweepConfig(start=32, memory_cap_mb=48))


def test_a_results_writer_on_windows_locks_a_byte_no_reader_reads(tmp_path, monkeypatch):
    """Windows' byte locks stop other processes' reads too: a writer that locked the first record's first byte
    made a reader of the results file (notebook 06, `lstmnb results`) fail with PermissionError meanwhile. The
    lock is taken and released far past the records, and the file position is kept."""
    import types

    from lstmnb import paths

    calls = []
    fake = types.SimpleNamespace(LK_LOCK=1, LK_UNLCK=0,
                                 locking=lambda fd, mode, n: calls.append((mode, os.lseek(fd, 0, os.SEEK_CUR), n)))
    monkeypatch.setitem(sys.modules, "msvcrt", fake)
    # Windows as paths.py sees it (the whole process's os.name would turn pytest's own paths into WindowsPath)
    monkeypatch.setattr(paths, "os", types.SimpleNamespace(name="nt", lseek=os.lseek, SEEK_SET=os.SEEK_SET,
                                                           SEEK_CUR=os.SEEK_CUR))
    runs = tmp_path / "runs.jsonl"
    fd = os.open(runs, os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, b"x" * 10)
        os.lseek(fd, 3, os.SEEK_SET)
        with paths.locked(fd):
            assert os.lseek(fd, 0, os.SEEK_CUR) == 3
        assert os.lseek(fd, 0, os.SEEK_CUR) == 3
    finally:
        os.close(fd)
    assert calls == [(1, paths._LOCK_BYTE, 1), (0, paths._LOCK_BYTE, 1)]
    assert paths._LOCK_BYTE > 2**30 and runs.stat().st_size == 10  # the lock never grew the file


@pytest.fixture
def fresh_cpu_model():
    from lstmnb.machine import device

    device.cpu_model.cache_clear()
    yield device.cpu_model
    device.cpu_model.cache_clear()


@pytest.mark.skipif(os.name == "nt", reason="the stand-in sysctl is a shell script")
def test_the_cpu_is_named_on_macos_by_sysctl(tmp_path, monkeypatch, fresh_cpu_model):
    """Records from a Mac said 'arm' (platform.processor()) where the chip has a name."""
    sysctl = tmp_path / "sysctl"
    sysctl.write_text('#!/bin/sh\n[ "$2" = machdep.cpu.brand_string ] && echo "Apple M2 Pro" && exit 0\nexit 1\n')
    sysctl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(sys, "platform", "darwin")
    assert fresh_cpu_model() == "Apple M2 Pro"
    sysctl.write_text("#!/bin/sh\nexit 1\n")  # no such key (or no sysctl): the platform's own string
    fresh_cpu_model.cache_clear()
    import platform

    assert fresh_cpu_model() == (platform.processor() or platform.machine())


def test_the_cpu_is_named_on_windows_by_the_registry(monkeypatch, fresh_cpu_model):
    """Windows' platform.processor() gives a family code ('Intel64 Family 6 Model 158 ...'), not the name."""
    import contextlib
    import types

    asked = []

    @contextlib.contextmanager
    def open_key(root, path):
        asked.append((root, path))
        yield "key"

    fake = types.SimpleNamespace(HKEY_LOCAL_MACHINE="HKLM", OpenKey=open_key,
                                 QueryValueEx=lambda key, name: ("Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz  ", 1))
    monkeypatch.setitem(sys.modules, "winreg", fake)
    monkeypatch.setattr(sys, "platform", "win32")
    assert fresh_cpu_model() == "Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz"
    assert asked == [("HKLM", r"HARDWARE\DESCRIPTION\System\CentralProcessor\0")]
