"""Read a few values out of a Blosc-compressed chunk without fetching or decoding all of it.

ARCO-ERA5's chunks are one hour of the globe (4.15 MB as float32) in Blosc blocks of 512 KB, so a point needs one block
of the eight: fetch the header with a small byte-range request, then only the blocks that hold the wanted values (more
range requests), decode those and pick the values. For point series this reads about a quarter of the bytes a
whole-chunk read does.

A Blosc chunk (format 2, i.e. c-blosc 1.x, as numcodecs writes it; c-blosc's README_HEADER.rst), all little-endian:
- a 16-byte header: version, versionlz, flags, typesize (uint8 each), nbytes, blocksize, cbytes (uint32);
- flags: 0x01 byte shuffle, 0x02 stored uncompressed (no block table follows), 0x04 bit shuffle, 0x10 blocks are not
  split; bits 5-7 the codec (0 blosclz, 1 lz4/lz4hc, 2 snappy, 3 zlib, 4 zstd);
- then the block table ("bstarts"), one int32 offset per block; blocks may lie in any order (threads write them as
  they finish), so a block ends where the next higher offset (or the chunk) begins;
- each block, compressed on its own, is ``typesize`` streams when split (one for the last, partial block, or when not
  split), each an int32 compressed size and its bytes; a size equal to the stream's length means stored raw;
- byte shuffle is applied per block.

Only what this module can decode is read in parts (lz4, zlib or zstd; byte shuffle or none), each stream decompressed
by numcodecs (the library zarr decodes with); anything else, or anything that does not add up, raises ``ValueError``
and the caller reads the whole chunk.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

HEADER = 16
FORMAT_VERSION = 2  # the chunk format of c-blosc 1.x
_SHUFFLE, _MEMCPYED, _BITSHUFFLE, _DONT_SPLIT = 0x01, 0x02, 0x04, 0x10
_CODECS = {1: "lz4", 3: "zlib", 4: "zstd"}
# numcodecs' names for Blosc's compressors, as the codec number a chunk's flags carry (lz4hc writes lz4)
_CNAMES = {"blosclz": 0, "lz4": 1, "lz4hc": 1, "snappy": 2, "zlib": 3, "zstd": 4}
BITSHUFFLE = 2  # numcodecs.Blosc.BITSHUFFLE


def readable(cname: str, shuffle: int) -> bool:
    """Whether chunks of a Blosc codec with numcodecs' ``cname`` and ``shuffle`` can be read in parts
    here. Auto shuffle passes: what a chunk holds is checked again by ``parse_header``."""
    return _CNAMES.get(cname) in _CODECS and shuffle != BITSHUFFLE


def stated_size(buf) -> int | None:
    """The compressed size a Blosc chunk's header states (``cbytes``), or None when ``buf`` is shorter
    than a header. A chunk whose length differs is cut short or damaged: c-blosc trusts the header and
    would read past the buffer, returning plausible numbers."""
    head = bytes(memoryview(buf)[:HEADER])
    return int.from_bytes(head[12:16], "little") if len(head) == HEADER else None


@dataclass(frozen=True)
class Header:
    flags: int
    typesize: int
    nbytes: int
    blocksize: int
    cbytes: int

    @property
    def nblocks(self) -> int:
        return -(-self.nbytes // self.blocksize)

    @property
    def memcpyed(self) -> bool:
        return bool(self.flags & _MEMCPYED)

    @property
    def table_end(self) -> int:
        """Bytes from the chunk's start that hold the header and the block table."""
        return HEADER if self.memcpyed else HEADER + 4 * self.nblocks

    def block_len(self, k: int) -> int:
        """Uncompressed bytes of block ``k`` (the last one may be short)."""
        return min(self.blocksize, self.nbytes - k * self.blocksize)


def parse_header(buf: bytes) -> Header:
    """The chunk's header; ValueError when this module cannot read the chunk in parts."""
    if len(buf) < HEADER:
        raise ValueError(f"a Blosc header needs {HEADER} bytes, got {len(buf)}")
    version, _, flags, typesize, nbytes, blocksize, cbytes = struct.unpack_from("<BBBBIII", buf)
    if version != FORMAT_VERSION:
        raise ValueError(f"Blosc chunk format {version} (only {FORMAT_VERSION}, c-blosc 1.x, is read in parts)")
    if blocksize <= 0 or typesize <= 0 or nbytes <= 0 or cbytes < HEADER:
        raise ValueError("implausible Blosc header")
    head = Header(flags, typesize, nbytes, blocksize, cbytes)
    if not head.memcpyed:
        if flags & _BITSHUFFLE:
            raise ValueError("bit-shuffled Blosc chunks are read whole")
        if flags >> 5 not in _CODECS:
            raise ValueError(f"Blosc codec {flags >> 5} is read whole")
    return head


def block_extents(head: Header, table: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(start, stop) byte offsets of every block in the chunk, from the header and block table."""
    n = head.nblocks
    if head.memcpyed:  # raw bytes right after the header: "blocks" are plain slices
        starts = HEADER + np.arange(n, dtype=np.int64) * head.blocksize
        return starts, np.minimum(starts + head.blocksize, HEADER + head.nbytes)
    if len(table) < head.table_end:
        raise ValueError("block table incomplete")
    starts = np.frombuffer(table, dtype="<i4", count=n, offset=HEADER).astype(np.int64)
    if starts.min() < head.table_end or starts.max() >= head.cbytes:
        raise ValueError("Blosc block table points outside the chunk")
    ordered = np.unique(starts)
    if ordered.size != n:
        raise ValueError("Blosc block table has repeated offsets")
    after = np.append(ordered[1:], head.cbytes)
    return starts, after[np.searchsorted(ordered, starts)]


def blocks_holding(head: Header, offsets: np.ndarray, itemsize: int) -> np.ndarray:
    """Sorted indices of the blocks that hold the items starting at byte ``offsets``."""
    offsets = np.asarray(offsets, dtype=np.int64)
    if offsets.size and (offsets.min() < 0 or offsets.max() + itemsize > head.nbytes):
        raise ValueError("item offsets outside the chunk")
    return np.unique(np.concatenate([offsets // head.blocksize, (offsets + itemsize - 1) // head.blocksize]))


def byte_ranges(starts: np.ndarray, stops: np.ndarray, blocks: np.ndarray) -> list[tuple[int, int]]:
    """The (start, stop) byte ranges that cover ``blocks``; blocks that touch are merged into one range."""
    merged: list[list[int]] = []
    for a, b in sorted((int(starts[k]), int(stops[k])) for k in blocks):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


_DECODERS: dict = {}


def _decompress(codec: int, data, size: int):
    """Decode one stream with numcodecs (a buffer of ``size`` bytes)."""
    if not _DECODERS:
        import numcodecs

        _DECODERS.update({1: numcodecs.LZ4(), 3: numcodecs.Zlib(), 4: numcodecs.Zstd()})
    if codec == 1:  # LZ4 block format; numcodecs.LZ4 wants the decoded size as a 4-byte prefix
        data = struct.pack("<I", size) + data
    out = _DECODERS[codec].decode(data)
    if memoryview(out).nbytes != size:
        raise ValueError(f"a Blosc stream decoded to {memoryview(out).nbytes} bytes, expected {size}")
    return out


def _streams(head: Header, k: int, comp: bytes) -> list:
    """Block ``k`` decompressed but still shuffled, if the chunk was (the bytes Blosc compressed), as
    the list of its streams: ``typesize`` of them when split (stream j: byte j of every item), else one."""
    size = head.block_len(k)
    if head.memcpyed:
        if len(comp) != size:
            raise ValueError("raw Blosc block has the wrong length")
        return [comp]
    splits = 1 if (head.flags & _DONT_SPLIT or size < head.blocksize) else head.typesize  # the last block: short
    if size % splits:
        splits = 1
    each = size // splits
    comp = memoryview(comp).cast("B")
    parts, pos = [], 0
    for _ in range(splits):
        if pos + 4 > len(comp):
            raise ValueError("Blosc block ends inside a stream header")
        (csize,) = struct.unpack_from("<i", comp, pos)
        pos += 4
        if csize <= 0 or pos + csize > len(comp):
            raise ValueError("Blosc stream size outside its block")
        stream = comp[pos:pos + csize]
        pos += csize
        parts.append(stream if csize == each else _decompress(head.flags >> 5, stream, each))
    if pos != len(comp):
        raise ValueError("Blosc block has bytes left over after its streams")
    return parts


def gather(head: Header, blocks: dict[int, bytes], offsets: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The items of ``dtype`` at byte ``offsets`` of the chunk, from its compressed ``blocks`` (by index), picked
    straight from the shuffled bytes without unshuffling whole blocks. Items not the chunk's own (another size than
    its typesize, or not aligned to it) raise ValueError: the caller reads such a chunk whole."""
    dtype, offsets = np.dtype(dtype), np.asarray(offsets, dtype=np.int64)
    size, ts, bs = dtype.itemsize, head.typesize, head.blocksize
    if size != ts or bs % size or (offsets % size).any():
        raise ValueError(f"items of {size} bytes in a Blosc chunk of typesize {ts} are read whole")
    out = np.empty(len(offsets), dtype=dtype)
    raw = out.view(np.uint8).reshape(len(offsets), size)
    k_of = offsets // bs
    shuffled = bool(head.flags & _SHUFFLE) and ts > 1 and not head.memcpyed
    for k in np.unique(k_of):
        mine = k_of == k
        streams = [np.frombuffer(x, dtype=np.uint8) for x in _streams(head, int(k), blocks[int(k)])]
        item = (offsets[mine] - k * bs) // size
        n = head.block_len(int(k)) // ts
        if not shuffled:  # streams are consecutive pieces of the block
            data = streams[0] if len(streams) == 1 else np.concatenate(streams)
            raw[mine] = data[item[:, None] * size + np.arange(size)[None, :]]
        elif len(streams) == ts:  # split: stream j holds byte j of every item
            for j, stream in enumerate(streams):
                raw[mine, j] = stream[item]
        else:
            raw[mine] = streams[0][np.arange(ts)[None, :] * n + item[:, None]]
    return out
