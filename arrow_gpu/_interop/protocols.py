"""The protocols of foreign CUDA arrays, as data: the CUDA array interface's dict, the bytes
its strides span, and DLPack's device types and dtype codes.

Pure Python with no state, below the compiled module (whose ``Context.buffer_from_object``
reads the interface) and the importer of arrays, ``arrow_gpu._interop.array_import``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["DL_CPU", "DL_CUDA", "DL_CUDA_HOST", "contiguous_span", "dlpack_code",
           "dlpack_dtype", "parse_cuda_array_interface"]

# DLPack's device types (DLDeviceType) that arrow_gpu tells apart.
DL_CPU, DL_CUDA, DL_CUDA_HOST = 1, 2, 3

# DLPack's type codes (DLDataTypeCode) by numpy dtype kind.
_DL_CODE_BY_KIND = {"i": 0, "u": 1, "f": 2, "b": 6}
_KIND_BY_DL_CODE = {code: kind for kind, code in _DL_CODE_BY_KIND.items()}


def parse_cuda_array_interface(
        interface: Mapping[str, Any],
        what: str) -> tuple[int, tuple[int, ...], np.dtype[Any], tuple[int, ...] | None]:
    """(address, shape, dtype, strides) of a ``__cuda_array_interface__`` dict.

    Strides, in bytes, are None for C order. A malformed interface is a ValueError that
    names ``what`` holds it.
    """
    try:
        shape = tuple(operator.index(extent) for extent in interface["shape"])
        dtype = np.dtype(interface["typestr"])
        address = interface["data"][0] or 0
        strides = interface.get("strides")
        strides = None if strides is None else tuple(operator.index(s) for s in strides)
    except (KeyError, TypeError, IndexError) as error:
        raise ValueError(f"the {what}'s __cuda_array_interface__ is malformed ({error!r}): it "
                         "needs 'shape' (a tuple of ints), 'typestr' and 'data' (ptr, "
                         "readonly)") from error
    return address, shape, dtype, strides


def contiguous_span(shape: tuple[int, ...], strides: tuple[int, ...] | None, itemsize: int,
                    *, row_major: bool = False) -> tuple[int, int]:
    """(start, end) byte offsets, from the data pointer, of the elements an array addresses.

    ValueError ("array data is non-contiguous") if they do not fill that span, or, with
    ``row_major``, if they do not follow each other in C order from the data pointer (what
    an Arrow buffer needs; any order does for a view of the bytes).
    """
    count = math.prod(shape)
    if count == 0:
        return 0, 0
    if strides is None:
        return 0, count * itemsize
    if row_major:
        step = itemsize
        for extent, stride in zip(reversed(shape), reversed(strides)):
            if extent > 1 and stride != step:  # a dimension of one may have any stride
                raise ValueError("array data is non-contiguous")
            step *= extent
        return 0, count * itemsize
    start = end = 0
    for extent, stride in zip(shape, strides):
        reach = stride * (extent - 1)  # negative strides reach below the data pointer
        if reach < 0:
            start += reach
        else:
            end += reach
    end += itemsize
    if end - start != count * itemsize:
        raise ValueError("array data is non-contiguous")
    return start, end


def dlpack_dtype(code: int, bits: int, lanes: int) -> np.dtype[Any] | None:
    """The numpy dtype of a DLPack dtype, or None for one numpy has no plain dtype for."""
    kind = _KIND_BY_DL_CODE.get(code)
    if kind is None or lanes != 1 or bits % 8 or not bits:
        return None
    if kind == "b":
        return np.dtype(np.bool_) if bits == 8 else None
    try:
        return np.dtype(f"<{kind}{bits // 8}")
    except TypeError:  # no such width, e.g. 24-bit integers
        return None


def dlpack_code(dtype: np.dtype[Any]) -> int:
    """DLPack's type code of an integer, floating-point or boolean dtype."""
    return _DL_CODE_BY_KIND[dtype.kind]
