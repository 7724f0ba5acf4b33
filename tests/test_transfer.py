"""to_device / to_host: every type, every container, every capsule protocol."""

import os
import threading

import nanoarrow as na
import numpy as np
import pyarrow as pa
import pytest

import arrow_gpu
from arrow_gpu import _cuda
from arrow_gpu import c_device_interface as cdi
from arrow_gpu.c_device_interface import DeviceData
from arrow_gpu.transfer import to_device, to_host
from arrow_gpu.transfer_options import transfer_progress
from _arrow_samples import assert_identical, samples

SAMPLES = samples()
IDS = [name for name, _ in SAMPLES]


def all_buffers_on(data, on_device):
    chunks = data.chunks if isinstance(data, pa.ChunkedArray) else [data]
    for chunk in chunks:
        arrays = chunk.columns if isinstance(chunk, pa.RecordBatch) else [chunk]
        for array in arrays:
            stack = [array]
            while stack:
                current = stack.pop()
                for buffer in current.buffers():
                    if buffer is not None:
                        assert buffer.is_cpu is not on_device
                if pa.types.is_dictionary(current.type):
                    stack.append(current.dictionary)
    return True


@pytest.mark.parametrize("array", [a for _, a in SAMPLES], ids=IDS)
def test_array_round_trip(ctx, array):
    device = to_device(array)
    assert all_buffers_on(device, True)
    back = to_host(device)
    assert all_buffers_on(back, False)
    assert_identical(back, array)


@pytest.mark.parametrize("array", [a for _, a in SAMPLES], ids=IDS)
def test_device_to_device(ctx, array):
    first = to_device(array)
    second = to_device(first, stream=arrow_gpu.Stream(ctx))
    assert all_buffers_on(second, True)
    assert_identical(second, array)


def _wide():
    columns = {f"c{i}": pa.array(range(i, i + 50)) for i in range(200)}
    return pa.table({**columns, "s": pa.array([str(i) if i % 3 else None for i in range(50)])})


@pytest.mark.parametrize("data", [
    _wide().column("s").chunk(0),
    pa.chunked_array([_wide().column(0).chunk(0), pa.array([None, 7])]),
    _wide().to_batches()[0],
    _wide(),
], ids=["array", "chunked", "batch", "table"])
def test_host_data_moves_in_one_allocation(ctx, data):
    before = ctx.memory_stats()["total_allocations"]
    device = to_device(data)
    assert ctx.memory_stats()["total_allocations"] == before + 1
    assert type(device) is type(data)
    assert to_host(device).equals(data)


def test_empty_containers(ctx):
    for data in (pa.chunked_array([], type=pa.int64()), pa.table({"x": pa.array([], pa.int8())}),
                 pa.record_batch({"s": pa.array([], pa.string())})):
        device = to_device(data)
        assert type(device) is type(data) and to_host(device).equals(data)


def test_empty_unions_read_from_ipc_move(ctx):
    """An IPC reader gives an empty union no buffers at all, nested ones too; libarrow's
    size accounting would read its missing type ids (a crash), so such data moves as it is."""
    import io

    union = pa.dense_union([pa.field("d", pa.date32()), pa.field("v", pa.binary_view())])
    sparse = pa.sparse_union([pa.field("s", pa.string())])
    batch = pa.record_batch({"u": pa.nulls(0, union), "l": pa.nulls(0, pa.list_(sparse)),
                             "s": pa.array([], pa.large_string())})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    read = pa.ipc.open_stream(sink.getvalue()).read_next_batch()
    assert read.column(0).buffers()[1] is None  # the layout that crashed
    back = to_host(to_device(read))
    assert back.schema == batch.schema and back.num_rows == 0
    back.validate(full=True)


@pytest.mark.parametrize("data", [pa.table({"x": [1, 2, 3]}).select([]),
                                  pa.record_batch({"x": [1, 2, 3]}).select([])],
                         ids=["table", "batch"])
def test_rows_without_columns_keep_their_count(ctx, data):
    # Issue "Trustworthy at the edges", defect 4: a 3-row table of no columns came back with 0.
    for moved in (to_device(data), to_host(data), to_host(to_device(data)),
                  to_device(to_device(data), device=ctx.memory_manager)):
        assert type(moved) is type(data) and moved.num_rows == 3
    batch = data if isinstance(data, pa.RecordBatch) else data.to_batches()[0]
    assert cdi.import_record_batch(DeviceData(batch)).num_rows == 3
    assert cdi.import_stream(DeviceData(data)).num_rows == 3
    assert batch.copy_to(ctx.memory_manager).num_rows == 3


def test_containers(ctx):
    chunked = pa.chunked_array([pa.array([1, None]), pa.array([3]).slice(1), pa.array([4, 5])])
    device = to_device(chunked)
    assert isinstance(device, pa.ChunkedArray) and device.num_chunks == 3
    assert to_host(device).equals(chunked)
    table = pa.table({"x": chunked, "s": pa.chunked_array([["a", "b"], [], ["c", None]])})
    device_table = to_device(table)
    assert isinstance(device_table, pa.Table) and all_buffers_on(device_table.column(0), True)
    assert to_host(device_table).equals(table)
    batch = table.combine_chunks().to_batches()[0]
    assert to_host(to_device(batch)).equals(batch)


def test_capsule_objects(ctx):
    values = pa.array([1, None, 3])
    assert to_host(to_device(na.c_array(values))).equals(values)  # __arrow_c_array__
    stream = na.c_array_stream(pa.table({"x": values}))  # __arrow_c_stream__: streamed
    assert to_host(to_device(stream)).read_all().equals(pa.table({"x": values}))
    device = DeviceData(to_device(values))  # __arrow_c_device_array__
    assert to_host(device, stream=arrow_gpu.Stream(ctx)).equals(values)
    table = pa.table({"x": values})
    assert to_host(DeviceData(to_device(table))).equals(table)  # __arrow_c_device_stream__


def test_streams_as_ints_and_objects(ctx):
    stream = arrow_gpu.Stream(ctx)
    values = pa.array(["a", None])
    assert to_host(to_device(values, stream=stream), stream=stream.handle).equals(values)


def test_bad_inputs(ctx):
    with pytest.raises(TypeError, match="cannot move"):
        to_device([1, 2, 3])
    with pytest.raises(TypeError):
        to_host(object())
    with pytest.raises(Exception):
        to_device(pa.array([1]), device=4096)
    with pytest.raises(ValueError):
        to_device(pa.array([1]), stream=-1)


@pytest.mark.multi_gpu
def test_to_second_device(ctx, ctx1):
    values = pa.array(["x", None, "yz"])
    on_second = to_device(to_device(values), device=1)
    assert arrow_gpu.CudaBuffer.from_buffer(on_second.buffers()[1]).context.device_number == 1
    assert to_host(on_second).equals(values)


def test_a_slice_moves_only_the_bytes_it_covers(ctx):
    n = 200_000
    table = pa.table({"x": pa.array(range(n), pa.int64()),
                      "s": pa.array([f"v{i}" if i % 3 else None for i in range(n)]),
                      "l": pa.array([[i, i + 1] for i in range(n)])})
    before = ctx.bytes_allocated
    one_row = to_device(table.slice(7, 1))
    assert ctx.bytes_allocated - before < 4096  # the parent holds megabytes
    assert to_host(one_row).equals(table.slice(7, 1))
    del one_row
    # A table whose chunks are slices of the same arrays: the table once, not once a chunk.
    chunked = pa.Table.from_batches(table.to_batches(max_chunksize=n // 4))
    moved = to_device(chunked)
    assert ctx.bytes_allocated - before < 1.2 * table.get_total_buffer_size()
    assert to_host(moved).equals(chunked)


@pytest.mark.parametrize("type", [pa.string(), pa.binary(), pa.large_string(),
                                  pa.large_binary()])
def test_strings_whose_buffers_reach_past_their_rows_move_only_their_rows(ctx, type):
    values = pa.array([None if i % 7 == 0 else "x" * (i % 100) for i in range(20_000)], type)
    validity, offsets, data = values.buffers()
    first_ten = pa.Array.from_buffers(type, 10, [validity, offsets, data])  # whole buffers
    for part in (first_ten, values.slice(12_345, 10)):
        before = ctx.bytes_allocated
        moved = to_device(part)
        allocated = ctx.bytes_allocated - before
        assert to_host(moved).equals(part)
        del moved
        assert allocated < 4096  # the buffers hold a megabyte


@pytest.mark.parametrize("first, last", [(40, 30), (-5, 30), (0, 200_000), (0, -1),
                                         (-2**31, 2**31 - 1)])
def test_strings_whose_end_offsets_do_not_fit_their_bytes_move_as_written(ctx, first, last):
    # Offsets that pyarrow's construction checked, then changed under it (as memory shared
    # with another producer can be): the upload sizes the rows from these two offsets, and
    # where they do not fit the bytes it moves the buffers as they are, reading nothing past.
    offsets = np.array([0, 10, 20, 30], np.int32)
    values = pa.Array.from_buffers(pa.string(), 3, [None, pa.py_buffer(offsets),
                                                    pa.py_buffer(b"x" * 100_000)])
    offsets[[0, 3]] = first, last
    back = to_host(to_device(values))
    assert back.buffers()[1].to_pybytes() == offsets.tobytes()
    assert back.buffers()[2].to_pybytes() == values.buffers()[2].to_pybytes()


def test_chunks_that_share_a_dictionary_share_its_copy(ctx):
    # Slices of one dictionary array hold one dictionary: it moves once each way, and the
    # copies' chunks share it as the originals do (so that compute can concatenate them).
    dictionary = pa.array([f"value {i}" * 50 for i in range(1000)])
    column = pa.DictionaryArray.from_arrays(pa.array([i % 1000 for i in range(4000)],
                                                     pa.int32()), dictionary)
    chunked = pa.chunked_array([column.slice(i, 1000) for i in range(0, 4000, 1000)] + [
        pa.DictionaryArray.from_arrays(pa.array([1, 0], pa.int32()), dictionary)])
    before = ctx.bytes_allocated
    moved = to_device(chunked)
    assert ctx.bytes_allocated - before < 1.5 * dictionary.nbytes  # not five copies of it

    def places(data):
        return {tuple(b.address for b in chunk.dictionary.buffers() if b is not None)
                for chunk in data.chunks}

    assert len(places(moved)) == 1
    back = to_host(moved)
    assert len(places(back)) == 1 and back.equals(chunked)
    # Equal dictionaries of separate arrays stay separate copies.
    pair = [pa.DictionaryArray.from_arrays(pa.array([1, 0], pa.int8()), dictionary.slice(0, 2))
            for _ in range(2)]
    apart = to_device(pa.chunked_array(pair))
    assert len(places(apart)) == 2


@pytest.mark.parametrize("rows", [10, 300_000], ids=["one driver copy", "staged"])
def test_progress_knows_the_total_of_data_in_memory_up_front(ctx, rows):
    table = pa.table({"x": pa.array(range(rows), pa.int64()),
                      "s": pa.array([f"row {i}" for i in range(rows)])})
    totals = []
    with transfer_progress(lambda nbytes: totals.append(up.total_bytes)) as up:
        device = to_device(table)
    assert up.total_bytes == up.bytes_moved > 0
    assert totals[0] == up.total_bytes  # known from the first report on: a percentage
    with transfer_progress(lambda nbytes: None) as down:
        host = to_host(device)
    assert down.total_bytes == down.bytes_moved == up.bytes_moved
    assert host.equals(table)
    del device


def test_progress_counts_no_total_for_transfers_of_other_threads(ctx):
    # A thread's transfers may belong to a stream whose total is unknown: no guess.
    table = pa.table({"x": pa.array(range(1000), pa.int64())})
    with transfer_progress(lambda nbytes: None) as progress:
        worker = threading.Thread(target=lambda: to_device(table))
        worker.start()
        worker.join()
    assert progress.total_bytes is None and progress.bytes_moved > 0


@pytest.mark.skipif(not arrow_gpu.using_simulator(), reason="counts the simulator's calls")
@pytest.mark.parametrize("rows", [1000, 1_000_000], ids=["small", "staged"])
def test_transfers_given_a_non_blocking_stream_stay_off_the_legacy_stream(rows, ctx):
    # The legacy default stream waits for every blocking stream of every library: copies
    # given a non-blocking stream follow that stream alone, whether they run on it (small
    # ones) or on the staging ring's stream (large ones).
    host = pa.table({"x": np.arange(rows), "s": pa.array(["ab"] * rows)})
    stream = arrow_gpu.Stream(ctx, non_blocking=True)
    before = _cuda._simulated_legacy_stream_uses()
    _cuda._simulate_busy_legacy_stream(True)
    try:
        back = to_host(to_device(host, stream=stream), stream)
    finally:
        _cuda._simulate_busy_legacy_stream(False)
    assert _cuda._simulated_legacy_stream_uses() == before
    assert back.equals(host)
    to_host(to_device(host))  # without a stream: the legacy stream's, as cuMemcpy's
    assert _cuda._simulated_legacy_stream_uses() > before


@pytest.mark.gpu
def test_a_small_upload_is_there_for_a_non_blocking_stream_at_once(ctx):
    # The driver returns from a copy out of pageable memory once it has staged the bytes,
    # before its DMA ends; a non-blocking stream is not ordered after that copy. Work queued
    # on such a stream as soon as to_device returns must still read the bytes uploaded, with
    # the copy engine kept busy by another stream's copy so that the DMA runs late.
    cupy = pytest.importorskip("cupy")
    from arrow_gpu.interop import as_cuda_array
    busy = cupy.cuda.Stream(non_blocking=True)
    pinned = np.frombuffer(cupy.cuda.alloc_pinned_memory(256 << 20), np.uint8, 256 << 20)
    target = cupy.empty(256 << 20, cupy.uint8)
    reader = cupy.cuda.Stream(non_blocking=True)
    for round in range(20):
        target.set(pinned, stream=busy)
        values = pa.array([round] * 100_000, pa.int64())  # 800 kB: a direct driver copy
        device = to_device(values)
        with reader:
            read = cupy.asarray(as_cuda_array(device)).copy()
        reader.synchronize()
        assert int((read == round).sum()) == len(values), f"round {round}"
    busy.synchronize()


def vm_flags_at(address):
    """The VmFlags of the mapping of this process that holds ``address``."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split(maxsplit=1)[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(bound, 16) for bound in head.split("-"))
                inside = start <= address < end
            elif inside and line.startswith("VmFlags:"):
                return line.split()[1:]
    raise LookupError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not os.path.isdir("/sys/kernel/mm/transparent_hugepage"),
                    reason="needs Linux's transparent huge pages")
@pytest.mark.parametrize("download", ["to_host", "copy_to_host", "copy_to"])
def test_a_download_asks_for_huge_pages_where_its_pool_does_not(ctx, download):
    # The system pool (malloc) asks for none: with transparent huge pages in madvise mode a
    # fresh result took a fault every 4 KiB. Its whole huge pages are advised.
    values = np.arange(3 << 20)  # 24 MiB
    on_device = to_device(pa.array(values))
    pool = pa.system_memory_pool()
    if download == "to_host":
        data = to_host(on_device, memory_pool=pool).buffers()[1]
    elif download == "copy_to_host":
        data = ctx.buffer_from_data(values).copy_to_host(memory_pool=pool)
    else:
        data = on_device.copy_to(_cuda._cpu_memory_manager(pool)).buffers()[1]
    assert np.array_equal(np.frombuffer(data, np.int64), values)
    page = 2 << 20
    assert "hg" in vm_flags_at(-(-data.address // page) * page)
