"""The kernels' host twins, which the simulator runs in their place: one per kernel, taking
its parameters, refusing launches its kernel leaves undefined; and, on a GPU, equal to the
kernel byte for byte on random inputs and grids."""

import re

import numpy as np
import pytest

import arrow_gpu
from arrow_gpu import _cuda
from arrow_gpu._compute import kernel_source as _kernel_source, kernels as _kernels

THREADS = 256


def source_kernels():
    """Each kernel of the source and how many parameters it takes."""
    source = "\n".join(_kernel_source.FILES.values())
    found = re.findall(r'extern "C" __global__ void (\w+)\(([^)]*)\)', source)
    return {name: len(params.split(",")) for name, params in found}


def test_every_kernel_has_a_twin_taking_its_parameters():
    kernels = source_kernels()
    assert set(kernels) == set(_kernels._kernel_names())
    for name, count in kernels.items():
        with pytest.raises(ValueError, match=f"{name} takes {count} parameters, not 0"):
            _cuda._run_twin(name, 1, THREADS, [])
    with pytest.raises(KeyError, match="no kernel twin is named 'ag_nothing'"):
        _cuda._run_twin("ag_nothing", 1, THREADS, [])


def test_a_twin_refuses_a_grid_its_kernel_leaves_undefined():
    # The scans' shared memory holds 8 warps' sums; compaction votes across whole warps.
    with pytest.raises(ValueError, match="refuses a launch of 1 blocks of 512 threads"):
        _cuda._run_twin("ag_scan", 1, 512, [0] * 7)
    with pytest.raises(ValueError, match="refuses"):
        _cuda._run_twin("ag_compact", 1, 48, [0] * 10)
    with pytest.raises(ValueError, match="refuses"):  # without a state, one block scans
        _cuda._run_twin("ag_mask_ranks", 2, THREADS, [0, 0, 0, 0, 1, 64, 0, 0, 0])
    with pytest.raises(ValueError, match="cannot launch 0 blocks"):
        _cuda._run_twin("ag_fill_bytes", 0, THREADS, [0, 0, 0])


@pytest.mark.skipif(not arrow_gpu.using_simulator(), reason="the simulator's module")
def test_the_simulator_loads_twins_by_name_as_the_driver_loads_kernels(ctx):
    module = _cuda._load_module(ctx, b"")  # no image: the twins are built in
    with pytest.raises(OSError, match="CUDA_ERROR_NOT_FOUND"):
        _cuda._module_function(ctx, module, "ag_nothing")
    fill = _cuda._module_function(ctx, module, "ag_fill_bytes")
    buffer = ctx.new_buffer(5)
    _cuda._launch(ctx, fill, 1, THREADS, [buffer.address, 5, 7])
    assert buffer.copy_to_host().to_pybytes() == bytes([7] * 5)
    with pytest.raises(OSError, match="CUDA_ERROR_INVALID_VALUE"):
        _cuda._launch(ctx, _cuda._module_function(ctx, module, "ag_scan"), 1, 64, [0] * 7)
    with pytest.raises(OSError, match="CUDA_ERROR_INVALID_HANDLE"):
        _cuda._launch(ctx, buffer.address, 1, THREADS, [])  # not a function


# ---- twins against kernels ----------------------------------------------------------------

class Side:
    """Memory of one side of the comparison: the device's (the kernel), or the host's (the
    twin). Buffers are made in the same order on both sides, from the same bytes."""

    def __init__(self, ctx, device):
        self.ctx, self.device, self.buffers, self.compared = ctx, device, [], []

    def mem(self, data, compared=True):
        data = bytes(data) or b"\0"  # never empty, so every buffer has an address
        if self.device:
            buffer = self.ctx.buffer_from_data(data)
            address = buffer.address
        else:
            buffer = np.frombuffer(bytearray(data), np.uint8)
            address = buffer.ctypes.data
        self.buffers.append(buffer)
        self.compared.append(compared)
        return address

    def table(self, data):
        """A table of addresses of this side's memory: its own on each side."""
        return self.mem(data, compared=False)

    def contents(self):
        return [(b.copy_to_host().to_pybytes() if self.device else b.tobytes()) if compared
                else None for b, compared in zip(self.buffers, self.compared)]


def bits(rng, n):
    return np.packbits(rng.random(max(n, 1)) < 0.6, bitorder="little").tobytes() + b"\0" * 9


def ints(values, dtype="<i8"):
    return np.asarray(values).astype(dtype).tobytes()


def rows(rng, n, bound, nulls=True):
    out = rng.integers(0, max(bound, 1), n)
    if nulls:
        out[rng.random(n) < 0.2] = -1
    return out


def group_ranks(mask, mask_off, valid, valid_off, mode, n):
    """The exclusive scan of each group's selected rows, as ag_mask_ranks gives it."""
    def unpacked(data, off):
        return np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")[off:off + n]
    values = unpacked(mask, mask_off).astype(bool)
    is_valid = unpacked(valid, valid_off).astype(bool) if valid else np.ones(n, bool)
    picked = values & is_valid if mode == 1 else (values & is_valid) | ~is_valid
    counts = np.add.reduceat(picked.astype(np.int64), np.arange(0, n, 32)) if n else []
    return np.concatenate([[0], np.cumsum(counts)])


def offsets_of(lengths):
    return np.concatenate([[0], np.cumsum(lengths)])


def counted(rng, m, n):
    """A count made on the device that bounds a kernel's inputs (at most n; fewer where a
    mask selected fewer rows), or none."""
    return m(ints([int(rng.integers(0, n + 1))])) if rng.random() < 0.5 else 0


def gather_indices(rng, m, n):
    """The rows of a gather over ``n`` rows of 70 (the kernels' GatherIndices and the count):
    int64 positions (-1 a null row), or indices as they are, some out of range."""
    if rng.random() < 0.5:
        return [m(ints(rows(rng, n, 70))), 8, 1, n, 2**63 - 1, 0]
    idx_width = int(rng.choice([1, 2, 4, 8]))
    signed = int(rng.integers(0, 2))
    idx = rng.integers(-2 if signed else 0, 72, n).astype(f"<{'i' if signed else 'u'}{idx_width}")
    return [m(idx.tobytes()), idx_width, signed, n, 70, m(4)]


def gathered_validity(rng, m, n):
    """The validity arguments of a gather over ``n`` rows of 70: its words, the source bitmap
    (or none: all valid), its offset and the count of bits set; or none made."""
    if rng.random() < 0.3:
        return [0, 0, 0, 0]
    return [m(4 * (-(-n // 32))), m(bits(rng, 80)) if rng.random() < 0.8 else 0,
            int(rng.integers(0, 8)), m(8)]


def case(name, side, rng, n):
    """The launch of kernel ``name`` over ``n`` items of random data: (blocks, args)."""
    m = side.mem
    grid = int(rng.integers(1, 40))  # grid-stride kernels: any grid covers any length
    if name == "ag_indices":
        width = int(rng.choice([1, 2, 4, 8]))
        signed = int(rng.integers(0, 2))
        idx = rng.integers(-5, 60, n).astype(f"<{'i' if signed else 'u'}{width}")
        return grid, [m(8 * n), m(idx.tobytes()), width, signed, m(bits(rng, n)),
                      int(rng.integers(0, 8)), n, 50, m(4)]
    if name == "ag_gather":
        width = int(rng.choice([0, 1, 2, 4, 8, 16, 24, 3, 12]))
        valid = gathered_validity(rng, m, n)
        return grid, [m(width * n), m(rng.bytes(width * 70)), width,
                      *gather_indices(rng, m, n), *valid]
    if name == "ag_gather_bits":
        return grid, [m(n // 8 + 1), m(bits(rng, 80)), int(rng.integers(0, 8)),
                      m(ints(rows(rng, n, 70))), n, m(8)]
    if name == "ag_copy_bits":
        return grid, [m(rng.bytes(n // 8 + 3)), int(rng.integers(0, 16)), m(bits(rng, n + 8)),
                      int(rng.integers(0, 8)), n, int(rng.integers(0, 2))]
    if name == "ag_popcount":
        return grid, [m(bits(rng, n + 8)), int(rng.integers(0, 8)), n, m(8 * grid)]
    if name == "ag_range_sizes":
        width = int(rng.choice([4, 8]))
        offsets = offsets_of(rng.integers(0, 9, 71))
        sizes = m(ints(rng.integers(0, 9, 71), f"<i{width}")) if rng.random() < 0.5 else 0
        valid = gathered_validity(rng, m, n)
        starts = m(width * n) if rng.random() < 0.7 else 0
        return grid, [m(width * n), m(ints(offsets, f"<i{width}")), sizes, width,
                      *gather_indices(rng, m, n), counted(rng, m, n), *valid, starts]
    if name == "ag_scan":
        tiles = max(-(-n // _kernels.SCAN_TILE), 1)  # a scan of nothing still writes its total
        in_width, width = int(rng.choice([4, 8])), int(rng.choice([4, 8]))
        data = [m(ints(rng.integers(-1000, 1000, n), f"<i{in_width}")), in_width, n]
        # one tile needs no state, and runs with it as well
        state = m(8 * (tiles + 1)) if tiles > 1 or rng.random() < 0.5 else 0
        return tiles, [*data, m(width * (n + 1)), width, m(8), state]
    if name in ("ag_mask_ranks", "ag_compact", "ag_compact_bits", "ag_compact_ranges"):
        mask, valid = bits(rng, n + 16), bits(rng, n + 16) if rng.random() < 0.7 else b""
        mask_off, valid_off, mode = int(rng.integers(0, 9)), int(rng.integers(0, 9)), \
            int(rng.integers(1, 3))
        ranks = group_ranks(mask, mask_off, valid, valid_off, mode, n)
        selection = [m(mask), mask_off, m(valid) if valid else 0, valid_off, mode, n]
        if name == "ag_mask_ranks":
            groups = -(-n // 32)
            tiles = max(-(-groups // _kernels.SCAN_TILE), 1)
            # one tile needs no state, and runs with it as well
            state = m(8 * (tiles + 1)) if tiles > 1 or rng.random() < 0.5 else 0
            return tiles, [*selection, m(8 * (groups + 1)), m(8), state]
        if name == "ag_compact":
            width = int(rng.choice([0, 1, 2, 4, 8, 16, 3]))  # 0: the rows' positions
            src = m(rng.bytes(width * n)) if width else 0
            return grid, [m(max(width, 8) * n), src, width, *selection, m(ints(ranks))]
        if name == "ag_compact_ranges":
            width = int(rng.choice([4, 8]))
            offsets = offsets_of(rng.integers(0, 300, n + 1))[:n + 1]
            return grid, [m(width * n), m(width * n), m(ints(offsets, f"<i{width}")), width,
                          *selection, m(ints(ranks)), m(8) if rng.random() < 0.7 else 0]
        return grid, [m(n // 8 + 8), m(bits(rng, n + 8)), int(rng.integers(0, 8)), *selection,
                      m(ints(ranks)), m(8)]
    if name in ("ag_expand_ranges", "ag_gather_ranges"):
        width, dst_width = int(rng.choice([4, 8])), int(rng.choice([4, 8]))
        # Rows of at most 16 bytes (a lane's each), some longer than 64 bytes; with 700, warps
        # of rows past ag_gather_ranges' stage and rows past the words a round reads. Of 70
        # rows a warp's lie within the span it reads whole; of 2,000, mostly not.
        longest, count = int(rng.choice([17, 100, 700])), int(rng.choice([70, 2000]))
        lengths = rng.integers(0, longest, count) * (rng.random(count) < 0.9)
        offsets = offsets_of(lengths)
        idx = rows(rng, n, count)
        taken = np.where(idx >= 0, lengths[idx], 0)
        fixed = int(rng.integers(1, 4)) if name == "ag_expand_ranges" and rng.random() < 0.3 \
            else 0
        dst = offsets_of(np.full(n, fixed) if fixed else taken)
        dst_offsets = [m(ints(dst, f"<i{dst_width}")), dst_width, n]
        if name == "ag_expand_ranges":
            return grid, [m(8 * int(dst[-1])), m(ints(offsets, f"<i{width}")), width, fixed,
                          m(ints(idx)), *dst_offsets]
        if rng.random() < 0.5:  # a filter's: in order
            idx = np.sort(idx)
            taken = np.where(idx >= 0, lengths[idx], 0)
            dst = offsets_of(taken)
            dst_offsets = [m(ints(dst, f"<i{dst_width}")), dst_width, n]
        starts = np.where(idx >= 0, offsets[:-1][idx], 0)  # as the sizing passes write them
        # Room sized before the total was known: enough, or too little (nothing copied).
        total = int(dst[-1])
        room = [0, 0] if rng.random() < 0.4 else \
            [m(ints([total])), total + int(rng.choice([-1, 0, 5])) if total else 0]
        return grid, [m(total + 8), m(rng.bytes(int(offsets[-1]) + 8)),
                      m(ints(starts, f"<i{width}")), width, *dst_offsets,
                      int(rng.choice([8, 32])), *room]
    if name in ("ag_copy_ranges", "ag_rebase_ranges", "ag_copy_bit_ranges"):
        return batched(name, side, rng, n)
    if name == "ag_and_bits":
        return grid, [m(bits(rng, n)), m(bits(rng, n + 8)), int(rng.integers(0, 8)), n]
    if name == "ag_fill_bytes":
        return grid, [m(rng.bytes(n)), n, int(rng.integers(0, 256))]
    if name == "ag_replace_nulls":
        return grid, [m(ints(rows(rng, n, 70))), n, 70]
    if name == "ag_union_validity":
        codes = rng.choice([0, 3, 5], n).astype(np.int8)
        table = np.zeros(256, np.int64)
        for code in (0, 3, 5):
            if rng.random() < 0.8:
                table[2 * code:2 * code + 2] = [m(bits(rng, n + 8)), int(rng.integers(0, 8))]
        offsets = m(ints(rng.integers(0, n + 1, n), "<i4")) if rng.random() < 0.5 else 0
        return grid, [m(n // 8 + 1), m(codes.tobytes()), offsets, n, side.table(table.tobytes())]
    if name == "ag_type_mask":
        return grid, [m(n // 8 + 1), m(rng.choice([0, 1, 7], n).astype(np.int8).tobytes()), n,
                      int(rng.choice([0, 1, 7]))]
    if name == "ag_scatter_ranks":
        return grid, [m(4 * n), m(ints(rng.permutation(n))), n]
    if name == "ag_fill_indices":
        return grid, [m(8 * n), m(bits(rng, n + 8)), int(rng.integers(0, 8)), n, -7]
    if name == "ag_run_of_rows":
        width = int(rng.choice([2, 4, 8]))
        runs = int(rng.integers(0, n + 1)) if n else 0
        ends = np.cumsum(rng.integers(1, 4, runs)) + 2
        picked = rows(rng, n, int(ends[-1]) - 2 if runs else 1)
        rows_at = m(ints(picked)) if rng.random() < 0.5 else 0  # 0: rows 0 to n
        return grid, [m(8 * n), m(ints(ends, f"<i{width}")), width, runs, rows_at, 2, n]
    raise AssertionError(f"no case for {name}")


def batched(name, side, rng, n):
    """A table of ranges with the blocks each needs, as arrow_gpu._compute.copy_plan lists them."""
    m = side.mem
    table, blocks = [], 0
    if name == "ag_copy_bit_ranges":  # ranges tiling two bitmaps of whole 64-bit words
        for _ in range(2):
            dst_bits = int(rng.integers(1, 3 * n + 2))
            dst, count = m(rng.bytes(-(-dst_bits // 64) * 8)), m(8)
            at = 0
            while at < dst_bits:
                size = min(int(rng.integers(1, n + 2)), dst_bits - at)
                owned = -(-(at + size) // 64) - -(-at // 64)
                table.append([m(bits(rng, size + 8)) if rng.random() < 0.8 else 0,
                              int(rng.integers(0, 8)), dst, at, size, blocks, count, 0])
                blocks += -(-owned // _kernels.BIT_BLOCK_WORDS)
                at += size
        return blocks, [side.table(ints(table)), len(table)]
    for _ in range(int(rng.integers(1, 6))):
        size = int(rng.integers(0, 3 * n + 1))
        if name == "ag_copy_ranges":
            table.append([m(rng.bytes(size)), m(size), size, blocks])
            blocks += -(-size // _kernels.COPY_BLOCK_BYTES)
            continue
        width = int(rng.choice([1, 2, 4, 8, 16]))
        if width == 16:  # views: lengths around 12, some out of line
            views = rng.integers(0, 2**31, (size, 4)).astype("<i4")
            views[:, 0] = rng.integers(0, 25, size)
            src = m(views.tobytes())
        else:
            src = m(ints(rng.integers(0, 10**6, size), f"<i{width}"))
        typed = width != 16 and rng.random() < 0.4
        type_ids = m(rng.integers(0, 128, size).astype(np.int8).tobytes()) if typed else 0
        deltas = m(ints(rng.integers(-10**6, 10**6, 128), "<i4")) if typed else 0
        table.append([src, m(width * size), size, width, int(rng.integers(-10**6, 10**6)),
                      type_ids, deltas, blocks])
        blocks += -(-size // _kernels.REBASE_BLOCK_ITEMS)
    blocks = max(blocks, 1)  # ranges of nothing still need a block to launch
    return blocks, [side.table(ints(table)), len(table)]


LENGTHS = [0, 1, 31, 33, 257, 2047, 2049, 5000, 70_001]


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(source_kernels()))
def test_twins_equal_kernels(name, ctx):
    # Every buffer, outputs and inputs alike, ends byte for byte the same on both sides.
    kernels = _kernels.kernels_for(ctx)
    for seed, n in enumerate(LENGTHS):
        device, host = Side(ctx, True), Side(ctx, False)
        blocks, args = case(name, device, np.random.default_rng(seed), n)
        twin_blocks, twin_args = case(name, host, np.random.default_rng(seed), n)
        assert blocks == twin_blocks
        _cuda._launch(ctx, kernels._functions[name], blocks, THREADS, args)
        ctx.synchronize()
        _cuda._run_twin(name, blocks, THREADS, twin_args)
        for i, (got, want) in enumerate(zip(device.contents(), host.contents())):
            assert got == want, (name, n, f"buffer {i}")


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [32 * _kernels.SCAN_TILE + 1, 3 * 32 * _kernels.SCAN_TILE + 777])
def test_the_mask_ranks_twin_equals_its_kernel_over_several_tiles(rows, ctx):
    # A mask past a tile of groups: the blocks find their prefixes through the state.
    kernels = _kernels.kernels_for(ctx)
    for seed in range(3):
        device, host = Side(ctx, True), Side(ctx, False)
        blocks, args = case("ag_mask_ranks", device, np.random.default_rng(seed), rows)
        twin_blocks, twin_args = case("ag_mask_ranks", host, np.random.default_rng(seed), rows)
        assert blocks == twin_blocks > 1 and args[-1] != 0
        _cuda._launch(ctx, kernels._functions["ag_mask_ranks"], blocks, THREADS, args)
        ctx.synchronize()
        _cuda._run_twin("ag_mask_ranks", blocks, THREADS, twin_args)
        for i, (got, want) in enumerate(zip(device.contents(), host.contents())):
            assert got == want, (rows, f"buffer {i}")


def test_twins_run_without_a_device():
    # The twin side of the comparison above runs anywhere: a scan of three tiles, which
    # leaves its state as the kernel does (three tickets taken, each tile's inclusive prefix
    # published under the flag in the top two bits).
    tile = _kernels.SCAN_TILE
    n = 2 * tile + 904
    data = np.arange(n, dtype=np.int64)
    out = np.zeros(n + 1, np.int64)
    total, state = np.zeros(1, np.int64), np.zeros(4, np.uint64)
    _cuda._run_twin("ag_scan", 3, THREADS, [data.ctypes.data, 8, n, out.ctypes.data, 8,
                                           total.ctypes.data, state.ctypes.data])
    assert out.tolist() == [0, *np.cumsum(data).tolist()]
    assert total[0] == data.sum()
    prefixes = [int(data[:end].sum()) for end in (tile, 2 * tile, n)]
    assert state.tolist() == [3, *[(2 << 62) | p for p in prefixes]]
    with pytest.raises(ValueError, match="refuses a launch of 3 blocks"):  # tiles need a state
        _cuda._run_twin("ag_scan", 3, THREADS, [data.ctypes.data, 8, n, out.ctypes.data, 8,
                                               total.ctypes.data, 0])


def test_a_count_on_the_device_bounds_the_sizes():
    # A mask's rows, counted on the device, bound the rows sized before the host knows them:
    # sizes and starts past the count are not written.
    count = np.array([2], np.int64)
    offsets = np.array([0, 3, 3, 10], np.int32)
    positions = np.array([2, 0, 1, 2], np.int64)
    sizes = np.full(4, -1, np.int32)
    starts = np.full(4, -1, np.int32)
    _cuda._run_twin("ag_range_sizes", 1, THREADS,
                    [sizes.ctypes.data, offsets.ctypes.data, 0, 4, positions.ctypes.data, 8, 1,
                     4, 2**63 - 1, 0, count.ctypes.data, 0, 0, 0, 0, starts.ctypes.data])
    assert sizes.tolist() == [7, 3, -1, -1]
    assert starts.tolist() == [3, 0, -1, -1]


def test_a_popcount_leaves_a_count_per_block_for_the_host_to_sum():
    # No counter to zero first: each block writes the set bits of the bytes its threads read
    # (byte k of the range by thread k modulo the grid's threads).
    bits = np.packbits(np.random.default_rng(0).random(5000 * 8) < 0.3, bitorder="little")
    counts = np.full(3, -1, np.int64)
    _cuda._run_twin("ag_popcount", 3, THREADS, [bits.ctypes.data, 5, 39_000, counts.ctypes.data])
    unpacked = np.unpackbits(bits, bitorder="little")[5:39_005]
    assert counts.sum() == unpacked.sum()
    per_byte = np.unpackbits(bits, bitorder="little")
    per_byte[:5] = 0
    per_byte[39_005:] = 0
    byte_counts = per_byte[:(39_004 // 8 + 1) * 8].reshape(-1, 8).sum(axis=1)
    block_of = (np.arange(len(byte_counts)) % (3 * THREADS)) // THREADS
    assert counts.tolist() == [int(byte_counts[block_of == b].sum()) for b in range(3)]


def test_a_scan_of_thousands_of_tiles_equals_numpy(ctx):
    # More tiles than the device runs at once: each finds its prefix through the tiles
    # before it, whatever order their blocks start in; 4-byte and 8-byte inputs, some
    # negative, into 8-byte offsets.
    kernels = _kernels.kernels_for(ctx)
    rng = np.random.default_rng(0)
    for n, dtype in ((12_345_679, "<i4"), (3_000_001, "<i8")):
        data = rng.integers(-50, 100, n).astype(dtype)
        src, out = ctx.buffer_from_data(data.tobytes()), ctx.new_buffer(8 * (n + 1))
        total = kernels.scan(src.address, data.itemsize, n, out.address, 8)
        want = np.concatenate([[0], np.cumsum(data, dtype=np.int64)])
        assert total == want[-1]
        assert np.array_equal(np.frombuffer(out.copy_to_host(), np.int64), want)
