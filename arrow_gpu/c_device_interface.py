"""Arrow's C Device Data Interface for device (and host) Arrow data.

Export and import run in the native core on libarrow's own bridge; arrow_gpu adds the CUDA
parts Arrow leaves to a device. An export records a CUDA event on the producer's stream
that the consumer waits on (pyarrow's own ``__arrow_c_device_array__`` exports none), and
never counts nulls of device memory on the host (pyarrow's crashes on sliced device
arrays). An import checks an untrusted producer's structs before libarrow follows their
pointers, waits on the producer's event (on the consumer's stream, or on the host), and
releases every struct exactly once, also when it fails.

>>> import pyarrow as pa
>>> import arrow_gpu
>>> from arrow_gpu.c_device_interface import DeviceData, import_array
>>> on_gpu = pa.array([1, None, 3]).copy_to(arrow_gpu.Context(0).memory_manager)
>>> back = import_array(DeviceData(on_gpu))
>>> back.copy_to(pa.default_cpu_memory_manager()).to_pylist()
[1, None, 3]
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

import arrow_gpu._cuda as _cuda
from arrow_gpu.device import DeviceLike, as_context, stream_handle

__all__ = [
    "DEVICE_CPU",
    "DEVICE_CUDA",
    "DEVICE_CUDA_HOST",
    "DeviceData",
    "import_array",
    "import_record_batch",
    "import_stream",
    "iter_stream",
]

# The device types of the C Device Data Interface (ArrowDeviceType) that arrow_gpu reads.
DEVICE_CPU = 1
DEVICE_CUDA = 2
DEVICE_CUDA_HOST = 3


def _check_kwargs(kwargs: dict[str, Any]) -> None:
    unknown = sorted(name for name, value in kwargs.items() if value is not None)
    if unknown:
        raise NotImplementedError(f"unsupported keyword arguments: {', '.join(unknown)}")


class DeviceData:
    """Device (or host) Arrow data, exported through the Arrow PyCapsule device protocol.

    Each export records a CUDA event on ``stream``, which the consumer waits on and which
    lives until the consumer releases the struct.

    Parameters
    ----------
    data : pyarrow.Array, RecordBatch, Table or RecordBatchReader
        The data. An Array or RecordBatch exports as a device array and as a one-chunk
        stream; a Table or RecordBatchReader exports as a stream, chunk by chunk.
    stream : stream-like, optional
        The stream that produced the data, in any spelling ``stream_handle`` accepts.

    Raises
    ------
    TypeError
        If ``data`` is of another type, or ``stream`` is not a spelling of a stream.
    ValueError
        If the stream handle is negative or does not fit a pointer.

    Examples
    --------
    >>> import pyarrow as pa, arrow_gpu
    >>> table = pa.table({"x": [1, 2]}).to_batches()[0].copy_to(arrow_gpu.Context(0).memory_manager)
    >>> schema, array = DeviceData(table).__arrow_c_device_array__()
    >>> schema, array
    (<capsule object "arrow_schema" at ...>, <capsule object "arrow_device_array" at ...>)
    """

    __slots__ = ("data", "stream")

    def __init__(self, data: pa.Array | pa.RecordBatch | pa.Table | pa.RecordBatchReader,
                 stream: Any = None) -> None:
        if not isinstance(data, (pa.Array, pa.RecordBatch, pa.Table, pa.RecordBatchReader)):
            raise TypeError(f"cannot export a '{type(data).__name__}'; expected a pyarrow Array, "
                            "RecordBatch, Table or RecordBatchReader")
        if stream is not None:
            stream_handle(stream)  # reject a bad stream now rather than at export time
        self.data = data
        self.stream = stream

    def __arrow_c_device_array__(self, requested_schema: Any = None,
                                 **kwargs: Any) -> tuple[object, object]:
        """Export the data as the capsules ``arrow_schema`` and ``arrow_device_array``.

        This is the Arrow PyCapsule protocol's method for device arrays.

        Parameters
        ----------
        requested_schema : PyCapsule, optional
            An ``arrow_schema`` capsule the consumer asks for. It must have the data's
            layout: nothing is cast on the device.
        **kwargs
            Keywords of later versions of the protocol; only None values are accepted.

        Returns
        -------
        tuple of (PyCapsule, PyCapsule)
            The ``arrow_schema`` and ``arrow_device_array`` capsules.

        Raises
        ------
        TypeError
            If the data is a Table or RecordBatchReader (export those as a stream), or
            ``requested_schema`` has another layout.
        NotImplementedError
            If a keyword argument other than ``requested_schema`` is given a value.

        Examples
        --------
        >>> import pyarrow as pa, arrow_gpu
        >>> on_gpu = arrow_gpu.to_device(pa.array([1, 2]))
        >>> schema, array = DeviceData(on_gpu).__arrow_c_device_array__()
        >>> import_array((schema, array)).type
        DataType(int64)
        """
        if kwargs:
            _check_kwargs(kwargs)
        if not isinstance(self.data, (pa.Array, pa.RecordBatch)):
            raise TypeError(f"a {type(self.data).__name__} exports as a stream: use "
                            "__arrow_c_device_stream__")
        return _cuda._export_device_array(self.data, self.stream, requested_schema)

    def __arrow_c_device_stream__(self, requested_schema: Any = None, **kwargs: Any) -> Any:
        """Export the data as an ``arrow_device_array_stream`` capsule.

        This is the Arrow PyCapsule protocol's method for device streams. The stream yields
        one record batch per chunk; an Array is one batch (a struct array's fields become
        its columns, else it is a single column named "").

        Parameters
        ----------
        requested_schema : PyCapsule, optional
            An ``arrow_schema`` capsule the consumer asks for. It must have the data's
            layout: nothing is cast on the device.
        **kwargs
            Keywords of later versions of the protocol; only None values are accepted.

        Returns
        -------
        PyCapsule
            The ``arrow_device_array_stream`` capsule.

        Raises
        ------
        TypeError
            If ``requested_schema`` has another layout.
        NotImplementedError
            If a keyword argument other than ``requested_schema`` is given a value.

        Examples
        --------
        >>> import pyarrow as pa, arrow_gpu
        >>> on_gpu = arrow_gpu.to_device(pa.table({"x": [1, 2]}))
        >>> capsule = DeviceData(on_gpu).__arrow_c_device_stream__()
        >>> import_stream(capsule).num_rows
        2
        """
        if kwargs:
            _check_kwargs(kwargs)
        data = self.data
        if isinstance(data, pa.Array):
            data = pa.RecordBatch.from_struct_array(data) if pa.types.is_struct(data.type) \
                else pa.record_batch([data], names=[""])
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        if isinstance(data, pa.RecordBatchReader):
            data = pa.RecordBatchReader.from_batches(data.schema, _device_batches(data))
        return _cuda._export_device_stream(data, self.stream, requested_schema)

    def __repr__(self) -> str:
        return f"<arrow_gpu.DeviceData {type(self.data).__name__} stream={self.stream!r}>"


def _device_batches(reader: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
    """The batches of a reader exported as a device stream; a host batch, which such a
    stream cannot carry, fails with what to do instead."""
    for index, batch in enumerate(reader):
        # Column by column: a batch's own device_type says CPU for many device batches.
        if all(column.is_cpu for column in batch.columns) and batch.get_total_buffer_size() > 0:
            raise TypeError(
                f"batch {index} of the reader is in host memory (device_type {DEVICE_CPU} in a "
                f"stream of device_type {DEVICE_CUDA}): DeviceData exports data where it is; "
                "to copy a host reader to the GPU batch by batch, use "
                "arrow_gpu.to_device(reader), whose DeviceReader exports "
                "__arrow_c_device_stream__ itself")
        yield batch


def _no_request_for_capsules(requested_schema: Any) -> None:
    # Capsules are exported already: a request they cannot honour must not be ignored.
    if requested_schema is not None:
        raise ValueError("requested_schema is asked of a producer object, but capsules were "
                         "given; pass the producer itself to import_array/import_stream")


def _requested(schema: pa.Schema | pa.DataType | pa.Field | None) -> Any:
    return None if schema is None else schema.__arrow_c_schema__()


def _capsules(obj: Any, requested_schema: Any) -> tuple[object, object]:
    if isinstance(obj, tuple) and len(obj) == 2:
        _no_request_for_capsules(requested_schema)
        return obj
    producer = getattr(obj, "__arrow_c_device_array__", None)
    if producer is None:
        raise TypeError(f"'{type(obj).__name__}' object does not expose __arrow_c_device_array__")
    requested = _requested(requested_schema)
    capsules: tuple[object, object] = producer(requested) if requested is not None else producer()
    return capsules


def _device_pair(device: tuple[int, int] | DeviceLike | None) -> tuple[int, int] | None:
    """``(device_type, device_id)`` as the C interface names where arrays live."""
    if device is None or isinstance(device, tuple):
        return device
    if isinstance(device, numbers.Integral) and not isinstance(device, bool):
        # An expectation about the data: device 1 need not exist here to be wrong.
        return DEVICE_CUDA, int(device)
    return DEVICE_CUDA, as_context(device).device_number


def import_array(obj: Any, *, stream: Any = None,
                 device: tuple[int, int] | DeviceLike | None = None,
                 requested_schema: pa.DataType | pa.Field | None = None) -> pa.Array:
    """Import a device array from any producer of ``__arrow_c_device_array__``.

    The structs are released whether the import succeeds or not.

    Parameters
    ----------
    obj : object or tuple of (PyCapsule, PyCapsule)
        An object with ``__arrow_c_device_array__``, or a ``(schema_capsule,
        array_capsule)`` pair it returned.
    stream : stream-like, optional
        A stream, as an int handle or any object ``stream_handle`` accepts, that is made to
        wait on the producer's event. Without one the host waits.
    device : tuple of (int, int) or DeviceLike, optional
        Where the array must be; arrays elsewhere are rejected. Either the C interface's
        ``(device_type, device_id)``, such as ``(DEVICE_CUDA, 0)`` or ``(DEVICE_CPU, -1)``,
        or a CUDA device in any spelling ``arrow_gpu.device.as_context`` accepts (``0``
        means ``(DEVICE_CUDA, 0)``).
    requested_schema : pyarrow.DataType or pyarrow.Field, optional
        The type to ask the producer for. Not allowed with capsules, which are exported
        already.

    Returns
    -------
    pyarrow.Array
        The array, where the producer left it (no copy).

    Raises
    ------
    TypeError
        If ``obj`` does not expose ``__arrow_c_device_array__``, the pair is not
        capsules, or ``device`` is not a spelling of a device.
    ValueError
        If the structs are malformed (``pyarrow.ArrowInvalid``, naming what is wrong), the
        array is not on ``device``, a capsule has the wrong name or was imported already,
        or ``requested_schema`` is given with capsules.

    Examples
    --------
    >>> import pyarrow as pa, arrow_gpu
    >>> data = pa.array([1.5, None]).copy_to(arrow_gpu.Context(0).memory_manager)
    >>> import_array(DeviceData(data), device=(DEVICE_CUDA, 0)).type
    DataType(double)
    >>> import_array(DeviceData(data), device=0).device_type  # a CUDA device, as for as_context
    <DeviceAllocationType.CUDA: 2>
    """
    expected = _device_pair(device)
    schema_capsule, array_capsule = _capsules(obj, requested_schema)
    return _cuda._import_device_array(schema_capsule, array_capsule, stream, expected, False)


def import_record_batch(obj: Any, *, stream: Any = None,
                        device: tuple[int, int] | DeviceLike | None = None,
                        requested_schema: pa.Schema | None = None) -> pa.RecordBatch:
    """Import a struct device array as a record batch.

    Like :func:`import_array`, whose parameters and errors it shares.

    Parameters
    ----------
    obj : object or tuple of (PyCapsule, PyCapsule)
        An object with ``__arrow_c_device_array__``, or a ``(schema_capsule,
        array_capsule)`` pair it returned.
    stream : stream-like, optional
        A stream that is made to wait on the producer's event. Without one the host waits.
    device : tuple of (int, int) or DeviceLike, optional
        Where the batch must be, as for ``import_array``: arrays elsewhere are rejected.
    requested_schema : pyarrow.Schema, optional
        The schema to ask the producer for. Not allowed with capsules.

    Returns
    -------
    pyarrow.RecordBatch
        The batch, where the producer left it (no copy).

    Raises
    ------
    TypeError
        If ``obj`` does not expose ``__arrow_c_device_array__``, the pair is not
        capsules, or ``device`` is not a spelling of a device.
    ValueError
        If the structs are malformed or not a struct array, the array is not on ``device``,
        or a capsule has the wrong name or was imported already.

    Examples
    --------
    >>> import pyarrow as pa, arrow_gpu
    >>> batch = pa.record_batch({"x": [1, 2]}).copy_to(arrow_gpu.Context(0).memory_manager)
    >>> import_record_batch(DeviceData(batch)).schema.names
    ['x']
    """
    expected = _device_pair(device)
    schema_capsule, array_capsule = _capsules(obj, requested_schema)
    return _cuda._import_device_array(schema_capsule, array_capsule, stream, expected, True)


def iter_stream(obj: Any, *, stream: Any = None,
                requested_schema: pa.Schema | None = None) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The schema and the batches of a ``__arrow_c_device_stream__`` producer, one at a time.

    The producer's stream is released at its end, on its error, or when the iterator goes.

    Parameters
    ----------
    obj : object or PyCapsule
        An object with ``__arrow_c_device_stream__``, or an ``arrow_device_array_stream``
        capsule it returned.
    stream : stream-like, optional
        A stream that is made to wait on each batch's event. Without one the host waits.
    requested_schema : pyarrow.Schema, optional
        The schema to ask the producer for. Not allowed with a capsule.

    Returns
    -------
    tuple of (pyarrow.Schema, iterator of pyarrow.RecordBatch)
        The schema, and the batches where the producer left them (no copy).

    Raises
    ------
    TypeError
        If ``obj`` does not expose ``__arrow_c_device_stream__``.
    ValueError
        If the structs are malformed, the capsule was imported already, or
        ``requested_schema`` is given with a capsule.
    OSError
        While iterating, if the producer reports an error.

    Examples
    --------
    >>> import pyarrow as pa, arrow_gpu
    >>> table = arrow_gpu.to_device(pa.table({"x": [1, 2, 3]}))
    >>> schema, batches = iter_stream(DeviceData(table))
    >>> schema.names, [len(batch) for batch in batches]
    (['x'], [3])
    """
    if type(obj).__name__ == "PyCapsule":
        _no_request_for_capsules(requested_schema)
        capsule = obj
    else:
        producer = getattr(obj, "__arrow_c_device_stream__", None)
        if producer is None:
            raise TypeError(f"'{type(obj).__name__}' object does not expose __arrow_c_device_stream__")
        requested = _requested(requested_schema)
        capsule = producer(requested) if requested is not None else producer()
    reader = _cuda._open_device_stream(capsule, stream)
    return reader.schema, reader


def import_stream(obj: Any, *, stream: Any = None,
                  requested_schema: pa.Schema | None = None) -> pa.Table:
    """Read a whole ``__arrow_c_device_stream__`` into a table.

    Parameters
    ----------
    obj : object or PyCapsule
        An object with ``__arrow_c_device_stream__``, or an ``arrow_device_array_stream``
        capsule it returned.
    stream : stream-like, optional
        A stream that is made to wait on each batch's event. Without one the host waits.
    requested_schema : pyarrow.Schema, optional
        The schema to ask the producer for. Not allowed with a capsule.

    Returns
    -------
    pyarrow.Table
        One chunk per batch; the chunks stay where they are (no copy).

    Raises
    ------
    TypeError
        If ``obj`` does not expose ``__arrow_c_device_stream__``.
    ValueError
        If the structs are malformed, or the capsule was imported already.
    OSError
        If the producer reports an error.

    Examples
    --------
    >>> import pyarrow as pa, arrow_gpu
    >>> table = arrow_gpu.to_device(pa.table({"x": [1, 2, 3]}))
    >>> import_stream(DeviceData(table)).num_rows
    3
    """
    schema, batches = iter_stream(obj, stream=stream, requested_schema=requested_schema)
    return pa.Table.from_batches(list(batches), schema=schema)
