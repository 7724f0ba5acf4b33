"""What moves a stream's batches: a thread that moves each batch ahead of the consumer
(small host batches that arrive together in groups, one copy for a group), or the consumer's
own thread where the source copies its batches itself. ``arrow_gpu.streaming``'s readers
read through them.
"""

from __future__ import annotations

import collections
import copy
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import pyarrow as pa

#: Moves a record batch or a table (to the device, or back to the host), complete when it
#: returns.
Move = Callable[[Any], Any]


#: Small host batches that arrive together share one copy and one handoff to the consumer:
#: up to this many bytes, this many batches, or this long reading them.
GROUP_BYTES = 1 << 20
GROUP_BATCHES = 64
GROUP_SECONDS = 0.001


def _host_bytes(batch: pa.RecordBatch) -> int | None:
    """The bytes of a batch's buffers when they are host memory; None for device data."""
    try:
        nbytes: int = batch.get_total_buffer_size()
    except NotImplementedError:  # pyarrow counts host data only; counting must not read it
        return None
    return nbytes


def buffer_sizes(batch: pa.RecordBatch) -> int:
    """The sizes of a device batch's buffers, from metadata only."""
    return sum(buffer.size for column in batch.columns for buffer in column.buffers()
               if buffer is not None)


class _End:
    """What the producer leaves last in the queue: the end of the source, or its error."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


def _raise_at_consumer(error: BaseException) -> NoReturn:
    """Raise ``error``, which happened on the producer thread, on the consumer's: as an
    exception of the same type whose cause is the original (with the producer's traceback)."""
    try:
        again = copy.copy(error)
    except Exception:  # an exception type that cannot be rebuilt from its arguments
        raise error from None
    raise again from error


def check_schema(batch: pa.RecordBatch, schema: pa.Schema, index: int) -> None:
    if not batch.schema.equals(schema):
        raise pa.ArrowInvalid(
            f"batch {index} of the stream has another schema than the stream's: a device "
            f"reader's batches share one schema; cast them to one first (stream: "
            f"{schema.to_string(show_schema_metadata=False)!r}; batch {index}: "
            f"{batch.schema.to_string(show_schema_metadata=False)!r})")


def groups(source: Iterator[pa.RecordBatch], schema: pa.Schema
            ) -> Iterator[tuple[list[pa.RecordBatch], int | None]]:
    """The source's batches, checked, in groups to move at once, with their host bytes (None
    for device data).

    Small host batches that the source yields quickly share a group (see ``GROUP_BYTES``).
    The first batch goes alone (it is the one a consumer waits for), and so does every batch
    once a read took ``GROUP_SECONDS`` or more: a slow source's batches are never held back
    waiting for the next one.
    """
    group: list[pa.RecordBatch] = []
    group_bytes = 0
    started = 0.0
    slow = False
    batches = enumerate(source)
    while True:
        asked = time.perf_counter()
        try:
            index, batch = next(batches)
            check_schema(batch, schema, index)
        except StopIteration:
            break
        except BaseException:
            if group:  # the batches before the error reach the consumer first
                yield group, group_bytes
            raise
        now = time.perf_counter()
        slow = slow or now - asked >= GROUP_SECONDS
        nbytes = _host_bytes(batch)
        if (index == 0 or slow or nbytes is None or nbytes >= GROUP_BYTES
                or batch.num_rows == 0 or not batch.num_columns):
            if group:
                yield group, group_bytes
                group, group_bytes = [], 0
            alone = [batch]
            del batch  # the group alone holds it, so the consumer's move frees it
            yield alone, nbytes
            del alone  # before the next read
            continue
        if not group:
            started = now
        group.append(batch)
        del batch
        group_bytes += nbytes
        if (group_bytes >= GROUP_BYTES or len(group) >= GROUP_BATCHES
                or now - started >= GROUP_SECONDS):
            yield group, group_bytes
            group, group_bytes = [], 0
    if group:
        yield group, group_bytes


def move_batches(group: list[pa.RecordBatch], move: Move) -> list[pa.RecordBatch]:
    """The batches of ``group`` moved, several in one transfer (the batches stay as they
    were: a table's chunks)."""
    if len(group) == 1:
        return [move(group[0])]
    moved: list[pa.RecordBatch] = move(pa.Table.from_batches(group)).to_batches()
    return moved


class Prefetcher:
    """A thread that takes batches from a source, moves each, and hands them to a consumer
    through a queue of at most ``depth`` moved batches.

    It holds no reference to the object that owns it, so that object can be collected (and
    close it) while the thread waits.
    """

    def __init__(self, source: Iterator[pa.RecordBatch], schema: pa.Schema, move: Move,
                 depth: int, on_moved: Callable[[int], None], name: str,
                 close_source: Callable[[], object] | None = None,
                 interrupt_source: Callable[[], object] | None = None) -> None:
        self._condition = threading.Condition()
        self._ready: collections.deque[pa.RecordBatch | _End] = collections.deque()
        self._depth = depth
        self._stopping = False
        self._closed = False
        self._interrupt_source = interrupt_source
        self._thread = threading.Thread(
            target=self._produce, args=(source, schema, move, on_moved, close_source),
            name=name, daemon=True)
        self._start_lock = threading.Lock()

    def _produce(self, source: Iterator[pa.RecordBatch], schema: pa.Schema, move: Move,
                 on_moved: Callable[[int], None],
                 close_source: Callable[[], object] | None) -> None:
        end = _End()
        try:
            for group, nbytes in groups(source, schema):
                if self._stopping:
                    break
                moved = move_batches(group, move)
                if nbytes is None:  # device to device
                    nbytes = sum(buffer_sizes(batch) for batch in moved)
                del group  # host memory held stays one group, however far the consumer lags
                on_moved(nbytes)
                with self._condition:
                    while len(self._ready) >= self._depth and not self._stopping:
                        self._condition.wait()
                    if self._stopping:
                        break
                    self._ready.extend(moved)
                    self._condition.notify_all()
                del moved
        except BaseException as error:  # re-raised at the consumer, Ctrl-C included
            end = _End(error)
        finally:
            if close_source is not None:
                try:
                    close_source()
                except Exception as error:
                    end = end if end.error is not None else _End(error)
            with self._condition:
                self._ready.append(end)
                self._condition.notify_all()

    def next(self) -> pa.RecordBatch:
        """The next moved batch; StopIteration at the end; the source's error, re-raised."""
        with self._start_lock:
            if self._closed:
                raise ValueError("the reader is closed")
            if self._thread.ident is None:
                self._thread.start()
        with self._condition:
            while not self._ready:
                self._condition.wait()
            item = self._ready[0]
            if isinstance(item, _End):
                if item.error is not None:
                    self._ready[0] = _End()  # raised once; then the stream is over
            else:
                self._ready.popleft()
                self._condition.notify_all()
        if not isinstance(item, _End):
            return item
        if item.error is not None:
            _raise_at_consumer(item.error)
        raise StopIteration

    def close(self) -> None:
        """Stop the producer, drop what it prefetched and wait for it to end.

        A read of the source in progress finishes first, sooner where the source has a way
        to be interrupted (``interrupt_source``).
        """
        with self._start_lock:
            self._closed = True
        with self._condition:
            self._stopping = True
            self._ready.clear()
            self._condition.notify_all()
        if self._interrupt_source is not None:
            self._interrupt_source()
        started = self._thread.ident is not None
        if started and self._thread is not threading.current_thread():
            self._thread.join()


class InPlace:
    """Batches that the source put on the device itself, read on the consumer's thread.

    A source that reads and copies ahead on threads of its own (``read_parquet``'s decoders)
    leaves a prefetch thread nothing to overlap; its thread and per-batch work beside busy
    decoders only cost throughput (bench/parquet_pool_bench.py; the figures are in
    bench/RESULTS.md, "The decoders' window and the consumer"). The same interface as
    :class:`Prefetcher`.
    """

    def __init__(self, source: Iterator[pa.RecordBatch], schema: pa.Schema,
                 on_moved: Callable[[int], None], close_source: Callable[[], object],
                 interrupt_source: Callable[[], object] | None = None) -> None:
        self._source = source
        self._index = 0
        self._schema = schema
        self._on_moved = on_moved
        self._close_source: Callable[[], object] | None = close_source
        self._interrupt_source = interrupt_source
        self._closed = False

    def _end(self) -> None:
        close, self._close_source = self._close_source, None
        # What the source holds (the rest of a row group in assembly) goes now, not when the
        # reader is dropped.
        self._source = iter(())
        if close is not None:
            close()

    def next(self) -> pa.RecordBatch:
        """The next batch; StopIteration at the end; the source's error, raised once."""
        if self._closed:
            raise ValueError("the reader is closed")
        if self._close_source is None:
            raise StopIteration
        try:
            # Not through enumerate(): its cached result tuple would keep the last batch.
            batch = next(self._source)
            check_schema(batch, self._schema, self._index)
        except StopIteration:
            self._end()
            raise
        except BaseException:  # an error or Ctrl-C, raised once; then the stream is over
            self._stop()
            raise
        self._index += 1
        self._on_moved(buffer_sizes(batch))
        return batch

    def _stop(self) -> None:
        """The source's threads wind down (a read in progress ends sooner where the source
        can be interrupted), then end."""
        if self._close_source is not None and self._interrupt_source is not None:
            self._interrupt_source()
        self._end()

    def close(self) -> None:
        """Stop the source."""
        self._closed = True
        self._stop()
