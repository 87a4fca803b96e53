"""Atomic writes: a failed write leaves the old file or store untouched; leftovers are swept."""

import os

import pytest

from lstmnb.paths import atomic_path, sweep_stale_temps, temp_path, write_atomic


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = write_atomic(tmp_path / "a.json", b"old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("killed mid-write")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_directory_is_replaced_whole(tmp_path):
    target = tmp_path / "store.zarr"
    for version in ("v1", "v2"):
        with atomic_path(target) as tmp:
            tmp.mkdir()
            (tmp / "data").write_text(version)
    assert (target / "data").read_text() == "v2"
    assert [p.name for p in tmp_path.iterdir()] == ["store.zarr"]


def test_suffix_ends_the_temporary_name_and_a_killed_writers_file_is_swept(tmp_path):
    tmp = temp_path(tmp_path / "fig.png", ".png")
    assert tmp.name.endswith(".tmp.png") and tmp.name.startswith(".fig.png.")
    tmp.write_bytes(b"x")
    assert sweep_stale_temps(tmp_path) == 0  # this process is alive: its file stays
    dead = tmp.name.replace(f".{os.getpid()}-", ".999999999-")  # no such process
    tmp.rename(tmp_path / dead)
    assert sweep_stale_temps(tmp_path) == 1 and not list(tmp_path.iterdir())
