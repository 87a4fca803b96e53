"""ERA5 data access: from a store (the study's real ERA5 shipped with lstmnb, the synthetic sample, Google's ARCO-ERA5 bucket, any Zarr store) to
checked, cached float32 series of points or boxes.

The modules follow the flow, each importing only those above it in this list (docs/architecture.md):

=================  ===================================================================================
``blosc_parts``    reading a few values out of a Blosc chunk without fetching or decoding all of it
``cache``          the resumable block cache of extracted series, and the store metadata kept beside it
``arco_layout``    writing, checking and building into the cache a store in the ARCO-ERA5 layout
``sample``         the embedded synthetic store (an area: boxes, region mode)
``study``          the study's real ERA5 at its two points, shipped with lstmnb (the default source)
``transport``      raw bytes of store keys: local files, or HTTP(S)/GCS with pooled connections, retries
``catalogue``      the request, the catalogue, resolving and opening a source, time and coordinate checks
``zarr_meta``      Zarr metadata (v2 and v3) read once: the store's axes and each array's chunk layout
``plan``           a request checked against a store and resolved to indices and cache targets
``readers``        the cells of one (variable, hour): raw chunk bytes or Blosc blocks, else zarr
``fetch``          the checkpointed scheduler: concurrent reads into cache blocks, resumable
``extraction``     ``extract`` (the front door), assembling the result, ``to_frame``, ``summary``
``serve``          loopback HTTP servers for tests and benchmarks (never imported by the rest)
=================  ===================================================================================

``from lstmnb import era5`` (the package's former name for this) still gives this package.
"""

from .cache import DEFAULT_BLOCK_HOURS
from .catalogue import (
    CATALOGUE,
    DEFAULT_END,
    DEFAULT_POINTS,
    DEFAULT_START,
    DEFAULT_VARIABLE,
    SAMPLE,
    STUDY,
    SOURCE_HINT,
    Request,
    StoreRef,
    check_credentials,
    check_request,
    data_kind,
    open_ref,
    open_store,
    parse_time,
    point_label,
    resolve_source,
)
from .extraction import assemble, extract, summary, to_frame
from .fetch import DEFAULT_CONCURRENCY, CacheMiss, FetchStats, fetch_plan
from .plan import Plan, Target, fit_times, make_plan, valid_range
from .transport import RetryPolicy
from .zarr_meta import StoreMeta, cached_meta, open_meta

__all__ = [
    "CATALOGUE", "DEFAULT_BLOCK_HOURS", "DEFAULT_CONCURRENCY", "DEFAULT_END", "DEFAULT_POINTS", "DEFAULT_START",
    "DEFAULT_VARIABLE", "SAMPLE", "STUDY", "SOURCE_HINT", "CacheMiss", "FetchStats", "Plan", "Request", "RetryPolicy",
    "StoreMeta", "StoreRef", "Target", "assemble", "check_credentials", "check_request", "cached_meta", "data_kind", "extract", "fetch_plan", "fit_times", "make_plan",
    "open_meta", "open_ref", "open_store", "parse_time", "point_label", "resolve_source", "summary",
    "to_frame", "valid_range",
]
