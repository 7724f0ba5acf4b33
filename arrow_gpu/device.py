"""CUDA devices at the Python surface: contexts, streams, events, and which device is which.

``Context``, ``Stream`` and ``Event`` are defined in the compiled core and live here; the
other modules of the package take them from here. ``as_context`` reads every ``device=``
argument of the package, ``stream_handle`` every ``stream=`` argument.

>>> from arrow_gpu.device import Context, Stream
>>> stream = Stream(Context(0))
>>> stream.wait(Stream.wrap(0).record())
>>> stream.synchronize()
"""

import operator
from typing import Any, Optional, Protocol, SupportsIndex, Union

import pyarrow as pa

from arrow_gpu._cuda import Context, Event, Stream, _data_context, using_simulator
from arrow_gpu._util.handles import stream_handle

__all__ = ["Context", "DeviceLike", "Event", "HasDeviceId", "Stream", "StreamOfDevice",
           "as_context", "context_of", "device_count", "is_available", "stream_handle",
           "using_simulator"]


class HasDeviceId(Protocol):
    """An object that names a device by its number, as cuda.core's ``Device`` does."""

    @property
    def device_id(self) -> int: ...


class StreamOfDevice(Protocol):
    """A ``__cuda_stream__`` stream that says its device, as cuda.core's ``Stream`` does."""

    def __cuda_stream__(self) -> tuple[int, int]: ...

    @property
    def device(self) -> HasDeviceId: ...


#: A device, as every ``device=`` parameter of arrow_gpu takes it (see ``as_context``).
DeviceLike = Union[SupportsIndex, Context, Stream, pa.MemoryManager, pa.Device, HasDeviceId,
                   StreamOfDevice]

_DEVICE_CHOICES = ("an int (a device number), a Context (arrow_gpu or pyarrow.cuda), a "
                   "Stream, a pyarrow MemoryManager or Device of a CUDA device, or an object "
                   "with a device_id (a cuda.core Device) or a __cuda_stream__ stream with a "
                   "device (a cuda.core Stream)")


def device_count() -> int:
    """The number of CUDA devices visible to this process (simulated ones under the simulator).

    Returns
    -------
    int
        How many devices there are.

    Raises
    ------
    OSError
        If there is no driver and the simulator is off; see ``is_available``.

    Examples
    --------
    >>> device_count() >= 1
    True
    """
    count: int = Context.get_num_devices()
    return count


def is_available() -> bool:
    """Whether a CUDA device can be used: a driver with a device, or the simulator.

    Unlike ``device_count`` it does not raise when there is no driver.

    Returns
    -------
    bool
        True when at least one device can be used.

    Raises
    ------
    pyarrow.ArrowInvalid
        If an ``ARROW_GPU_*`` environment variable is malformed: that is a mistake to fix,
        not an absent GPU.

    Examples
    --------
    >>> is_available()
    True
    """
    try:
        return device_count() > 0
    except OSError:
        return False


def as_context(device: DeviceLike) -> Context:
    """The context a ``device=`` argument names: the one way arrow_gpu reads a device.

    A Context is itself; an arrow_gpu Stream names its own context; anything else names a
    device, and so that device's primary context (the one Numba, CuPy and PyTorch use).

    Parameters
    ----------
    device : int, Context, Stream, pyarrow.MemoryManager, pyarrow.Device or device object
        A device number (an int or NumPy integer, not a bool); a Context (arrow_gpu's,
        which ``pyarrow.cuda`` serves); an arrow_gpu Stream; a pyarrow MemoryManager or
        Device of a CUDA device; an object with an int ``device_id`` (a cuda.core
        ``Device``); or a ``__cuda_stream__`` stream whose ``device`` has one (a cuda.core
        ``Stream``: the ``__cuda_stream__`` protocol itself names no device).

    Returns
    -------
    Context
        The context.

    Raises
    ------
    TypeError
        If ``device`` is none of the above (the message lists them).
    ValueError
        If ``device`` is a pyarrow MemoryManager or Device of something other than a CUDA
        device, such as the CPU; ``pyarrow.ArrowInvalid`` if no device has that number.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from arrow_gpu import Context, Stream
    >>> as_context(0) == Context(0)
    True
    >>> ctx = as_context(Context(0).memory_manager)
    >>> as_context(ctx) is ctx, as_context(Stream(ctx)) is ctx
    (True, True)
    >>> as_context(pa.default_cpu_memory_manager())
    Traceback (most recent call last):
    ...
    ValueError: device must be a CUDA device, not <pyarrow.Device: CPUDevice()>; ...
    """
    if type(device) is int:  # the common case first: every transfer asks
        return _primary_context(device)
    if isinstance(device, Context):
        return device
    if isinstance(device, Stream):
        return device.context
    if isinstance(device, pa.MemoryManager):
        device = device.device
    if isinstance(device, pa.Device):
        if device.device_type != pa.DeviceAllocationType.CUDA:
            raise ValueError(f"device must be a CUDA device, not {device}; pass a device "
                             "number, a Context, or a CUDA MemoryManager or Device (to copy "
                             "data to host memory, use to_host)")
        return _primary_context(device.device_id)
    if isinstance(device, SupportsIndex) and not isinstance(device, bool):
        return _primary_context(operator.index(device))
    number = getattr(device, "device_id", None)
    is_stream = hasattr(device, "__cuda_stream__")
    if number is None and is_stream:
        # The protocol gives a handle only; cuda.core's Stream also says its device.
        number = getattr(getattr(device, "device", None), "device_id", None)
    if isinstance(number, int) and not isinstance(number, bool):
        return _primary_context(number)
    if is_stream:
        raise TypeError(f"a '{type(device).__name__}' stream does not say which device it is "
                        "on (the __cuda_stream__ protocol carries a handle only); pass the "
                        "device number, or an arrow_gpu or cuda.core Stream")
    raise TypeError(f"device must be {_DEVICE_CHOICES}; got '{type(device).__name__}'")


def _primary_context(number: int) -> Context:
    try:
        return Context(number)
    except pa.ArrowInvalid:
        count = device_count()
        if not 0 <= number < count:
            raise pa.ArrowInvalid(f"device {number} does not exist: this process sees "
                                  f"{count} device(s), numbered from 0") from None
        raise


def context_of(data: Any) -> Optional[Context]:
    """The context of the first device buffer of some Arrow data.

    Parameters
    ----------
    data : pyarrow.Array, ChunkedArray, RecordBatch or Table
        The data to look at.

    Returns
    -------
    Context or None
        The Context of that buffer's memory; None when all of it is in host memory.

    Raises
    ------
    TypeError
        If ``data`` is not pyarrow data.
    pyarrow.ArrowTypeError
        If the first device buffer is device memory that is not CUDA memory.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from arrow_gpu import to_device
    >>> context_of(to_device(pa.table({"x": [1]}))).device_number
    0
    >>> context_of(pa.array([1])) is None
    True
    """
    return _data_context(data)
