"""Reading values out of Blosc chunks block by block gives exactly what numcodecs' whole decode gives."""

from __future__ import annotations

import struct

import numcodecs
import numpy as np
import pytest

from lstmnb.data import blosc_parts as bp


def _field(shape, dtype, seed=0, noisy=False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if noisy:  # incompressible low bytes, as in real temperature fields
        return (rng.standard_normal(shape) * 1e3).astype(dtype)
    return np.cumsum(rng.standard_normal(int(np.prod(shape)))).reshape(shape).astype(dtype)


def _pick(enc: bytes, offsets: np.ndarray, dtype) -> np.ndarray:
    """What the reader does: header and table, then only the blocks holding ``offsets``."""
    head = bp.parse_header(enc[:4096])
    starts, stops = bp.block_extents(head, enc[:head.table_end])
    blocks = bp.blocks_holding(head, offsets, np.dtype(dtype).itemsize)
    return bp.gather(head, {int(k): enc[starts[k]:stops[k]] for k in blocks}, offsets, dtype)


@pytest.mark.parametrize("cname", ["lz4", "lz4hc", "zlib", "zstd"])
@pytest.mark.parametrize("shuffle", [numcodecs.Blosc.NOSHUFFLE, numcodecs.Blosc.SHUFFLE])
@pytest.mark.parametrize("blocksize", [0, 8192, 30000])
def test_values_equal_whole_decode(cname, shuffle, blocksize):
    rng = np.random.default_rng(1)
    for shape, dtype, noisy in [((181, 360), "f4", True), ((181, 360), "f4", False), ((97, 33), "f8", False),
                                ((5000,), "i2", True)]:
        x = _field(shape, dtype, noisy=noisy)
        enc = numcodecs.Blosc(cname=cname, clevel=5, shuffle=shuffle, blocksize=blocksize).encode(x)
        flat = np.concatenate([[0, x.size - 1], rng.integers(0, x.size, 20)])
        got = _pick(enc, flat * x.itemsize, x.dtype)
        np.testing.assert_array_equal(got, x.ravel()[flat])


def test_chunk_stored_uncompressed():
    x = _field((64, 64), "f4", noisy=True)
    enc = numcodecs.Blosc(cname="lz4", clevel=0, shuffle=numcodecs.Blosc.SHUFFLE, blocksize=4096).encode(x)
    head = bp.parse_header(enc)
    assert head.memcpyed and head.table_end == bp.HEADER
    flat = np.array([0, 1000, 4095])
    np.testing.assert_array_equal(_pick(enc, flat * 4, np.float32), x.ravel()[flat])


def test_blocks_in_any_order():
    """Threads may write blocks out of order; each block ends at the next higher offset."""
    x = _field((181, 360), "f4")
    enc = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE, blocksize=16384).encode(x)
    head = bp.parse_header(enc)
    starts, stops = bp.block_extents(head, enc)
    order = np.random.default_rng(3).permutation(head.nblocks)
    body, table, pos = [], [], head.table_end
    new_start = {}
    for k in order:
        new_start[int(k)] = pos
        body.append(enc[starts[k]:stops[k]])
        pos += stops[k] - starts[k]
    table = b"".join(struct.pack("<i", new_start[k]) for k in range(head.nblocks))
    shuffled = enc[:bp.HEADER] + table + b"".join(body)
    assert len(shuffled) == len(enc) and shuffled != enc
    flat = np.arange(0, x.size, 997)
    np.testing.assert_array_equal(_pick(shuffled, flat * 4, np.float32), x.ravel()[flat])


def test_byte_ranges_merge_touching_blocks():
    starts = np.array([100, 200, 300, 400])
    stops = np.array([200, 300, 400, 450])
    assert bp.byte_ranges(starts, stops, np.array([0, 1, 3])) == [(100, 300), (400, 450)]
    assert bp.byte_ranges(starts, stops, np.array([2])) == [(300, 400)]


@pytest.mark.parametrize("what", ["bitshuffle", "blosclz", "not blosc", "short", "format"])
def test_what_cannot_be_read_in_parts_says_so(what):
    x = _field((64, 64), "f4")
    if what == "bitshuffle":
        enc = numcodecs.Blosc(cname="lz4", shuffle=numcodecs.Blosc.BITSHUFFLE).encode(x)
    elif what == "blosclz":
        enc = numcodecs.Blosc(cname="blosclz").encode(x)
    elif what == "not blosc":
        enc = numcodecs.Zstd().encode(x)
    elif what == "short":
        enc = b"\x02\x01"
    else:
        enc = b"\x05" + numcodecs.Blosc(cname="lz4").encode(x)[1:]
    with pytest.raises(ValueError):
        bp.parse_header(enc)


@pytest.mark.parametrize("cname", numcodecs.blosc.list_compressors())
@pytest.mark.parametrize("shuffle", [numcodecs.Blosc.NOSHUFFLE, numcodecs.Blosc.SHUFFLE, numcodecs.Blosc.BITSHUFFLE])
def test_readable_says_what_parse_header_accepts(cname, shuffle):
    """The reader decides from an array's codec settings (before any chunk is fetched) whether to read
    its chunks in parts: that must agree with what the chunks themselves turn out to be."""
    x = np.repeat(_field((256,), "f4"), 16)  # runs of equal values: every codec compresses it
    enc = numcodecs.Blosc(cname=cname, clevel=5, shuffle=shuffle).encode(x)
    assert not enc[2] & 0x02, "stored compressed (the flags' stored-raw bit: a raw chunk is always readable)"
    try:
        bp.parse_header(enc)
        accepted = True
    except ValueError:
        accepted = False
    assert bp.readable(cname, shuffle) == accepted
    assert bp.BITSHUFFLE == numcodecs.Blosc.BITSHUFFLE


def test_damaged_block_is_an_error_not_garbage():
    x = _field((181, 360), "f4")
    enc = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE, blocksize=16384).encode(x)
    head = bp.parse_header(enc)
    starts, stops = bp.block_extents(head, enc)
    comp = enc[starts[2]:stops[2]]
    with pytest.raises(ValueError):
        bp.gather(head, {2: comp[:-5]}, np.array([2 * head.blocksize]), np.float32)  # truncated
    with pytest.raises(ValueError):
        bp.block_extents(head, enc[:bp.HEADER + 8])  # table cut short


def test_items_not_of_the_chunks_typesize_are_left_to_a_whole_read():
    """Items of another size than the chunk's typesize may cross blocks: ValueError, and the pipeline reads
    that chunk whole (zarr's values either way)."""
    x = _field((181, 360), "f4")
    enc = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE, blocksize=16384).encode(x)
    with pytest.raises(ValueError, match="typesize 4 are read whole"):
        _pick(enc, np.array([0, 8000]), np.float64)
