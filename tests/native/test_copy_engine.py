"""The copy engine: pipelined staging, coalesced transfers, options, progress, failures.

Under the simulator the staging ring and chunks are made tiny so that every transfer of a
few kilobytes runs the multi-chunk, multi-thread pipeline; on a GPU the same tests run.
"""

import os
import signal
import threading
import time

import numpy as np
import pyarrow as pa
import pytest

import arrow_gpu
from arrow_gpu import new_host_buffer
from arrow_gpu.transfer_options import (get_transfer_options, release_staging,
                                        set_transfer_options, staging_bytes_held,
                                        transfer_options, transfer_progress)

from _arrow_samples import samples

STAGING = 4096
CHUNK = 512
CPU = pa.default_cpu_memory_manager()


@pytest.fixture(params=[1, 3], ids=["inline", "threads"])
def engine(request):
    """A tiny ring (8 slots of 512 bytes): copies from 256 bytes up are pipelined."""
    release_staging()  # a larger ring left by earlier transfers would be reused
    with transfer_options(staging_bytes=STAGING, chunk_bytes=CHUNK, threads=request.param,
                          small_copy_bytes=256) as options:
        yield options
    release_staging()


def _payload(n, seed=0):
    return np.random.default_rng(seed + n).integers(0, 256, n, dtype=np.uint8).tobytes()


SIZES = [0, 1, 255, 256, CHUNK - 1, CHUNK, CHUNK + 1, STAGING - 1, STAGING, STAGING + 1,
         3 * STAGING + 17, 100_003]


@pytest.mark.parametrize("n", SIZES)
def test_roundtrip_across_chunk_boundaries(ctx, engine, n):
    data = _payload(n)
    device = ctx.buffer_from_data(data)
    assert device.size == n
    assert device.copy_to_host().to_pybytes() == data
    assert staging_bytes_held() <= STAGING


def test_a_thread_stages_its_own_transfers_when_it_says_so(ctx):
    """A thread's own copy-thread count applies to the transfers that it starts, not to
    other threads', and leaves the process-wide options as they were."""
    from arrow_gpu._cuda import _set_thread_copy_threads

    release_staging()
    with transfer_options(staging_bytes=STAGING, chunk_bytes=CHUNK, threads=3,
                          small_copy_bytes=256) as options:
        assert _set_thread_copy_threads(1) == 0
        try:
            others = []
            thread = threading.Thread(target=lambda: others.append(_set_thread_copy_threads(0)))
            thread.start()
            thread.join()
            assert others == [0]
            data = _payload(3 * STAGING + 17)
            assert ctx.buffer_from_data(data).copy_to_host().to_pybytes() == data
            assert get_transfer_options() == options
        finally:
            assert _set_thread_copy_threads(0) == 1
    release_staging()


@pytest.mark.parametrize("n", [CHUNK + 3, 5 * STAGING + 1])
def test_copy_to_goes_through_the_engine(ctx, engine, n):
    array = pa.array(np.frombuffer(_payload(8 * n), dtype=np.int64))
    on_device = array.copy_to(ctx.memory_manager)
    assert not on_device.is_cpu
    assert on_device.copy_to(CPU).equals(array)


def test_unaligned_source_destination_and_positions(ctx, engine):
    data = _payload(3 * STAGING + 7)
    source = pa.py_buffer(data).slice(3)  # an odd host address
    device = ctx.new_buffer(len(data) + 5)
    assert device.copy_from_host(source, position=5) == len(data) - 3
    host = bytearray(len(data) + 1)
    out = pa.py_buffer(memoryview(host)[1:])  # an odd destination address
    back = device.copy_to_host(position=5, nbytes=len(data) - 3)
    assert back.to_pybytes() == data[3:]
    device.copy_to_host(position=6, nbytes=len(data) - 4, buf=out)
    assert bytes(host[1:len(data) - 3]) == data[4:]


@pytest.mark.parametrize("threads", [1, 3])
def test_large_parts_stream_to_odd_destinations(ctx, threads):
    """Parts of 16 KiB and more are unstaged with streaming stores: odd addresses and sizes
    around each 64-byte block and each unit must land exactly."""
    release_staging()
    data = _payload((1 << 20) + 4099)
    device = ctx.buffer_from_data(data)
    with transfer_options(staging_bytes=1 << 20, chunk_bytes=256 << 10, threads=threads,
                          small_copy_bytes=1024):
        for shift in (1, 7, 16, 63):
            host = bytearray(len(data) + 64)
            out = pa.py_buffer(memoryview(host)[shift:shift + len(data) - 5])
            device.copy_to_host(position=5, nbytes=len(data) - 5, buf=out)
            assert bytes(host[shift:shift + len(data) - 5]) == data[5:]
            assert not any(host[:shift]) and not any(host[shift + len(data) - 5:])
    release_staging()


@pytest.mark.parametrize("size", [(1 << 20) + 4099, (32 << 20) + 4099],
                         ids=["streamed", "through-caches"])
@pytest.mark.parametrize("threads", [1, 3])
def test_uploads_stage_odd_sources_exactly(ctx, threads, size):
    """Uploads of up to 32 MiB are staged with streaming stores, larger ones through the
    caches: odd host addresses and sizes around each 64-byte block and each unit must land
    exactly either way, at an odd device position."""
    release_staging()
    data = _payload(size)
    device = ctx.new_buffer(size)
    with transfer_options(threads=threads, small_copy_bytes=1024):
        for shift in (1, 7, 16, 63):
            source = pa.py_buffer(data).slice(shift, size - shift - 5)
            assert device.copy_from_host(source, position=3) == source.size
            back = device.copy_to_host(position=3, nbytes=source.size)
            assert back.to_pybytes() == data[shift:size - 5]
    release_staging()


@pytest.mark.parametrize("rows", [20_000, 60_000], ids=["small", "woken-early"])
@pytest.mark.parametrize("threads", [2, 3, 5])
def test_every_transfer_wakes_the_workers_it_needs(ctx, threads, rows):
    """The pool's threads sleep on one word; a large transfer (from 512 KiB) wakes them
    before planning and they poll for the job a while, then sleep again. However few of them
    a transfer uses, and whether its job finds them polling or asleep (the pauses outlast the
    polling), every transfer finishes: a lost wake-up hangs here."""
    release_staging()
    table = pa.table({"s": pa.array([str(x) * (x % 5) for x in range(rows)]),
                      "i": pa.array(np.arange(rows))})
    with transfer_options(staging_bytes=1 << 16, chunk_bytes=4096, threads=threads,
                          small_copy_bytes=0):
        for k in range(50):
            assert arrow_gpu.to_host(arrow_gpu.to_device(table)).equals(table)
            if k % 3 == 0:
                time.sleep(0.001)
    release_staging()


def test_pinned_host_memory_goes_direct(ctx, engine):
    data = _payload(2 * STAGING + 1)
    pinned = new_host_buffer(len(data))
    np.frombuffer(pinned, dtype=np.uint8)[:] = np.frombuffer(data, dtype=np.uint8)
    device = ctx.buffer_from_data(pinned)
    back = new_host_buffer(len(data))
    device.copy_to_host(buf=back)
    assert back.to_pybytes() == data
    # The same through pyarrow's hooks, with a pinned (kCUDA_HOST) source and destination.
    array = pa.Array.from_buffers(pa.uint8(), len(data), [None, pinned])
    on_device = array.copy_to(ctx.memory_manager)
    for manager in (pinned.memory_manager, CPU):
        back = on_device.copy_to(manager)
        assert back.buffers()[1].device_type == manager.device.device_type
        assert back.buffers()[1].to_pybytes() == data


def test_staging_disabled_copies_directly(ctx):
    release_staging()
    data = _payload(3 << 20)
    with transfer_options(staging_bytes=0):
        device = ctx.buffer_from_data(data)
        assert device.copy_to_host().to_pybytes() == data
        assert staging_bytes_held() == 0


def _bytes_array(data):
    """A uint8 array whose one buffer is exactly ``data`` (a host or device buffer)."""
    return pa.Array.from_buffers(pa.uint8(), data.size, [None, data])


def _data_buffers(chunked):
    return [chunk.buffers()[1] for chunk in chunked.chunks]


def test_coalesced_buffers(ctx, engine):
    sizes = [0, 1, 7, 63, 64, 65, CHUNK, 3 * STAGING + 5, 0, 1000, 3]
    payloads = [_payload(n, seed=i) for i, n in enumerate(sizes)]
    host = pa.chunked_array([_bytes_array(pa.py_buffer(p)) for p in payloads], pa.uint8())
    before = ctx.memory_stats()
    moved = arrow_gpu.to_device(host, ctx)
    after = ctx.memory_stats()
    assert after["total_allocations"] == before["total_allocations"] + 1  # one allocation
    copies = _data_buffers(moved)
    assert [c.size for c in copies] == sizes
    assert all(c.address % 64 == 0 for c in copies)
    assert all(not c.is_cpu and c.device_type == pa.DeviceAllocationType.CUDA for c in copies)
    assert [arrow_gpu.CudaBuffer.from_buffer(c).to_pybytes() for c in copies] == payloads
    back = _data_buffers(arrow_gpu.to_host(moved))
    assert all(b.is_cpu for b in back)
    assert [b.to_pybytes() for b in back] == payloads


def test_coalesced_buffers_from_separate_allocations_and_slices(ctx, engine):
    whole = ctx.buffer_from_data(_payload(5000))
    pieces = [ctx.buffer_from_data(_payload(n, seed=1)) for n in (0, 10, 2000, 600)]
    pieces += [whole.slice(3, 100), whole.slice(110, 3000), whole.slice(4990, 10)]
    device = pa.chunked_array([_bytes_array(p) for p in pieces], pa.uint8())
    back = _data_buffers(arrow_gpu.to_host(device))
    assert [b.to_pybytes() for b in back] == [p.to_pybytes() for p in pieces]


def test_coalesced_empty_and_bad_inputs(ctx, engine):
    empty = pa.chunked_array([], pa.uint8())
    assert arrow_gpu.to_device(empty, ctx).num_chunks == 0
    assert arrow_gpu.to_host(empty).num_chunks == 0
    zeros = pa.chunked_array([_bytes_array(pa.py_buffer(b""))] * 3, pa.uint8())
    assert [b.size for b in _data_buffers(arrow_gpu.to_device(zeros, ctx))] == [0] * 3
    with pytest.raises(TypeError):
        arrow_gpu.to_device(b"not pyarrow data", ctx)
    # Host buffers inside device data (IPC readers make empty ones) pass through as they are.
    host = pa.py_buffer(b"abc")
    mixed = pa.chunked_array([_bytes_array(ctx.buffer_from_data(b"xyz")), _bytes_array(host)])
    moved, same = _data_buffers(arrow_gpu.to_host(mixed))
    assert moved.is_cpu and moved.to_pybytes() == b"xyz"
    assert same.address == host.address and same.to_pybytes() == b"abc"


def _assert_same_as_copy_to(ours, reference):
    """Same layout (type, length, offset, null count) and the same bytes in every buffer."""
    assert ours.type == reference.type
    assert len(ours) == len(reference) and ours.offset == reference.offset
    ours_host = ours.copy_to(CPU)
    reference_host = reference.copy_to(CPU)
    assert [b is None for b in ours_host.buffers()] == [b is None for b in reference_host.buffers()]
    for mine, theirs in zip(ours_host.buffers(), reference_host.buffers()):
        if mine is not None:
            assert mine.to_pybytes() == theirs.to_pybytes()
    assert ours_host.null_count == reference_host.null_count


@pytest.mark.parametrize("sliced", [False, True], ids=["whole", "sliced"])
def test_coalesced_arrays_match_copy_to(ctx, engine, sliced):
    pairs = samples(sliced=sliced)
    arrays = [array for _, array in pairs]
    moved = arrow_gpu.to_device(pa.chunked_array([arrays[1]]), ctx)  # a ChunkedArray too
    assert not moved.chunk(0).is_cpu
    for (name, array), ours in zip(pairs, [arrow_gpu.to_device(array, ctx) for array in arrays]):
        assert not any(b is not None and b.is_cpu for b in ours.buffers()), name
        _assert_same_as_copy_to(ours, array.copy_to(ctx.memory_manager))
    assert arrow_gpu.to_host(moved).equals(pa.chunked_array([arrays[1]]))
    back = [arrow_gpu.to_host(arrow_gpu.to_device(array, ctx)) for array in arrays]
    for (name, array), host in zip(pairs, back):
        assert host.is_cpu, name
        _assert_same_as_copy_to(host, array)  # NaN-proof: compares bytes


def test_small_tables_move_without_the_pinned_ring(ctx):
    release_staging()
    table = pa.table({"x": [1, None, 3], "s": ["a", None, "ccc"], "d": [0.5, 1.5, None]})
    sliced = table.slice(1)  # buffers joined across small gaps, on the way back too
    for _ in range(3):
        assert arrow_gpu.to_host(arrow_gpu.to_device(table, ctx)).equals(table)
        assert arrow_gpu.to_host(arrow_gpu.to_device(sliced, ctx)).equals(sliced)
    assert staging_bytes_held() == 0


def test_tables_and_batches(ctx, engine):
    table = pa.table({
        "i": pa.chunked_array([[1, None, 3], [], [4, 5]]),
        "s": pa.chunked_array([["a", None], ["b", "cc", None]]),
        "d": pa.chunked_array([pa.array(["x", "y", "x", None, "y"]).dictionary_encode()]),
        "l": pa.chunked_array([[[1, 2], None, [], [3]], [[4]]]),
    })
    on_device = arrow_gpu.to_device(table, ctx)
    assert on_device.schema == table.schema
    assert [c.num_chunks for c in on_device.columns] == [c.num_chunks for c in table.columns]
    assert all(not chunk.is_cpu for column in on_device.columns for chunk in column.chunks)
    assert arrow_gpu.to_host(on_device).equals(table)
    batch = table.combine_chunks().to_batches()[0]
    assert arrow_gpu.to_host(arrow_gpu.to_device(batch, ctx)).equals(batch)
    wide = pa.table({f"c{i}": np.arange(i, i + 100, dtype=np.int64) for i in range(300)})
    before = ctx.memory_stats()["total_allocations"]
    wide_on_device = arrow_gpu.to_device(wide, ctx)
    assert ctx.memory_stats()["total_allocations"] == before + 1
    assert arrow_gpu.to_host(wide_on_device).equals(wide)
    with pytest.raises(TypeError):
        arrow_gpu.to_device({"not": "arrow"}, ctx)


def test_concurrent_transfers_from_several_threads(ctx, engine):
    errors = []

    def work(seed):
        try:
            for k in range(10):
                data = _payload(CHUNK * (k + 1) + seed, seed=seed)
                device = ctx.buffer_from_data(data)
                assert device.copy_to_host().to_pybytes() == data
                table = pa.table({"x": np.arange(seed, seed + 500 * k + 1)})
                assert arrow_gpu.to_host(arrow_gpu.to_device(table, ctx)).equals(table)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


class _FailingAllocator:
    """Device memory handed out from one preallocated buffer; the n-th request fails."""

    def __init__(self, ctx, fail_at):
        self.arena = ctx.new_buffer(1 << 20)
        self.used = 0
        self.calls = 0
        self.fail_at = fail_at

    def allocate(self, nbytes, device):
        self.calls += 1
        if self.calls == self.fail_at:
            raise MemoryError("simulated out of memory")
        address = self.arena.address + self.used
        self.used += (nbytes + 255) // 256 * 256
        return address

    def free(self, address, nbytes, device):
        pass


@pytest.mark.parametrize("fail_at", [1, 3, 5])  # of 5 buffers
def test_allocation_failure_in_the_middle_of_a_table(ctx, engine, fail_at):
    batch = pa.record_batch({
        "i": pa.array(np.arange(2000, dtype=np.int64)),
        "s": pa.array([str(i) if i % 7 else None for i in range(2000)]),
        "f": pa.array(np.linspace(0, 1, 2000)),
    })
    snapshot = [b and b.to_pybytes() for column in batch.columns for b in column.buffers()]
    allocator = _FailingAllocator(ctx, fail_at)
    baseline = ctx.memory_stats()
    arrow_gpu.set_allocator(allocator.allocate, allocator.free)
    try:
        with pytest.raises(MemoryError):
            batch.copy_to(ctx.memory_manager)
        stats = ctx.memory_stats()
        assert stats["bytes_allocated"] == baseline["bytes_allocated"]
        assert stats["live_allocations"] == baseline["live_allocations"]
        if fail_at == 1:  # the coalesced transfer makes one allocation
            allocator.calls = 0
            with pytest.raises(MemoryError):
                arrow_gpu.to_device(batch, ctx)
    finally:
        arrow_gpu.set_allocator()
    assert ctx.memory_stats()["bytes_allocated"] == baseline["bytes_allocated"]
    assert [b and b.to_pybytes() for column in batch.columns for b in column.buffers()] == \
        snapshot  # the source is untouched


def test_options_are_validated_and_restored():
    before = get_transfer_options()
    for bad in ({"staging_bytes": -1}, {"staging_bytes": 100}, {"chunk_bytes": 8},
                {"threads": -1}, {"threads": 1000}, {"small_copy_bytes": -5}):
        with pytest.raises(ValueError):
            set_transfer_options(**bad)
        assert get_transfer_options() == before
    with transfer_options(threads=2, chunk_bytes=1 << 20):
        assert get_transfer_options()["threads"] == 2
    assert get_transfer_options() == before


@pytest.mark.parametrize("options, message", [
    # 1 TiB was accepted and reported while the ring held 64 slots of 8 MiB: 512 MiB.
    ({"staging_bytes": 1 << 40},
     r"staging_bytes \(1099511627776\) is more than the staging ring holds: at most 64 "
     r"slots of chunk_bytes \(8388608\), 536870912 bytes; pass a larger chunk_bytes"),
    ({"staging_bytes": 1 << 20},
     r"chunk_bytes \(8388608\) must be at most half of staging_bytes \(1048576\): .*; pass a "
     r"smaller chunk_bytes or a larger staging_bytes"),
    ({"chunk_bytes": 64 << 20}, r"chunk_bytes \(67108864\) must be at most half"),
    ({"chunk_bytes": 512 << 10}, r"staging_bytes \(67108864\) is more than the staging ring"),
], ids=["staging-past-64-slots", "staging-under-2-slots", "chunk-over-half", "chunk-too-small"])
def test_options_the_ring_cannot_honour_are_refused(options, message):
    before = get_transfer_options()
    with pytest.raises(ValueError, match=message):
        set_transfer_options(**options)
    assert get_transfer_options() == before
    # The largest ring of these chunks is accepted.
    with transfer_options(staging_bytes=64 * before["chunk_bytes"]) as accepted:
        assert accepted["staging_bytes"] == 64 * before["chunk_bytes"]


def test_progress_reports_every_byte(ctx, engine):
    moved = []
    data = _payload(3 * STAGING + 5)
    with transfer_progress(moved.append):
        device = ctx.buffer_from_data(data)
        device.copy_to_host()
        arrow_gpu.to_device(pa.chunked_array([_bytes_array(pa.py_buffer(b"abc")),
                                           _bytes_array(pa.py_buffer(data))]), ctx)
    assert sum(moved) == 2 * len(data) + 3 + len(data)
    assert len(moved) > 3  # reported chunk by chunk
    moved.clear()
    ctx.buffer_from_data(data)
    assert moved == []  # the callback is gone after the block


def test_progress_callback_error_cancels_the_transfer(ctx, engine):
    def stop(nbytes):
        raise RuntimeError("stop")

    data = _payload(3 * STAGING)
    device = ctx.new_buffer(len(data))
    with transfer_progress(stop):
        with pytest.raises(pa.ArrowCancelled, match="stop"):
            device.copy_from_host(data)
    device.copy_from_host(data)  # the engine is usable again
    assert device.copy_to_host().to_pybytes() == data


def test_release_staging_from_a_progress_callback(ctx, engine):
    # The transfer holds the ring while it reports progress: release_staging() must not
    # wait for it (it did, forever); the ring goes when that transfer ends.
    calls = []

    def release(nbytes):
        calls.append(nbytes)
        release_staging()

    data = _payload(3 * STAGING)
    with transfer_progress(release):
        device = ctx.buffer_from_data(data)
        assert device.copy_to_host().to_pybytes() == data
    assert calls
    assert staging_bytes_held() == 0
    assert ctx.buffer_from_data(data).copy_to_host().to_pybytes() == data  # made again


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
def test_interrupts_in_a_progress_callback_stay_themselves(ctx, engine, error):
    def interrupt(nbytes):
        raise error("stop")

    data = _payload(3 * STAGING)
    device = ctx.new_buffer(len(data))
    with pytest.raises(error, match="stop"):
        with transfer_progress(interrupt):
            device.copy_from_host(data)
    device.copy_from_host(data)
    assert device.copy_to_host().to_pybytes() == data


def test_progress_callback_error_is_the_cause(ctx, engine):
    def stop(nbytes):
        raise ValueError("bad progress")

    with pytest.raises(pa.ArrowCancelled, match="bad progress") as info:
        with transfer_progress(stop):
            ctx.buffer_from_data(_payload(3 * STAGING))
    assert isinstance(info.value.__cause__, ValueError)


@pytest.fixture
def sigint_raises():
    """Python's KeyboardInterrupt handler on SIGINT, whatever the process inherited: one
    started in the background without job control inherits SIGINT ignored, and Python then
    installs no handler."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_during_a_transfer_is_a_keyboard_interrupt(ctx, engine, sigint_raises):
    # The signal arrives while the engine runs; Python delivers it inside the progress
    # callback, and it must leave the transfer as KeyboardInterrupt, every time.
    data = _payload(3 * STAGING)
    device = ctx.new_buffer(len(data))
    for _ in range(5):
        sent = []

        def signal_once(nbytes):
            if not sent:
                sent.append(nbytes)
                os.kill(os.getpid(), signal.SIGINT)

        with pytest.raises(KeyboardInterrupt):
            with transfer_progress(signal_once):
                device.copy_from_host(data)
