"""Reading the requested cells of one (variable, hour) from a store: ``RawReader`` straight from chunk
bytes (whole chunks, or only the Blosc blocks that hold the cells), ``ZarrReader`` through zarr for
layouts the raw path does not handle; ``make_reader`` picks the fastest that fits the store.
"""

from __future__ import annotations

import numpy as np

from ..errors import DataError
from . import blosc_parts
from .plan import Plan
from .transport import ChunkError, ChunkSource
from .zarr_meta import ArrayMeta, array_metas

_HEAD_BYTES = 4096  # first range of a partial read: the header and a table of up to 1020 blocks
_WHOLE_SHARE = 0.5  # when the needed blocks hold more of a chunk than this, read chunks whole


def _cells(plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of every grid cell some target needs (each once)."""
    rows, cols = [], []
    for t in plan.targets:
        if plan.kind == "points":
            rows.append(np.asarray(t.rows[:1]))
            cols.append(np.asarray(t.cols[:1]))
        else:
            r, c = np.meshgrid(np.asarray(t.rows), np.asarray(t.cols), indexing="ij")
            rows.append(r.ravel())
            cols.append(c.ravel())
    cells = np.unique(np.stack([np.concatenate(rows), np.concatenate(cols)], axis=1), axis=0)
    return cells[:, 0].astype(np.int64), cells[:, 1].astype(np.int64)


def _box(plan: Plan) -> tuple[int, int, int, int]:
    """(r0, r1, c0, c1): the smallest box of rows r0..r1-1 and columns c0..c1-1 holding every target's
    cells; a reader reads it for each (variable, hour)."""
    rows, cols = plan.rows, plan.cols
    return int(rows.min()), int(rows.max()) + 1, int(cols.min()), int(cols.max()) + 1


def _partial_ok(m: ArrayMeta) -> bool:
    """Whether chunks of this array can be read in parts (Blosc with a codec blosc_parts decodes)."""
    import numcodecs

    c = m.compressor
    return isinstance(c, numcodecs.Blosc) and not m.filters and blosc_parts.readable(c.cname, c.shuffle)


class RawReader:
    """Reads the requested cells of one (variable, hour) straight from chunk bytes, as a box.

    For zarr stores (format 2, or 3 without sharding) with one time step per chunk (ARCO-ERA5's
    layout). Chunk bytes are fetched by
    ``ChunkSource`` (concurrent, retried). When the cells are a small part of a Blosc chunk (point
    series), only the header and the blocks that hold them are fetched and decoded (``blosc_parts``);
    otherwise the chunk is fetched whole and decoded once for every cell. Box entries that are not
    requested cells may be left unset (two points far apart span a large box; filling it every hour
    would cost more than reading their blocks). ``partial_reads=False`` reads every chunk whole (the
    extraction benchmark shows what reading only the blocks gains).
    """

    def __init__(self, plan: Plan, source: ChunkSource, metas: dict[str, ArrayMeta], partial_reads: bool = True):
        self.r0, self.r1, self.c0, self.c1 = _box(plan)
        self.source = source
        self.metas = metas
        self.cell_rows, self.cell_cols = _cells(plan)
        self.whole: set[str] = {v for v, m in metas.items() if not (partial_reads and _partial_ok(m))}
        self._in_chunk: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    @property
    def bytes_read(self) -> int:
        return self.source.bytes_read

    async def read(self, variable: str, t: int) -> np.ndarray:
        """The box of ``variable`` at hour index ``t`` (a coroutine on the source's loop)."""
        m = self.metas[variable]
        cy, cx = m.chunks[1], m.chunks[2]
        out = np.empty((self.r1 - self.r0, self.c1 - self.c0), dtype=np.float32)  # cells are all set
        for jy in range(self.r0 // cy, (self.r1 - 1) // cy + 1):
            for jx in range(self.c0 // cx, (self.c1 - 1) // cx + 1):
                key = m.key(variable, t, jy, jx)
                rows, cols, flat = self._cells_in(m, jy, jx)
                if not rows.size:
                    continue
                if variable not in self.whole and rows.size * 2 < cy * cx:
                    out[rows + jy * cy - self.r0, cols + jx * cx - self.c0] = \
                        await self._read_cells(variable, key, m, flat)
                    continue
                block = self._decode(m, await self.source.aget(key))
                ya, yb = max(self.r0, jy * cy), min(self.r1, (jy + 1) * cy)
                xa, xb = max(self.c0, jx * cx), min(self.c1, (jx + 1) * cx)
                out[ya - self.r0:yb - self.r0, xa - self.c0:xb - self.c0] = \
                    block[ya - jy * cy:yb - jy * cy, xa - jx * cx:xb - jx * cx]
        return out

    def _cells_in(self, m: ArrayMeta, jy: int, jx: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Requested cells in chunk (jy, jx): rows and columns within it, and positions in its order."""
        cy, cx = m.chunks[1], m.chunks[2]
        key = (cy, cx, m.order, jy, jx)
        if key not in self._in_chunk:  # only the loop thread reads: no lock needed
            inside = (self.cell_rows // cy == jy) & (self.cell_cols // cx == jx)
            rows, cols = self.cell_rows[inside] - jy * cy, self.cell_cols[inside] - jx * cx
            self._in_chunk[key] = (rows, cols, rows * cx + cols if m.order == "C" else cols * cy + rows)
        return self._in_chunk[key]

    @staticmethod
    def _decode(m: ArrayMeta, raw: bytes | None, flat: np.ndarray | None = None) -> np.ndarray:
        """A whole chunk as a (rows, cols) array, or its values at positions ``flat`` (in the chunk's
        order); the fill value when the chunk does not exist."""
        cy, cx = m.chunks[1], m.chunks[2]
        if raw is None:
            return np.full((cy, cx) if flat is None else flat.size, m.fill, dtype=np.float32)
        if getattr(m.compressor, "codec_id", None) == "blosc":
            # c-blosc trusts the header's size and reads past a cut-off buffer: check it first
            cbytes = int.from_bytes(raw[12:16], "little") if len(raw) >= blosc_parts.HEADER else None
            if cbytes != len(raw):
                raise ValueError(f"Blosc chunk of {len(raw)} bytes whose header says {cbytes}: cut short or damaged")
        data = m.compressor.decode(raw) if m.compressor is not None else raw
        for f in reversed(m.filters):
            data = f.decode(data)
        values = np.frombuffer(data, dtype=m.dtype)
        return values.reshape((cy, cx), order=m.order) if flat is None else values[flat]

    async def _read_cells(self, variable: str, key: str, m: ArrayMeta, flat: np.ndarray) -> np.ndarray:
        """Values at chunk positions ``flat``, read through the Blosc blocks that hold them."""
        head_raw = await self.source.aget(key, byte_range=(0, _HEAD_BYTES))
        if head_raw is None:
            return self._decode(m, None, flat)
        itemsize = m.dtype.itemsize
        try:
            head = blosc_parts.parse_header(head_raw)
            if head.nbytes != m.chunks[1] * m.chunks[2] * itemsize:
                raise ValueError("Blosc header does not match the array's chunk size")
            if len(head_raw) >= head.cbytes:  # a small chunk came whole with the header
                return self._decode(m, head_raw[:head.cbytes], flat)
            if len(head_raw) < head.table_end:  # more blocks than the first range covered
                head_raw += await self.source.aget(key, byte_range=(len(head_raw), head.table_end)) or b""
            starts, stops = blosc_parts.block_extents(head, head_raw)
            offsets = flat * itemsize
            blocks = blosc_parts.blocks_holding(head, offsets, itemsize)
        except ValueError:
            return self._decode(m, await self.source.aget(key), flat)
        if (stops[blocks] - starts[blocks]).sum() > _WHOLE_SHARE * head.cbytes:
            self.whole.add(variable)  # later chunks of this array: one whole read, no header round trip
            rest = await self.source.aget(key, byte_range=(len(head_raw), head.cbytes)) or b""
            return self._decode(m, head_raw + rest, flat)
        ranges = blosc_parts.byte_ranges(starts, stops, blocks)
        fetch = [r for r in ranges if r[1] > len(head_raw)]
        got = dict(zip(fetch, await self.source.aget_many([key] * len(fetch), byte_ranges=fetch)))
        try:
            comps = {}
            for a, b in ranges:
                data = head_raw[a:b] if b <= len(head_raw) else got[(a, b)]
                if data is None or len(data) != b - a:
                    raise ValueError("chunk changed while it was read")
                for k in blocks[(starts[blocks] >= a) & (stops[blocks] <= b)]:
                    comps[int(k)] = data[starts[k] - a:stops[k] - a]
            return blosc_parts.gather(head, comps, offsets, m.dtype)
        except ValueError:
            return self._decode(m, await self.source.aget(key), flat)


class ZarrReader:
    """Fallback for layouts the raw path does not handle (sharded zarr v3, several hours per chunk, other
    codecs): zarr reads."""

    def __init__(self, plan: Plan):
        import zarr

        ref = plan.ref
        if ref.remote:
            self.group = zarr.open_group(ref.url, mode="r", storage_options=ref.storage_options or None)
        else:
            self.group = zarr.open_group(ref.url, mode="r")
        self.r0, self.r1, self.c0, self.c1 = _box(plan)
        self.arrays = {v: self.group[v] for v in plan.variables}
        self.bytes_read = 0

    def read(self, variable: str, t: int) -> np.ndarray:
        return np.asarray(self.arrays[variable][t, self.r0:self.r1, self.c0:self.c1])


def make_reader(plan: Plan, source: ChunkSource, zmetadata: dict | None = None, *, partial_reads: bool = True
                ) -> RawReader | ZarrReader:
    """The fastest reader that handles this store: raw chunk bytes through ``source`` when possible,
    else zarr. ``partial_reads``: read only the Blosc blocks that hold the cells (see ``RawReader``).

    ``zmetadata`` (the store's consolidated metadata: v2's ``.zmetadata`` contents or v3's root
    ``zarr.json``), when the caller already has it from opening the store, is reused: no second
    metadata read.
    """
    try:
        metas = array_metas(plan.variables, source, zmetadata)
        if metas is not None:
            source.bytes_read = source.requests = 0  # from here on: chunk reads only
            return RawReader(plan, source, metas, partial_reads)
    except ChunkError as exc:
        raise DataError(f"cannot read {plan.ref.url}/.zmetadata: {exc}; check the network or use --source sample") from None
    except (ValueError, KeyError, TypeError):
        pass
    return ZarrReader(plan)
