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

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from arrow_gpu import _cuda
from arrow_gpu.device import stream_handle

__all__ = [
    "DEVICE_CPU",
    "DEVICE_CUDA",
    "DEVICE_CUDA_HOST",
    "DEVICE_CUDA_MANAGED",
    "DeviceData",
    "import_array",
    "import_record_batch",
    "import_stream",
    "iter_stream",
]

DEVICE_CPU = 1
DEVICE_CUDA = 2
DEVICE_CUDA_HOST = 3
DEVICE_CUDA_MANAGED = 13


def _check_kwargs(kwargs: dict[str, Any]) -> None:
    unknown = sorted(name for name, value in kwargs.items() if value is not None)
    if unknown:
        raise NotImplementedError(f"unsupported keyword arguments: {', '.join(unknown)}")


class DeviceData:
    """Device (or host) Arrow data, exported through the Arrow PyCapsule device protocol.

    ``data`` is a ``pa.Array``, ``pa.RecordBatch`` (both export as a device array and as a
    one-chunk stream), ``pa.Table`` or ``pa.RecordBatchReader`` (streams, chunk by chunk).
    ``stream`` is the stream that produced the data (any spelling ``stream_handle``
    accepts): each export records a CUDA event on it, which the consumer waits on and which
    lives until the consumer releases the struct.

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
        """Capsules ``arrow_schema`` and ``arrow_device_array`` (the spec's protocol)."""
        if kwargs:
            _check_kwargs(kwargs)
        if not isinstance(self.data, (pa.Array, pa.RecordBatch)):
            raise TypeError(f"a {type(self.data).__name__} exports as a stream: use "
                            "__arrow_c_device_stream__")
        return _cuda._export_device_array(self.data, self.stream, requested_schema)

    def __arrow_c_device_stream__(self, requested_schema: Any = None, **kwargs: Any) -> Any:
        """A capsule ``arrow_device_array_stream`` yielding one record batch per chunk."""
        if kwargs:
            _check_kwargs(kwargs)
        data = self.data
        if isinstance(data, pa.Array):
            data = pa.RecordBatch.from_struct_array(data) if pa.types.is_struct(data.type) \
                else pa.record_batch([data], names=[""])
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        return _cuda._export_device_stream(data, self.stream, requested_schema)

    def __repr__(self) -> str:
        return f"<arrow_gpu.DeviceData {type(self.data).__name__} stream={self.stream!r}>"


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


def import_array(obj: Any, *, stream: Any = None, device: tuple[int, int] | None = None,
                 requested_schema: pa.DataType | pa.Field | None = None) -> pa.Array:
    """Import a device array from any producer of ``__arrow_c_device_array__``.

    ``obj`` is such an object or a ``(schema_capsule, array_capsule)`` pair. ``stream``
    (an int handle or any stream object ``stream_handle`` accepts) is made to wait on the
    producer's event; without one the host waits. ``device=(device_type, device_id)``
    rejects arrays elsewhere. Malformed structs raise ``ValueError`` (``pa.ArrowInvalid``)
    naming what is wrong; the structs are released either way.

    >>> import pyarrow as pa, arrow_gpu
    >>> data = pa.array([1.5, None]).copy_to(arrow_gpu.Context(0).memory_manager)
    >>> import_array(DeviceData(data), device=(DEVICE_CUDA, 0)).type
    DataType(double)
    """
    schema_capsule, array_capsule = _capsules(obj, requested_schema)
    return _cuda._import_device_array(schema_capsule, array_capsule, stream, device, False)


def import_record_batch(obj: Any, *, stream: Any = None, device: tuple[int, int] | None = None,
                        requested_schema: pa.Schema | None = None) -> pa.RecordBatch:
    """Like :func:`import_array`, for a struct array seen as a record batch.

    >>> import pyarrow as pa, arrow_gpu
    >>> batch = pa.record_batch({"x": [1, 2]}).copy_to(arrow_gpu.Context(0).memory_manager)
    >>> import_record_batch(DeviceData(batch)).schema.names
    ['x']
    """
    schema_capsule, array_capsule = _capsules(obj, requested_schema)
    return _cuda._import_device_array(schema_capsule, array_capsule, stream, device, True)


def iter_stream(obj: Any, *, stream: Any = None,
                requested_schema: pa.Schema | None = None) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The schema and the batches of a ``__arrow_c_device_stream__`` producer, one at a time.

    The producer's stream is released at its end, on its error, or when the iterator goes.

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
    reader = _cuda.DeviceStreamReader._open(capsule, stream)
    return reader.schema, reader


def import_stream(obj: Any, *, stream: Any = None,
                  requested_schema: pa.Schema | None = None) -> pa.Table:
    """Read a whole ``__arrow_c_device_stream__`` into a table (its chunks stay where they are).

    >>> import pyarrow as pa, arrow_gpu
    >>> table = arrow_gpu.to_device(pa.table({"x": [1, 2, 3]}))
    >>> import_stream(DeviceData(table)).num_rows
    3
    """
    schema, batches = iter_stream(obj, stream=stream, requested_schema=requested_schema)
    return pa.Table.from_batches(list(batches), schema=schema)
