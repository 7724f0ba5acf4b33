"""The pinned memory pool: pyarrow allocates from it, and its buffers reach the device by DMA
alone."""

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arrow_gpu
from arrow_gpu import (pinned_memory_pool, pinned_pool_stats, release_pinned_memory,
                       set_pinned_cache_limit, to_device, to_host)
from arrow_gpu.transfer_options import release_staging, staging_bytes_held, transfer_options


@pytest.fixture
def pool():
    """Device 0's pinned pool, with nothing allocated from it left by the test."""
    pool = pinned_memory_pool(0)
    gc.collect()
    before = pool.bytes_allocated()
    yield pool
    gc.collect()
    assert pool.bytes_allocated() == before, "pinned memory still allocated after the test"


def test_one_pool_per_device_with_its_own_name(pool):
    assert isinstance(pool, pa.MemoryPool)
    assert pool.backend_name == "arrow_gpu_pinned"
    assert pinned_memory_pool(arrow_gpu.Context(0)).backend_name == "arrow_gpu_pinned"
    with pytest.raises(pa.ArrowInvalid):
        pinned_memory_pool(arrow_gpu.device_count())


def test_buffers_count_while_they_live_and_are_reused_once_freed(pool):
    before = pool.bytes_allocated()
    buffer = pa.allocate_buffer(3 << 20, memory_pool=pool)
    assert pool.bytes_allocated() == before + (3 << 20)
    assert pool.max_memory() >= before + (3 << 20)
    memoryview(buffer).cast("B")[:] = b"\x05" * (3 << 20)
    assert buffer.to_pybytes()[-1] == 5
    del buffer
    assert pool.bytes_allocated() == before
    driver_calls = pinned_pool_stats(0)["driver_allocations"]
    again = pa.allocate_buffer(3 << 20, memory_pool=pool)  # the freed block, no driver call
    assert pinned_pool_stats(0)["driver_allocations"] == driver_calls
    del again
    smaller = pa.allocate_buffer(int(2.3 * (1 << 20)), memory_pool=pool)  # still fits well
    assert pinned_pool_stats(0)["driver_allocations"] == driver_calls
    del smaller


def test_release_gives_back_what_no_buffer_uses(pool):
    kept = pa.allocate_buffer(1 << 20, memory_pool=pool)
    freed = [pa.allocate_buffer(size, memory_pool=pool) for size in (100, 5000, 2 << 20)]
    del freed
    cached = pinned_pool_stats(0)["cached_bytes"]
    assert cached >= 100 + 5000 + (2 << 20)
    assert release_pinned_memory(0) >= cached
    stats = pinned_pool_stats(0)
    assert stats["cached_bytes"] == 0
    assert stats["reserved_bytes"] >= 1 << 20  # the live buffer's memory stays
    assert release_pinned_memory(0) == 0
    memoryview(kept).cast("B")[:] = b"\x01" * (1 << 20)
    assert kept.to_pybytes() == b"\x01" * (1 << 20)
    del kept


@pytest.fixture
def cache_limit():
    """Device 0's pinned cache limit, set back after the test."""
    before = pinned_pool_stats(0)["cache_limit"]
    yield before
    set_pinned_cache_limit(before)


def test_free_blocks_are_kept_up_to_a_quarter_of_the_host_memory_by_default(pool, cache_limit):
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert cache_limit == physical // 4
    MiB = 1 << 20
    release_pinned_memory(0)
    base = pinned_pool_stats(0)["cached_bytes"]  # small blocks whose neighbours live on
    small, large = (pa.allocate_buffer(size, memory_pool=pool) for size in (MiB, 4 * MiB))
    assert set_pinned_cache_limit(base + 2 * MiB) == 0  # nothing free past it yet
    reserved = pinned_pool_stats(0)["reserved_bytes"]
    del large  # past the limit: given back at once
    stats = pinned_pool_stats(0)
    assert (stats["cached_bytes"], stats["reserved_bytes"]) == (base, reserved - 4 * MiB)
    del small  # within it: kept for the next allocation
    stats = pinned_pool_stats(0)
    assert (stats["cached_bytes"], stats["cache_limit"]) == (base + MiB, base + 2 * MiB)
    calls = stats["driver_allocations"]
    again = pa.allocate_buffer(MiB, memory_pool=pool)
    assert pinned_pool_stats(0)["driver_allocations"] == calls
    del again
    # Lowering the limit gives back what lies past it now; None keeps every freed block.
    assert set_pinned_cache_limit(0) >= MiB
    assert pinned_pool_stats(0)["cached_bytes"] <= base
    assert set_pinned_cache_limit(None) == 0
    assert pinned_pool_stats(0)["cache_limit"] is None
    freed = [pa.allocate_buffer(size * MiB, memory_pool=pool) for size in (3, 5, 7)]
    del freed
    assert pinned_pool_stats(0)["cached_bytes"] >= 15 * MiB
    assert release_pinned_memory(0) >= 15 * MiB


@settings(deadline=None, max_examples=25)
@given(sizes=st.lists(st.integers(min_value=300 << 10, max_value=4 << 20), min_size=1,
                      max_size=6),
       limit=st.integers(min_value=0, max_value=12 << 20), order=st.randoms())
def test_freed_blocks_never_hold_more_than_the_limit(sizes, limit, order):
    # Blocks past 256 KiB are pinned allocations of their own: each free that would take the
    # free ones past the limit gives the largest back first, and nothing is lost track of.
    before = pinned_pool_stats(0)["cache_limit"]
    release_pinned_memory(0)
    base = pinned_pool_stats(0)  # small blocks whose neighbours live on stay
    try:
        set_pinned_cache_limit(base["cached_bytes"] + limit)
        pool = pinned_memory_pool(0)
        buffers = [pa.allocate_buffer(size, memory_pool=pool) for size in sizes]
        order.shuffle(buffers)
        while buffers:
            buffers.pop()
            assert pinned_pool_stats(0)["cached_bytes"] <= base["cached_bytes"] + limit
        release_pinned_memory(0)
        after = pinned_pool_stats(0)
        assert (after["cached_bytes"], after["reserved_bytes"]) == \
            (base["cached_bytes"], base["reserved_bytes"])
    finally:
        set_pinned_cache_limit(before)


@pytest.mark.parametrize("limit, error", [(-1, ValueError), (1.5, TypeError),
                                          (True, TypeError), ("1GB", TypeError)])
def test_a_cache_limit_is_bytes_or_none(limit, error, cache_limit):
    with pytest.raises(error, match="pinned cache limit"):
        set_pinned_cache_limit(limit)
    assert pinned_pool_stats(0)["cache_limit"] == cache_limit


def test_empty_allocations_need_no_memory(pool):
    before = pool.bytes_allocated()
    empty = pa.allocate_buffer(0, memory_pool=pool)
    assert empty.size == 0
    assert pool.bytes_allocated() == before
    del empty


@settings(deadline=None, max_examples=30)
@given(st.lists(st.integers(min_value=0, max_value=3 << 20), min_size=1, max_size=8))
def test_growing_and_shrinking_keeps_the_bytes(sizes):
    pool = pinned_memory_pool(0)
    before = pool.bytes_allocated()
    buffer = pa.allocate_buffer(sizes[0], memory_pool=pool, resizable=True)
    expected = np.arange(sizes[0], dtype=np.uint64).astype(np.uint8)
    np.frombuffer(buffer, dtype=np.uint8)[:] = expected
    for size in sizes[1:]:
        buffer.resize(size)
        kept = min(size, len(expected))
        assert np.array_equal(np.frombuffer(buffer, dtype=np.uint8)[:kept], expected[:kept])
        expected = np.arange(size, dtype=np.uint64).astype(np.uint8)
        np.frombuffer(buffer, dtype=np.uint8)[:] = expected
        assert pool.bytes_allocated() >= before + size  # pyarrow rounds capacities up
    del buffer
    assert pool.bytes_allocated() == before


def test_kernels_and_readers_decode_into_it(ctx, pool, tmp_path):
    table = pa.table({"x": np.arange(300_000), "s": [str(i % 977) for i in range(300_000)]})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=100_000)
    before = pool.bytes_allocated()
    read = ds.dataset(tmp_path / "t.parquet").to_table(memory_pool=pool)
    assert pool.bytes_allocated() > before  # the decoded columns live in the pool
    doubled = pc.multiply(read["x"], 2, memory_pool=pool)
    on_device = to_device(pa.table({"x": doubled, "s": read["s"]}), ctx)
    assert on_device["x"].chunk(0).buffers()[1].is_cpu is False
    assert to_host(on_device).equals(pa.table({"x": pc.multiply(table["x"], 2),
                                               "s": table["s"]}))
    del read, doubled


def test_pinned_data_moves_without_the_staging_ring(ctx, pool):
    values = np.random.default_rng(0).integers(0, 1 << 40, 1 << 20)
    pageable = pa.array(values)
    pinned = pc.add(pageable, 0, memory_pool=pool)  # 8 MiB in the pinned pool
    with transfer_options(small_copy_bytes=1 << 16):
        release_staging()
        on_device = to_device(pinned, ctx)
        assert staging_bytes_held() == 0, "pinned data went through the staging ring"
        assert to_host(on_device).equals(pageable)
        to_device(pageable, ctx)
        assert staging_bytes_held() > 0  # ordinary memory is staged
    release_staging()
    del pinned, on_device


def test_downloads_into_the_pool_skip_the_staging_ring_and_reuse_its_memory(ctx, pool):
    table = pa.table({"x": np.arange(1 << 20), "s": [f"v{i}" for i in range(1 << 20)]})
    on_device = to_device(table, ctx)
    with transfer_options(small_copy_bytes=1 << 16):
        release_staging()
        before = pool.bytes_allocated()
        back = to_host(on_device, memory_pool=pool)
        assert staging_bytes_held() == 0, "a download into pinned memory was staged"
    assert back.equals(table)
    assert pool.bytes_allocated() - before >= table.nbytes
    del back
    driver_calls = pinned_pool_stats(0)["driver_allocations"]
    again = to_host(on_device, memory_pool=pool)  # the freed block again: no pinning
    assert pinned_pool_stats(0)["driver_allocations"] == driver_calls
    assert again.equals(table)
    del again, on_device
    release_staging()


@pytest.mark.parametrize("source", ["device", "host", "reader", "filtered"])
def test_to_host_allocates_from_any_pool_it_is_given(ctx, source):
    table = pa.table({"x": np.arange(10_000), "y": [None, 1.5] * 5_000})
    mask = pa.array(np.arange(10_000) % 3 == 0)
    pool = pa.proxy_memory_pool(pa.default_memory_pool())  # counts its own allocations
    expected = table.filter(mask) if source == "filtered" else table
    if source == "host":
        back = to_host(table, memory_pool=pool)
    elif source == "reader":
        batches = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(4_000))
        back = to_host(to_device(batches, ctx), memory_pool=pool).read_all()
    else:
        back = to_host(to_device(table, ctx), memory_pool=pool,
                       filter=to_device(mask, ctx) if source == "filtered" else None)
    assert back.equals(expected)
    assert pool.bytes_allocated() >= expected.nbytes
    del back
    assert pool.bytes_allocated() == 0


def test_to_host_names_what_a_memory_pool_must_be(ctx):
    with pytest.raises(TypeError, match="memory_pool must be a pyarrow.MemoryPool"):
        to_host(to_device(pa.array([1]), ctx), memory_pool=pa.default_cpu_memory_manager())


def test_trim_gives_back_the_pinned_memory_no_download_uses(ctx, pool):
    on_device = to_device(pa.array(np.arange(1 << 20)), ctx)
    kept = to_host(on_device, memory_pool=pool)
    del on_device
    dropped = to_host(to_device(pa.array(np.arange(1 << 19)), ctx), memory_pool=pool)
    del dropped
    assert pinned_pool_stats(0)["cached_bytes"] >= 4 << 20
    reserved = pinned_pool_stats(0)["reserved_bytes"]
    assert arrow_gpu.trim(0) >= 4 << 20
    assert pinned_pool_stats(0)["cached_bytes"] == 0
    assert pinned_pool_stats(0)["reserved_bytes"] < reserved
    assert kept.to_numpy()[-1] == (1 << 20) - 1  # its pinned memory stayed
    del kept


@pytest.mark.skipif(not arrow_gpu.using_simulator(), reason="limits the simulator's pinned memory")
def test_with_no_pinned_memory_left_the_pool_serves_ordinary_memory(tmp_path):
    """Past the pinned memory the system grants, allocations come from the system allocator
    (counted), the data is the same, transfers stage it, and reads still work."""
    pq.write_table(pa.table({"x": np.arange(200_000)}), tmp_path / "t.parquet",
                   row_group_size=50_000)
    code = textwrap.dedent(
        f"""
        import gc
        import numpy as np, pyarrow as pa, pyarrow.dataset as ds
        import arrow_gpu
        from arrow_gpu.loading import read_parquet
        pool = arrow_gpu.pinned_memory_pool(0)
        held = [pa.allocate_buffer(1 << 20, memory_pool=pool) for _ in range(6)]
        stats = arrow_gpu.pinned_pool_stats(0)
        assert stats["pageable_allocations"] >= 2, stats
        assert stats["reserved_bytes"] <= 4 << 20, stats
        for buffer in held:
            np.frombuffer(buffer, dtype=np.uint8)[:] = 9
        data = pa.Array.from_buffers(pa.uint8(), 6 << 20, [None, pa.py_buffer(
            b"".join(buffer.to_pybytes() for buffer in held))])
        assert arrow_gpu.to_host(arrow_gpu.to_device(data)).equals(data)
        table = read_parquet({str(tmp_path / "t.parquet")!r}, decoders=2)
        assert arrow_gpu.to_host(table).equals(ds.dataset({str(tmp_path)!r}).to_table())
        del held, buffer, table
        gc.collect()
        assert pool.bytes_allocated() == 0
        print("ok")
        """
    )
    env = dict(os.environ, ARROW_GPU_SIMULATOR="1", ARROW_GPU_SIMULATOR_PINNED_MEMORY="4M")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
