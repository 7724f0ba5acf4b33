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

import pyarrow as pa

from arrow_gpu import _cuda

__all__ = [
    "get_transfer_options",
    "release_staging",
    "set_transfer_options",
    "staging_bytes_held",
    "transfer_options",
    "transfer_progress",
]

ProgressCallback = Callable[[int], object]

_log = logging.getLogger("arrow_gpu")


def get_transfer_options() -> dict[str, int]:
    """The engine's options: ``staging_bytes`` (pinned ring, default 64 MiB), ``chunk_bytes``
    (one staging slot), ``threads`` (0: chosen from the cores) and ``small_copy_bytes``
    (copies below it are one synchronous driver copy).

    >>> sorted(get_transfer_options())
    ['chunk_bytes', 'small_copy_bytes', 'staging_bytes', 'threads']
    """
    return _cuda._transfer_options()


def set_transfer_options(*, staging_bytes: int | None = None, chunk_bytes: int | None = None,
                         threads: int | None = None,
                         small_copy_bytes: int | None = None) -> dict[str, int]:
    """Change some options (the others stay); returns the previous options.

    The staging ring is re-made at its new size on the next large transfer.

    >>> previous = set_transfer_options(threads=2)
    >>> get_transfer_options()["threads"]
    2
    >>> _ = set_transfer_options(**previous)
    """
    previous = get_transfer_options()
    requested = {"staging_bytes": staging_bytes, "chunk_bytes": chunk_bytes, "threads": threads,
                 "small_copy_bytes": small_copy_bytes}
    given = {name: _cuda._as_int(name, value) for name, value in requested.items()
             if value is not None}
    options = {**previous, **given}
    _cuda._set_transfer_options(**options)
    return previous


@contextlib.contextmanager
def transfer_options(**options: int) -> Iterator[dict[str, int]]:
    """Options for the duration of a ``with`` block (process-wide, not per thread)."""
    previous = set_transfer_options(**options)
    try:
        yield get_transfer_options()
    finally:
        set_transfer_options(**previous)


def release_staging() -> None:
    """Free the pinned staging ring; the next large transfer makes it again.

    Called while a transfer uses the ring (from a ``transfer_progress`` callback, or another
    thread), it returns at once and that transfer frees the ring when it ends.
    """
    held = staging_bytes_held()
    _cuda._release_staging()
    _log.debug("released %d bytes of pinned staging memory", held)


def staging_bytes_held() -> int:
    """Bytes of pinned memory the staging ring holds now."""
    return _cuda._staging_bytes_held()


_progress_lock = threading.Lock()
_progress_stack: list[ProgressCallback] = []


@contextlib.contextmanager
def transfer_progress(callback: ProgressCallback | None = None, *, total: int | None = None,
                      description: str = "transfer") -> Iterator[None]:
    """Report the bytes moved by transfers inside the block.

    ``callback(nbytes)`` is called, on the thread that started each transfer, with the bytes
    moved since the last call; an exception it raises cancels the transfer: the
    ``pyarrow.ArrowCancelled`` that leaves the block has it as ``__cause__``
    (``KeyboardInterrupt`` and ``SystemExit``, Ctrl-C included, leave as themselves). Without a
    callback, a tqdm bar of ``total`` bytes is shown (that needs tqdm installed).

    >>> import pyarrow as pa, arrow_gpu
    >>> moved = []
    >>> with transfer_progress(moved.append):
    ...     _ = arrow_gpu.Context(0).buffer_from_data(b"x" * 100)
    >>> sum(moved)
    100
    """
    bar = None
    if callback is None:
        try:
            from tqdm.auto import tqdm
        except ImportError:
            raise ModuleNotFoundError(
                "transfer_progress() without a callback shows a tqdm progress bar, and tqdm is "
                "not installed: pip install tqdm, or pass a callback(nbytes)") from None
        bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=description)
        callback = bar.update
    elif not callable(callback):
        raise TypeError(f"callback must be callable (it is called with a byte count), got "
                        f"'{type(callback).__name__}'")
    report, failures = _recording_failures(callback)
    with _progress_lock:
        _progress_stack.append(report)
        _cuda._set_progress_callback(report)
    try:
        yield
    except pa.ArrowCancelled as cancelled:
        if failures and cancelled.__cause__ is None:
            raise cancelled from failures[-1]
        raise
    finally:
        with _progress_lock:
            _progress_stack.remove(report)
            _cuda._set_progress_callback(_progress_stack[-1] if _progress_stack else None)
        if bar is not None:
            bar.close()


def _recording_failures(
        callback: ProgressCallback) -> tuple[ProgressCallback, list[BaseException]]:
    """``callback`` and a list that collects what it raises, to chain to the cancellation."""
    failures: list[BaseException] = []

    def report(nbytes: int) -> object:
        try:
            return callback(nbytes)
        except BaseException as error:
            failures.append(error)
            raise

    return report, failures
