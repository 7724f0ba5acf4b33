"""Many device copies gathered while data is walked, and launched together.

Concatenating copies each buffer of each chunk of each column: a driver copy or a launch per
buffer makes the cost grow with the chunks, not the bytes. A ``CopyPlan`` gathers them, then
``run`` launches each kind once, whatever their number: byte ranges (``ag_copy_ranges``),
bitmaps assembled at any bit offsets, their set bits counted (``ag_copy_bit_ranges``), and
offsets or views moved by a delta (``ag_rebase_ranges``). The kinds write disjoint memory, so
their order does not matter. Their tables of ranges, the small constants they read and the
counters they add to reach the device in one host-to-device copy; the counters come back in
one copy.

``read_ranges`` reads many small device ranges with one launch and one copy back.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Optional, Union

from arrow_gpu import _kernels
from arrow_gpu._cuda import CudaBuffer

__all__ = ["Constant", "CopyPlan", "read_ranges"]

# The structs of the source (CopyRange, BitRange, RebaseRange), each ending in first_block.
_COPY_RANGE = struct.Struct("<4q")
_BIT_RANGE = struct.Struct("<8q")
_REBASE_RANGE = struct.Struct("<8q")
_ALIGN = 16


@dataclass(frozen=True)
class Constant:
    """Bytes a plan uploads with its tables; their device address is known when it runs."""

    offset: int  # in the constants' area


Address = Union[int, Constant]
_Resolver = Callable[[Address], int]


def _blocks(units: int, per_block: int) -> int:
    return -(-units // per_block)


def _padded(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN


class CopyPlan:
    """The copies of one operation, in device memory that no copy of it writes before it
    reads (sources are inputs, destinations new buffers). Nothing runs before ``run``."""

    def __init__(self, k: _kernels.DeviceKernels) -> None:
        self.k = k
        self._constants = bytearray()
        self._copies: list[tuple[int, Address, int]] = []
        # (src, src_off, dst, dst_off, nbits, counter or -1)
        self._bits: list[tuple[int, int, int, int, int, int]] = []
        # (src, dst, n, width, delta, type_ids, deltas)
        self._rebases: list[tuple[Address, int, int, int, int, int, Address]] = []
        self._counters = 0
        self._counts: Optional[list[int]] = None

    def constant(self, data: bytes) -> Constant:
        at = Constant(len(self._constants))
        self._constants += data + bytes(_padded(len(data)) - len(data))
        return at

    def copy(self, dst: int, src: Address, nbytes: int) -> None:
        if nbytes > 0:
            self._copies.append((dst, src, nbytes))

    def bitmap(self, pieces: Sequence[tuple[int, int, int]]) -> CudaBuffer:
        """A new bitmap of ``pieces`` (address, or 0 for bits all set; bit offset; bits) one
        after another."""
        return self._bitmap(pieces, counter=-1)

    def validity(self, pieces: Sequence[tuple[int, int, int]]
                 ) -> tuple[CudaBuffer, Callable[[], int]]:
        """A new validity bitmap of ``pieces`` (as ``bitmap``), and a function that gives its
        null count once the plan ran."""
        counter = self._counters
        self._counters += 1
        out = self._bitmap(pieces, counter)
        nbits = sum(bits for _, _, bits in pieces)
        return out, lambda: nbits - self._set_bits(counter)

    def _bitmap(self, pieces: Sequence[tuple[int, int, int]], counter: int) -> CudaBuffer:
        nbits = sum(bits for _, _, bits in pieces)
        out = self.k.alloc(8 * _blocks(nbits, 64))  # the kernel writes whole 64-bit words
        position = 0
        for src, src_off, bits in pieces:
            if bits > 0:
                self._bits.append((src, src_off, out.address, position, bits, counter))
                position += bits
        return out

    def rebase(self, dst: int, src: Address, n: int, width: int, delta: int = 0,
               type_ids: int = 0, deltas: Address = 0) -> None:
        """``n`` items of ``src`` to ``dst``, moved by ``delta`` (see ``ag_rebase_ranges``)."""
        if n > 0:
            self._rebases.append((src, dst, n, width, delta, type_ids, deltas))

    def run(self) -> None:
        """Launch the copies, and wait for them (the tables are freed when this returns)."""
        if not (self._copies or self._bits or self._rebases):
            self._counts = [0] * self._counters  # bitmaps of no bits
            return
        k = self.k
        counters = 8 * self._counters
        sections = [counters, len(self._constants), len(self._copies) * _COPY_RANGE.size,
                    len(self._bits) * _BIT_RANGE.size, len(self._rebases) * _REBASE_RANGE.size]
        upload = k.alloc(sum(_padded(size) for size in sections))
        starts = [upload.address]
        for size in sections[:-1]:
            starts.append(starts[-1] + _padded(size))
        counters_at, constants_at, copies_at, bits_at, rebases_at = starts

        def resolved(address: Address) -> int:
            return constants_at + address.offset if isinstance(address, Constant) else address

        copy_table, copy_blocks = self._copy_table(resolved)
        bit_table, bit_blocks = self._bit_table(counters_at)
        rebase_table, rebase_blocks = self._rebase_table(resolved)
        blob = b"".join(data + bytes(_padded(len(data)) - len(data)) for data in (
            bytes(counters), bytes(self._constants), copy_table, bit_table, rebase_table))
        k.write(upload.address, blob)
        if copy_blocks:
            k.copy_ranges(copies_at, len(self._copies), copy_blocks)
        if bit_blocks:
            k.copy_bit_ranges(bits_at, len(self._bits), bit_blocks)
        if rebase_blocks:
            k.rebase_ranges(rebases_at, len(self._rebases), rebase_blocks)
        if counters:
            data = k.read(counters_at, counters)  # waits for the launches
            self._counts = [value for (value,) in struct.iter_unpack("<q", data)]
        else:
            k.finish()

    def _set_bits(self, counter: int) -> int:
        if self._counts is None:
            raise RuntimeError("the plan has not run: its counts are not known yet")
        return self._counts[counter]

    def _copy_table(self, resolved: _Resolver) -> tuple[bytes, int]:
        rows = []
        blocks = 0
        for dst, src, nbytes in self._copies:
            rows.append(_COPY_RANGE.pack(resolved(src), dst, nbytes, blocks))
            blocks += _blocks(nbytes, _kernels.COPY_BLOCK_BYTES)
        return b"".join(rows), blocks

    def _bit_table(self, counters_at: int) -> tuple[bytes, int]:
        rows = []
        blocks = 0
        for src, src_off, dst, dst_off, nbits, counter in self._bits:
            count = 0 if counter < 0 else counters_at + 8 * counter
            rows.append(_BIT_RANGE.pack(src, src_off, dst, dst_off, nbits, blocks, count, 0))
            # The words whose first bit this range holds; a range may hold none.
            words = _blocks(dst_off + nbits, 64) - _blocks(dst_off, 64)
            blocks += _blocks(words, _kernels.BIT_BLOCK_WORDS)
        return b"".join(rows), blocks

    def _rebase_table(self, resolved: _Resolver) -> tuple[bytes, int]:
        rows = []
        blocks = 0
        for src, dst, n, width, delta, type_ids, deltas in self._rebases:
            rows.append(_REBASE_RANGE.pack(resolved(src), dst, n, width, delta, type_ids,
                                           resolved(deltas), blocks))
            blocks += _blocks(n, _kernels.REBASE_BLOCK_ITEMS)
        return b"".join(rows), blocks



def read_ranges(k: _kernels.DeviceKernels, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
    """The bytes of each device range (address, nbytes): one launch, one copy back."""
    total = sum(nbytes for _, nbytes in ranges)
    scratch = k.alloc(total)
    plan = CopyPlan(k)
    position = 0
    for src, nbytes in ranges:
        plan.copy(scratch.address + position, src, nbytes)
        position += nbytes
    plan.run()
    data = k.read(scratch.address, total)
    out = []
    position = 0
    for _, nbytes in ranges:
        out.append(data[position:position + nbytes])
        position += nbytes
    return out
