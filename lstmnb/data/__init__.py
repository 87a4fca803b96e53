"""ERA5 data access: from a store (the study's real ERA5, the synthetic sample, ARCO-ERA5, any Zarr store) to
checked, cached float32 series of points or boxes, through zarr-python 3 and xarray. The modules and their
order: docs/architecture.md. ``from lstmnb import era5`` (this package's former name) still gives it.

The names below are imported on first use (PEP 562) so that importing ``lstmnb.data.blosc_pipeline`` stays
light: zarr loads it in every process where lstmnb is installed (its entry point).
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

        globals()[name] = value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
