"""Many device copies gathered while data is walked, and launched together.

Concatenating copies each buffer of each chunk of each column: a driver copy or a launch per
buffer makes the cost grow with the chunks, not the bytes. A ``CopyPlan`` gathers them, then
``launch`` launches each kind once, whatever their number: byte ranges (``ag_copy_ranges``),
bitmaps assembled at any bit offsets, their set bits counted (``ag_copy_bit_ranges``), and
offsets or views moved by a delta (``ag_rebase_ranges``). The kinds write disjoint memory, so
their order does not matter. Their tables of ranges, the small constants they read and the
counters they add to reach the device in one host-to-device copy; the counters come back in
one copy, and with them any device ranges the plan reads back (``readback``): a check that
needs device bytes costs no round trip of its own.

Ranges come one at a time, or a whole column of chunks at once as NumPy columns (``copies``,
``rebases``, ``bitmap``), kept as they came until ``launch`` writes them into the kernels'
tables in one native walk: the host's work grows with the columns, not the chunks.

Planning may need device bytes before it can go on (where each chunk's items start and end
decides what is copied): ``read_first`` asks for them, and ``answer`` reads every ask of a
round in one round trip. A plan may ``launch`` what it gathered before it is complete: the
host uploads the next tables in the device's order without waiting, so the device copies
while the host plans; ``run`` then waits once, and the counters and readbacks of every
launch come back in one copy. ``read_ranges`` reads many small device ranges with one
launch and one copy back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np
import numpy.typing as npt

from arrow_gpu._compute import kernels
from arrow_gpu._cuda import CudaBuffer, _lay_blocks, _read_ranges, _write_ranges

__all__ = ["Constant", "CopyPlan", "read_ranges", "starts"]

_ALIGN = 16


@dataclass(frozen=True)
class Constant:
    """Bytes a plan uploads with its tables; their device address is known when it runs."""

    offset: int  # in the constants' area


@dataclass(frozen=True)
class _Counter:
    """A counter a plan's bitmap adds its set bits to: its device address is known when the
    plan launches."""

    index: int


Address = Union[int, Constant, _Counter]
_Resolver = Callable[[Address], int]
_Ints = npt.NDArray[np.int64]
_Column = Union[Address, _Ints]  # one value for every range, or one per range


def starts(sizes: _Ints) -> _Ints:
    """Where each of ``sizes`` starts when they are laid one after another."""
    ends = sizes.cumsum()
    return ends - sizes


def _padded(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN


class _Ranges:
    """The ranges of one kernel, a row per range in its table: their fields, as they came
    (a column of them at once, or one range as a piece of one), are written into the
    table's ``columns`` at ``launch`` (the table's builder fills the others), in one native
    walk. Columns are kept, not copied: nothing changes them once given. Ranges of nothing
    (``size`` field 0) are dropped as they come."""

    def __init__(self, columns: tuple[int, ...], size: int) -> None:
        self._columns = columns
        self._size = size
        self._pieces: list[tuple[int, tuple[_Column, ...]]] = []
        self.count = 0

    def add(self, *row: Address) -> None:
        if row[self._size] != 0:
            self._pieces.append((1, row))
            self.count += 1

    def add_many(self, *columns: _Column) -> None:
        sizes = np.asarray(columns[self._size])
        count = int(np.count_nonzero(sizes))
        if not count:
            return
        if count < sizes.size:
            kept = sizes != 0
            columns = tuple(column[kept] if isinstance(column, np.ndarray) else column
                            for column in columns)
        self._pieces.append((count, columns))
        self.count += count

    def write(self, rows: _Ints, resolved: _Resolver) -> None:
        """Write every range's fields into ``rows`` (its table, a row per range)."""
        _write_ranges(rows, self._columns, self._pieces, resolved)


@dataclass(frozen=True)
class _Launched:
    """A launch's tables, alive until the plan waited for it, and where its counters
    (``counters`` of them, the plan's first) and its readback area are."""

    upload: CudaBuffer
    counters_at: int
    counters: int
    readback_at: int
    read_bytes: int


class CopyPlan:
    """The copies of one operation, in device memory that no copy of it writes before it
    reads (sources are inputs, destinations new buffers). Nothing runs before ``launch``
    (or ``run``, which launches what is left and waits)."""

    def __init__(self, k: kernels.DeviceKernels) -> None:
        self.k = k
        self._constants = bytearray()
        self._copies, self._bits, self._rebases, self._reads = _kinds()
        self._counters = 0
        self._counts: Optional[list[int]] = None
        self._read_bytes = 0
        self._read_back: Optional[bytes] = None
        self._asks: list[tuple[_Ints, _Ints, Callable[[bytes], None]]] = []
        self._read_bytes_launched = 0
        self._launched: list[_Launched] = []
        self.unlaunched_bytes = 0  # what the ranges gathered since the last launch write

    def __enter__(self) -> CopyPlan:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._launched:  # planning failed after launches: their memory goes once done
            self.k.finish()

    def constant(self, data: bytes) -> Constant:
        at = Constant(len(self._constants))
        self._constants += data + bytes(_padded(len(data)) - len(data))
        return at

    def copy(self, dst: int, src: Address, nbytes: int) -> None:
        self._copies.add(src, dst, nbytes)
        self.unlaunched_bytes += nbytes

    def copies(self, dst: _Column, src: _Column, nbytes: _Ints) -> None:
        """Many ``copy``, one per item of the columns."""
        self._copies.add_many(src, dst, nbytes)
        self.unlaunched_bytes += int(nbytes.sum())

    def bitmap(self, nbits: int, sources: _Ints, offsets: _Ints, lengths: _Ints,
               positions: _Ints) -> CudaBuffer:
        """A new bitmap of ``nbits`` bits, of pieces: ``lengths`` bits of ``sources`` (0 for
        bits all set) from their bit ``offsets``, to its bit ``positions``."""
        return self._bitmap(nbits, sources, offsets, lengths, positions, counter=0)

    def validity(self, nbits: int, sources: _Ints, offsets: _Ints, lengths: _Ints,
                 positions: _Ints) -> tuple[CudaBuffer, Callable[[], int]]:
        """A new validity bitmap of pieces (as ``bitmap``), and a function that gives its
        null count once the plan ran."""
        counter = self._counters
        self._counters += 1
        out = self._bitmap(nbits, sources, offsets, lengths, positions, _Counter(counter))
        return out, lambda: nbits - self._set_bits(counter)

    def _bitmap(self, nbits: int, sources: _Ints, offsets: _Ints, lengths: _Ints,
                positions: _Ints, counter: Address) -> CudaBuffer:
        out = self.k.alloc(8 * -(-nbits // 64))  # the kernel writes whole 64-bit words
        self._bits.add_many(sources, offsets, out.address, positions, lengths, counter)
        self.unlaunched_bytes += nbits // 8
        return out

    def rebase(self, dst: int, src: Address, n: int, width: int, delta: int = 0,
               type_ids: int = 0, deltas: Address = 0) -> None:
        """``n`` items of ``src`` to ``dst``, moved by ``delta`` (see ``ag_rebase_ranges``)."""
        self._rebases.add(src, dst, n, width, delta, type_ids, deltas)
        self.unlaunched_bytes += n * width

    def rebases(self, dst: _Column, src: _Column, n: _Ints, width: int,
                delta: _Column) -> None:
        """Many ``rebase`` (without type ids), one per item of the columns."""
        self._rebases.add_many(src, dst, n, width, delta, 0, 0)
        self.unlaunched_bytes += int(n.sum()) * width

    def readback(self, src: _Ints, nbytes: _Ints) -> Callable[[], bytes]:
        """Device ranges (``src``, ``nbytes``) that ``run`` copies back with the counters: a
        function that gives their bytes, one range after another, once the plan ran. The
        ranges must be inputs of the plan (no copy of it writes them)."""
        start = self._read_bytes
        # Where they go in the readback area, known at launch: from its start until then.
        self._reads.add_many(src, start - self._read_bytes_launched + starts(nbytes), nbytes)
        self._read_bytes += int(nbytes.sum())
        end = self._read_bytes
        return lambda: self._read_data()[start:end]

    def read_first(self, src: _Ints, nbytes: _Ints, then: Callable[[bytes], None]) -> None:
        """Device ranges (``src``, ``nbytes``) the planning needs before it can go on:
        ``then`` gets their bytes, one range after another, when ``run`` starts, and may
        plan more (or ask for more, read in a next round). The asks of a round are read
        together, in one round trip."""
        self._asks.append((src, nbytes, then))

    def answer(self) -> None:
        """Read what the planning asked for (``read_first``), every ask of a round in one
        round trip, and give it to the planning, until it asks no more. The read waits for
        the launches before it: ask before you ``launch``."""
        while self._asks:
            asks, self._asks = self._asks, []
            data = read_ranges(self.k, np.concatenate([src for src, _, _ in asks]),
                               np.concatenate([nbytes for _, nbytes, _ in asks]))
            position = 0
            for _, nbytes, then in asks:
                size = int(nbytes.sum())
                then(data[position:position + size])
                position += size

    def launch(self) -> None:
        """Launch the ranges gathered so far, without waiting for them: while the device
        copies them, the planning of the next ones goes on."""
        bits, rebases = self._bits, self._rebases
        copies = self._copies.count + self._reads.count
        if not (copies or bits.count or rebases.count):
            return
        k = self.k
        read_bytes = self._read_bytes - self._read_bytes_launched
        # Where each part goes, in 64-bit words from the upload's start, every one 16-byte
        # aligned (constants are padded, rows are 4 or 8 words): the constants, the tables,
        # the counters (every counter so far, from 0: the launches' sum) go up; they and
        # the readback area after them come back.
        copies_word = len(self._constants) // 8
        bits_word = copies_word + 4 * copies
        rebases_word = bits_word + 8 * bits.count
        counters_word = rebases_word + 8 * rebases.count
        readback_word = counters_word + 2 * -(-self._counters // 2)
        upload = k.alloc(8 * readback_word + read_bytes)
        at: int = upload.address
        counters_at, readback_at = at + 8 * counters_word, at + 8 * readback_word

        def resolved(address: Address) -> int:
            if isinstance(address, Constant):
                return at + address.offset  # the constants come first
            if isinstance(address, _Counter):
                return counters_at + 8 * address.index
            return address

        blob = np.zeros(readback_word, "<i8")  # what goes up: the counters start at 0
        blob[:copies_word] = np.frombuffer(self._constants, "<i8")
        # A kind without ranges costs no table (each costs a few NumPy calls: host time).
        copy_blocks = bit_blocks = rebase_blocks = 0
        if copies:
            copy_blocks = self._copy_table(blob[copies_word:bits_word].reshape(copies, 4),
                                           resolved, readback_at)
        if bits.count:
            bit_blocks = self._bit_table(blob[bits_word:rebases_word].reshape(bits.count, 8),
                                         resolved)
        if rebases.count:
            rebase_blocks = self._rebase_table(
                blob[rebases_word:counters_word].reshape(rebases.count, 8), resolved)
        k.write(at, blob.tobytes())
        if copy_blocks:
            k.copy_ranges(at + 8 * copies_word, copies, copy_blocks)
        if bit_blocks:
            k.copy_bit_ranges(at + 8 * bits_word, bits.count, bit_blocks)
        if rebase_blocks:
            k.rebase_ranges(at + 8 * rebases_word, rebases.count, rebase_blocks)
        self._launched.append(_Launched(upload, counters_at, self._counters, readback_at,
                                        read_bytes))
        self._copies, self._bits, self._rebases, self._reads = _kinds()
        self._read_bytes_launched = self._read_bytes
        self.unlaunched_bytes = 0

    def run(self) -> None:
        """Answer the asks, launch what is left, and wait for every launch: then the
        counts and the readback are known (and the tables freed)."""
        self.answer()
        self.launch()
        launched, self._launched = self._launched, []
        returning = [launch for launch in launched if launch.counters or launch.read_bytes]
        spans = [(launch.counters_at, launch.readback_at - launch.counters_at + launch.read_bytes)
                 for launch in returning]
        data: list[bytes] = []
        if not spans:
            self.k.finish()
        elif len(spans) == 1:  # one copy back, which waits for the launches
            data = [self.k.read(*spans[0])]
        else:  # gathered on the device first, in the launches' order: one copy back still
            sizes = [size for _, size in spans]
            gathered = self.k.alloc(sum(sizes))
            position = 0
            for address, size in spans:
                self.k.copy(gathered.address + position, address, size)
                position += size
            joined = self.k.read(gathered.address, position)
            data = [joined[start:start + size] for start, size in zip(
                starts(np.array(sizes, np.int64)).tolist(), sizes)]
        counts = np.zeros(self._counters, np.int64)
        read_back = []
        for launch, piece in zip(returning, data):
            counts[:launch.counters] += np.frombuffer(piece, "<i8", launch.counters)
            read_back.append(piece[launch.readback_at - launch.counters_at:])
        self._counts = counts.tolist()
        self._read_back = b"".join(read_back)

    def _set_bits(self, counter: int) -> int:
        if self._counts is None:
            raise RuntimeError("the plan has not run: its counts are not known yet")
        return self._counts[counter]

    def _read_data(self) -> bytes:
        if self._read_back is None:
            raise RuntimeError("the plan has not run: its readback is not known yet")
        return self._read_back

    # Each fills its kernel's table (see the structs of copies.cu) and gives its blocks,
    # laid out by the native plans' code.

    def _copy_table(self, rows: _Ints, resolved: _Resolver, readback_at: int) -> int:
        # src, dst, nbytes, first_block: the copies, then the reads into the readback area
        self._copies.write(rows, resolved)
        if self._reads.count:
            reads = rows[self._copies.count:]
            self._reads.write(reads, resolved)
            reads[:, 1] += readback_at
        blocks: int = _lay_blocks("copy", rows)
        return blocks

    def _bit_table(self, rows: _Ints, resolved: _Resolver) -> int:
        # src, src_off, dst, dst_off, nbits, first_block, counter (its address, or 0), unused
        self._bits.write(rows, resolved)
        blocks: int = _lay_blocks("bits", rows)
        return blocks

    def _rebase_table(self, rows: _Ints, resolved: _Resolver) -> int:
        # src, dst, n, width, delta, type_ids, deltas, first_block
        self._rebases.write(rows, resolved)
        blocks: int = _lay_blocks("rebase", rows)
        return blocks


def _kinds() -> tuple[_Ranges, _Ranges, _Ranges, _Ranges]:
    """A plan's ranges of each kind, none yet: copies, bitmaps' pieces, rebases, reads."""
    return (_Ranges((0, 1, 2), size=2),  # src, dst, nbytes
            _Ranges((0, 1, 2, 3, 4, 6), size=4),  # src, src_off, dst, dst_off, nbits, counter
            _Ranges((0, 1, 2, 3, 4, 5, 6), size=2),  # src, dst, n, width, delta, type_ids, deltas
            _Ranges((0, 1, 2), size=2))  # src, dst in the readback area, nbytes


def read_ranges(k: kernels.DeviceKernels, src: _Ints, nbytes: _Ints) -> bytes:
    """The bytes of each device range (``src``, ``nbytes``) one after another: one launch,
    one copy back, planned natively (as the native concatenation reads its ranges)."""
    data: bytes = _read_ranges(k.select_kernels, np.ascontiguousarray(src, np.int64),
                               np.ascontiguousarray(nbytes, np.int64), k.stream)
    return data
