"""The pluggable device allocator, the caching default, and their accounting."""

import gc
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pyarrow as pa
import pytest

import arrow_gpu
from arrow_gpu import _cuda


@pytest.fixture(autouse=True)
def allocator_state_of_its_own():
    # Garbage an earlier test left (a traceback's frames holding its device arrays) is
    # collected before ctx's leak check freezes every object: frozen, it would keep small
    # buffers alive in the allocator's shared blocks, which these tests read as in use.
    gc.collect()
    yield
    arrow_gpu.set_allocator()


def live_allocations(ctx):
    gc.collect()
    return ctx.memory_stats()["live_allocations"]


@pytest.mark.parametrize("kind", ["caching", "device", "pool"])
def test_builtin_allocators_serve_pyarrow_copies(ctx, kind):
    arrow_gpu.set_allocator(kind)
    assert arrow_gpu.allocator_name() == kind
    before = live_allocations(ctx)
    host = pa.array([1, None, 3], pa.int64())
    device = host.copy_to(ctx.memory_manager)
    assert live_allocations(ctx) == before + 2  # validity bitmap and values
    assert device.copy_to(pa.default_cpu_memory_manager()).equals(host)
    del device
    assert live_allocations(ctx) == before


def test_buffers_return_to_the_allocator_that_made_them(ctx):
    arrow_gpu.set_allocator("pool")
    pooled = ctx.buffer_from_data(b"pooled")
    arrow_gpu.set_allocator("device")
    assert pooled.to_pybytes() == b"pooled"
    del pooled  # freed by the pool even though "device" is current now


def test_callback_allocator_gets_every_allocation_and_free(ctx):
    # Pinned host memory stands in for another library's device pool: on a GPU it is
    # device-accessible, in the simulator device memory is host memory anyway.
    blocks = {}
    calls = []

    def allocate(nbytes, device):
        calls.append(("allocate", nbytes, device))
        block = arrow_gpu.new_host_buffer(nbytes)
        blocks[ctx.get_device_address(block.address)] = block
        return ctx.get_device_address(block.address)

    def free(address, nbytes, device):
        calls.append(("free", nbytes, device))
        del blocks[address]

    arrow_gpu.set_allocator(allocate, free)
    buf = ctx.buffer_from_data(b"through the hook")
    assert buf.to_pybytes() == b"through the hook"
    assert calls == [("allocate", 16, 0)]
    del buf
    gc.collect()
    assert calls[-1] == ("free", 16, 0)
    assert not blocks


class PinnedResource:
    """A DeviceMemoryResource of pinned host memory (see the callback test above)."""

    def __init__(self, ctx):
        self.ctx, self.blocks, self.calls = ctx, {}, []

    def allocate(self, nbytes, device):
        self.calls.append(("allocate", nbytes, device))
        block = arrow_gpu.new_host_buffer(nbytes)
        address = self.ctx.get_device_address(block.address)
        self.blocks[address] = block
        return address

    def deallocate(self, address, nbytes, device):
        self.calls.append(("deallocate", nbytes, device))
        del self.blocks[address]


def test_a_memory_resource_object_serves_and_takes_back_every_allocation(ctx):
    resource = PinnedResource(ctx)
    assert isinstance(resource, arrow_gpu.memory_manager.DeviceMemoryResource)
    arrow_gpu.set_allocator(resource)
    assert arrow_gpu.allocator_name() == "callback"
    table = arrow_gpu.to_device(pa.table({"x": [1, None, 3]}))
    assert arrow_gpu.to_host(table).to_pydict() == {"x": [1, None, 3]}
    assert resource.calls and all(call[0] == "allocate" for call in resource.calls)
    del table
    gc.collect()
    assert not resource.blocks
    assert [call[0] for call in resource.calls].count("deallocate") == len(resource.calls) // 2


def test_a_memory_resource_takes_no_separate_free(ctx):
    with pytest.raises(TypeError, match="frees through its own deallocate"):
        arrow_gpu.set_allocator(PinnedResource(ctx), free=lambda *args: None)


def test_failing_callback_allocator_raises_memory_error(ctx):
    def allocate(nbytes, device):
        raise RuntimeError("pool exhausted")

    arrow_gpu.set_allocator(allocate, lambda *args: None)
    with pytest.raises(MemoryError, match="pool exhausted"):
        ctx.new_buffer(64)
    with pytest.raises(MemoryError):
        pa.array([1, 2, 3]).copy_to(ctx.memory_manager)


def test_a_failing_callback_allocator_is_called_once_even_with_memory_cached(ctx):
    ctx.new_buffer(1000)  # freed at once, into the cache
    calls = []

    def allocate(nbytes, device):
        calls.append(nbytes)
        raise MemoryError("pool exhausted")

    arrow_gpu.set_allocator(allocate, lambda *args: None)
    with pytest.raises(MemoryError, match="pool exhausted"):
        ctx.new_buffer(64)
    assert calls == [64]


def test_callback_returning_garbage_raises_memory_error(ctx):
    arrow_gpu.set_allocator(lambda n, d: "not an address", lambda *args: None)
    with pytest.raises(MemoryError, match="not an address"):
        ctx.new_buffer(8)
    arrow_gpu.set_allocator(lambda n, d: 0, lambda *args: None)
    with pytest.raises(MemoryError, match="address 0"):
        ctx.new_buffer(8)


def test_bad_allocator_arguments():
    with pytest.raises(ValueError, match="unknown allocator 'slab'; choose 'caching', 'device' "
                                         "or 'pool', or pass a DeviceMemoryResource"):
        arrow_gpu.set_allocator("slab")
    # "callback" is the name allocator_name() gives a function pair, not a choice by itself.
    with pytest.raises(ValueError, match="choose 'caching', 'device' or 'pool'"):
        arrow_gpu.set_allocator("callback")
    with pytest.raises(TypeError, match="an allocator cannot be a 'int'; choose"):
        arrow_gpu.set_allocator(5)
    with pytest.raises(TypeError, match="callable free"):
        arrow_gpu.set_allocator(lambda n, d: 0)
    with pytest.raises(TypeError, match="only given with a callable"):
        arrow_gpu.set_allocator("device", free=lambda *a: None)


def test_memory_stats_track_peak_and_totals(ctx):
    start = ctx.memory_stats()
    a = ctx.new_buffer(1000)
    b = ctx.new_buffer(500)
    during = ctx.memory_stats()
    assert during["bytes_allocated"] == start["bytes_allocated"] + 1500
    assert during["peak_bytes_allocated"] >= start["bytes_allocated"] + 1500
    assert during["total_allocations"] == start["total_allocations"] + 2
    del a, b
    gc.collect()
    after = arrow_gpu.memory_stats(0)
    assert after["bytes_allocated"] == start["bytes_allocated"]
    assert after["total_bytes_allocated"] == start["total_bytes_allocated"] + 1500
    assert 0 < after["device_free_bytes"] <= after["device_total_bytes"]


def test_out_of_device_memory_is_memory_error(ctx):
    free, total = ctx.memory_info()
    with pytest.raises(MemoryError, match="could not allocate"):
        ctx.new_buffer(total * 4)


def test_caching_is_the_default():
    assert arrow_gpu.allocator_name() == "caching"


def test_freed_memory_is_reused_without_driver_calls(ctx):
    sizes = [64, 1000, 4096, 70_000, 3 << 20]  # small classes and a whole block
    for size in sizes:  # warm the cache
        ctx.new_buffer(size)  # freed at once
    before = ctx.memory_stats()
    for _ in range(20):
        buffers = [ctx.new_buffer(size) for size in sizes]
        del buffers
        table = arrow_gpu.to_device(pa.table({"x": [1, None, 3], "s": ["a", "b", None]}))
        arrow_gpu.to_host(table)
        del table
    after = ctx.memory_stats()
    assert after["driver_allocations"] == before["driver_allocations"]
    assert after["driver_frees"] == before["driver_frees"]
    assert after["cache_hits"] >= before["cache_hits"] + 20 * (len(sizes) + 1)


@pytest.fixture
def busy_legacy_stream():
    """The legacy default stream held up, as a busy blocking stream of another library holds
    it (events recorded there have not passed), under the simulator."""
    if not arrow_gpu.using_simulator():
        pytest.skip("holds the simulator's legacy default stream")
    _cuda._simulate_busy_legacy_stream(True)
    yield
    _cuda._simulate_busy_legacy_stream(False)


def test_a_held_up_free_is_not_waited_for(ctx, busy_legacy_stream):
    # A block's reuse waits for its free, recorded on the legacy default stream; while that
    # stream is held up, the cache takes other memory rather than wait for other streams.
    sizes = [64, 70_000, 3 << 20]
    freed = {size: ctx.new_buffer(size).address for size in sizes}
    uses = _cuda._simulated_legacy_stream_uses()
    again = {size: ctx.new_buffer(size).address for size in sizes}
    assert _cuda._simulated_legacy_stream_uses() == uses
    assert all(again[size] != freed[size] for size in sizes)


def test_a_held_up_cache_grows_by_a_bounded_amount_then_waits(ctx, busy_legacy_stream):
    arrow_gpu.trim()
    size = 300 << 20
    first = ctx.new_buffer(size).address  # freed: its reuse waits for the legacy stream
    uses = _cuda._simulated_legacy_stream_uses()
    addresses = [ctx.new_buffer(size).address for _ in range(3)]  # 900 MiB more: new memory
    assert _cuda._simulated_legacy_stream_uses() == uses
    assert first not in addresses
    reused = ctx.new_buffer(size).address  # past 1 GiB: waits for a free instead
    assert _cuda._simulated_legacy_stream_uses() == uses + 1
    assert reused in [first, *addresses]
    arrow_gpu.trim()


def test_a_held_up_free_is_reused_once_it_has_passed(ctx, busy_legacy_stream):
    address = ctx.new_buffer(70_000).address
    _cuda._simulate_busy_legacy_stream(False)
    assert ctx.new_buffer(70_000).address == address


def test_bytes_allocated_counts_what_buffers_hold_not_the_cache(ctx):
    start = ctx.memory_stats()
    buffers = [ctx.new_buffer(n) for n in (1, 513, 5000, (1 << 20) + 1)]
    held = ctx.memory_stats()
    assert held["bytes_allocated"] == start["bytes_allocated"] + 1 + 513 + 5000 + (1 << 20) + 1
    assert held["live_allocations"] == start["live_allocations"] + 4
    assert held["reserved_bytes"] - held["cached_bytes"] >= 1 + 513 + 5000 + (1 << 20) + 1
    del buffers
    freed = ctx.memory_stats()
    assert freed["bytes_allocated"] == start["bytes_allocated"]
    assert freed["live_allocations"] == start["live_allocations"]
    assert freed["reserved_bytes"] - freed["cached_bytes"] == \
        start["reserved_bytes"] - start["cached_bytes"]


def test_small_buffers_share_a_driver_allocation(ctx):
    arrow_gpu.trim()
    before = ctx.memory_stats()["driver_allocations"]
    buffers = [ctx.buffer_from_data(bytes([i]) * 100) for i in range(16)]
    assert ctx.memory_stats()["driver_allocations"] == before + 1
    addresses = sorted(b.address for b in buffers)
    assert all(b - a >= 512 for a, b in zip(addresses, addresses[1:]))  # no overlap
    assert [b.to_pybytes() for b in buffers] == [bytes([i]) * 100 for i in range(16)]


def test_trim_gives_unused_memory_back_and_keeps_live_buffers(ctx):
    kept = ctx.buffer_from_data(b"still here")
    dropped = [ctx.new_buffer(n) for n in (100, 70_000, 5 << 20)]
    del dropped
    arrow_gpu.release_pinned_memory(0)  # trim gives that back too: none is counted below
    cached = ctx.memory_stats()
    assert cached["cached_bytes"] >= 5 << 20
    released = arrow_gpu.trim(0)
    trimmed = ctx.memory_stats()
    assert released >= 5 << 20
    assert trimmed["reserved_bytes"] == cached["reserved_bytes"] - released
    assert trimmed["driver_frees"] > cached["driver_frees"]
    assert kept.to_pybytes() == b"still here"  # its driver allocation stayed
    # Nothing unused is left on this device (another may hold an earlier test's cache).
    assert arrow_gpu.trim(0) == 0
    del kept
    assert arrow_gpu.trim(0) > 0


def test_trim_also_frees_cache_left_by_a_previous_default(ctx):
    ctx.new_buffer(1000)  # freed at once
    arrow_gpu.set_allocator("device")
    assert ctx.memory_stats()["cached_bytes"] > 0
    assert arrow_gpu.trim() > 0


def run_simulated(code, memory):
    env = dict(os.environ, ARROW_GPU_SIMULATOR="1", ARROW_GPU_SIMULATOR_MEMORY=str(memory))
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_running_out_of_memory_trims_the_cache_first():
    out = run_simulated(
        """
        import arrow_gpu
        ctx = arrow_gpu.Context(0)
        for n in (3 << 20, 100, 70_000):  # a whole block and two carved segments, freed
            ctx.new_buffer(n)  # freed at once
        assert ctx.memory_stats()["reserved_bytes"] == 8 << 20
        big = ctx.new_buffer(6 << 20)  # fits only once the cache gave its memory back
        stats = ctx.memory_stats()
        assert stats["driver_frees"] == 3 and stats["reserved_bytes"] == 6 << 20, stats
        try:
            ctx.new_buffer(4 << 20)
        except MemoryError as error:
            print(error)
        del big
        print(ctx.new_buffer(7 << 20).size)
        """, memory=8 << 20)
    error, size = out.strip().splitlines()
    assert "could not allocate 4194304 bytes" in error and "CUDA_ERROR_OUT_OF_MEMORY" in error
    assert size == str(7 << 20)


def test_small_buffers_fit_when_a_whole_segment_does_not():
    out = run_simulated(
        """
        import arrow_gpu
        ctx = arrow_gpu.Context(0)
        buffers = [ctx.buffer_from_data(bytes([i]) * 1000) for i in range(100)]
        print(all(b.to_pybytes() == bytes([i]) * 1000 for i, b in enumerate(buffers)))
        """, memory=1 << 20)
    assert out.strip() == "True"


def test_a_carved_buffer_exports_its_offset_for_ipc(ctx):
    buffers = [ctx.buffer_from_data(f"block {i:02}".encode()) for i in range(16)]
    try:
        handles = [buffer.export_for_ipc() for buffer in buffers]
    except OSError as error:
        if "CUDA_ERROR_NOT_SUPPORTED" in str(error):
            pytest.skip("this driver (the simulator) has no CUDA IPC")
        raise
    # Sixteen small blocks share driver allocations, so most lie past their start.
    carved = max(range(16), key=lambda i: handles[i].offset)
    assert handles[carved].offset > 0
    importer = textwrap.dedent(
        """
        import sys
        import arrow_gpu
        ctx = arrow_gpu.Context(0)
        handle = arrow_gpu.IpcMemHandle.from_buffer(bytes.fromhex(sys.stdin.read().strip()))
        print(ctx.open_ipc_buffer(handle).copy_to_host().to_pybytes().decode())
        """)
    result = subprocess.run([sys.executable, "-c", importer], capture_output=True, text=True,
                            input=handles[carved].serialize().to_pybytes().hex(), timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"block {carved:02}"


def test_threads_allocating_at_once_never_share_memory(ctx):
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(200):
                held = []
                for size in rng.choice([8, 600, 5000, 200_000, 3 << 20], size=4):
                    pattern = bytes([seed]) * int(size)
                    held.append((ctx.buffer_from_data(pattern), pattern))
                for buffer, pattern in held:  # another thread writing here would show
                    if buffer.to_pybytes() != pattern:
                        errors.append(f"thread {seed}: buffer overwritten")
        except Exception as error:  # reported below, on the main thread
            errors.append(repr(error))

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(1, 9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
