"""A map over items run on a few threads, its results handed over in the items' order.

Decoding a file's batches (decompressing IPC, decoding Parquet row groups) is the slow part of
loading them; one batch at a time leaves most cores idle. :class:`OrderedMap` runs
``function(item)`` for the next few items at once, on a thread pool of its own, and yields the
results in order: at most ``ahead`` calls started and not yet handed over (``workers`` of them
running), so the memory held stays bounded by ``ahead`` results besides the one in hand,
however slow the consumer.

>>> with OrderedMap(lambda n: n * n, range(5), workers=2, name="squares") as squares:
...     list(squares)
[0, 1, 4, 9, 16]
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Generic, TypeVar

__all__ = ["OrderedMap"]

Item = TypeVar("Item")
Result = TypeVar("Result")


class OrderedMap(Generic[Item, Result]):
    """``function(item)`` for each of ``items``, computed on up to ``workers`` threads ahead
    of the consumer and yielded in the items' order.

    Nothing runs before the first ``next``. Items are taken from ``items`` only as calls are
    started: a call starts once it is among the ``ahead`` items after the consumer's and a
    thread is free, so one slow call idles no other thread while fewer than ``ahead`` items
    wait behind it. An error of a call (or of ``items``) is raised when the consumer reaches
    its place, after the results before it; then the map is over. ``close()`` (or leaving its
    ``with`` block) cancels the calls not started, waits for the running ones and ends the
    threads; the end of the items, or an error, closes it too. Read it from one thread.

    Parameters
    ----------
    function : callable
        Called on the pool's threads, one item at a time.
    items : iterable
        The items, in the order of the results.
    workers : int
        Threads: calls running at once (at least 1).
    name : str
        The threads' name prefix.
    ahead : int, optional
        Calls started and not handed over, results waiting included (at least ``workers``,
        which is the default).
    """

    def __init__(self, function: Callable[[Item], Result], items: Iterable[Item], *,
                 workers: int, name: str, ahead: int | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        ahead = workers if ahead is None else ahead
        if ahead < workers:
            raise ValueError(f"ahead must be at least workers ({workers}), got {ahead}")
        self._ahead = ahead
        self._function = function
        self._items = iter(items)
        self._workers = workers
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        self._in_flight: collections.deque[Future[Result]] = collections.deque()
        self._items_error: BaseException | None = None  # raised after the calls before it
        self._items_done = False
        self._closed = False

    def _start_calls(self, pool: ThreadPoolExecutor) -> None:
        """Start calls on the next items until ``ahead`` are in flight or items run out."""
        while not self._items_done and len(self._in_flight) < self._ahead:
            try:
                item = next(self._items)
            except StopIteration:
                self._items_done = True
            except BaseException as error:
                self._items_done = True
                self._items_error = error
            else:
                self._in_flight.append(pool.submit(self._function, item))
                del item  # the call alone holds it

    def __iter__(self) -> OrderedMap[Item, Result]:
        return self

    def __next__(self) -> Result:
        if self._closed:
            raise StopIteration
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix=self._name)
        self._start_calls(self._pool)
        if not self._in_flight:
            error, self._items_error = self._items_error, None
            self.close()
            if error is not None:
                raise error
            raise StopIteration
        try:
            result = self._in_flight.popleft().result()
        except BaseException:
            self.close()
            raise
        self._start_calls(self._pool)  # the pool works on while the consumer has this one
        return result

    def close(self) -> None:
        """Cancel the calls not started, wait for the running ones; the threads end. Closing
        again does nothing."""
        self._closed = True
        self._in_flight.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> OrderedMap[Item, Result]:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
