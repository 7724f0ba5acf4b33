# distutils: language = c++
# cython: language_level = 3, embedsignature = True
"""CUDA contexts and buffers for pyarrow: the API of ``pyarrow.cuda``.

Everything here is a thin, typed layer over the C++ core in ``_native/``; copies release
the GIL. This file holds what the whole module shares and includes one ``.pxi`` per concept
from ``_cython/``; the extension types are declared in ``_cuda.pxd``, the C++ core as Cython
sees it too.
"""

import operator

import pyarrow as pa

from arrow_gpu._util.arguments import as_int
from arrow_gpu._interop.protocols import contiguous_span, parse_cuda_array_interface
from arrow_gpu._util.handles import handle_value, stream_handle

from cython.operator cimport dereference as deref
from libc.stdint cimport int64_t, uintptr_t
from libcpp.memory cimport shared_ptr

from pyarrow.includes.common cimport GetResultValue
from pyarrow.includes.libarrow cimport CBuffer
from pyarrow.lib cimport Buffer, check_status, pyarrow_wrap_buffer


def _register_device_mappers():
    """Tell Arrow how to find memory managers for kCUDA and kCUDA_HOST device ids.

    Returns False when another CUDA backend (a CUDA-enabled Arrow build) already has them.
    """
    return GetResultValue(RegisterDeviceMappers())


# Devices and their memory
include "_cython/context.pxi"         # Context: a device's CUDA context
include "_cython/allocator.pxi"       # where device memory comes from
include "_cython/cuda_buffer.pxi"     # CudaBuffer: device memory as a pyarrow.Buffer
include "_cython/host_buffer.pxi"     # HostBuffer: pinned host memory
include "_cython/ipc.pxi"             # IpcMemHandle: device memory shared with another process
include "_cython/handoff.pxi"         # batches handed to another process from where they live
include "_cython/stream.pxi"          # Stream and Event

# Moving Arrow data
include "_cython/copy_engine.pxi"     # the copy engine's options and whole-object transfers
include "_cython/device_io.pxi"       # files and IPC messages on device memory
include "_cython/parquet_chunks.pxi"  # Parquet column chunks decoded and copied piece by piece

# Handing data to other libraries
include "_cython/capsules.pxi"        # PyCapsules that own C structs
include "_cython/c_device.pxi"        # the C Device Data Interface
include "_cython/dlpack.pxi"          # DLPack

include "_cython/bit_pack.pxi"        # flags packed into Arrow bitmaps on the device
include "_cython/null_counts.pxi"     # unknown null counts made exact without a host read
include "_cython/kernels.pxi"         # kernels compiled at run time, and their launches
include "_cython/array_layouts.pxi"   # where many arrays' buffers are, read in one walk
include "_cython/range_tables.pxi"    # the kernels' tables of ranges, written in one walk
include "_cython/select.pxi"          # rows selected by a mask or indices, planned natively
include "_cython/concat.pxi"          # arrays end to end, planned natively

include "_cython/diagnostics.pxi"     # facts about the driver and the devices
