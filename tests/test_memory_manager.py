"""The pluggable device allocator and its accounting."""

import gc

import pyarrow as pa
import pytest

import arrow_gpu


@pytest.fixture(autouse=True)
def restore_default_allocator():
    yield
    arrow_gpu.set_allocator("device")


def live_allocations(ctx):
    gc.collect()
    return ctx.memory_stats()["live_allocations"]


@pytest.mark.parametrize("kind", ["device", "pool"])
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


def test_failing_callback_allocator_raises_memory_error(ctx):
    def allocate(nbytes, device):
        raise RuntimeError("pool exhausted")

    arrow_gpu.set_allocator(allocate, lambda *args: None)
    with pytest.raises(MemoryError, match="pool exhausted"):
        ctx.new_buffer(64)
    with pytest.raises(MemoryError):
        pa.array([1, 2, 3]).copy_to(ctx.memory_manager)


def test_callback_returning_garbage_raises_memory_error(ctx):
    arrow_gpu.set_allocator(lambda n, d: "not an address", lambda *args: None)
    with pytest.raises(MemoryError, match="not an address"):
        ctx.new_buffer(8)
    arrow_gpu.set_allocator(lambda n, d: 0, lambda *args: None)
    with pytest.raises(MemoryError, match="address 0"):
        ctx.new_buffer(8)


def test_bad_allocator_arguments():
    with pytest.raises(ValueError, match="unknown allocator"):
        arrow_gpu.set_allocator("slab")
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
