"""Many device copies gathered while data is walked, and launched together.

Concatenating copies each buffer of each chunk of each column: a driver copy or a launch per
buffer makes the cost grow with the chunks, not the bytes. A ``CopyPlan`` gathers them, then
``run`` launches each kind once, whatever their number: byte ranges (``ag_copy_ranges``),
bitmaps assembled at any bit offsets, their set bits counted (``ag_copy_bit_ranges``), and
offsets or views moved by a delta (``ag_rebase_ranges``). The kinds write disjoint memory, so
their order does not matter. Their tables of ranges, the small constants they read and the
counters they add to reach the device in one host-to-device copy; the counters come back in
one copy, and with them any device ranges the plan reads back (``readback``): a check that
needs device bytes costs no round trip of its own.

Ranges come one at a time, or a whole column of chunks at once as NumPy columns (``copies``,
``rebases``, ``bitmap``): the tables are built by NumPy, so the host's work grows with the
columns, not the chunks.

Planning may need device bytes before it can go on (where each chunk's items start and end
decides what is copied): ``read_first`` asks for them, and ``run`` reads every ask of a round
in one round trip before it launches. ``read_ranges`` reads many small device ranges with one
launch and one copy back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np
import numpy.typing as npt

from arrow_gpu import _kernels
from arrow_gpu._cuda import CudaBuffer

__all__ = ["Constant", "CopyPlan", "read_ranges", "starts"]

_ALIGN = 16


@dataclass(frozen=True)
class Constant:
    """Bytes a plan uploads with its tables; their device address is known when it runs."""

    offset: int  # in the constants' area


Address = Union[int, Constant]
_Resolver = Callable[[Address], int]
_Ints = npt.NDArray[np.int64]
_Column = Union[int, _Ints]  # one value for every range, or one per range


def starts(sizes: _Ints) -> _Ints:
    """Where each of ``sizes`` starts when they are laid one after another."""
    ends = np.cumsum(sizes, dtype=np.int64)
    return ends - sizes


def _blocks(units: _Ints, per_block: int) -> _Ints:
    return -(-units // per_block)


def _padded(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN


class _Ranges:
    """The ranges of one kernel: the fields of its struct before ``first_block``, a row per
    range. Ranges of nothing (``size`` field 0) are dropped as they come."""

    def __init__(self, fields: int, size: int) -> None:
        self._fields = fields
        self._size = size
        self._rows: list[tuple[Address, ...]] = []  # one at a time: may name Constants
        self._columns: list[_Ints] = []  # many at once, (fields, ranges) each
        self.count = 0

    def add(self, *row: Address) -> None:
        if row[self._size] != 0:
            self._rows.append(row)
            self.count += 1

    def add_many(self, *columns: _Column) -> None:
        kept = np.asarray(columns[self._size]) != 0
        count = int(np.count_nonzero(kept))
        table = np.empty((self._fields, count), np.int64)
        every = count == kept.size  # the common case: no range is empty, none to drop
        for field, column in zip(table, columns):
            field[:] = column if every or not isinstance(column, np.ndarray) else column[kept]
        self._columns.append(table)
        self.count += table.shape[1]

    def fields(self, resolved: _Resolver) -> _Ints:
        """Every range, (fields, ranges)."""
        one = np.array([[resolved(value) for value in row] for row in self._rows], np.int64)
        return np.concatenate([one.reshape(-1, self._fields).T, *self._columns], axis=1)


def _fill_table(rows: _Ints, before: _Ints, blocks_of: _Ints) -> int:
    """Fill a kernel's array of structs, ``rows`` (a row per range): the fields ``before``
    (fields, ranges), then each range's first block (its ranges before it need ``blocks_of``
    each); the fields after are the caller's. Returns the blocks of all."""
    ends = np.cumsum(blocks_of, dtype=np.int64)
    rows[:, :len(before)] = before.T
    rows[:, len(before)] = ends - blocks_of
    return int(ends[-1]) if len(ends) else 0


class CopyPlan:
    """The copies of one operation, in device memory that no copy of it writes before it
    reads (sources are inputs, destinations new buffers). Nothing runs before ``run``."""

    def __init__(self, k: _kernels.DeviceKernels) -> None:
        self.k = k
        self._constants = bytearray()
        self._copies = _Ranges(3, size=2)  # (src, dst, nbytes)
        # (src, src_off, dst, dst_off, nbits, counter or -1)
        self._bits = _Ranges(6, size=4)
        # (src, dst, n, width, delta, type_ids, deltas)
        self._rebases = _Ranges(7, size=2)
        self._counters = 0
        self._counts: Optional[list[int]] = None
        self._reads = _Ranges(2, size=1)  # (src, nbytes): copied into the readback area
        self._read_bytes = 0
        self._read_back: Optional[bytes] = None
        self._asks: list[tuple[_Ints, _Ints, Callable[[bytes], None]]] = []

    def constant(self, data: bytes) -> Constant:
        at = Constant(len(self._constants))
        self._constants += data + bytes(_padded(len(data)) - len(data))
        return at

    def copy(self, dst: int, src: Address, nbytes: int) -> None:
        self._copies.add(src, dst, nbytes)

    def copies(self, dst: _Column, src: _Column, nbytes: _Column) -> None:
        """Many ``copy``, one per item of the columns."""
        self._copies.add_many(src, dst, nbytes)

    def bitmap(self, sources: _Ints, offsets: _Ints, lengths: _Ints) -> CudaBuffer:
        """A new bitmap of pieces one after another: ``lengths`` bits of ``sources`` (0 for
        bits all set) from their bit ``offsets``."""
        return self._bitmap(sources, offsets, lengths, counter=-1)

    def validity(self, sources: _Ints, offsets: _Ints, lengths: _Ints
                 ) -> tuple[CudaBuffer, Callable[[], int]]:
        """A new validity bitmap of pieces (as ``bitmap``), and a function that gives its
        null count once the plan ran."""
        counter = self._counters
        self._counters += 1
        out = self._bitmap(sources, offsets, lengths, counter)
        nbits = int(lengths.sum())
        return out, lambda: nbits - self._set_bits(counter)

    def _bitmap(self, sources: _Ints, offsets: _Ints, lengths: _Ints,
                counter: int) -> CudaBuffer:
        nbits = int(lengths.sum())
        out = self.k.alloc(8 * -(-nbits // 64))  # the kernel writes whole 64-bit words
        self._bits.add_many(sources, offsets, out.address, starts(lengths), lengths, counter)
        return out

    def rebase(self, dst: int, src: Address, n: int, width: int, delta: int = 0,
               type_ids: int = 0, deltas: Address = 0) -> None:
        """``n`` items of ``src`` to ``dst``, moved by ``delta`` (see ``ag_rebase_ranges``)."""
        self._rebases.add(src, dst, n, width, delta, type_ids, deltas)

    def rebases(self, dst: _Column, src: _Column, n: _Column, width: int,
                delta: _Column) -> None:
        """Many ``rebase`` (without type ids), one per item of the columns."""
        self._rebases.add_many(src, dst, n, width, delta, 0, 0)

    def readback(self, src: _Ints, nbytes: _Ints) -> Callable[[], bytes]:
        """Device ranges (``src``, ``nbytes``) that ``run`` copies back with the counters: a
        function that gives their bytes, one range after another, once the plan ran. The
        ranges must be inputs of the plan (no copy of it writes them)."""
        start = self._read_bytes
        self._reads.add_many(src, nbytes)
        self._read_bytes += int(nbytes.sum())
        end = self._read_bytes
        return lambda: self._read_data()[start:end]

    def read_first(self, src: _Ints, nbytes: _Ints, then: Callable[[bytes], None]) -> None:
        """Device ranges (``src``, ``nbytes``) the planning needs before it can go on:
        ``then`` gets their bytes, one range after another, when ``run`` starts, and may
        plan more (or ask for more, read in a next round). The asks of a round are read
        together, in one round trip."""
        self._asks.append((src, nbytes, then))

    def run(self) -> None:
        """Read what the planning asked for, launch the copies, and wait for them (the
        tables are freed when this returns)."""
        while self._asks:
            asks, self._asks = self._asks, []
            data = read_ranges(self.k, np.concatenate([src for src, _, _ in asks]),
                               np.concatenate([nbytes for _, nbytes, _ in asks]))
            position = 0
            for _, nbytes, then in asks:
                size = int(nbytes.sum())
                then(data[position:position + size])
                position += size
        if not (self._copies.count or self._bits.count or self._rebases.count
                or self._reads.count):
            self._counts = [0] * self._counters  # bitmaps of no bits
            self._read_back = b""
            return
        k = self.k
        counters = 8 * self._counters
        # What goes up first, then what comes back: counters, and the readback area after.
        sections = [len(self._constants), 32 * (self._copies.count + self._reads.count),
                    64 * self._bits.count, 64 * self._rebases.count, counters,
                    self._read_bytes]
        upload = k.alloc(sum(_padded(size) for size in sections))
        section_starts = [upload.address]
        for size in sections[:-1]:
            section_starts.append(section_starts[-1] + _padded(size))
        constants_at, copies_at, bits_at, rebases_at, counters_at, readback_at = section_starts

        def resolved(address: Address) -> int:
            return constants_at + address.offset if isinstance(address, Constant) else address

        if self._reads.count:
            src, nbytes = self._reads.fields(resolved)
            self._copies.add_many(src, readback_at + starts(nbytes), nbytes)
        # Everything that goes up, in one array of 64-bit words: the counters start at 0.
        blob = np.zeros((readback_at - upload.address) // 8, "<i8")

        def section(at: int, width: int, count: int) -> _Ints:
            first = (at - upload.address) // 8
            return blob[first:first + width * count].reshape(count, width)

        blob.view(np.uint8)[:len(self._constants)] = np.frombuffer(self._constants, np.uint8)
        copy_blocks = self._copy_table(section(copies_at, 4, self._copies.count), resolved)
        bit_blocks = self._bit_table(section(bits_at, 8, self._bits.count), resolved,
                                     counters_at)
        rebase_blocks = self._rebase_table(section(rebases_at, 8, self._rebases.count),
                                           resolved)
        k.write(upload.address, blob.tobytes())
        if copy_blocks:
            k.copy_ranges(copies_at, self._copies.count, copy_blocks)
        if bit_blocks:
            k.copy_bit_ranges(bits_at, self._bits.count, bit_blocks)
        if rebase_blocks:
            k.rebase_ranges(rebases_at, self._rebases.count, rebase_blocks)
        if counters or self._read_bytes:
            # One copy back, which waits for the launches.
            data = k.read(counters_at, readback_at - counters_at + self._read_bytes)
            self._counts = np.frombuffer(data, "<i8", self._counters).tolist()
            self._read_back = data[readback_at - counters_at:]
        else:
            k.finish()

    def _set_bits(self, counter: int) -> int:
        if self._counts is None:
            raise RuntimeError("the plan has not run: its counts are not known yet")
        return self._counts[counter]

    def _read_data(self) -> bytes:
        if self._read_back is None:
            raise RuntimeError("the plan has not run: its readback is not known yet")
        return self._read_back

    # Each fills its kernel's table (see the structs of _kernel_source) and gives its blocks.

    def _copy_table(self, rows: _Ints, resolved: _Resolver) -> int:
        fields = self._copies.fields(resolved)  # src, dst, nbytes
        return _fill_table(rows, fields, _blocks(fields[2], _kernels.COPY_BLOCK_BYTES))

    def _bit_table(self, rows: _Ints, resolved: _Resolver, counters_at: int) -> int:
        fields = self._bits.fields(resolved)  # src, src_off, dst, dst_off, nbits, counter
        dst_off, nbits, counter = fields[3], fields[4], fields[5]
        # The words whose first bit a range holds; a range may hold none.
        words = _blocks(dst_off + nbits, 64) - _blocks(dst_off, 64)
        blocks = _fill_table(rows, fields[:5], _blocks(words, _kernels.BIT_BLOCK_WORDS))
        rows[:, 6] = np.where(counter < 0, 0, counters_at + 8 * counter)  # then an unused 0
        return blocks

    def _rebase_table(self, rows: _Ints, resolved: _Resolver) -> int:
        fields = self._rebases.fields(resolved)  # src, dst, n, width, delta, type_ids, deltas
        return _fill_table(rows, fields, _blocks(fields[2], _kernels.REBASE_BLOCK_ITEMS))


def read_ranges(k: _kernels.DeviceKernels, src: _Ints, nbytes: _Ints) -> bytes:
    """The bytes of each device range (``src``, ``nbytes``) one after another: one launch,
    one copy back."""
    plan = CopyPlan(k)
    data = plan.readback(src, nbytes)
    plan.run()
    return data()
