# Kernels compiled at run time and launched (arrow_gpu/_compute/kernels.py). Included in _cuda.pyx.


cdef vector[c_string] _directories(directories) except *:
    cdef vector[c_string] result
    for directory in directories:
        result.push_back(str(directory).encode())
    return result


def _kernels_supported(Context context):
    """Whether ``context``'s driver runs kernels (the simulator runs none)."""
    return KernelsSupported(deref(context.c_context))


def _compute_capability(Context context):
    """The device's compute capability as major * 10 + minor."""
    return GetResultValue(ComputeCapability(deref(context.c_context)))


def _multiprocessor_count(Context context):
    return GetResultValue(MultiprocessorCount(deref(context.c_context)))


def _nvrtc_version(directories):
    """NVRTC's version (major * 1000 + minor * 10), looked for in ``directories`` first."""
    return GetResultValue(NvrtcVersion(_directories(directories)))


def _compile_kernels(directories, str source, str name, dict headers, int arch, options):
    """The module image (bytes) of CUDA C ``source`` for compute capability ``arch``: a CUBIN
    where NVRTC knows ``arch``, else PTX; ``headers`` (include name -> text) are what its
    quoted includes find. Releases the GIL: units compile on threads at once."""
    cdef vector[c_string] c_directories = _directories(directories)
    cdef c_string c_source = source.encode()
    cdef c_string c_name = name.encode()
    cdef vector[pair[c_string, c_string]] c_headers
    for header, text in headers.items():
        c_headers.push_back(pair[c_string, c_string](header.encode(), text.encode()))
    cdef vector[c_string] c_options = _directories(options)
    cdef CResult[c_string] image
    with nogil:
        image = CompileKernels(c_directories, c_source, c_name, c_headers, arch, c_options)
    return GetResultValue(image)


def _load_module(Context context, bytes image):
    """The handle of a module of ``image`` (a CUBIN or PTX) loaded into ``context`` for the
    process's life."""
    cdef c_string c_image = image
    cdef CResult[CUmodule] module
    with nogil:
        module = LoadModule(deref(context.c_context), c_image)
    return <uintptr_t>GetResultValue(module)


def _module_function(Context context, uintptr_t module, str name):
    return <uintptr_t>GetResultValue(
        ModuleFunction(deref(context.c_context), <CUmodule>module, name.encode()))


def _launch(Context context, uintptr_t function, int64_t blocks, int threads, args,
            stream=None):
    """Queue ``function`` on ``stream``: ``blocks`` of ``threads``; ``args`` are ints, each
    passed as a 64-bit parameter (negative ones in two's complement)."""
    cdef vector[uint64_t] c_args
    for arg in args:
        c_args.push_back(<uint64_t>(int(arg) & 0xFFFFFFFFFFFFFFFF))
    cdef CUstream raw = _raw_stream(stream)
    with nogil:
        check_status(Launch(deref(context.c_context), <CUfunction>function, blocks, threads,
                            c_args, raw))


def _run_twin(str name, int64_t blocks, int threads, args):
    """Run the host twin of kernel ``name`` at once, as a launch of ``blocks`` of ``threads``
    would run the kernel, on host memory (``args`` as ``_launch`` takes them); needs no
    device. For tests that hold twins and kernels equal."""
    cdef c_string c_name = name.encode()
    cdef vector[uint64_t] c_args
    for arg in args:
        c_args.push_back(<uint64_t>(int(arg) & 0xFFFFFFFFFFFFFFFF))
    with nogil:
        check_status(RunKernelTwin(c_name, blocks, threads, c_args))


def _copy_device_bytes(Context context, uintptr_t dst, uintptr_t src, int64_t nbytes,
                       stream=None):
    """Queue a copy of ``nbytes`` between two addresses of ``context``'s device."""
    cdef CUstream raw = _raw_stream(stream)
    with nogil:
        check_status(deref(context.c_context).CopyDeviceToDevice(
            dst, src, nbytes, deref(context.c_context), raw))


def _write_in_order(Context context, uintptr_t dst, const unsigned char[::1] data,
                    stream=None):
    """Queue a copy of host ``data`` to ``dst`` on ``stream`` (None: the legacy default
    stream), after the launches queued there so far. The driver stages pageable bytes before
    it returns, so the host waits for no launch, and ``data`` may go at once."""
    cdef Py_ssize_t nbytes = data.shape[0]
    if nbytes == 0:
        return
    cdef CUstream raw = _raw_stream(stream)
    with nogil:
        check_status(deref(context.c_context).CopyHostToDeviceAsync(dst, &data[0], nbytes,
                                                                    raw))
