"""Tuning and watching the copy engine behind every host<->device transfer.

Large copies from or to ordinary (pageable) host memory are pipelined through a bounded
ring of pinned staging memory by a few CPU threads; small copies are one driver copy.
``staging_bytes=0`` turns the pipeline off (direct copies only).

>>> from arrow_gpu.transfer_options import get_transfer_options, transfer_options
>>> with transfer_options(staging_bytes=1 << 20, chunk_bytes=256 << 10):
...     get_transfer_options()["staging_bytes"]
1048576
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

import arrow_gpu._cuda as _cuda
from arrow_gpu._util.arguments import as_int

__all__ = [
    "get_transfer_options",
    "release_staging",
    "set_transfer_options",
    "staging_bytes_held",
    "TransferProgress",
    "expect_transfer",
    "transfer_options",
    "transfer_progress",
]

ProgressCallback = Callable[[int], object]

_log = logging.getLogger("arrow_gpu")


def get_transfer_options() -> dict[str, int]:
    """The copy engine's current options.

    Returns
    -------
    dict of str to int
        ``staging_bytes`` (the pinned ring, default 64 MiB), ``chunk_bytes`` (one staging
        slot, the largest chunk, default 8 MiB), ``threads`` (0: three quarters of the
        cores, at most 12) and ``small_copy_bytes`` (copies below it are one synchronous
        driver copy).

    Examples
    --------
    >>> sorted(get_transfer_options())
    ['chunk_bytes', 'small_copy_bytes', 'staging_bytes', 'threads']
    """
    return _cuda._transfer_options()


def set_transfer_options(*, staging_bytes: int | None = None, chunk_bytes: int | None = None,
                         threads: int | None = None,
                         small_copy_bytes: int | None = None) -> dict[str, int]:
    """Change some of the copy engine's options; the others stay as they are.

    The options are process-wide. The staging ring is re-made at its new size on the next
    large transfer.

    Parameters
    ----------
    staging_bytes : int, optional
        The size of the pinned staging ring: 0 turns staging off, else 2 to 64 slots of
        ``chunk_bytes`` (the ring holds whole slots).
    chunk_bytes : int, optional
        The size of one staging slot, at least 64 (used rounded down to a multiple of 64):
        a transfer's largest chunk (its chunks grow to it and shrink again before the end).
    threads : int, optional
        The number of copy threads, the calling thread included, from 0 (chosen from the
        cores) to 64.
    small_copy_bytes : int, optional
        Copies below this size are one synchronous driver copy; non-negative.

    Returns
    -------
    dict of str to int
        The options as they were before, to pass back here later.

    Raises
    ------
    TypeError
        If a value is not an int.
    ValueError
        If a value is out of its range, or ``staging_bytes`` and ``chunk_bytes`` (as given,
        or as they are) make a ring of fewer than 2 or more than 64 slots
        (``pyarrow.ArrowInvalid``); no option changes then.

    Examples
    --------
    >>> previous = set_transfer_options(threads=2)
    >>> get_transfer_options()["threads"]
    2
    >>> _ = set_transfer_options(**previous)
    """
    previous = get_transfer_options()
    requested = {"staging_bytes": staging_bytes, "chunk_bytes": chunk_bytes, "threads": threads,
                 "small_copy_bytes": small_copy_bytes}
    given = {name: as_int(name, value) for name, value in requested.items()
             if value is not None}
    options = {**previous, **given}
    _cuda._set_transfer_options(**options)
    return previous


@contextlib.contextmanager
def transfer_options(**options: int) -> Iterator[dict[str, int]]:
    """Set options for the duration of a ``with`` block (process-wide, not per thread).

    The previous options come back when the block ends, also on an error.

    Parameters
    ----------
    **options : int
        Any of the keyword arguments of ``set_transfer_options``.

    Yields
    ------
    dict of str to int
        All options as they are inside the block.

    Raises
    ------
    TypeError
        If an option is unknown or not an int.
    ValueError
        If a value is out of its range (``pyarrow.ArrowInvalid``).

    Examples
    --------
    >>> with transfer_options(threads=1) as options:
    ...     options["threads"]
    1
    """
    previous = set_transfer_options(**options)
    try:
        yield get_transfer_options()
    finally:
        set_transfer_options(**previous)


def release_staging() -> None:
    """Free the pinned staging ring; the next large transfer makes it again.

    Called while a transfer uses the ring (from a ``transfer_progress`` callback, or another
    thread), it returns at once and that transfer frees the ring when it ends.

    Examples
    --------
    >>> release_staging()
    >>> staging_bytes_held()
    0
    """
    held = staging_bytes_held()
    _cuda._release_staging()
    _log.debug("released %d bytes of pinned staging memory", held)


def staging_bytes_held() -> int:
    """Bytes of pinned memory the staging ring holds now.

    Returns
    -------
    int
        0 when there is no ring (none made yet, or released).

    Examples
    --------
    >>> staging_bytes_held() >= 0
    True
    """
    return _cuda._staging_bytes_held()


class TransferProgress:
    """What the transfers of a ``transfer_progress`` block have moved so far.

    Attributes
    ----------
    bytes_moved : int
        The bytes reported so far.
    total_bytes : int or None
        The total given to ``transfer_progress``; else the sum of the totals that streamed
        transfers started in the block announced (an uncompressed IPC file knows its size up
        front), or, without them, of the transfers the block's own thread started
        (``to_device``/``to_host`` of data in memory, a whole-file ``read_ipc``: at their
        end it equals ``bytes_moved``); None while none is known.

    Examples
    --------
    >>> import pyarrow as pa
    >>> import arrow_gpu
    >>> with arrow_gpu.transfer_progress(lambda nbytes: None) as progress:
    ...     _ = arrow_gpu.to_device(pa.array(range(1000)))
    >>> progress
    <TransferProgress 8000 of 8000 bytes>
    """

    __slots__ = ("bytes_moved", "total_bytes")

    def __init__(self, total_bytes: int | None) -> None:
        self.bytes_moved = 0
        self.total_bytes = total_bytes

    def __repr__(self) -> str:
        return f"<TransferProgress {self.bytes_moved} of {self.total_bytes} bytes>"


class _Block:
    """One ``transfer_progress`` block: its callback, its counts and its bar, if any."""

    __slots__ = ("callback", "progress", "bar", "total_given", "announced", "thread", "report")

    def __init__(self, callback: ProgressCallback, progress: TransferProgress, bar: Any,
                 total_given: bool) -> None:
        self.callback = callback
        self.progress = progress
        self.bar = bar
        self.total_given = total_given
        self.announced = False  # a streamed transfer announced its total
        self.thread = threading.get_ident()
        self.report: Callable[[int, int], object] | None = None  # the copy engine's hook

    def add_to_total(self, nbytes: int) -> None:
        self.progress.total_bytes = (self.progress.total_bytes or 0) + nbytes
        if self.bar is not None:
            self.bar.total = self.progress.total_bytes
            self.bar.refresh()


_progress_lock = threading.Lock()
_progress_stack: list[_Block] = []


def expect_transfer(nbytes: int) -> None:
    """Tell the innermost ``transfer_progress`` block, if any, that a transfer started in it
    will move ``nbytes`` more.

    Streamed transfers that know their size up front call it; the block's ``total_bytes``
    (and its tqdm bar's total) grow by ``nbytes``, unless ``transfer_progress`` was given a
    total.

    Examples
    --------
    >>> with transfer_progress(lambda nbytes: None) as progress:
    ...     expect_transfer(100)
    >>> progress.total_bytes
    100
    """
    with _progress_lock:
        if not _progress_stack:
            return
        block = _progress_stack[-1]
        if block.total_given:
            return
        if not block.announced:  # the totals of transfers started so far no longer count
            block.announced = True
            block.progress.total_bytes = None
        block.add_to_total(nbytes)


@contextlib.contextmanager
def transfer_progress(callback: ProgressCallback | None = None, *, total: int | None = None,
                      description: str = "transfer") -> Iterator[TransferProgress]:
    """Report the bytes moved by transfers inside the block.

    Blocks can nest; the innermost callback gets the reports. A streamed transfer (a
    ``DeviceReader``, e.g. ``to_device`` of a ``RecordBatchReader``) reports its batches as
    its thread copies them: read it inside the block. One that knows its size up front adds
    it to the block's ``total_bytes`` (and to the bar's total).

    Parameters
    ----------
    callback : callable, optional
        Called as ``callback(nbytes)``, on the thread that started each transfer (for a
        streamed transfer, its producer thread), with the bytes moved since the last call.
        An exception it raises cancels the transfer.
        Without a callback, a tqdm bar is shown (that needs tqdm installed).
    total : int, optional
        The bytes the block will move, when the caller knows them: the tqdm bar counts up
        to it, and it is the yielded ``total_bytes``.
    description : str, default "transfer"
        The tqdm bar's label; only used without a callback.

    Yields
    ------
    TransferProgress
        The bytes moved so far and the total, when known, updated as transfers go.

    Raises
    ------
    TypeError
        If ``callback`` is not callable.
    ModuleNotFoundError
        If no callback is given and tqdm is not installed.
    pyarrow.ArrowCancelled
        Out of the block, when ``callback`` raised and so cancelled a transfer; it has the
        callback's exception as ``__cause__``. ``KeyboardInterrupt`` and ``SystemExit``
        (Ctrl-C included) leave as themselves.

    Examples
    --------
    >>> import pyarrow as pa, arrow_gpu
    >>> moved = []
    >>> with transfer_progress(moved.append) as progress:
    ...     _ = arrow_gpu.Context(0).buffer_from_data(b"x" * 100)
    >>> sum(moved), progress.bytes_moved
    (100, 100)
    """
    bar = None
    if callback is None:
        try:
            from tqdm.auto import tqdm
        except ImportError:
            raise ModuleNotFoundError(
                "transfer_progress() without a callback shows a tqdm progress bar, and tqdm is "
                "not installed: pip install 'arrow_gpu[progress]' (or tqdm), or pass a "
                "callback(nbytes)") from None
        bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=description)
        callback = bar.update
    elif not callable(callback):
        raise TypeError(f"callback must be callable (it is called with a byte count), got "
                        f"'{type(callback).__name__}'")
    block = _Block(callback, TransferProgress(total), bar, total is not None)
    block.report, failures = _recording_failures(block)
    with _progress_lock:
        _progress_stack.append(block)
        _cuda._set_progress_callback(block.report)
    try:
        yield block.progress
    except pa.ArrowCancelled as cancelled:
        if failures and cancelled.__cause__ is None:
            raise cancelled from failures[-1]
        raise
    finally:
        with _progress_lock:
            _progress_stack.remove(block)
            _cuda._set_progress_callback(_progress_stack[-1].report if _progress_stack
                                         else None)
        if bar is not None:
            bar.close()


def _recording_failures(block: _Block) -> tuple[Callable[[int, int], object],
                                                 list[BaseException]]:
    """The copy engine's hook for ``block``, counting into its progress and calling its
    callback, and a list that collects what the callback raises, to chain to the
    cancellation."""
    failures: list[BaseException] = []

    def report(moved: int, expected: int) -> object:
        if expected:  # a transfer starts: counted where no streamed total was announced
            if not (block.total_given or block.announced) and (
                    threading.get_ident() == block.thread):
                with _progress_lock:
                    block.add_to_total(expected)
            return None
        block.progress.bytes_moved += moved
        try:
            return block.callback(moved)
        except BaseException as error:
            failures.append(error)
            raise

    return report, failures
