"""ERA5 data access: from a store (the study's real ERA5 shipped with lstmnb and the synthetic sample, both
built by ``lstmnb.datasets``; Google's ARCO-ERA5 bucket; any Zarr store) to checked, cached float32 series of
points or boxes, read through zarr-python 3 and xarray.

The modules follow the flow, each importing only those above it in this list (docs/architecture.md):

=================  ===================================================================================
``blosc_parts``    reading a few values out of a Blosc chunk without fetching or decoding all of it
``blosc_pipeline`` those partial reads as a zarr codec pipeline (usable from plain xarray: one line)
``stores``         the zarr store of a source (local, gcsfs, fsspec HTTP): one-round-trip opening, retries
``catalogue``      the request, the catalogue, resolving and opening a source, time and coordinate checks
``cache``          the resumable block cache, the store metadata kept beside it, what is cached
``plan``           a request checked against a store and resolved to indices and cache targets
``reads``          the cells of one variable over a run of hours, read through zarr
``fetch``          the checkpointed scheduler: concurrent reads into cache blocks, resumable
``extraction``     ``extract`` (the front door), assembling the result, ``to_frame``, ``summary``
=================  ===================================================================================

``from lstmnb import era5`` (the package's former name for this) still gives this package.

The names below are imported on first use (PEP 562), so that importing ``lstmnb.data.blosc_pipeline`` stays
light: zarr loads that module in every process of an environment where lstmnb is installed (its entry
point), and a plain zarr user should not pay for xarray, pandas and the rest of this package.
"""

_EXPORTS = {
    "cache": ("DEFAULT_BLOCK_HOURS", "StoreMeta", "cached_meta"),
    "catalogue": ("CATALOGUE", "DEFAULT_END", "DEFAULT_POINTS", "DEFAULT_START", "DEFAULT_VARIABLE", "SAMPLE",
                  "STUDY", "SOURCE_HINT", "Request", "StoreRef", "check_credentials", "check_request", "data_kind",
                  "open_ref", "open_store", "parse_time", "point_label", "resolve_source"),
    "extraction": ("assemble", "extract", "summary", "to_frame"),
    "fetch": ("DEFAULT_CONCURRENCY", "CacheMiss", "FetchStats", "fetch_plan"),
    "plan": ("Plan", "Target", "fit_times", "make_plan", "valid_range"),
    "stores": ("RetryPolicy",),
}
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    """A name of ``__all__``, imported from its module when first asked for."""
    if name in _HOME:
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
