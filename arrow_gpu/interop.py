"""Zero-copy handoff of device data to and from CuPy, PyTorch, Numba and friends.

pyarrow arrays cannot grow new attributes, so :func:`as_cuda_array` wraps a device
primitive array (or a ``CudaBuffer``) in an object exposing ``__cuda_array_interface__``
(v3) and DLPack (``__dlpack__``/``__dlpack_device__``). :func:`from_cuda_array` and
:func:`from_dlpack` go the other way. No data is copied; the pyarrow buffers keep the
foreign memory alive and the views keep the pyarrow buffers alive.

>>> import pyarrow as pa, arrow_gpu
>>> from arrow_gpu.interop import as_cuda_array, from_dlpack
>>> values = pa.array([1.5, 2.5]).copy_to(arrow_gpu.Context(0).memory_manager)
>>> view = as_cuda_array(values)
>>> view.__cuda_array_interface__["typestr"], view.__cuda_array_interface__["shape"]
('<f8', (2,))
>>> from_dlpack(view).copy_to(pa.default_cpu_memory_manager()).to_pylist()
[1.5, 2.5]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from arrow_gpu._cuda import CudaBuffer, _cuda_array_interface, _dlpack_capsule, _DLPackTensor
from arrow_gpu.device import Context, Stream, stream_handle

__all__ = ["CudaArrayView", "as_cuda_array", "from_cuda_array", "from_dlpack", "numpy_dtype"]

_DL_CPU, _DL_CUDA, _DL_CUDA_HOST = 1, 2, 3
_DL_INT, _DL_UINT, _DL_FLOAT = 0, 1, 2


# numpy dtypes that map one to one onto Arrow fixed-width types.
_ARROW_BY_DTYPE = {
    np.dtype(name): getattr(pa, name)()
    for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "float32", "float64")
}
_DTYPE_BY_ARROW = {arrow: dtype for dtype, arrow in _ARROW_BY_DTYPE.items()}
_DL_CODE = {"i": _DL_INT, "u": _DL_UINT, "f": _DL_FLOAT}
_DTYPE_BY_DL = {(_DL_CODE[dtype.kind], dtype.itemsize * 8): dtype for dtype in _ARROW_BY_DTYPE}


def numpy_dtype(type: pa.DataType) -> np.dtype | None:
    """The numpy dtype that maps one to one onto an Arrow integer or floating-point type.

    Parameters
    ----------
    type : pyarrow.DataType
        Any Arrow type.

    Returns
    -------
    numpy.dtype or None
        The dtype of the same values, or None when no numpy dtype maps onto ``type``.

    Examples
    --------
    >>> import pyarrow as pa
    >>> numpy_dtype(pa.int32()), numpy_dtype(pa.string())
    (dtype('int32'), None)
    """
    return _DTYPE_BY_ARROW.get(type)


class CudaArrayView:
    """A device array or buffer seen as a 1-D strided-free CUDA array (CAI v3 and DLPack).

    Make one with :func:`as_cuda_array`.

    Parameters
    ----------
    buffer : CudaBuffer
        The device memory; the view keeps it alive.
    address : int
        The device address of the first element.
    length : int
        The number of elements.
    dtype : numpy.dtype
        The type of one element.
    stream : stream-like, optional
        Where the data was produced, in any spelling ``stream_handle`` accepts: consumers
        are made to wait for it.
    owner : object, optional
        Another object to keep alive with the view, such as the array ``buffer`` is from.

    Raises
    ------
    TypeError
        If ``stream`` is not a spelling of a stream.
    ValueError
        If the stream handle is negative or does not fit a pointer.

    Examples
    --------
    >>> import numpy as np
    >>> from arrow_gpu import Context
    >>> buffer = Context(0).buffer_from_data(b"abcd")
    >>> view = CudaArrayView(buffer, buffer.address, 4, np.dtype("uint8"))
    >>> view.__cuda_array_interface__["shape"], view.device_id
    ((4,), 0)
    """

    def __init__(self, buffer: CudaBuffer, address: int, length: int, dtype: np.dtype,
                 stream: Any = None, owner: Any = None) -> None:
        self._buffer = buffer
        self._owner = owner
        self.address = address
        self.length = length
        self.dtype = dtype
        self.stream = stream
        stream_handle(stream)

    @property
    def device_id(self) -> int:
        """The number of the device that holds the data."""
        return self._buffer.context.device_number

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The view's CUDA array interface, version 3.

        Its ``stream`` is the producing stream's handle, or None when there is no stream to
        wait for (version 3 does not allow 0).
        """
        handle = stream_handle(self.stream) if self.stream is not None else None
        return {
            "version": 3,
            "shape": (self.length,),
            "typestr": self.dtype.str,
            "data": (self.address, False),
            "strides": None,
            "stream": handle or None,  # 0 is not allowed in v3; None means "no sync needed"
        }

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(2, device_id)``: DLPack's device type for CUDA, and the device number."""
        return (_DL_CUDA, self.device_id)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: bool | None = None) -> Any:
        """Export the view as a DLPack ``dltensor`` capsule, without a copy.

        Parameters
        ----------
        stream : int, optional
            The consumer's stream, which is made to wait for the producing stream: None for
            the legacy default stream, -1 for no wait.
        max_version : tuple of (int, int), optional
            Accepted for the protocol; the capsule is an unversioned ``dltensor``.
        dl_device : tuple of (int, int), optional
            The device the consumer wants; it must be this view's.
        copy : bool, optional
            True is refused: the data is never copied.

        Returns
        -------
        PyCapsule
            A ``dltensor`` capsule that keeps the view alive.

        Raises
        ------
        BufferError
            If ``copy`` is True, or ``dl_device`` is another device.

        Examples
        --------
        >>> import pyarrow as pa
        >>> from arrow_gpu import to_device
        >>> as_cuda_array(to_device(pa.array([1, 2]))).__dlpack__()
        <capsule object "dltensor" at ...>
        """
        if copy:
            raise BufferError("arrow_gpu hands out device data without copying (copy=True)")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"data is on {self.__dlpack_device__()}, not {tuple(dl_device)}")
        if self.stream is not None and stream != -1:
            context = self._buffer.context
            # DLPack's None means the legacy default stream, whose handle is 1 (CU_STREAM_LEGACY).
            consumer = Stream.wrap(1 if stream is None else stream, context)
            consumer.wait(Stream.wrap(self.stream, context).record())
        return _dlpack_capsule(self, self.address, self.length, _DL_CODE[self.dtype.kind],
                               self.dtype.itemsize * 8, self.device_id)

    def __repr__(self) -> str:
        return f"<arrow_gpu.interop.CudaArrayView {self.dtype} [{self.length}] device={self.device_id}>"


def as_cuda_array(data: pa.Array | CudaBuffer, *, stream: Any = None,
                  ignore_validity: bool = False) -> CudaArrayView:
    """A zero-copy CUDA-array view of a device primitive array or a ``CudaBuffer``.

    Parameters
    ----------
    data : pyarrow.Array or CudaBuffer
        A device array of an integer or floating-point type, or device bytes (seen as
        ``uint8``).
    stream : stream-like, optional
        The stream that produces ``data``: consumers of the view (through DLPack) wait for it.
    ignore_validity : bool, default False
        Expose the values of an array that has a validity bitmap (CUDA arrays have no
        bit-packed masks, so such arrays are refused otherwise).

    Returns
    -------
    CudaArrayView
        An object with ``__cuda_array_interface__`` and ``__dlpack__`` that keeps ``data``
        alive.

    Raises
    ------
    TypeError
        If ``data`` is neither, is in host memory, or its type has no numpy equivalent.
    ValueError
        If ``data`` has a validity bitmap and ``ignore_validity`` is False.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from arrow_gpu import to_device
    >>> as_cuda_array(to_device(pa.array([1, 2], pa.int16()))).__cuda_array_interface__["shape"]
    (2,)
    """
    if isinstance(data, pa.Buffer):
        buffer = CudaBuffer.from_buffer(data)
        return CudaArrayView(buffer, buffer.address, buffer.size, np.dtype("uint8"), stream)
    if not isinstance(data, pa.Array):
        raise TypeError(f"expected a device pyarrow Array or CudaBuffer, got {type(data).__name__}")
    dtype = numpy_dtype(data.type)
    if dtype is None:
        raise TypeError(f"{data.type} has no CUDA array equivalent; supported: "
                        f"{', '.join(str(t) for t in _DTYPE_BY_ARROW)}")
    validity, values = data.buffers()
    if validity is not None and not ignore_validity:
        raise ValueError("array has a validity bitmap; pass ignore_validity=True to expose "
                         "its values alone")
    if values is None or values.is_cpu:
        raise TypeError("as_cuda_array views device memory, and the array is in host memory: "
                        "copy it to the device first with arrow_gpu.to_device(array)")
    buffer = CudaBuffer.from_buffer(values)
    address = buffer.address + data.offset * dtype.itemsize
    return CudaArrayView(buffer, address, len(data), dtype, stream, owner=data)


def _wait_for(stream: Any, context: Context) -> None:
    """Block until a producer's stream (of ``context``'s device) has finished its work."""
    if stream is not None:
        Stream.wrap(stream, context).synchronize()


def _bitmap(mask: Any, length: int, context: Context) -> pa.Buffer:
    """An Arrow validity bitmap for ``mask``: a bitmap buffer as is, a boolean CUDA array packed."""
    if isinstance(mask, pa.Buffer):
        # Device kernels would read a host (or other device's) bitmap as their own memory.
        if (mask.device_type, mask.device.device_id) != (pa.DeviceAllocationType.CUDA,
                                                         context.device_number):
            raise ValueError(f"validity bitmap is in {mask.device_type.name} memory of device "
                             f"{mask.device.device_id}, not on CUDA device "
                             f"{context.device_number} with the values; copy it there first")
        if mask.size * 8 < length:
            raise ValueError(f"validity bitmap of {mask.size} bytes is too short for {length} values")
        return mask
    interface = getattr(mask, "__cuda_array_interface__", None)
    if interface is None:
        raise TypeError("mask must be a bitmap buffer or an object with __cuda_array_interface__")
    address, shape, dtype, strides = _cuda_array_interface(interface, "mask")
    if dtype.kind not in "bui" or dtype.itemsize != 1 or shape != (length,):
        raise ValueError("mask must be a 1-D boolean or uint8 CUDA array as long as the data")
    _wait_for(interface.get("stream"), context)
    # Packing bytes into bits needs a kernel; the mask (1/8 of a byte-mask) goes via the host.
    raw = context.foreign_buffer(_contiguous_address(address, strides, length, 1), length,
                                 base=mask)
    bits = np.packbits(np.frombuffer(raw.copy_to_host(), np.uint8) != 0, bitorder="little")
    return context.buffer_from_data(bits.tobytes())


def _contiguous_address(address: int, strides: tuple[int, ...] | None, length: int,
                        itemsize: int) -> int:
    """The address of a 1-D CUDA array whose elements follow each other, as Arrow's do."""
    if strides is not None and length > 1 and strides != (itemsize,):
        raise ValueError(f"CUDA array is not contiguous (strides {strides})")
    return address


def from_cuda_array(obj: Any, mask: Any = None, *, device: int | None = None) -> pa.Array:
    """A device pyarrow array over the memory of a ``__cuda_array_interface__`` object.

    No copy is made of the values: the array's buffer keeps ``obj`` alive.

    Parameters
    ----------
    obj : object with ``__cuda_array_interface__``
        A 1-D contiguous CUDA array of an integer or floating-point dtype; the host waits
        for the interface's ``stream``, if it names one.
    mask : CUDA array or pyarrow.Buffer, optional
        A boolean (or uint8) CUDA array, True = valid, packed into a new validity bitmap,
        or an Arrow bitmap buffer on the same device, used as is. The interface's own
        ``mask`` is used when none is given.
    device : int, optional
        The device of ``obj``'s memory; asked of DLPack or the driver when omitted.

    Returns
    -------
    pyarrow.Array
        A device array of the matching Arrow type.

    Raises
    ------
    TypeError
        If ``obj`` has no interface, or its dtype has no Arrow equivalent.
    ValueError
        If the interface is malformed, or the array is not 1-D and contiguous, or the mask
        does not fit.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from arrow_gpu import to_device
    >>> view = as_cuda_array(to_device(pa.array([1.5, 2.5])))
    >>> from_cuda_array(view).type
    DataType(double)
    """
    interface = getattr(obj, "__cuda_array_interface__", None)
    if interface is None:
        raise TypeError(f"'{type(obj).__name__}' object has no __cuda_array_interface__")
    address, shape, dtype, strides = _cuda_array_interface(interface, "array")
    if len(shape) != 1:
        raise ValueError(f"only 1-D CUDA arrays become Arrow arrays, got shape {shape}")
    if dtype.byteorder == ">" or dtype not in _ARROW_BY_DTYPE:
        raise TypeError(f"unsupported CUDA array dtype {interface['typestr']!r}")
    length = shape[0]
    address = _contiguous_address(address, strides, length, dtype.itemsize)
    context = Context(device if device is not None else _device_of_pointer(obj, address))
    _wait_for(interface.get("stream"), context)
    values = context.foreign_buffer(address, length * dtype.itemsize, base=obj)
    if mask is None and interface.get("mask") is not None:
        mask = interface["mask"]
    validity = None if mask is None else _bitmap(mask, length, context)
    return pa.Array.from_buffers(_ARROW_BY_DTYPE[dtype], length, [validity, values],
                                 null_count=-1 if validity is not None else 0)


def _device_of_pointer(obj: Any, address: int) -> int:
    """The device of a foreign CUDA array: from DLPack if it says, else from the driver.

    The CUDA array interface carries no device; without one (an empty array has no
    memory to ask about) it is device 0.
    """
    device = getattr(obj, "__dlpack_device__", None)
    if device is not None:
        device_type, device_id = device()
        if device_type == _DL_CUDA:
            return int(device_id)
    if address == 0:
        return 0
    try:
        return Context(0).get_device_number(address)
    except OSError as error:
        raise ValueError(f"the CUDA array's data pointer {address:#x} is not memory the CUDA "
                         f"driver knows ({error}); pass device= to say where it lives") from error


def from_dlpack(obj: Any) -> pa.Array:
    """A device pyarrow array over the memory of a DLPack producer (CuPy, PyTorch, ...).

    The producer is asked to order its work before the legacy default stream, which this
    function then waits on, so the array is ready for any later use. No data is copied.

    Parameters
    ----------
    obj : object with ``__dlpack__`` and ``__dlpack_device__``
        A 1-D contiguous CUDA tensor of an integer or floating-point dtype.

    Returns
    -------
    pyarrow.Array
        A device array of the matching Arrow type, without nulls; it keeps the tensor alive.

    Raises
    ------
    TypeError
        If ``obj`` does not support DLPack, is not on a CUDA device (a NumPy array, for
        example), or its dtype has no Arrow equivalent.
    ValueError
        If the tensor is not 1-D, or not contiguous.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from arrow_gpu import to_device
    >>> from_dlpack(as_cuda_array(to_device(pa.array([1, 2], pa.int8())))).type
    DataType(int8)
    """
    device_of = getattr(obj, "__dlpack_device__", None)
    if device_of is None or not hasattr(obj, "__dlpack__"):
        raise TypeError(f"'{type(obj).__name__}' object does not support DLPack")
    device_type, device_id = device_of()
    if device_type in (_DL_CPU, _DL_CUDA_HOST):
        raise TypeError(
            f"from_dlpack views CUDA device memory without copying, and this "
            f"'{type(obj).__name__}' is in host (CPU) memory: copy host data to the device "
            "with arrow_gpu.to_device(pa.array(...)) or Context.buffer_from_data")
    if device_type != _DL_CUDA:
        raise TypeError(f"from_dlpack views CUDA device memory (DLPack device type "
                        f"{_DL_CUDA}), and this '{type(obj).__name__}' is on DLPack device "
                        f"type {device_type}")
    tensor = _DLPackTensor(obj.__dlpack__(stream=1))  # 1: the legacy default stream
    shape, (dtype_code, bits, lanes) = tensor.shape, tensor.dtype
    if len(shape) != 1:
        raise ValueError(f"only 1-D tensors become Arrow arrays, got {len(shape)} dimensions")
    dtype = _DTYPE_BY_DL.get((dtype_code, bits)) if lanes == 1 else None
    if dtype is None:
        raise TypeError(f"unsupported DLPack dtype (code {dtype_code}, bits {bits}, lanes {lanes})")
    length = shape[0]
    strides = tensor.strides
    if strides and length > 1 and strides[0] != 1:
        raise ValueError(f"tensor is not contiguous (stride {strides[0]} elements)")
    context = Context(int(device_id))
    Stream.wrap(0, context).synchronize()
    values = context.foreign_buffer(tensor.address, length * dtype.itemsize, base=tensor)
    return pa.Array.from_buffers(_ARROW_BY_DTYPE[dtype], length, [None, values], null_count=0)
