"""Shared fixtures. Every test session gets its own cache directory (LSTMNB_CACHE), so tests never
touch the user's cache and the embedded sample store is built at most once per session."""

from __future__ import annotations

import os

import pytest


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
    from lstmnb.sample import sample_store

    return sample_store()


@pytest.fixture(scope="session")
def small_store(tmp_path_factory):
    """A ten-day sample store in the ARCO layout (both variables), quick to write and read."""
    from lstmnb.sample import write_sample

    path = tmp_path_factory.mktemp("stores") / "small.zarr"
    return write_sample(path, start="2020-01-01T00", end="2020-01-10T23", lat=(41.0, 19.0), lon=(279.0, 281.0))
