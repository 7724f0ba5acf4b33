"""Foreign CUDA arrays as device memory Arrow can hold, and their nulls as Arrow bitmaps.

The one importer behind ``interop.from_cuda_array``, ``interop.from_dlpack`` and
``numba.from_numba``: a ``__cuda_array_interface__`` (v2 or v3) or DLPack object becomes an
:class:`ImportedArray` — checked once to hold its elements one after another, its device
known, its producer's stream waited for. Masks follow pyarrow's convention everywhere:
``mask`` is True = null (as in ``pa.array(..., mask=...)``), ``validity`` is True = valid or
an already packed Arrow bitmap; flags are packed into bitmaps on the device.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from arrow_gpu._cuda import CudaBuffer, _DLPackTensor, _pack_bits, _resolve_null_counts
from arrow_gpu._interop.protocols import (DL_CPU, DL_CUDA, DL_CUDA_HOST, contiguous_span,
                                          dlpack_dtype, parse_cuda_array_interface)
from arrow_gpu.device import Context, DeviceLike, Stream, as_context, stream_handle

__all__ = ["ARROW_BY_DTYPE", "DTYPE_BY_ARROW", "ImportedArray", "arrow_array", "import_array",
           "known_null_counts",
           "import_cuda_array", "import_dlpack", "import_interface", "length_of", "pack_flags",
           "validity_bitmap"]

# numpy dtypes that map one to one onto Arrow fixed-width types; bools are packed into bits.
ARROW_BY_DTYPE = {
    np.dtype(name): getattr(pa, name)()
    for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "float32", "float64")
}
DTYPE_BY_ARROW = {arrow: dtype for dtype, arrow in ARROW_BY_DTYPE.items()}


class ImportedArray(NamedTuple):
    """The device memory of a foreign CUDA array, its elements in row-major order."""

    context: Context  # the primary context of the device that holds it
    address: int  # of the first element
    nbytes: int
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    owner: object  # keeps the memory alive

    def buffer(self) -> CudaBuffer:
        """A device buffer over the memory, holding its owner."""
        return self.context.foreign_buffer(self.address, self.nbytes, base=self.owner)


def import_interface(interface: Mapping[str, Any], owner: object, what: str,
                     device: DeviceLike | None = None, stream: Any = None) -> ImportedArray:
    """The array a ``__cuda_array_interface__`` dict describes, once its producer's stream is
    done: for the host, or with ``stream`` (the consumer's), for work queued there.

    ``owner`` keeps the memory alive; ``device`` says where it lives when the caller knows
    (the interface does not say): otherwise DLPack or the driver is asked.
    """
    address, shape, dtype, strides = parse_cuda_array_interface(interface, what)
    nbytes = _row_major_nbytes(shape, strides, dtype, what)
    context = as_context(device if device is not None else _device_of(owner, address))
    producer = interface.get("stream")
    if producer is not None:  # the producer's work on it may still be under way
        if stream_handle(stream) == 0:
            Stream.wrap(producer, context).synchronize()
        else:
            Stream.wrap(stream, context).wait(Stream.wrap(producer, context).record())
    return ImportedArray(context, address, nbytes, shape, dtype, owner)


def import_cuda_array(obj: Any, what: str, device: DeviceLike | None = None,
                      stream: Any = None) -> ImportedArray:
    """The array behind ``obj.__cuda_array_interface__`` (see :func:`import_interface`)."""
    interface = getattr(obj, "__cuda_array_interface__", None)
    if interface is None:
        hint = ""
        if hasattr(obj, "__array_interface__") or hasattr(obj, "__array__"):
            hint = ("; it is in host memory: copy it to the device with "
                    "arrow_gpu.to_device(pa.array(obj))")
        raise TypeError(f"'{type(obj).__name__}' object has no __cuda_array_interface__{hint}")
    return import_interface(interface, obj, what, device, stream)


def import_dlpack(obj: Any, what: str, stream: Any = None) -> ImportedArray:
    """The tensor a DLPack producer exports, once the producer's work on it is done: for the
    host, or with ``stream`` (the consumer's), for work queued there.

    The producer is asked to order its work before ``stream`` (the legacy default stream for
    None, which is then waited on). The imported array owns the tensor: the producer's
    deleter runs when it goes.
    """
    device_of = getattr(obj, "__dlpack_device__", None)
    if device_of is None or not hasattr(obj, "__dlpack__"):
        raise TypeError(f"'{type(obj).__name__}' object does not support DLPack")
    device_type, device_id = device_of()
    if device_type in (DL_CPU, DL_CUDA_HOST):
        raise TypeError(
            f"DLPack imports view CUDA device memory without copying, and this "
            f"'{type(obj).__name__}' is in host (CPU) memory: copy host data to the device "
            "with arrow_gpu.to_device(pa.array(...)) or Context.buffer_from_data")
    if device_type != DL_CUDA:
        raise TypeError(f"DLPack imports view CUDA device memory (DLPack device type "
                        f"{DL_CUDA}), and this '{type(obj).__name__}' is on DLPack device "
                        f"type {device_type}")
    consumer = stream_handle(stream)
    tensor = _DLPackTensor(obj.__dlpack__(stream=consumer or 1))  # 1: the legacy stream
    dtype = dlpack_dtype(*tensor.dtype)
    if dtype is None:
        code, bits, lanes = tensor.dtype
        raise TypeError(f"unsupported DLPack dtype (code {code}, bits {bits}, lanes {lanes})")
    shape = tensor.shape
    strides = None if tensor.strides is None else tuple(s * dtype.itemsize
                                                        for s in tensor.strides)
    nbytes = _row_major_nbytes(shape, strides, dtype, what)
    context = Context(int(device_id))
    if consumer == 0:
        Stream.wrap(0, context).synchronize()
    return ImportedArray(context, tensor.address, nbytes, shape, dtype, tensor)


def import_array(obj: Any, what: str, stream: Any = None) -> ImportedArray:
    """A CUDA array of either protocol: the CUDA array interface first, then DLPack; ready
    for the host, or with ``stream``, for work queued there."""
    if hasattr(obj, "__cuda_array_interface__"):
        return import_cuda_array(obj, what, stream=stream)
    if hasattr(obj, "__dlpack__"):
        return import_dlpack(obj, what, stream)
    raise TypeError(f"the {what} must be a CUDA array (with __cuda_array_interface__ or "
                    f"DLPack), not {type(obj).__name__}")


def _row_major_nbytes(shape: tuple[int, ...], strides: tuple[int, ...] | None,
                      dtype: np.dtype[Any], what: str) -> int:
    try:
        contiguous_span(shape, strides, dtype.itemsize, row_major=True)
    except ValueError:
        raise ValueError(f"the {what} is not contiguous (shape {shape}, strides {strides}): "
                         "an Arrow buffer holds its elements one after another, in row-major "
                         "order; make a contiguous copy first") from None
    return math.prod(shape) * dtype.itemsize


def _device_of(obj: Any, address: int) -> int:
    """The device of a foreign CUDA array: from DLPack if it says, else from the driver.

    The CUDA array interface carries no device; without one (an empty array has no
    memory to ask about) it is device 0.
    """
    device = getattr(obj, "__dlpack_device__", None)
    if device is not None:
        device_type, device_id = device()
        if device_type == DL_CUDA:
            return int(device_id)
    if address == 0:
        return 0
    try:
        number: int = Context(0).get_device_number(address)
    except OSError as error:
        raise ValueError(f"the CUDA array's data pointer {address:#x} is not memory the CUDA "
                         f"driver knows ({error}); pass device= to say where it lives") from error
    return number


# --- Nulls ----------------------------------------------------------------------------------


Importer = Callable[[Any, str], ImportedArray]


def validity_bitmap(mask: Any, validity: Any, length: int, context: Context,
                    importer: Importer = import_array) -> pa.Buffer | None:
    """The validity bitmap of ``length`` values on ``context``'s device, or None for no nulls.

    Parameters
    ----------
    mask : CUDA array, optional
        Bools (or uint8 bytes), True = null, as in ``pa.array(..., mask=...)``: packed.
    validity : CUDA array or pyarrow.Buffer, optional
        Bools, True = valid: packed; or a packed Arrow bitmap (bit i = value i, 1 = valid),
        as a uint8 CUDA array or a device buffer: used as is, without a copy.
    importer : callable, optional
        Turns an array argument into an :class:`ImportedArray` (Numba's simulated arrays
        have no protocol of their own).

    Raises
    ------
    ValueError
        If both are given, one does not fit ``length``, or lives on another device.
    TypeError
        If one is not a CUDA array of a dtype named above.
    """
    if mask is not None and validity is not None:
        raise ValueError("give either mask (True = null, as in pa.array) or validity "
                         "(True = valid, or a packed Arrow bitmap), not both")
    if mask is not None:
        if isinstance(mask, pa.Buffer):
            raise TypeError("mask takes a CUDA array of bools, True = null; a packed Arrow "
                            "bitmap goes to validity=")
        return pack_flags(importer(mask, "mask"), length, context, invert=True, what="mask")
    if validity is None:
        return None
    if isinstance(validity, pa.Buffer):
        return _checked_bitmap(validity, validity.size, length, context)
    flags = importer(validity, "validity")
    if flags.dtype == np.uint8:
        if len(flags.shape) != 1:
            raise ValueError(f"a validity bitmap is 1-D, got shape {flags.shape}")
        _require_context(flags, context, "validity")
        return _checked_bitmap(flags.buffer(), flags.nbytes, length, context)
    return pack_flags(flags, length, context, invert=False, what="validity")


def pack_flags(flags: ImportedArray, length: int, context: Context, *, invert: bool,
               what: str, stream: Any = None) -> CudaBuffer:
    """A new bitmap of ``length`` flags: bit i is set where flag i is true (false: ``invert``).

    The bits are packed on the device, ready when this returns; with ``stream``, packed
    there, ready for the work queued after them.
    """
    if flags.dtype not in (np.bool_, np.uint8):
        raise TypeError(f"the {what} must hold bools (or uint8 bytes, nonzero = true), not "
                        f"dtype {flags.dtype}")
    if flags.shape != (length,):
        raise ValueError(f"{what} length mismatch: shape {flags.shape} for {length} values")
    _require_context(flags, context, what)
    source = flags.buffer()  # a view the driver copies from, under the simulator too
    bitmap = context.new_buffer((length + 7) // 8)
    _pack_bits(context, bitmap.address, source.address, length, invert, stream)
    if stream_handle(stream) == 0:
        Stream.wrap(0, context).synchronize()  # queued on the legacy default stream
    return bitmap


def _require_context(array: ImportedArray, context: Context, what: str) -> None:
    if array.context != context:
        raise ValueError(f"the {what} is on device {array.context.device_number}, the values "
                         f"on device {context.device_number}: copy it there first")


def _checked_bitmap(bitmap: pa.Buffer, nbytes: int, length: int,
                    context: Context) -> pa.Buffer:
    # Device code would read a host (or other device's) bitmap as its own memory.
    if (bitmap.device_type, bitmap.device.device_id) != (pa.DeviceAllocationType.CUDA,
                                                         context.device_number):
        raise ValueError(f"validity bitmap is in {bitmap.device_type.name} memory of device "
                         f"{bitmap.device.device_id}, not on CUDA device "
                         f"{context.device_number} with the values; copy it there first")
    if nbytes * 8 < length:
        raise ValueError(f"validity length mismatch: a bitmap of {nbytes} bytes is too short "
                         f"for {length} values")
    return bitmap


# --- Arrow arrays ---------------------------------------------------------------------------


def length_of(values: ImportedArray) -> int:
    """The number of values of a 1-D array."""
    if len(values.shape) != 1:
        raise ValueError(f"only 1-D CUDA arrays become Arrow arrays, got shape {values.shape}")
    return values.shape[0]


def arrow_array(values: ImportedArray, validity: pa.Buffer | None,
                stream: Any = None) -> pa.Array:
    """The Arrow array of the values' type over their memory and a validity bitmap.

    Numbers are viewed without a copy; bools (a byte each) are packed on the device into the
    bits of a new ``pa.bool_()`` array, as Arrow holds them (on ``stream``: see pack_flags).
    """
    dtype = values.dtype
    n = length_of(values)
    if dtype == np.bool_:
        data = pack_flags(values, n, values.context, invert=False, what="bools", stream=stream)
    elif dtype.byteorder == ">" or dtype not in ARROW_BY_DTYPE:
        raise TypeError(f"unsupported CUDA array dtype {dtype.str!r}; supported: bool, "
                        f"{', '.join(str(t) for t in DTYPE_BY_ARROW)}")
    else:
        data = values.buffer()
    array = pa.Array.from_buffers(pa.bool_() if dtype == np.bool_ else ARROW_BY_DTYPE[dtype],
                                  n, [validity, data],
                                  null_count=-1 if validity is not None else 0)
    return known_null_counts(array)


def known_null_counts(array: pa.Array) -> pa.Array:
    """``array`` with every unknown null count in it, at any depth, made exact now: on the
    host for host memory, through the driver for device memory. pyarrow counts an unknown
    one on the host when it builds or checks an array, and a device bitmap read there faults
    (a map checks its entries', for one); a host array copied to the device keeps its
    counts."""
    resolved: pa.Array = _resolve_null_counts(array)
    return resolved
