"""Partial Blosc reads as a zarr-python 3 codec pipeline: a point read fetches only the Blosc blocks that hold it
(``blosc_parts`` says why that is a quarter of an ARCO-ERA5 chunk). ``BloscBlocksPipeline`` asks the store for the
chunk's header (one small byte range), then for the byte ranges of the blocks that hold the selection, and decodes
those alone. A selection covering much of a chunk, a chunk that is not Blosc (or not in a form ``blosc_parts``
reads), and every write go the default way (``BatchedCodecPipeline``), so results are exactly zarr's.

zarr chooses a codec pipeline class when it opens an array, from its ``codec_pipeline.path`` setting; lstmnb
registers this class under the ``zarr.codec_pipeline`` entry point, so plain xarray uses it after one line::

    zarr.config.set({"codec_pipeline.path": "lstmnb.data.blosc_pipeline.BloscBlocksPipeline"})
    ds = xr.open_zarr("gs://gcp-public-data-arco-era5/ar/...", chunks=None)  # then select points

``BatchedCodecPipeline`` lives in ``zarr.core`` (not zarr's public API): pyproject pins zarr's minor version (3.1)
for it, and for ``read``'s batch-item layout (byte getter, chunk spec, chunk selection, output selection, whether
the chunk is complete) that this class reads.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from functools import lru_cache

import numcodecs.blosc
import numpy as np
from zarr.abc.store import RangeByteRequest
from zarr.codecs import BloscCodec, BytesCodec
from zarr.codecs._v2 import V2Codec
from zarr.core.codec_pipeline import BatchedCodecPipeline, fill_value_or_default
from zarr.registry import register_pipeline

from . import blosc_parts

PATH = "lstmnb.data.blosc_pipeline.BloscBlocksPipeline"  # the value of zarr's codec_pipeline.path
WHOLE_PATH = "lstmnb.data.blosc_pipeline.WholeChunksPipeline"  # every chunk read whole (partial_reads=False)
HEAD_BYTES = 4096  # the first range of a partial read: the header and a table of up to 1020 blocks
WHOLE_SHARE = 0.5  # when a selection's blocks hold more of a chunk than this, read the chunk whole
MAX_CELLS = 1 << 24  # chunks up to this many items are read in parts (their position grid: 8 bytes per item)
SMALL_CHUNK = 65536  # encoded bytes up to which a chunk is decoded on the event loop (see decode_batch)


@lru_cache(maxsize=8)
def _positions(shape: tuple[int, ...]) -> np.ndarray:
    """Each element's flat position in a C-order chunk of ``shape`` (read-only; indexed by a selection)."""
    grid = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    grid.flags.writeable = False
    return grid


@dataclass(frozen=True)
class BloscBlocksPipeline(BatchedCodecPipeline):
    """zarr's default pipeline, except that reads of a small part of a Blosc chunk fetch only its blocks."""

    @property
    def _blosc(self) -> tuple[str, int] | None:
        """Blosc's (codec name, shuffle) in numcodecs' terms where chunks are plain C-order items compressed
        by Blosc alone (zarr v2 or v3 metadata), else None."""
        codec, after = self.array_bytes_codec, self.bytes_bytes_codecs
        if self.array_array_codecs:
            return None
        if isinstance(codec, V2Codec):  # zarr v2: numcodecs' compressor, no filters
            blosc = codec.compressor
            plain = not after and not codec.filters and getattr(blosc, "codec_id", None) == "blosc"
            return (blosc.cname, blosc.shuffle) if plain else None
        little = isinstance(codec, BytesCodec) and getattr(codec.endian, "value", codec.endian) in (None, "little")
        if not (little and len(after) == 1 and isinstance(after[0], BloscCodec)):
            return None
        cname, shuffle = (getattr(v, "value", v) for v in (after[0].cname, after[0].shuffle))
        return cname, blosc_parts.BITSHUFFLE if shuffle == "bitshuffle" else 1

    @property
    def _in_parts(self) -> bool:
        """Whether chunks can be read in parts: Blosc with a codec and shuffle ``blosc_parts`` decodes (each chunk's
        header is checked again)."""
        blosc = None if getattr(self, "_whole", False) else self._blosc
        return blosc is not None and blosc_parts.readable(*blosc)

    async def read(self, batch_info, out, drop_axes: tuple[int, ...] = ()) -> None:
        in_parts = self._in_parts
        jobs, rest = [], []
        for item in batch_info:
            _, spec, chunk_selection, _, complete = item
            cells = math.prod(spec.shape)
            if (in_parts and not complete and cells <= MAX_CELLS and spec.order == "C"
                    and spec.dtype.to_native_dtype().byteorder != ">"):
                flat = _positions(tuple(spec.shape))[chunk_selection]
                if flat.size * 2 < cells:
                    jobs.append(self._read_blocks(item, flat, out, drop_axes))
                    continue
            rest.append(item)
        if rest:
            jobs.append(super().read(rest, out, drop_axes))
        await asyncio.gather(*jobs)

    async def _read_blocks(self, item, flat: np.ndarray, out, drop_axes: tuple[int, ...]) -> None:
        """Fill ``out`` for one chunk from the Blosc blocks that hold positions ``flat`` of it."""
        getter, spec, chunk_selection, out_selection, _ = item
        proto, dtype = spec.prototype, spec.dtype.to_native_dtype()
        head = await getter.get(proto, byte_range=RangeByteRequest(0, HEAD_BYTES))
        if head is None:
            out[out_selection] = fill_value_or_default(spec)
            return
        raw = head.to_bytes()
        values = None
        try:
            header = blosc_parts.parse_header(raw)
            if header.nbytes != int(np.prod(spec.shape)) * dtype.itemsize:
                raise ValueError("Blosc header does not match the array's chunk size")
            if len(raw) >= header.cbytes:  # a small chunk (or a server ignoring Range) sent it whole
                raw = raw[:header.cbytes]
            else:
                if len(raw) < header.table_end:  # more blocks than the first range covered
                    raw += (await self._range(getter, proto, len(raw), header.table_end)).tobytes()
                starts, stops = blosc_parts.block_extents(header, raw)
                offsets = flat.ravel() * dtype.itemsize
                blocks = blosc_parts.blocks_holding(header, offsets, dtype.itemsize)
                if (stops[blocks] - starts[blocks]).sum() > WHOLE_SHARE * header.cbytes:
                    object.__setattr__(self, "_whole", True)  # later reads of this array: whole, no header first
                    raw += (await self._range(getter, proto, len(raw), header.cbytes)).tobytes()
                else:
                    values = await self._gather(getter, proto, header, raw, starts, stops, blocks, offsets, dtype)
        except ValueError:  # not readable in parts after all (or changed meanwhile): this chunk and the rest whole
            object.__setattr__(self, "_whole", True)
            whole = await getter.get(proto)
            raw = whole.to_bytes() if whole is not None else b""
        if values is None:  # decode the whole chunk the default way, then select
            (chunk,) = await self.decode_batch([(proto.buffer.from_bytes(raw), spec)])
            values = chunk.as_numpy_array()[chunk_selection]
        else:
            values = values.reshape(flat.shape)
        if drop_axes:
            values = values.squeeze(axis=drop_axes)
        out[out_selection] = values

    async def decode_batch(self, chunk_bytes_and_specs):
        """zarr's decoding, after checking each Blosc chunk's length against its header (``stated_size``). Small
        chunks are decoded right here: zarr decodes each chunk in a worker thread, and for the study's store (13,128
        chunks of 8 bytes) the hops cost more than the decoding."""
        batch = list(chunk_bytes_and_specs)
        if self._blosc is None:
            return await super().decode_batch(batch)
        out: list = [None] * len(batch)
        rest = []
        for i, (raw, spec) in enumerate(batch):
            if raw is None:
                rest.append(i)
                continue
            data = raw.as_numpy_array()
            if blosc_parts.stated_size(data) != len(data):
                raise ValueError(f"Blosc chunk of {len(data)} bytes whose header says otherwise: cut short or damaged")
            dtype = spec.dtype.to_native_dtype()
            if len(data) <= SMALL_CHUNK and spec.order == "C" and dtype.byteorder != ">":
                values = np.frombuffer(numcodecs.blosc.decompress(data), dtype=dtype).reshape(spec.shape)
                out[i] = spec.prototype.nd_buffer.from_numpy_array(values)
            else:
                rest.append(i)
        if rest:
            for i, chunk in zip(rest, await super().decode_batch([batch[i] for i in rest])):
                out[i] = chunk
        return out

    @staticmethod
    async def _range(getter, proto, start: int, stop: int) -> np.ndarray:
        """Bytes ``start..stop-1`` of the chunk (sliced out when a server ignores Range and sends it all)."""
        got = await getter.get(proto, byte_range=RangeByteRequest(start, stop))
        data = got.as_numpy_array() if got is not None else np.empty(0, np.uint8)  # a view: blocks are large
        if len(data) > stop - start and len(data) >= stop:
            data = data[start:stop]
        if len(data) != stop - start:
            raise ValueError("chunk changed while it was read")
        return data

    async def _gather(self, getter, proto, header, raw, starts, stops, blocks, offsets, dtype) -> np.ndarray:
        """The items at byte ``offsets``, from the blocks ``blocks`` (fetched as merged byte ranges)."""
        ranges = blosc_parts.byte_ranges(starts, stops, blocks)
        fetch = [r for r in ranges if r[1] > len(raw)]
        got = dict(zip(fetch, await asyncio.gather(*(self._range(getter, proto, a, b) for a, b in fetch))))
        comps = {}
        for a, b in ranges:
            data = raw[a:b] if b <= len(raw) else got[(a, b)]
            for k in blocks[(starts[blocks] >= a) & (stops[blocks] <= b)]:
                comps[int(k)] = data[starts[k] - a:stops[k] - a]
        return blosc_parts.gather(header, comps, offsets, dtype)


@dataclass(frozen=True)
class WholeChunksPipeline(BloscBlocksPipeline):
    """zarr's default reads (every chunk whole) with the Blosc length check: lstmnb's ``partial_reads=False``."""

    _whole = True  # a class attribute, not a field: BloscBlocksPipeline.read then never reads in parts


register_pipeline(BloscBlocksPipeline)
register_pipeline(WholeChunksPipeline)
