"""arrow_gpu's own C Device Data Interface: export, import, sync events, streams, bad input."""

import ctypes
import gc

import nanoarrow.device as nd
import pyarrow as pa
import pytest

import arrow_gpu
from arrow_gpu import _cuda
from arrow_gpu import c_device_interface as cdi
from arrow_gpu.c_device_interface import DeviceData, import_array, import_record_batch, import_stream
from _arrow_samples import assert_identical, samples
from arrow_gpu.testing.c_structs import ArrowDeviceArray, ArrowSchema, in_new_capsule, is_released, moved_from_capsule, release

CPU = pa.default_cpu_memory_manager()
SAMPLES = samples()
IDS = [name for name, _ in SAMPLES]


def host(data):
    return data.copy_to(CPU)


def assert_same(device_result, expected):
    assert_identical(device_result, expected)


pytestmark = pytest.mark.usefixtures("nothing_left_exported")


def on_device(ctx, array):
    array.null_count  # noqa: B018 - pyarrow's own exporter would count on the device
    return array.copy_to(ctx.memory_manager)


@pytest.mark.parametrize("array", [a for _, a in SAMPLES], ids=IDS)
def test_our_capsules_round_trip(ctx, array):
    device = on_device(ctx, array)
    result = import_array(DeviceData(device))
    assert not result.is_cpu or pa.types.is_null(array.type)
    assert_same(result, array)


@pytest.mark.parametrize("array", [a for _, a in SAMPLES], ids=IDS)
def test_pyarrow_imports_our_capsules(ctx, array):
    device = on_device(ctx, array)
    assert_same(pa.Array._import_from_c_device_capsule(*DeviceData(device).__arrow_c_device_array__()), array)


# pyarrow's exporter counts nulls of sliced arrays on the host: it segfaults on device
# memory, so pyarrow gets freshly built (unsliced) arrays to export.
@pytest.mark.parametrize("array", [a for _, a in samples(sliced=False)], ids=IDS)
def test_we_import_pyarrow_capsules(ctx, array):
    device = on_device(ctx, array)
    assert_same(import_array(device), array)


@pytest.mark.parametrize("array", [a for _, a in SAMPLES], ids=IDS)
def test_nanoarrow_consumes_and_produces(ctx, array):
    device = on_device(ctx, array)
    wrapped = nd.c_device_array(DeviceData(device))
    if pa.types.is_null(array.type):  # no buffers at all: host data
        assert wrapped.device_type == nd.DeviceType.CPU
    else:
        assert wrapped.device_type == nd.DeviceType.CUDA and wrapped.device_id == 0
    assert wrapped.array.length == len(array)
    if pa.types.is_string_view(array.type) or pa.types.is_binary_view(array.type):
        pytest.skip("nanoarrow 0.9 crashes re-exporting view arrays (c_array_shallow_copy)")
    assert_same(import_array(wrapped), array)


def _empty_views_at_offset_one():
    empty = pa.array(["a" * 20], pa.string_view()).slice(1)  # length 0, offset 1
    return {
        "sparse union": pa.UnionArray.from_sparse(pa.array([], pa.int8()), [empty]),
        "list": pa.ListArray.from_arrays(pa.array([0], pa.int32()), empty),
        "struct": pa.StructArray.from_arrays([empty], names=["v"]),
    }


@pytest.mark.parametrize("name", list(_empty_views_at_offset_one()))
def test_empty_view_children_at_an_offset_round_trip(ctx, name):
    # libarrow's importer sizes view buffers by length alone, then refuses the offset its
    # exporter kept; found by a random draw on a GPU.
    array = _empty_views_at_offset_one()[name]
    assert_same(import_array(DeviceData(on_device(ctx, array))), array)
    batch = pa.record_batch({"x": array})
    assert_identical(import_record_batch(DeviceData(batch.copy_to(ctx.memory_manager))), batch)


def test_record_batch_round_trip(ctx):
    columns = {name: array for name, array in SAMPLES if len(array) == 4}
    batch = pa.record_batch(list(columns.values()), names=list(columns))
    device = batch.copy_to(ctx.memory_manager)
    result = import_record_batch(DeviceData(device))
    assert isinstance(result, pa.RecordBatch)
    assert_same(result, batch)
    assert_same(pa.RecordBatch._import_from_c_device_capsule(*DeviceData(device).__arrow_c_device_array__()), batch)


@pytest.mark.parametrize("columns", [{}, {"n": pa.nulls(3)}])
def test_batches_without_buffers_import_on_the_declared_device(ctx, columns):
    # No columns, or only null ones: no buffer tells where the batch is but the producer's
    # declaration, which the import keeps (Arrow's own labels such a batch CPU).
    struct = pa.StructArray.from_arrays(list(columns.values()), list(columns)) if columns else \
        pa.Array.from_buffers(pa.struct([]), 3, [None], null_count=0, children=[])
    device = arrow_gpu.to_device(pa.RecordBatch.from_struct_array(struct), device=ctx)
    assert device.device_type == pa.DeviceAllocationType.CUDA
    _, batches = cdi.iter_stream(DeviceData(pa.Table.from_batches([device])))
    imported = [import_record_batch(DeviceData(device)), *batches]
    for result in imported:
        assert (result.num_rows, result.device_type) == (3, pa.DeviceAllocationType.CUDA)


def test_host_data_exports_as_cpu(ctx):
    _, capsule = DeviceData(pa.array([1, 2])).__arrow_c_device_array__()
    moved = moved_from_capsule(capsule, ArrowDeviceArray)
    try:
        assert (moved.device_type, moved.device_id, moved.sync_event) == (cdi.DEVICE_CPU, -1, None)
        assert list(moved.reserved) == [0, 0, 0]
    finally:
        release(moved)


def test_export_records_an_owned_sync_event(ctx):
    device = on_device(ctx, pa.array([1, None, 3]))
    stream = arrow_gpu.Stream(ctx)
    _, capsule = DeviceData(device, stream=stream).__arrow_c_device_array__()
    moved = moved_from_capsule(capsule, ArrowDeviceArray)
    assert (moved.device_type, moved.device_id) == (cdi.DEVICE_CUDA, 0)
    assert moved.sync_event, "a CUDA export must carry an event"
    handle = ctypes.c_void_p.from_address(moved.sync_event).value
    event = arrow_gpu.Event.wrap(handle, ctx)
    event.synchronize()
    assert event.done
    assert list(moved.reserved) == [0, 0, 0]
    assert _cuda._live_exports() == 1, "the event and data live until release"
    release(moved)
    assert not moved.array.release
    gc.collect()
    assert _cuda._live_exports() == 0


@pytest.mark.parametrize("stream", [None, 0, "object"])
def test_import_waits_on_consumer_stream(ctx, stream):
    consumer = arrow_gpu.Stream(ctx) if stream == "object" else stream
    device = on_device(ctx, pa.array(["a", None, "ccc"]))
    result = import_array(DeviceData(device, stream=arrow_gpu.Stream(ctx)), stream=consumer)
    assert_same(result, pa.array(["a", None, "ccc"]))


def test_consumer_moves_and_release_happens_once(ctx):
    device = on_device(ctx, pa.array([[1], None, [2, 3]]))
    schema_capsule, array_capsule = DeviceData(device).__arrow_c_device_array__()
    result = import_array((schema_capsule, array_capsule))
    del schema_capsule, array_capsule  # moved-from: the destructors must not release
    gc.collect()
    assert _cuda._live_exports() == 1, "the import holds the exported struct"
    del result
    gc.collect()
    assert _cuda._live_exports() == 0  # released, and not twice (the count would go below)


def test_unconsumed_capsules_release_on_destruction(ctx):
    device = on_device(ctx, pa.array([1, 2]))
    capsules = DeviceData(device).__arrow_c_device_array__()
    assert _cuda._live_exports() == 1
    del capsules
    gc.collect()
    assert _cuda._live_exports() == 0


def test_unknown_kwargs(ctx):
    data = DeviceData(on_device(ctx, pa.array([1])))
    with pytest.raises(NotImplementedError, match="future_option"):
        data.__arrow_c_device_array__(future_option=True)
    with pytest.raises(NotImplementedError):
        data.__arrow_c_device_stream__(future_option=1)
    import_array(data.__arrow_c_device_array__(future_option=None))


def test_requested_schema(ctx):
    data = DeviceData(on_device(ctx, pa.array([{"x": 1}])))
    same = import_array(data, requested_schema=pa.struct([("x", pa.int64())]))
    assert same.type == pa.struct([("x", pa.int64())])
    renamed = import_array(data, requested_schema=pa.struct([("y", pa.int64())]))
    assert renamed.type == pa.struct([("y", pa.int64())])
    with pytest.raises(pa.ArrowTypeError, match="requested_schema"):
        import_array(data, requested_schema=pa.struct([("x", pa.int32())]))


# ---------------------------------------------------------------------------
# Bad input: each gives an exception, nothing leaks, nothing is released twice
# ---------------------------------------------------------------------------


def _capsules_of(schema, device_array):
    """Fresh capsules owning (moved) copies of our structs."""
    return in_new_capsule(schema), in_new_capsule(device_array)


def _tampered(device, change, schema_of=None):
    schema_capsule, array_capsule = DeviceData(device).__arrow_c_device_array__()
    if schema_of is not None:
        schema_capsule, _ = DeviceData(schema_of).__arrow_c_device_array__()
    schema = moved_from_capsule(schema_capsule, ArrowSchema)
    array = moved_from_capsule(array_capsule, ArrowDeviceArray)
    change(schema, array)
    return _capsules_of(schema, array)


def _set(**fields):
    def change(schema, device_array):
        for name, value in fields.items():
            target, attribute = name.split("__")
            obj = {"schema": schema, "array": device_array.array, "device": device_array}[target]
            setattr(obj, attribute, value)
    return change


BAD = {
    "unknown format": (_set(schema__format=b"xyz"), "format"),
    "negative length": (_set(array__length=-1), "negative length"),
    "negative offset": (_set(array__offset=-3), "negative"),
    "buffer count": (_set(array__n_buffers=1),
                     r"invalid n_buffers \(1\) for type string: expected 3"),
    "bad null count": (_set(array__null_count=-5), "null_count"),
    "null count above length": (_set(array__null_count=4), "null_count 4 for length 3"),
    "device type": (_set(device__device_type=99), "device_type"),
    "managed memory": (_set(device__device_type=13), "unsupported device_type 13"),
    "device id": (_set(device__device_id=4096), "not a visible CUDA device"),
    "cpu with device id": (_set(device__device_type=1, device__device_id=0), "device_id -1"),
    "null data buffer": (lambda s, a: ctypes.memset(ctypes.addressof(a.array.buffers.contents) + 8, 0, 8),
                         "(?i)null data pointer"),
    "null buffers pointer": (_set(array__buffers=None), "NULL buffers pointer"),
    "null format": (_set(schema__format=None), "NULL format string"),
}


@pytest.mark.parametrize("change,message", BAD.values(), ids=list(BAD))
def test_bad_structs(ctx, change, message):
    device = on_device(ctx, pa.array(["a", None, "c"]))
    capsules = _tampered(device, change)
    with pytest.raises(ValueError, match=message):
        import_array(capsules)
    assert is_released(moved_from_capsule(capsules[1], ArrowDeviceArray)), "not consumed"


def test_schema_array_mismatch(ctx):
    device = on_device(ctx, pa.array([1, 2]))
    capsules = _tampered(device, lambda s, a: None, schema_of=pa.array([{"x": 1}]))
    with pytest.raises(ValueError, match="children"):
        import_array(capsules)


def test_device_mismatch_with_expectation(ctx):
    device = on_device(ctx, pa.array([1, 2]))
    with pytest.raises(ValueError, match="expected"):
        import_array(DeviceData(device), device=(cdi.DEVICE_CUDA, 1))
    with pytest.raises(ValueError, match="expected"):
        import_array(DeviceData(device), device=1)  # a DeviceLike: (DEVICE_CUDA, 1)
    with pytest.raises(ValueError, match="expected"):  # no such device here: still a mismatch
        import_array(DeviceData(device), device=arrow_gpu.device_count() + 3)
    with pytest.raises(ValueError, match="expected"):
        import_array(DeviceData(pa.array([1, 2])), device=ctx)  # host data, a CUDA device


def test_device_expectation_takes_the_c_pair_or_a_device(ctx):
    device = on_device(ctx, pa.array([1, 2]))
    for expected in ((cdi.DEVICE_CUDA, 0), 0, ctx, ctx.memory_manager, ctx.device):
        imported = import_array(DeviceData(device), device=expected)
        assert arrow_gpu.to_host(imported).equals(pa.array([1, 2]))
    host = pa.array([1, 2])
    assert import_array(DeviceData(host), device=(cdi.DEVICE_CPU, -1)).equals(host)
    with pytest.raises(TypeError, match="device must be an int"):
        import_array(DeviceData(device), device="cuda:0")


def test_released_struct(ctx):
    schema_capsule, _ = DeviceData(pa.array([1])).__arrow_c_device_array__()
    empty_capsule = in_new_capsule(ArrowDeviceArray())  # zeroed: release is NULL
    with pytest.raises(ValueError, match="released"):
        import_array((schema_capsule, empty_capsule))


def test_wrong_capsule_names(ctx):
    schema_capsule, array_capsule = DeviceData(pa.array([1])).__arrow_c_device_array__()
    with pytest.raises(ValueError, match="arrow_schema"):
        import_array((array_capsule, schema_capsule))
    with pytest.raises(TypeError, match="PyCapsule"):
        import_array((b"not a capsule", array_capsule))
    with pytest.raises(TypeError, match="__arrow_c_device_array__"):
        import_array(object())


def test_mixed_devices_in_one_batch(ctx):
    batch = pa.record_batch([on_device(ctx, pa.array([1])), pa.array([2])], names=["gpu", "cpu"])
    with pytest.raises(ValueError, match="several devices"):
        DeviceData(batch).__arrow_c_device_array__()


@pytest.mark.multi_gpu
def test_mixed_gpus_in_one_batch(ctx, ctx1):
    batch = pa.record_batch([on_device(ctx, pa.array([1])), on_device(ctx1, pa.array([2]))], names=["a", "b"])
    with pytest.raises(ValueError, match="several devices"):
        DeviceData(batch).__arrow_c_device_array__()


def test_export_rejects_bad_inputs():
    with pytest.raises(TypeError):
        DeviceData([1, 2, 3])
    with pytest.raises(ValueError):
        DeviceData(pa.array([1]), stream=-1)
    with pytest.raises(TypeError, match="stream"):
        DeviceData(pa.table({"x": [1]})).__arrow_c_device_array__()


# ---------------------------------------------------------------------------
# Device array streams
# ---------------------------------------------------------------------------


def _device_table(ctx, table):
    return pa.Table.from_batches([b.copy_to(ctx.memory_manager) for b in table.to_batches()], schema=table.schema)


def test_stream_round_trip_chunk_by_chunk(ctx):
    table = pa.table({"x": pa.chunked_array([[1, None], [3], [4, 5, 6]]),
                      "s": pa.chunked_array([["a", "b"], [None], ["d", "e", "f"]])})
    device = _device_table(ctx, table)
    result = import_stream(DeviceData(device, stream=arrow_gpu.Stream(ctx)), stream=arrow_gpu.Stream(ctx))
    assert result.num_rows == 6 and len(result.to_batches()) == len(device.to_batches())
    assert all(not b.column(0).is_cpu for b in result.to_batches())
    back = pa.Table.from_batches([host(b) for b in result.to_batches()], schema=table.schema)
    assert back.equals(table)


def test_stream_of_a_reader_and_early_close(ctx):
    table = _device_table(ctx, pa.table({"x": pa.chunked_array([[1], [2], [3]])}))
    schema, batches = cdi.iter_stream(DeviceData(pa.RecordBatchReader.from_batches(table.schema, table.to_batches())))
    assert schema == table.schema
    first = next(batches)
    assert len(first) == 1
    batches.close()  # releases the stream
    del first
    gc.collect()



def test_stream_reader_is_made_by_iter_stream_only(ctx):
    table = _device_table(ctx, pa.table({"x": [1]}))
    _, batches = cdi.iter_stream(DeviceData(table))
    with pytest.raises(TypeError, match=r"arrow_gpu\.c_device_interface\.iter_stream\(\)"):
        type(batches)()
    batches.close()

def test_stream_requested_schema_and_kwargs(ctx):
    device = _device_table(ctx, pa.table({"x": [1, 2]}))
    renamed = import_stream(DeviceData(device), requested_schema=pa.schema([("y", pa.int64())]))
    assert renamed.schema.names == ["y"]
    with pytest.raises(pa.ArrowTypeError):
        import_stream(DeviceData(device), requested_schema=pa.schema([("x", pa.string())]))


def test_stream_wrong_capsule_and_errors(ctx):
    with pytest.raises(ValueError, match="arrow_device_array_stream"):
        import_stream(DeviceData(pa.array([1])).__arrow_c_device_array__()[0])
    mixed = pa.Table.from_batches([pa.record_batch([pa.array([1])], names=["x"]),
                                   pa.record_batch([on_device(ctx, pa.array([2]))], names=["x"])])
    with pytest.raises(ValueError, match="several device types"):
        DeviceData(mixed).__arrow_c_device_stream__()
    reader = pa.RecordBatchReader.from_batches(mixed.schema, mixed.to_batches())
    with pytest.raises(OSError, match="device_type"):
        import_stream(DeviceData(reader))
