"""The cells of one variable over a run of hours, read through zarr: what the fetch scheduler asks for.

``CellReader`` opens the plan's arrays with zarr-python 3's asynchronous API on the extraction's store
(``stores.ReadStore``) and lstmnb's partial-Blosc codec pipeline (``blosc_pipeline``, unless whole chunks were
asked for), and reads points by coordinate selection, a box by orthogonal selection. Store layouts (zarr v2 or v3,
Blosc or other codecs, sharding, several hours per chunk, missing chunks as the fill value) are zarr's business;
the pipeline only picks which bytes of a chunk to fetch. Values are then decoded as xarray decodes them, from the
Dataset's encoding (``_FillValue`` and ``missing_value`` to NaN, ``scale_factor``/``add_offset`` applied).
"""

from __future__ import annotations

import numpy as np
import xarray as xr
import zarr

from .blosc_pipeline import PATH, WHOLE_PATH
from .plan import Plan
from .stores import ReadStore, run


class CellReader:
    """Reads the plan's cells as a coroutine on zarr's event loop: per hour one value per target (in target order)
    for points, the box's (rows, columns) array for a box. ``partial_reads=False`` opens the arrays with
    ``WholeChunksPipeline``, which reads every chunk whole as zarr's default does."""

    def __init__(self, plan: Plan, store: ReadStore, partial_reads: bool = True):
        self.store, self.kind = store, plan.kind

        async def open_arrays():
            group = await zarr.api.asynchronous.open_group(store=store, mode="r")
            return {v: await group.getitem(v) for v in plan.variables}

        with zarr.config.set({"codec_pipeline.path": PATH if partial_reads else WHOLE_PATH}):  # read at opening
            self.arrays = run(open_arrays())
        self.decode = {v: _mask_and_scale(plan.cf.get(v)) for v in plan.variables}
        if plan.kind == "points":
            self.rows = np.array([t.rows[0] for t in plan.targets], dtype=np.int64)
            self.cols = np.array([t.cols[0] for t in plan.targets], dtype=np.int64)
        else:
            self.rows, self.cols = _as_slice(plan.targets[0].rows), _as_slice(plan.targets[0].cols)

    async def read(self, variable: str, t0: int, t1: int) -> np.ndarray:
        """Hours ``t0 .. t1-1``: (hours, targets) for points, (hours, rows, columns) for a box."""
        array = self.arrays[variable]
        if self.kind == "points":
            n = self.rows.size
            hours = np.repeat(np.arange(t0, t1, dtype=np.int64), n)
            selection = (hours, np.tile(self.rows, t1 - t0), np.tile(self.cols, t1 - t0))
            values = np.asarray(await array.get_coordinate_selection(selection)).reshape(t1 - t0, n)
        else:
            values = await array.get_orthogonal_selection((slice(t0, t1), self.rows, self.cols))
        decode = self.decode[variable]
        return np.asarray(values if decode is None else decode(np.asarray(values)), dtype=np.float32)


def _mask_and_scale(cf: dict | None):
    """xarray's CF decoding of raw values with ``cf`` (a variable's ``CF_KEYS`` as xarray's encoding holds
    them), as a function; None where it changes nothing (no packing, and a NaN fill value or none, as in ARCO-ERA5)."""
    cf = dict(cf or {})
    fills = [np.asarray(v, dtype=np.float64).ravel() for k, v in cf.items() if k in ("_FillValue", "missing_value")]
    if len(fills) == len(cf) and (not fills or np.isnan(np.concatenate(fills)).all()):
        return None
    def decode(values: np.ndarray) -> np.ndarray:
        var = xr.Variable(tuple(f"d{i}" for i in range(values.ndim)), values, attrs=dict(cf))
        return np.asarray(xr.conventions.decode_cf_variable("v", var, decode_times=False, decode_timedelta=False).values)

    return decode


def _as_slice(index: tuple[int, ...]) -> slice | np.ndarray:
    """A run of consecutive indices as a slice (zarr selects it faster), anything else as it is (a box
    across the 0 meridian: the eastern columns, then the western)."""
    values = np.asarray(index, dtype=np.int64)
    if values.size and np.array_equal(values, np.arange(values[0], values[0] + values.size)):
        return slice(int(values[0]), int(values[-1]) + 1)
    return values
