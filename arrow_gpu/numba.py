"""Numba interop: typed, zero-copy Numba views of device Arrow arrays, and back.

``to_numba(array)`` turns a pyarrow array whose buffers live on a CUDA device into a
:class:`NumbaArrowView`: Numba device arrays over the very same memory (values, validity
bitmap, offsets, data, children), ready to pass to ``@cuda.jit`` kernels — no hand-built
``DeviceNDArray``. ``from_numba(device_array, mask=None, type=None)`` does the reverse: a
device pyarrow array over a Numba (or any CUDA array interface) array, without copying it and
keeping it alive. Device functions for kernels are in :mod:`arrow_gpu.numba_kernels`; the
Numba memory-manager plugin is :class:`arrow_gpu.numba_memory.ArrowGpuMemoryManager` (also
reachable as ``arrow_gpu.numba._numba_memory_manager`` for ``NUMBA_CUDA_MEMORY_MANAGER``).

Works on a GPU and, with ``ARROW_GPU_SIMULATOR=1 NUMBA_ENABLE_CUDASIM=1``, on the simulators.

>>> import pyarrow as pa
>>> from numba import cuda
>>> import arrow_gpu
>>> from arrow_gpu.numba import from_numba, to_numba
>>> @cuda.jit
... def increment_by_one(an_array):
...     pos = cuda.grid(1)
...     if pos < an_array.size:
...         an_array[pos] += 1
>>> ctx = arrow_gpu.Context(0)
>>> device_array = pa.array([1, 2, 3, 4], pa.int32()).copy_to(ctx.memory_manager)
>>> increment_by_one[1, 32](to_numba(device_array).values)
>>> device_array.copy_to(pa.default_cpu_memory_manager()).to_pylist()
[2, 3, 4, 5]
>>> back = from_numba(cuda.to_device([1.5, 2.5]), mask=cuda.to_device([False, True]))
>>> back.copy_to(pa.default_cpu_memory_manager()).to_pylist()
[1.5, None]
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import importlib
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

_INSTALL_ADVICE = 'pip install "arrow_gpu[numba]"'

try:
    from numba import cuda
    from numba.cuda.core import config as _numba_config
except ImportError as error:  # Numba alone has no numba.cuda.core: the CUDA target is separate
    raise ImportError(f"arrow_gpu.numba needs Numba's CUDA target, the numba-cuda package "
                      f"({error}): {_INSTALL_ADVICE}") from error

if not hasattr(np, "row_stack"):
    # numba-cuda 0.30 registers np.row_stack (removed in NumPy 2.5) when it first compiles a
    # kernel; refuse here, where the cause can still be named, rather than at every kernel.
    try:
        importlib.import_module("numba.cuda.np.arrayobj")
    except AttributeError as error:
        raise ImportError(f"numba-cuda cannot compile kernels with NumPy {np.__version__} "
                          f"({error}): {_INSTALL_ADVICE} installs a NumPy it can "
                          "use") from error

from arrow_gpu import numba_kernels  # noqa: E402
from arrow_gpu._cuda import CudaBuffer  # noqa: E402
from arrow_gpu._interop.array_import import (ImportedArray, import_cuda_array,  # noqa: E402
                                             import_interface, pack_flags, validity_bitmap)
from arrow_gpu.device import using_simulator  # noqa: E402
from arrow_gpu.interop import numpy_dtype  # noqa: E402

__all__ = ["NumbaArrowView", "from_numba", "pack_bits", "to_numba"]


# --- The one place where a real GPU and the simulators differ ---------------------------------


class _GpuBridge:
    """Real GPU: Numba ``DeviceNDArray`` over the ``MemoryPointer`` of a ``CudaBuffer``."""

    @staticmethod
    def wrap(buffer: CudaBuffer, dtype: np.dtype, shape: tuple):
        from numba.cuda.cudadrv.devicearray import DeviceNDArray

        strides = tuple(int(np.prod(shape[k + 1:], dtype=np.int64)) * dtype.itemsize
                        for k in range(len(shape)))
        return DeviceNDArray(shape, strides, dtype, gpu_data=buffer.to_numba())

    @staticmethod
    def inspect(obj, what: str) -> ImportedArray | None:
        # Numba's device arrays, and any other CUDA array interface object (CuPy, PyTorch).
        if not cuda.is_cuda_array(obj):
            return None
        return import_cuda_array(obj, what)


class _HostMemory:
    """Simulated device memory (host memory) as a numpy-readable object holding its buffer."""

    def __init__(self, buffer: CudaBuffer):
        self.buffer = buffer
        self.__array_interface__ = {"data": (buffer.address, False), "shape": (buffer.size,),
                                    "typestr": "|u1", "version": 3}


class _SimulatorBridge:
    """Simulators: Numba's fake device arrays are numpy arrays, arrow_gpu's memory is host."""

    @staticmethod
    def wrap(buffer: CudaBuffer, dtype: np.dtype, shape: tuple):
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return FakeCUDAArray(np.asarray(_HostMemory(buffer)).view(dtype).reshape(shape))

    @staticmethod
    def inspect(obj, what: str) -> ImportedArray | None:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        if not isinstance(obj, FakeCUDAArray):
            return None
        # Numba's simulated device memory is host memory, as arrow_gpu's is: the numpy
        # array's own interface describes it, on the one device Numba simulates.
        return import_interface(obj._ary.__array_interface__, obj, what, device=0)


@functools.cache
def _bridge():
    numba_simulated = bool(_numba_config.ENABLE_CUDASIM)
    if numba_simulated != using_simulator():
        raise RuntimeError(
            "arrow_gpu and Numba must both simulate the GPU or both use it: set "
            "ARROW_GPU_SIMULATOR=1 together with NUMBA_ENABLE_CUDASIM=1, or neither "
            f"(now ARROW_GPU_SIMULATOR={int(using_simulator())}, "
            f"NUMBA_ENABLE_CUDASIM={int(numba_simulated)})")
    return _SimulatorBridge if numba_simulated else _GpuBridge


# --- Arrow types and their device storage -----------------------------------------------------


class _Storage(NamedTuple):
    dtype: np.dtype
    inner: tuple  # the shape of one value: () for scalars, (k,) for k-word values
    metadata: dict


def _fixed_width_storage(type: pa.DataType) -> _Storage | None:
    """How one fixed-width Arrow value is stored, or None for other layouts."""
    types = pa.types
    dtype = numpy_dtype(type)  # every integer and floating-point type has one
    if dtype is not None:
        return _Storage(dtype, (), {})
    if types.is_decimal(type):
        metadata = {"precision": type.precision, "scale": type.scale}
        if type.bit_width <= 64:
            return _Storage(np.dtype(f"int{type.bit_width}"), (), metadata)
        # Two's complement over little-endian 64-bit words, least significant word first.
        return _Storage(np.dtype(np.uint64), (type.bit_width // 64,), metadata)
    if types.is_fixed_size_binary(type):
        return _Storage(np.dtype(np.uint8), (type.byte_width,), {"byte_width": type.byte_width})
    if types.is_temporal(type) and not types.is_interval(type):
        if types.is_date32(type):
            metadata = {"unit": "D"}
        elif types.is_date64(type):
            metadata = {"unit": "ms"}
        else:
            metadata = {"unit": type.unit}
        if types.is_timestamp(type):
            metadata["tz"] = type.tz
        return _Storage(np.dtype(f"int{type.bit_width}"), (), metadata)
    return None


def _offset_dtype(type: pa.DataType) -> np.dtype:
    large = (pa.types.is_large_string(type) or pa.types.is_large_binary(type)
             or pa.types.is_large_list(type))
    return np.dtype(np.int64 if large else np.int32)


# --- Arrow -> Numba ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NumbaArrowView:
    """Numba device arrays over the buffers of one device Arrow array (no copies).

    Make one with :func:`to_numba`. Its attributes:

    - ``type`` and ``length``: the array's Arrow type and number of slots.
    - ``values``: fixed-width values, ``offset`` already applied: shape ``(length,)`` in the
      storage dtype (temporal → int32/int64, decimal32/64 → int32/int64), or
      ``(length, k)`` for decimal128/256 (``k`` uint64 words, least significant first) and
      fixed-size binary (``k`` bytes). Booleans: the packed bits (uint8, LSB first) starting at
      bit ``offset``. Dictionary arrays: the indices. None for other layouts.
    - ``validity``: the validity bitmap (uint8, bit ``offset + i`` is slot ``i``), or None when
      the array has no bitmap. Kernels take ``bitmap``, which is never None.
    - ``offset``: the bit offset of slot 0 in ``validity`` (and in boolean ``values``).
    - ``offsets``: ``length + 1`` offsets (string, binary, list types), into ``data`` or the
      child; absolute, so ``data`` is the whole data buffer and a list's child the whole child.
    - ``data``: the bytes of string and binary values (uint8).
    - ``children``: views of child arrays: a list's values, a fixed-size list's values for
      exactly these slots, a struct's fields (aligned with the parent), a dictionary.
    - ``metadata``: what the storage dtype does not say: ``unit`` (and ``tz``) for temporal
      types, ``precision``/``scale`` for decimals, ``byte_width``, ``list_size``.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from arrow_gpu import to_device
    >>> view = to_numba(to_device(pa.array([1, None, 3], pa.int16())))
    >>> view.values.shape, view.offset, view.null_count()
    ((3,), 0, 1)
    """

    type: pa.DataType
    length: int
    values: Any = None
    validity: Any = None
    offset: int = 0
    offsets: Any = None
    data: Any = None
    children: tuple[NumbaArrowView, ...] = ()
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @functools.cached_property
    def bitmap(self):
        """``validity`` for kernels: an empty array stands for "no nulls" (see ``is_valid``).

        Examples
        --------
        >>> import pyarrow as pa
        >>> from arrow_gpu import to_device
        >>> to_numba(to_device(pa.array([1, 2]))).bitmap.size
        0
        """
        if self.validity is not None:
            return self.validity
        return cuda.device_array(0, np.uint8)

    def null_mask(self):
        """A new bool device array, True where the slot is null (``pa.array``'s mask convention).

        Returns
        -------
        numba.cuda device array
            ``length`` bools.

        Examples
        --------
        >>> import pyarrow as pa
        >>> from arrow_gpu import to_device
        >>> to_numba(to_device(pa.array([1, None]))).null_mask().copy_to_host().tolist()
        [False, True]
        """
        return _unpack(self.bitmap, self.offset, self.length, invert=True)

    def null_count(self) -> int:
        """The number of nulls, counted on the device.

        Returns
        -------
        int
            0 when the array has no validity bitmap.

        Examples
        --------
        >>> import pyarrow as pa
        >>> from arrow_gpu import to_device
        >>> to_numba(to_device(pa.array([None, None, 3]))).null_count()
        2
        """
        if self.validity is None:
            return 0
        return _count_unset(self.validity, self.offset, self.length)

    def to_bools(self):
        """The values of a boolean array as a new bool device array (one byte per value).

        Returns
        -------
        numba.cuda device array
            ``length`` bools.

        Raises
        ------
        TypeError
            If the array is not of a boolean type.

        Examples
        --------
        >>> import pyarrow as pa
        >>> from arrow_gpu import to_device
        >>> to_numba(to_device(pa.array([True, False]))).to_bools().copy_to_host().tolist()
        [True, False]
        """
        if not pa.types.is_boolean(self.type):
            raise TypeError(f"to_bools needs a boolean array, not {self.type}")
        return _unpack(self.values, self.offset, self.length, invert=False)


def to_numba(array: pa.Array) -> NumbaArrowView:
    """Zero-copy Numba device arrays over a device pyarrow array (see :class:`NumbaArrowView`).

    The views share memory with ``array``: kernels writing to them change it, and they keep
    its buffers alive.

    Parameters
    ----------
    array : pyarrow.Array
        An array in CUDA device memory, of a fixed-width, boolean, string, binary, list,
        map, fixed-size list, struct or dictionary type (nested ones included).

    Returns
    -------
    NumbaArrowView
        The views of its buffers, and of its children's.

    Raises
    ------
    TypeError
        If ``array`` is not a ``pyarrow.Array`` in CUDA device memory (a host array or a
        ChunkedArray included), or its type is null or another unsupported one.
    pyarrow.ArrowInvalid
        If the array's buffers are too small for its length.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from arrow_gpu import to_device
    >>> view = to_numba(to_device(pa.array(["ab", "c"])))
    >>> view.offsets.copy_to_host().tolist(), view.data.size
    ([0, 2, 3], 3)
    """
    _require_device_array(array)
    if len(array):  # buffer sizes must cover the views; empty arrays may have NULL buffers
        array.validate()
    type, length, offset = array.type, len(array), array.offset
    buffers = array.buffers()  # the first ones are this array's own, children's follow
    common = {"type": type, "length": length, "offset": offset % 8,
              "validity": _bits(buffers[0], offset, length)}
    storage = _fixed_width_storage(type)
    if storage is not None:
        values = _device_view(buffers[1], offset, length, storage.dtype, storage.inner)
        return NumbaArrowView(values=values, metadata=storage.metadata, **common)
    if pa.types.is_boolean(type):
        return NumbaArrowView(values=_bits(buffers[1], offset, length), **common)
    if (pa.types.is_string(type) or pa.types.is_binary(type) or pa.types.is_large_string(type)
            or pa.types.is_large_binary(type)):
        offsets = _device_view(buffers[1], offset, length + 1, _offset_dtype(type))
        data_size = 0 if buffers[2] is None else buffers[2].size
        data = _device_view(buffers[2], 0, data_size, np.dtype(np.uint8))
        return NumbaArrowView(offsets=offsets, data=data, **common)
    if pa.types.is_list(type) or pa.types.is_large_list(type) or pa.types.is_map(type):
        offsets = _device_view(buffers[1], offset, length + 1, _offset_dtype(type))
        return NumbaArrowView(offsets=offsets, children=(to_numba(array.values),), **common)
    if pa.types.is_fixed_size_list(type):
        size = type.list_size
        child = array.values.slice(offset * size, length * size)
        return NumbaArrowView(children=(to_numba(child),), metadata={"list_size": size},
                              **common)
    if pa.types.is_struct(type):
        children = tuple(to_numba(array.field(i)) for i in range(type.num_fields))
        return NumbaArrowView(children=children, **common)
    if pa.types.is_dictionary(type):
        index = _fixed_width_storage(type.index_type)
        assert index is not None  # dictionary indices are integers
        values = _device_view(buffers[1], offset, length, index.dtype)
        return NumbaArrowView(values=values, children=(to_numba(array.dictionary),),
                              metadata={"ordered": type.ordered}, **common)
    raise TypeError(f"to_numba does not support Arrow type {type}")


def _require_device_array(array) -> None:
    if isinstance(array, pa.ChunkedArray):
        raise TypeError("to_numba takes one pyarrow.Array; convert each of .chunks")
    if not isinstance(array, pa.Array):
        raise TypeError(f"to_numba takes a pyarrow.Array, not {type(array).__name__}")
    if pa.types.is_null(array.type):  # no buffers, so pyarrow says it is on the CPU
        raise TypeError("to_numba does not support Arrow type null: it has no memory to view")
    if array.device_type != pa.DeviceAllocationType.CUDA:
        raise TypeError(
            f"to_numba views device memory, and the array is in {array.device_type.name} "
            "memory: copy it to the device first with arrow_gpu.to_device(array)")


def _device_view(buffer: pa.Buffer | None, first: int, count: int, dtype: np.dtype,
                 inner: tuple = ()):
    """Elements ``[first, first + count)`` of ``buffer`` as a Numba device array."""
    shape = (count, *inner)
    value_size = dtype.itemsize * math.prod(inner)
    if count == 0:
        return cuda.device_array(shape, dtype)  # empty buffers may be absent or NULL
    window = CudaBuffer.from_buffer(buffer).slice(first * value_size, count * value_size)
    return _bridge().wrap(window, dtype, shape)


def _bits(buffer: pa.Buffer | None, offset: int, length: int):
    """The bytes of a bitmap that hold bits ``[offset, offset + length)``, or None."""
    if buffer is None:
        return None
    first = offset // 8
    return _device_view(buffer, first, (offset + length + 7) // 8 - first, np.dtype(np.uint8))


# --- Bit helpers (kernels) --------------------------------------------------------------------


def _blocks(count: int) -> int:
    return max(1, (count + numba_kernels.THREADS - 1) // numba_kernels.THREADS)


def _unpack(bits, bit_offset: int, length: int, invert: bool):
    out = cuda.device_array(length, np.bool_)
    if length:
        launch = numba_kernels.unpack_bits_kernel[_blocks(length), numba_kernels.THREADS]
        launch(bits, bit_offset, out, invert)
    return out


def _count_unset(bits, bit_offset: int, length: int) -> int:
    count = cuda.to_device(np.zeros(1, np.int64))
    if length:
        launch = numba_kernels.count_unset_kernel[_blocks(length), numba_kernels.THREADS]
        launch(bits, bit_offset, length, count)
    return int(count.copy_to_host()[0])  # also waits for the kernels queued before


def pack_bits(flags, invert: bool = False):
    """Pack a bool device array into a new Arrow bitmap (uint8, LSB first; True → 1).

    Parameters
    ----------
    flags : numba.cuda device array
        A 1-D contiguous device array of bools.
    invert : bool, default False
        Whether True packs to 0, which makes a validity bitmap of a null mask.

    Returns
    -------
    numba.cuda device array
        ``ceil(len(flags) / 8)`` uint8 bytes.

    Raises
    ------
    TypeError
        If ``flags`` is not a device array of bools (host memory included).
    ValueError
        If ``flags`` is not contiguous.

    Examples
    --------
    >>> from numba import cuda
    >>> pack_bits(cuda.to_device([True, False, True])).copy_to_host().tolist()
    [5]
    """
    memory = _inspect(flags, "flags")
    _require_layout(memory, memory.dtype, (), "flags", expected=np.dtype(np.bool_))
    bitmap = pack_flags(memory, memory.shape[0], memory.context, invert=invert, what="flags")
    return _device_view(bitmap, 0, bitmap.size, np.dtype(np.uint8))


# --- Numba -> Arrow ---------------------------------------------------------------------------


def from_numba(device_array, mask=None, type: pa.DataType | None = None, *,
               validity=None) -> pa.Array:
    """A device pyarrow array over a 1-d Numba device array, sharing its memory.

    Bool arrays become Arrow booleans: those are bits, so they are the one case that is
    packed into new memory. The result keeps the device arrays alive; its null count is
    computed on the device.

    Parameters
    ----------
    device_array : numba.cuda device array
        A contiguous Numba device array (or any object with the CUDA array interface). Its
        dtype must be the storage of ``type``, with a trailing dimension for
        decimal128/256 and fixed-size binary (the layout ``to_numba`` gives).
    mask : numba.cuda device array, optional
        Bools (or uint8 bytes), True where the value is null (as in
        ``pa.array(..., mask=...)``); packed into a new validity bitmap on the device.
    type : pyarrow.DataType, optional
        A fixed-width or boolean Arrow type; inferred from the dtype if omitted.
    validity : numba.cuda device array or pyarrow.Buffer, optional
        Instead of ``mask``: bools, True = valid, packed into a new bitmap; or an already
        packed Arrow validity bitmap (uint8, 1 = valid, starting at bit 0; or a device
        buffer), used as is.

    Returns
    -------
    pyarrow.Array
        A device array of ``type``.

    Raises
    ------
    TypeError
        If an argument is not a device array (host memory included), ``type`` is not a
        fixed-width or boolean ``pyarrow.DataType``, or a dtype or shape does not fit it.
    ValueError
        If both ``mask`` and ``validity`` are given, one is too short, an array is not
        contiguous, or the arrays are on different devices.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from numba import cuda
    >>> array = from_numba(cuda.to_device([1, 2, 3]), type=pa.int64())
    >>> array.type, array.is_cpu
    (DataType(int64), False)
    """
    memory = _inspect(device_array, "device_array")
    if type is None:
        type = _infer_type(memory.dtype)
    elif not isinstance(type, pa.DataType):
        raise TypeError(f"type must be a pyarrow.DataType, not {builtins.type(type).__name__}")
    length = memory.shape[0]
    if pa.types.is_boolean(type):
        _require_layout(memory, memory.dtype, (), "device_array", expected=np.dtype(np.bool_),
                        arrow_type=type)
        data = pack_flags(memory, length, memory.context, invert=False, what="device_array")
    else:
        storage = _fixed_width_storage(type)
        if storage is None:
            raise TypeError(f"from_numba builds fixed-width arrays; {type} is not one")
        _require_layout(memory, _storage_dtype(memory.dtype, type), storage.inner,
                        "device_array", expected=storage.dtype, arrow_type=type)
        data = memory.buffer()
    bitmap = validity_bitmap(mask, validity, length, memory.context, importer=_inspect)
    if bitmap is None:
        return pa.Array.from_buffers(type, length, [None, data], null_count=0)
    bits = _device_view(bitmap, 0, (length + 7) // 8, np.dtype(np.uint8))
    return pa.Array.from_buffers(type, length, [bitmap, data],
                                 null_count=_count_unset(bits, 0, length))


def _inspect(obj, name: str) -> ImportedArray:
    memory = _bridge().inspect(obj, name)
    if memory is not None:
        return memory
    if isinstance(obj, (np.ndarray, pa.Array, pa.Buffer)) or hasattr(obj, "__array_interface__"):
        raise TypeError(f"{name} is in host memory; copy it to the device first "
                        "(numba.cuda.to_device)")
    raise TypeError(f"{name} must be a Numba device array, not {builtins.type(obj).__name__}")


def _infer_type(dtype: np.dtype) -> pa.DataType:
    if dtype == np.bool_:
        return pa.bool_()
    try:
        return pa.from_numpy_dtype(dtype)
    except (pa.ArrowNotImplementedError, NotImplementedError, TypeError) as error:
        raise TypeError(f"no Arrow type for device arrays of dtype {dtype}: {error}") from None


def _storage_dtype(dtype: np.dtype, type: pa.DataType) -> np.dtype:
    """The dtype as Arrow storage: datetime64/timedelta64 are int64 of a matching unit."""
    if dtype.kind not in "Mm":
        return dtype
    # Same unit is not enough: a datetime64 must not become a duration or a time of day.
    matches = pa.types.is_timestamp(type) if dtype.kind == "M" else pa.types.is_duration(type)
    if not matches or type.unit != np.datetime_data(dtype)[0]:
        raise TypeError(f"dtype/type mismatch: {dtype} device array cannot back Arrow {type}")
    return np.dtype(np.int64)


def _require_layout(memory: ImportedArray, dtype: np.dtype, inner: tuple, name: str, *,
                    expected: np.dtype | None = None, arrow_type: pa.DataType | None = None):
    expected = dtype if expected is None else expected
    if dtype != expected or tuple(memory.shape[1:]) != inner or len(memory.shape) < 1:
        target = f"Arrow {arrow_type} (storage {expected}, value shape {inner})" \
            if arrow_type is not None else f"{expected} values of shape {inner}"
        raise TypeError(f"dtype/type mismatch: {name} of dtype {memory.dtype} and shape "
                        f"{memory.shape} cannot hold {target}")


def __getattr__(name: str):
    # The memory-manager plugin needs Numba's real driver: import it only when asked for.
    if name in ("ArrowGpuMemoryManager", "_numba_memory_manager"):
        from arrow_gpu.numba_memory import ArrowGpuMemoryManager

        return ArrowGpuMemoryManager
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
