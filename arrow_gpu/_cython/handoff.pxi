# Hand-offs between processes: batches described as the IPC messages that carry them, each
# body left in the device buffers it lives in (columnar/handoff.h). arrow_gpu._ipc.handoff puts
# the descriptions in payloads and reads them back.

from pyarrow.lib cimport (pyarrow_unwrap_batch, pyarrow_unwrap_buffer, pyarrow_unwrap_schema,
                          pyarrow_wrap_batch, pyarrow_wrap_schema)


def _describe_handoff(schema, batches):
    """The IPC messages of ``batches``: a list of ``(metadata, body_length, segments)``, with
    ``metadata`` the flatbuffer's bytes and each segment ``(body_offset, size, source,
    driver_handle, allocation_offset, allocation_size)``; ``source`` (a CudaBuffer of the
    segment's bytes) and ``driver_handle`` (64 bytes) are None where the driver cannot
    export the memory."""
    cdef shared_ptr[CSchema] c_schema = pyarrow_unwrap_schema(schema)
    cdef vector[shared_ptr[CRecordBatch]] c_batches
    for batch in batches:
        c_batches.push_back(pyarrow_unwrap_batch(batch))
    cdef vector[CHandoffMessage] messages
    with nogil:
        messages = GetResultValue(DescribeHandoff(c_schema, c_batches))
    cdef CHandoffSegment* segment
    described = []
    for m in range(messages.size()):
        segments = []
        for s in range(messages[m].segments.size()):
            segment = &messages[m].segments[s]
            source = handle = None
            if segment.exportable:
                source = CudaBuffer.from_buffer(pyarrow_wrap_buffer(segment.source))
                handle = (<char*>segment.handle.reserved)[:64]
            segments.append((segment.body_offset, segment.source.get().size(), source, handle,
                             segment.allocation_offset, segment.allocation_size))
        metadata = pyarrow_wrap_buffer(messages[m].metadata).to_pybytes()
        described.append((metadata, messages[m].body_length, segments))
    return described


def _read_handoff(messages, Context context not None, bint copy):
    """``(schema, batches)`` from ``(metadata, body_length, [(body_offset, source), ...])``
    messages, on ``context``'s device: one copy of all bodies into new memory with ``copy``,
    else views of the sources."""
    cdef vector[CHandoffMessage] c_messages
    cdef CHandoffMessage c_message
    cdef CHandoffSegment c_segment
    cdef CudaBuffer c_source
    for metadata, body_length, segments in messages:
        c_message.metadata = pyarrow_unwrap_buffer(pa.py_buffer(metadata))
        c_message.body_length = body_length
        c_message.segments.clear()
        for body_offset, source in segments:
            c_source = source
            c_segment.body_offset = body_offset
            c_segment.source = c_source.buffer
            c_message.segments.push_back(c_segment)
        c_messages.push_back(c_message)
    cdef shared_ptr[CSchema] c_schema
    cdef vector[shared_ptr[CRecordBatch]] batches
    with nogil:
        batches = GetResultValue(ReadHandoff(c_messages, context.manager, copy, &c_schema))
    return (pyarrow_wrap_schema(c_schema),
            [pyarrow_wrap_batch(batches[i]) for i in range(batches.size())])


def _isolated_copy(CudaBuffer buffer not None):
    """A copy of ``buffer`` at the start of a driver allocation of its own."""
    return buffer._isolated_copy()
