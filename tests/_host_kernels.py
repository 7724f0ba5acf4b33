"""The kernels of arrow_gpu.compute done on the host with NumPy, over simulated device memory.

The simulator runs no kernels, so arrow_gpu.compute runs pyarrow's CPU kernels there; these
stand in for the CUDA kernels one by one (same arguments, same effect on device memory) so
that the simulator also checks which buffers and children compute.py gathers for each type.
On a GPU the real kernels run instead.
"""

from __future__ import annotations

import numpy as np

from arrow_gpu import _kernels
from arrow_gpu._kernels import DeviceKernels


class HostKernels(DeviceKernels):
    def __init__(self, context):  # nothing to compile
        self.context = context

    # -- memory as NumPy -------------------------------------------------------------

    def _read(self, address, nbytes):
        if nbytes <= 0:
            return np.zeros(0, np.uint8)
        data = self.context.foreign_buffer(address, nbytes).copy_to_host().to_pybytes()
        return np.frombuffer(data, np.uint8).copy()

    def _write(self, address, array):
        data = np.ascontiguousarray(array).tobytes()
        if data:
            self.context.foreign_buffer(address, len(data)).copy_from_host(data)

    def _ints(self, address, n, width, signed=True):
        kind = {1: "i1", 2: "i2", 4: "i4", 8: "i8"}[width]
        kind = kind if signed else kind.replace("i", "u")
        return self._read(address, n * width).view(kind).astype(np.int64)

    def _bits(self, address, off, n):
        if address == 0:
            return np.ones(n, bool)
        first = off // 8
        raw = self._read(address + first, (off + n + 7) // 8 - first)
        start = off - first * 8
        return np.unpackbits(raw, bitorder="little")[start:start + n].astype(bool)

    def _write_bits(self, address, off, values):
        n = len(values)
        if n == 0:
            return
        first, last = off // 8, (off + n - 1) // 8
        current = np.unpackbits(self._read(address + first, last - first + 1), bitorder="little")
        current[off - first * 8:off - first * 8 + n] = values
        self._write(address + first, np.packbits(current, bitorder="little"))

    def _store(self, address, values, width):
        self._write(address, np.asarray(values, np.int64).astype("i4" if width == 4 else "i8"))

    def zeros(self, nbytes):
        buffer = self.alloc(nbytes)
        self._write(buffer.address, np.zeros(nbytes, np.uint8))
        return buffer

    # -- the kernels -----------------------------------------------------------------

    def indices(self, out, idx, width, signed, valid, valid_off, n, bound):
        values = self._ints(idx, n, width, signed)
        if width == 8 and not signed:
            values = self._read(idx, 8 * n).view("u8")
            values = np.where(values > 2**63 - 1, -1, values).astype(np.int64)
        is_valid = self._bits(valid, valid_off, n)
        bad = is_valid & ((values < 0) | (values >= bound))
        self._write(out, np.where(is_valid & ~bad, values, -1).astype(np.int64))
        return not bad.any()

    def gather(self, dst, src, idx, n, width):
        rows = self._ints(idx, n, 8)
        extent = max(int(rows.max()) + 1, 0) if n else 0
        source = self._read(src, extent * width).reshape(-1, width)
        out = np.zeros((n, width), np.uint8)
        out[rows >= 0] = source[rows[rows >= 0]]
        self._write(dst, out)

    def _count(self, count_at, bits):
        if count_at:
            self._store(count_at, self._ints(count_at, 1, 8) + int(bits.sum()), 8)

    def gather_bits(self, dst, src, src_off, idx, n, count_at=0):
        rows = self._ints(idx, n, 8)
        extent = max(int(rows.max()) + 1, 0) if n else 0
        source = self._bits(src, src_off, extent)
        bits = np.zeros(n, bool)
        bits[rows >= 0] = source[rows[rows >= 0]]
        self._write(dst, np.packbits(bits, bitorder="little"))
        self._count(count_at, bits)

    def copy_bits(self, dst, dst_off, src, src_off, n, invert=False):
        self._write_bits(dst, dst_off, self._bits(src, src_off, n) ^ bool(invert))

    def popcount(self, bits, off, n):
        return int(self._bits(bits, off, n).sum()) if n > 0 else 0

    def _ranges(self, offsets, sizes, width, rows):
        if not (rows >= 0).any():
            return np.zeros(len(rows), np.int64), np.zeros(len(rows), np.int64)
        extent = int(rows.max()) + 2
        starts = self._ints(offsets, extent, width)
        if sizes:
            lengths = self._ints(sizes, extent, width)
        else:
            lengths = np.diff(starts) if extent else np.zeros(0, np.int64)
        valid = rows >= 0
        start = np.where(valid, starts[np.where(valid, rows, 0)], 0)
        length = np.where(valid, lengths[np.where(valid, rows, 0)], 0)
        return start, length

    def range_sizes(self, out, offsets, sizes, width, idx, n):
        _, lengths = self._ranges(offsets, sizes, width, self._ints(idx, n, 8))
        self._write(out, lengths.astype(np.int64))

    def scan(self, src, n, out, out_width):
        items = self._ints(src, n, 8)
        self._store(out, np.concatenate([[0], np.cumsum(items)]), out_width)
        return int(items.sum())

    def _mask_items(self, src, src_off, valid, valid_off, mode, n):
        is_valid = self._bits(valid, valid_off, n)
        return np.where(is_valid, self._bits(src, src_off, n), mode == 2).astype(np.int64)

    def mask_ranks(self, mask, mask_off, valid, valid_off, mode, n):
        return int(self._mask_items(mask, mask_off, valid, valid_off, mode, n).sum()), None

    def compact(self, dst, src, width, mask, mask_off, valid, valid_off, mode, n, ranks):
        picked = self._mask_items(mask, mask_off, valid, valid_off, mode, n).astype(bool)
        if src == 0:
            positions = np.where(self._bits(valid, valid_off, n), np.arange(n), -1)
            self._write(dst, positions[picked].astype(np.int64))
        else:
            self._write(dst, self._read(src, n * width).reshape(n, width)[picked])

    def compact_bits(self, dst, src, src_off, mask, mask_off, valid, valid_off, mode, n,
                     ranks, count_at=0):
        picked = self._mask_items(mask, mask_off, valid, valid_off, mode, n).astype(bool)
        bits = self._bits(src, src_off, n)[picked]
        self._write(dst, np.packbits(bits, bitorder="little"))
        self._count(count_at, bits)

    def expand_ranges(self, out, offsets, width, fixed, idx, dst_offsets, dst_width, n):
        rows = self._ints(idx, n, 8)
        if fixed:
            start, length = rows * fixed, np.full(n, fixed)
        else:
            start, length = self._ranges(offsets, 0, width, rows)
            length = np.diff(self._ints(dst_offsets, n + 1, dst_width))
        parts = [np.arange(s, s + m) if r >= 0 else np.full(m, -1)
                 for r, s, m in zip(rows, start, length)]
        self._write(out, np.concatenate(parts or [np.zeros(0)]).astype(np.int64))

    def gather_ranges(self, dst, src, offsets, width, idx, dst_offsets, dst_width, n):
        rows = self._ints(idx, n, 8)
        start, length = self._ranges(offsets, 0, width, rows)
        to = self._ints(dst_offsets, n + 1, dst_width)
        for r, s, m, d in zip(rows, start, length, to):
            if r >= 0 and m:
                self._write(dst + int(d), self._read(src + int(s), int(m)))

    def and_bits(self, dst, src, src_off, n):
        self._write_bits(dst, 0, self._bits(dst, 0, n) & self._bits(src, src_off, n))

    def replace_nulls(self, idx, n, replacement):
        rows = self._ints(idx, n, 8)
        self._write(idx, np.where(rows < 0, replacement, rows).astype(np.int64))

    def fill_indices(self, out, valid, valid_off, n, replacement):
        is_valid = self._bits(valid, valid_off, n)
        self._write(out, np.where(is_valid, np.arange(n), replacement).astype(np.int64))

    def union_validity(self, out, type_ids, offsets, n, children):
        codes = self._ints(type_ids, n, 1) & 127
        rows = self._ints(offsets, n, 4) if offsets else np.arange(n)
        valid = np.zeros(n, bool)
        for code, (bits, bit_offset) in children.items():
            here = codes == code
            if here.any():
                extent = int(rows[here].max()) + 1
                valid[here] = self._bits(bits, bit_offset, extent)[rows[here]]
        self._write(out, np.packbits(valid, bitorder="little"))

    def type_mask(self, bits, type_ids, n, code):
        self._write(bits, np.packbits(self._ints(type_ids, n, 1) == code, bitorder="little"))

    def scatter_ranks(self, offsets, positions, n):
        if n == 0:
            return
        where = self._ints(positions, n, 8)
        for rank, position in enumerate(where):
            self._write(offsets + 4 * int(position), np.array([rank], np.int32))

    # -- the batched copies: their tables as the kernels read them ---------------------

    def _check_blocks(self, first_blocks, sizes, blocks):
        """Each range has the blocks its size needs, and they add up to ``blocks``."""
        ends = list(first_blocks[1:]) + [blocks]
        assert first_blocks[0] == 0, first_blocks
        assert [end - start for start, end in zip(first_blocks, ends)] == sizes

    def copy_ranges(self, table, count, blocks):
        rows = self._read(table, 32 * count).view("i8").reshape(count, 4)
        per = _kernels.COPY_BLOCK_BYTES
        self._check_blocks(rows[:, 3].tolist(), [-(-int(n) // per) for n in rows[:, 2]], blocks)
        for src, dst, nbytes, _ in rows.tolist():
            self._write(dst, self._read(src, nbytes))

    def copy_bit_ranges(self, table, count, blocks):
        rows = self._read(table, 64 * count).view("i8").reshape(count, 8)
        per = _kernels.BIT_BLOCK_WORDS
        owned = [-(-(off + n) // 64) - -(-off // 64) for off, n in rows[:, 3:5].tolist()]
        self._check_blocks(rows[:, 5].tolist(), [-(-words // per) for words in owned], blocks)
        for src, src_off, dst, dst_off, nbits, _, count_at, _ in rows.tolist():
            bits = self._bits(src, src_off, nbits)
            assert dst % 8 == 0  # written in whole 64-bit words
            self._write_bits(dst, dst_off, bits)
            if count_at:
                total = self._ints(count_at, 1, 8)[0] + int(bits.sum())
                self._write(count_at, np.array([total], np.int64))

    def rebase_ranges(self, table, count, blocks):
        rows = self._read(table, 64 * count).view("i8").reshape(count, 8)
        per = _kernels.REBASE_BLOCK_ITEMS
        self._check_blocks(rows[:, 7].tolist(), [-(-int(n) // per) for n in rows[:, 2]], blocks)
        for src, dst, n, width, delta, type_ids, deltas, _ in rows.tolist():
            if width == 16:  # views: the buffer index of out-of-line ones moves
                words = self._read(src, 16 * n).view("i4").reshape(-1, 4).copy()
                words[words[:, 0] > 12, 2] += delta
                self._write(dst, words)
                continue
            moved = self._ints(src, n, width)
            if type_ids:
                codes = self._ints(type_ids, n, 1) & 127
                moved += self._ints(deltas, 128, 4)[codes]
            else:
                moved += delta
            self._store(dst, moved, width)
