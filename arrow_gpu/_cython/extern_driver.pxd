# The native core's driver layer (_native/driver/) as Cython sees it: the driver table
# (real or simulated), NVRTC and the kernels' host twins. Included by _cuda.pxd.

from libc.stdint cimport int64_t, uint64_t
from libcpp cimport bool as c_bool
from libcpp.string cimport string as c_string
from libcpp.utility cimport pair
from libcpp.vector cimport vector

from pyarrow.includes.common cimport CResult, CStatus


cdef extern from "driver/driver.h" namespace "arrow_gpu" nogil:
    cdef struct CUipcMemHandle:
        char reserved[64]
    ctypedef void* CUstream
    ctypedef void* CUevent
    CResult[c_bool] UsingSimulator()


cdef extern from "driver/simulator.h" namespace "arrow_gpu" nogil:
    int64_t SimulatorContextSynchronizations()
    int64_t SimulatorDeviceReads()
    int64_t SimulatorStreamSynchronizations()
    int64_t SimulatorStreamWaits()
    int64_t SimulatorLiveStreams()
    int64_t SimulatorLegacyStreamUses()
    void SimulatorHoldLegacyStream(c_bool busy)
    int64_t SimulatorLaunches(const c_string& name)


cdef extern from "driver/nvrtc.h" namespace "arrow_gpu" nogil:
    CResult[int] NvrtcVersion(const vector[c_string]& directories)
    CResult[c_string] CompileKernels(const vector[c_string]& directories,
                                     const c_string& source, const c_string& name,
                                     const vector[pair[c_string, c_string]]& headers, int arch,
                                     const vector[c_string]& options)


cdef extern from "driver/kernel_twins.h" namespace "arrow_gpu" nogil:
    CStatus RunKernelTwin(const c_string& name, int64_t blocks, int threads,
                          const vector[uint64_t]& args)
