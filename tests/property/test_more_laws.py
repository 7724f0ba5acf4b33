"""More laws: Numba views, device IPC messages, and the allocator as a state machine."""

import gc
from contextlib import ExitStack

import pyarrow as pa
from hypothesis import given, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from arrow_gpu import Context, CudaBuffer
from arrow_gpu.c_device_interface import DeviceData, import_array
from arrow_gpu.io import read_record_batch, serialize_record_batch
from arrow_gpu.numba import from_numba, to_numba
from arrow_gpu.testing import strategies as ags
from arrow_gpu.transfer import to_device, to_host
from _arrow_samples import assert_identical
from _leaks import new_objects_only

ags.register_extension_types()
PRIMITIVES = ags.data_types(include=["integer", "floating"], max_depth=0, dictionary=False,
                            extension=False)


@given(ags.arrays(PRIMITIVES))
def test_numba_view_round_trip_is_identity(array):
    view = to_numba(to_device(array))
    back = from_numba(view.values, mask=view.null_mask(), type=array.type)
    assert_identical(to_host(back), array)


@given(ags.record_batches(ags.schemas(ags.data_types(dictionary=False,
                                                     exclude=ags.OPAQUE_FAMILIES))))
def test_ipc_serialized_on_device_reads_back_equal(batch):
    ctx = Context(0)
    on_device = serialize_record_batch(batch, ctx)
    assert on_device.to_pybytes() == batch.serialize().to_pybytes()
    assert_identical(to_host(read_record_batch(on_device, batch.schema)), batch)


class DeviceMemoryModel(RuleBasedStateMachine):
    """Buffers are allocated, written, sliced, copied, exported, imported and dropped in
    any order; their bytes and ``bytes_allocated`` always match a host model."""

    handles = Bundle("handles")

    def __init__(self):
        super().__init__()
        self.ctx = Context(0)
        self.frozen = ExitStack()  # until teardown: its collection walks only new objects
        self.frozen.enter_context(new_objects_only())
        self.baseline = self.ctx.bytes_allocated
        self.views = {}        # handle -> (CudaBuffer, allocation id, offset)
        self.allocations = {}  # allocation id -> bytearray, the model of its bytes
        self.next_handle = 0

    def _add(self, buffer, allocation, offset):
        handle = self.next_handle
        self.next_handle += 1
        self.views[handle] = (buffer, allocation, offset)
        return handle

    def _model(self, handle):
        buffer, allocation, offset = self.views[handle]
        return self.allocations[allocation], offset, buffer.size

    @rule(target=handles, data=st.binary(max_size=2048))
    def allocate(self, data):
        allocation = len(self.allocations)
        self.allocations[allocation] = bytearray(data)
        return self._add(self.ctx.buffer_from_data(data), allocation, 0)

    @rule(handle=handles, data=st.data())
    def write(self, handle, data):
        buffer, _, _ = self.views[handle]
        model, offset, size = self._model(handle)
        position = data.draw(st.integers(0, size))
        payload = data.draw(st.binary(max_size=size - position))
        assert buffer.copy_from_host(payload, position) == len(payload)
        model[offset + position:offset + position + len(payload)] = payload

    @rule(target=handles, handle=handles, data=st.data())
    def slice(self, handle, data):
        buffer, allocation, offset = self.views[handle]
        start = data.draw(st.integers(0, buffer.size))
        length = data.draw(st.integers(0, buffer.size - start))
        return self._add(buffer.slice(start, length), allocation, offset + start)

    @rule(destination=handles, source=handles)
    def copy_between(self, destination, source):
        target, _, _ = self.views[destination]
        origin, _, _ = self.views[source]
        nbytes = min(target.size, origin.size)
        expected = bytes(origin.to_pybytes()[:nbytes])
        target.copy_from_device(origin, 0, nbytes)
        model, offset, _ = self._model(destination)
        model[offset:offset + nbytes] = expected

    @rule(target=handles, handle=handles)
    def export_and_import(self, handle):
        buffer, allocation, offset = self.views[handle]
        if buffer.size == 0:  # importers turn empty device buffers into host ones
            return self._add(buffer, allocation, offset)
        array = pa.Array.from_buffers(pa.uint8(), buffer.size, [None, buffer])
        imported = import_array(DeviceData(array))
        return self._add(CudaBuffer.from_buffer(imported.buffers()[1]), allocation, offset)

    @rule(handle=consumes(handles))
    def drop(self, handle):
        del self.views[handle]

    @invariant()
    def bytes_match_the_model(self):
        for handle, (buffer, _, _) in self.views.items():
            model, offset, size = self._model(handle)
            assert buffer.to_pybytes() == bytes(model[offset:offset + size])

    @invariant()
    def live_allocations_are_counted(self):
        # Buffers hold no reference cycles: dropping the last reference frees at once.
        live = {allocation for _, allocation, _ in self.views.values()}
        note(f"live allocations: {len(live)}")
        expected = sum(len(self.allocations[allocation]) for allocation in live)
        assert self.ctx.bytes_allocated == self.baseline + expected

    def teardown(self):
        self.views.clear()
        with self.frozen:
            gc.collect()
            assert self.ctx.bytes_allocated == self.baseline


TestDeviceMemoryModel = DeviceMemoryModel.TestCase
# Each example is a whole program of steps: a quarter of the profile's examples explores as
# many states as the other laws do, within the GPU run's time.
TestDeviceMemoryModel.settings = settings(max_examples=max(settings().max_examples // 4, 10),
                                          stateful_step_count=30)
