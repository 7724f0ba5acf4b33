# The C Device Data Interface's capsules (the PyCapsule protocol) over the native core in
# c_device.h, which exports and imports on libarrow's bridge. Included in _cuda.pyx.

from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_New
from libc.stdlib cimport free

from pyarrow.includes.libarrow cimport ExportSchema, ImportSchema
from pyarrow.lib cimport (RecordBatchReader, pyarrow_unwrap_array, pyarrow_unwrap_batch,
                          pyarrow_unwrap_schema, pyarrow_unwrap_table, pyarrow_wrap_array,
                          pyarrow_wrap_batch, pyarrow_wrap_schema)


# Capsule destructors release a struct the consumer did not move out, then free it.

cdef void _release_schema_capsule(object capsule) noexcept:
    cdef ArrowSchema* schema = <ArrowSchema*>PyCapsule_GetPointer(capsule, "arrow_schema")
    if schema.release != NULL:
        schema.release(schema)
    free(schema)


cdef void _release_device_array_capsule(object capsule) noexcept:
    cdef ArrowDeviceArray* array = <ArrowDeviceArray*>PyCapsule_GetPointer(
        capsule, "arrow_device_array")
    if array.array.release != NULL:
        array.array.release(&array.array)
    free(array)


cdef void _release_device_stream_capsule(object capsule) noexcept:
    cdef ArrowDeviceArrayStream* stream = <ArrowDeviceArrayStream*>PyCapsule_GetPointer(
        capsule, "arrow_device_array_stream")
    if stream.release != NULL:
        stream.release(stream)
    free(stream)


cdef _already_imported(const char* name, kind):
    return ValueError(f"capsule {name.decode()!r} holds a released {kind}; a capsule can be "
                      "imported only once")


# Consumers move the struct out of the capsule and mark the capsule's copy released.

cdef int _take_schema(object capsule, ArrowSchema* out) except -1:
    cdef ArrowSchema* source = <ArrowSchema*>_capsule_pointer(capsule, "arrow_schema")
    if source.release == NULL:
        raise _already_imported(b"arrow_schema", "ArrowSchema")
    out[0] = source[0]
    source.release = NULL
    return 0


cdef int _take_device_array(object capsule, ArrowDeviceArray* out) except -1:
    cdef ArrowDeviceArray* source = <ArrowDeviceArray*>_capsule_pointer(
        capsule, "arrow_device_array")
    if source.array.release == NULL:
        raise _already_imported(b"arrow_device_array", "ArrowDeviceArray")
    out[0] = source[0]
    source.array.release = NULL
    return 0


cdef int _take_device_stream(object capsule, ArrowDeviceArrayStream* out) except -1:
    cdef ArrowDeviceArrayStream* source = <ArrowDeviceArrayStream*>_capsule_pointer(
        capsule, "arrow_device_array_stream")
    if source.release == NULL:
        raise _already_imported(b"arrow_device_array_stream", "ArrowDeviceArrayStream")
    out[0] = source[0]
    source.release = NULL
    return 0


def _export_device_array(data, stream, requested_schema):
    """``(arrow_schema, arrow_device_array)`` capsules of a pa.Array or pa.RecordBatch.

    An event recorded on ``stream`` after the data's producer becomes the sync event;
    ``requested_schema`` (a capsule or None) replaces the schema if it has the same layout.
    """
    cdef CUstream c_stream = _raw_stream(stream)
    # Each capsule owns its struct from the start, so a failure below releases what was made.
    cdef ArrowSchema* schema = <ArrowSchema*>_zeroed(sizeof(ArrowSchema))
    schema_capsule = PyCapsule_New(schema, "arrow_schema", _release_schema_capsule)
    cdef ArrowDeviceArray* array = <ArrowDeviceArray*>_zeroed(sizeof(ArrowDeviceArray))
    array_capsule = PyCapsule_New(array, "arrow_device_array", _release_device_array_capsule)
    cdef shared_ptr[CArray] c_array
    cdef shared_ptr[CRecordBatch] c_batch
    if isinstance(data, pa.RecordBatch):
        c_batch = pyarrow_unwrap_batch(data)
        with nogil:
            check_status(CExportBatch(c_batch, c_stream, array, schema))
    else:
        c_array = pyarrow_unwrap_array(data)
        with nogil:
            check_status(CExportArray(c_array, c_stream, array, schema))
    cdef ArrowSchema requested
    if requested_schema is not None:
        _take_schema(requested_schema, &requested)
        check_status(ApplyRequestedSchema(schema, &requested))
    return schema_capsule, array_capsule


def _export_device_stream(data, stream, requested_schema):
    """An ``arrow_device_array_stream`` capsule of a pa.Table or pa.RecordBatchReader."""
    cdef CUstream c_stream = _raw_stream(stream)
    cdef shared_ptr[CSchema] c_schema
    cdef ArrowSchema probe, requested
    if requested_schema is not None:
        # Batches carry no schema in a stream: the request only changes get_schema's answer.
        check_status(ExportSchema(deref(pyarrow_unwrap_schema(data.schema)), &probe))
        try:
            _take_schema(requested_schema, &requested)
        except BaseException:
            probe.release(&probe)
            raise
        check_status(ApplyRequestedSchema(&probe, &requested))
        c_schema = GetResultValue(ImportSchema(&probe))
    cdef ArrowDeviceArrayStream* out = <ArrowDeviceArrayStream*>_zeroed(
        sizeof(ArrowDeviceArrayStream))
    capsule = PyCapsule_New(out, "arrow_device_array_stream", _release_device_stream_capsule)
    cdef shared_ptr[CRecordBatchReader] c_reader
    if isinstance(data, pa.Table):
        check_status(CExportTableStream(pyarrow_unwrap_table(data), c_schema, c_stream, out))
    else:
        c_reader = (<RecordBatchReader?>data).reader
        check_status(CExportStream(c_reader, c_schema, c_stream, out))
    return capsule


cdef CImportOptions _import_options(stream, device) except *:
    cdef CImportOptions options
    options.has_stream = stream is not None
    options.stream = _raw_stream(stream)
    options.check_device = device is not None
    if device is not None:
        device_type, device_id = device
        options.device_type = as_int("device_type", device_type)
        options.device_id = as_int("device_id", device_id)
    return options


def _import_device_array(schema_capsule, array_capsule, stream, device, bint batch):
    """A pa.Array (or pa.RecordBatch) of capsules; their structs are moved out and consumed.

    A ``stream`` waits for the producer's event; without one, the host does.
    """
    cdef CImportOptions options = _import_options(stream, device)
    cdef ArrowSchema schema
    cdef ArrowDeviceArray array
    _take_schema(schema_capsule, &schema)
    try:
        _take_device_array(array_capsule, &array)
    except BaseException:
        schema.release(&schema)
        raise
    cdef CResult[shared_ptr[CArray]] c_array
    cdef CResult[shared_ptr[CRecordBatch]] c_batch
    if batch:
        with nogil:
            c_batch = CImportBatch(&schema, &array, options)
        return pyarrow_wrap_batch(GetResultValue(c_batch))
    with nogil:
        c_array = CImportArray(&schema, &array, options)
    return pyarrow_wrap_array(GetResultValue(c_array))


cdef class DeviceStreamReader:
    """The batches of an imported ``ArrowDeviceArrayStream``, one at a time.

    The stream is released at its end, on a producer's error, or when this object goes.
    """
    def __init__(self, *args, **kwargs):
        raise TypeError("use arrow_gpu.c_device_interface.iter_stream()")

    def __iter__(self):
        return self

    def close(self):
        """Release the stream now (as dropping this object would)."""
        if self.busy:
            raise ValueError("this stream is being read by another thread")
        self.importer.reset()

    def __next__(self):
        if self.importer.get() == NULL:
            raise StopIteration
        if self.busy:
            raise ValueError("this stream is being read by another thread")
        cdef CResult[shared_ptr[CRecordBatch]] result
        self.busy = True
        try:
            with nogil:
                result = self.importer.get().Next(self.options)
        finally:
            self.busy = False
        cdef shared_ptr[CRecordBatch] batch = GetResultValue(result)
        if batch.get() == NULL:
            self.importer.reset()  # released already; nothing left to hold
            raise StopIteration
        return pyarrow_wrap_batch(batch)


def _open_device_stream(capsule, stream):
    """A DeviceStreamReader over an ``arrow_device_array_stream`` capsule (taken from it)."""
    cdef DeviceStreamReader reader = DeviceStreamReader.__new__(DeviceStreamReader)
    reader.options = _import_options(stream, None)
    reader.stream = stream
    cdef ArrowDeviceArrayStream* source = <ArrowDeviceArrayStream*>_zeroed(
        sizeof(ArrowDeviceArrayStream))
    cdef CResult[shared_ptr[CStreamImporter]] opened
    try:
        _take_device_stream(capsule, source)
        with nogil:
            opened = CStreamImporter.Open(source)
    finally:
        free(source)  # its contents now belong to the importer
    reader.importer = GetResultValue(opened)
    reader.schema = pyarrow_wrap_schema(reader.importer.get().schema())
    return reader


def _live_exports():
    """How many exported arrays and streams their consumers have not released yet."""
    return LiveExports()
