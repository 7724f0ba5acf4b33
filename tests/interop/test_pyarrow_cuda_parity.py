"""Where arrow_gpu's pyarrow.cuda follows Arrow's reference exactly, and where it
deliberately differs (each difference is listed in the README).

Arrow's own tests (pyarrow.tests.test_cuda) cover the rest: scripts/pyarrow-cuda-tests.
"""

import weakref

import numpy as np
import pyarrow as pa
import pytest

from arrow_gpu import CudaBuffer, IpcMemHandle

DATA = bytes(range(16))


# --- as in Arrow -------------------------------------------------------------------------


def test_contexts_and_ipc_handles_are_weakly_referenceable(ctx):
    assert weakref.ref(ctx)() is ctx
    handle = ctx.buffer_from_data(DATA).export_for_ipc()
    assert weakref.ref(handle)() is handle


def test_ipc_handle_serialize_takes_a_pool(ctx):
    handle = ctx.buffer_from_data(DATA).export_for_ipc()
    assert handle.serialize(pool=pa.default_memory_pool()) == handle.serialize()


def test_buffer_from_object_of_a_device_pa_buffer_is_that_memory(ctx):
    device = pa.array(np.arange(4, dtype=np.int32)).copy_to(ctx.memory_manager)
    plain = device.buffers()[1]
    assert type(plain) is pa.Buffer
    view = ctx.buffer_from_object(plain)
    assert isinstance(view, CudaBuffer)
    assert (view.address, view.size) == (plain.address, plain.size)


def test_buffer_from_object_of_a_cuda_buffer_is_that_buffer(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    assert ctx.buffer_from_object(cbuf) is cbuf


@pytest.mark.multi_gpu
def test_buffer_from_object_keeps_the_device_of_a_cuda_buffer(ctx, ctx1):
    other = ctx1.buffer_from_data(DATA)
    assert ctx.buffer_from_object(other).context == ctx1


def test_copy_to_host_into_a_small_buffer_names_the_host_buffer(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    with pytest.raises(ValueError, match="requested copy does not fit into host buffer"):
        cbuf.copy_to_host(buf=pa.allocate_buffer(4), nbytes=100)


def test_no_buffer_protocol_with_arrows_message(ctx):
    with pytest.raises(BufferError, match="buffer protocol for device buffer not supported"):
        memoryview(ctx.buffer_from_data(DATA))


# --- deliberate differences (README: "Differences from Arrow's pyarrow.cuda") -------------


def test_copy_to_host_into_a_buffer_never_reads_past_the_device_buffer(ctx):
    # Arrow checks only the host buffer's size here and copies past the device buffer's end.
    cbuf = ctx.buffer_from_data(DATA)
    with pytest.raises(ValueError, match="requested more to copy than available from device buffer"):
        cbuf.copy_to_host(buf=pa.allocate_buffer(32), position=8, nbytes=16)


def test_an_offset_at_the_end_gives_an_empty_buffer(ctx):
    # Arrow raises "offset argument is out-of-range"; pyarrow.Buffer.slice and Python slicing
    # give an empty buffer, and so does arrow_gpu.
    cbuf = ctx.buffer_from_data(DATA)
    assert cbuf.slice(16).size == 0
    assert cbuf[16:].size == 0
    assert ctx.buffer_from_data(DATA, offset=16).size == 0


def test_a_negative_slice_length_is_refused(ctx):
    # Arrow makes a buffer of negative size.
    with pytest.raises(ValueError, match="non-negative"):
        ctx.buffer_from_data(DATA).slice(2, -1)


def test_equals_compares_device_buffers_at_different_addresses(ctx):
    # Arrow raises NotImplementedError unless the addresses are equal.
    cbuf = ctx.buffer_from_data(DATA)
    assert cbuf.equals(ctx.buffer_from_data(DATA))
    assert not cbuf.equals(ctx.buffer_from_data(DATA[::-1]))


def test_an_ipc_handle_of_a_slice_opens_as_that_slice(ctx):
    # Arrow's handle names the whole allocation, so the opened buffer is all of it.
    # (Opening happens in another process; here the handle's extent is what is checked.)
    buffer = ctx.buffer_from_data(DATA)
    whole = IpcMemHandle.from_buffer(buffer.export_for_ipc().serialize())
    handle = IpcMemHandle.from_buffer(buffer.slice(4, 8).export_for_ipc().serialize())
    # The offset is within the driver allocation, where the caching allocator may have
    # placed the buffer anywhere.
    assert (handle.offset, handle.size) == (whole.offset + 4, 8)
