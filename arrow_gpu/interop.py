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

import warnings
from typing import Any

import numpy as np
import pyarrow as pa

from arrow_gpu._cuda import CudaBuffer, _dlpack_capsule
from arrow_gpu._interop.array_import import (DTYPE_BY_ARROW, arrow_array, import_cuda_array,
                                             import_dlpack, length_of, pack_flags, validity_bitmap)
from arrow_gpu._interop.protocols import DL_CUDA, dlpack_code
from arrow_gpu.device import DeviceLike, Stream, stream_handle

__all__ = ["CudaArrayView", "as_cuda_array", "from_cuda_array", "from_dlpack", "numpy_dtype"]

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
    return DTYPE_BY_ARROW.get(type)


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
        return (DL_CUDA, self.device_id)

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
        return _dlpack_capsule(self, self.address, self.length, dlpack_code(self.dtype),
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
                        f"{', '.join(str(t) for t in DTYPE_BY_ARROW)}")
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


_MASK_MEANING_CHANGED = (
    "from_cuda_array(mask=...) now takes True = null, as pa.array(..., mask=...) does (it "
    "took True = valid before): invert masks that say True = valid, or pass them (and packed "
    "Arrow bitmaps) as validity=. Passing validity= instead of mask=, or filtering this "
    "FutureWarning, silences it.")


def from_cuda_array(obj: Any, mask: Any = None, *, validity: Any = None,
                    device: DeviceLike | None = None) -> pa.Array:
    """A device pyarrow array over the memory of a ``__cuda_array_interface__`` object.

    No copy is made of numeric values: the array's buffer keeps ``obj`` alive.

    Parameters
    ----------
    obj : object with ``__cuda_array_interface__``
        A 1-D contiguous CUDA array of an integer, floating-point or bool dtype; the host
        waits for the interface's ``stream``, if it names one. Bools (a byte each) are
        packed on the device into a new ``pa.bool_()`` array's bits: the one copy made.
    mask : CUDA array, optional
        Bools (or uint8 bytes), **True = null**, as in ``pa.array(..., mask=...)``; packed
        into a new validity bitmap on the device. Until this release it meant True = valid:
        every call that passes it warns (``FutureWarning``) for one release.
    validity : CUDA array or pyarrow.Buffer, optional
        Instead of ``mask``: bools, True = valid, packed into a new bitmap; or an already
        packed Arrow bitmap (a uint8 CUDA array, or a buffer on the same device), used as
        is. The interface's own ``mask`` (True = valid) is used when neither is given.
    device : DeviceLike, optional
        The device of ``obj``'s memory, in any spelling ``arrow_gpu.device.as_context``
        accepts; asked of DLPack or the driver when omitted.

    Returns
    -------
    pyarrow.Array
        A device array of the matching Arrow type.

    Raises
    ------
    TypeError
        If ``obj`` has no interface, its dtype has no Arrow equivalent, or a mask is not a
        CUDA array of bools.
    ValueError
        If the interface is malformed, the array is not 1-D and contiguous, both ``mask``
        and ``validity`` are given, or one does not fit.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from arrow_gpu import to_device
    >>> view = as_cuda_array(to_device(pa.array([1.5, 2.5])))
    >>> from_cuda_array(view).type
    DataType(double)
    >>> bitmap = to_device(pa.array([0b10], pa.uint8())).buffers()[1]  # value 0 is null
    >>> with_nulls = from_cuda_array(view, validity=bitmap)
    >>> with_nulls.copy_to(pa.default_cpu_memory_manager()).to_pylist()
    [None, 2.5]
    """
    if mask is not None:
        warnings.warn(_MASK_MEANING_CHANGED, FutureWarning, stacklevel=2)
    values = import_cuda_array(obj, "array", device)
    interface_mask = obj.__cuda_array_interface__.get("mask")
    if mask is None and validity is None and interface_mask is not None:
        # The interface's own mask holds flags, True = valid, whatever its dtype.
        flags = import_cuda_array(interface_mask, "interface's mask", device)
        bitmap = pack_flags(flags, length_of(values), values.context, invert=False,
                            what="interface's mask")
        return arrow_array(values, bitmap)
    return arrow_array(values, validity_bitmap(mask, validity, length_of(values),
                                                values.context))


def from_dlpack(obj: Any, *, mask: Any = None, validity: Any = None) -> pa.Array:
    """A device pyarrow array over the memory of a DLPack producer (CuPy, PyTorch, ...).

    The producer is asked to order its work before the legacy default stream, which this
    function then waits on, so the array is ready for any later use. No numeric data is
    copied.

    Parameters
    ----------
    obj : object with ``__dlpack__`` and ``__dlpack_device__``
        A 1-D contiguous CUDA tensor of an integer, floating-point or bool dtype (bools
        are packed on the device into a new ``pa.bool_()`` array's bits).
    mask : CUDA array, optional
        Bools (or uint8 bytes), True = null, as in ``pa.array(..., mask=...)``: packed into
        a validity bitmap on the device.
    validity : CUDA array or pyarrow.Buffer, optional
        Instead of ``mask``: bools, True = valid; or a packed Arrow bitmap (a uint8 CUDA
        array or a device buffer), used as is.

    Returns
    -------
    pyarrow.Array
        A device array of the matching Arrow type; it keeps the tensor alive.

    Raises
    ------
    TypeError
        If ``obj`` does not support DLPack, is not on a CUDA device (a NumPy array, for
        example), or its dtype has no Arrow equivalent.
    ValueError
        If the tensor is not 1-D, or not contiguous, or a mask does not fit.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from arrow_gpu import to_device
    >>> from_dlpack(as_cuda_array(to_device(pa.array([1, 2], pa.int8())))).type
    DataType(int8)
    """
    values = import_dlpack(obj, "tensor")
    return arrow_array(values, validity_bitmap(mask, validity, length_of(values),
                                                values.context))
