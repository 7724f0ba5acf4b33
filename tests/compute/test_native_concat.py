"""The native concatenation plan of arrow_gpu.compute.combine_chunks and concat: flat
columns (fixed-width values, booleans, binary and strings, dictionaries sharing one
dictionary) joined in one native call, against pyarrow's results on the host; other types
keep the per-type walk of _compute/concat.py.
"""

import os
import subprocess
import sys
import textwrap
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest

import arrow_gpu
from arrow_gpu import _cuda, compute
from arrow_gpu._compute import concat as _concat
from arrow_gpu.transfer import to_device, to_host
from test_native_select import ROWS, flat_table

# Parts of a column: uneven, some empty, none starting on a byte boundary after the first.
CUTS = [0, 3, 3, 20, 21, 50, ROWS]


def native_only():
    """The per-type walk made to fail: what passes took the native plan."""
    return mock.patch.object(_concat, "_concat",
                             side_effect=AssertionError("took the per-type walk"))


def chunked(device, cuts=CUTS):
    """``device``'s one-chunk table cut into slices of its chunks (which share one
    dictionary, as slices do)."""
    return pa.table({name: pa.chunked_array(
        [compute.slice(column.chunk(0), a, b - a) for a, b in zip(cuts, cuts[1:])], column.type)
        for name, column in zip(device.column_names, device.columns)})


def assert_same(got, want):
    got = to_host(got)
    assert got.equals(want), (got, want)
    columns = got.columns if isinstance(got, (pa.Table, pa.RecordBatch)) else [got]
    for column in columns:
        column.validate(full=True)
    wants = want.columns if isinstance(want, (pa.Table, pa.RecordBatch)) else [want]
    assert [c.null_count for c in columns] == [c.null_count for c in wants]


@pytest.mark.parametrize("nulls", [False, True], ids=["no_nulls", "nulls"])
@pytest.mark.parametrize("offset", [0, 5], ids=["whole", "sliced"])
def test_every_flat_type_combines_and_concatenates_natively(ctx, nulls, offset):
    host = flat_table(ROWS + offset, nulls).slice(offset)  # offsets in values and bitmaps
    device = to_device(host)
    parts = chunked(device)
    with native_only():
        combined = compute.combine_chunks(parts)
        assert all(column.num_chunks == 1 for column in combined.columns)
        assert_same(combined, host.combine_chunks())
        for name in ("bool", "int32", "string", "large_binary", "dictionary"):
            assert_same(compute.combine_chunks(parts[name]), host[name].combine_chunks())
            got = compute.concat([parts[name], compute.slice(device[name].chunk(0), 3, 17)])
            assert_same(got, pa.concat_arrays([host[name].combine_chunks(),
                                               host[name].combine_chunks().slice(3, 17)]))
        batches = [compute.slice(device, a, b - a).to_batches()[0]
                   for a, b in zip(CUTS, CUTS[1:]) if b > a]
        got = compute.concat(batches)
        assert isinstance(got, pa.RecordBatch)
        assert_same(got, host.combine_chunks().to_batches()[0])
        got = compute.concat([parts, device, parts])  # tables of many chunks and of one
        assert all(column.num_chunks == 1 for column in got.columns)
        assert_same(got, pa.concat_tables([host, host, host]).combine_chunks())


def test_many_parts_and_empty_parts(ctx):
    host = flat_table(ROWS, True)
    device = to_device(host)
    cuts = [0, *[i for i in range(ROWS) for _ in range(3)], ROWS]  # 3 * ROWS parts, most empty
    with native_only():
        assert_same(compute.combine_chunks(chunked(device, cuts)), host.combine_chunks())
        empty = chunked(device, [0, 0, 0])
        assert_same(compute.combine_chunks(empty), host.slice(0, 0).combine_chunks())


def test_a_table_mixing_flat_and_nested_columns_takes_the_walk(ctx):
    host = pa.table({"i": pa.chunked_array([[1, None], [3]]),
                     "s": pa.chunked_array([["x", None], ["yz"]]),
                     "l": pa.chunked_array([[[1], None], [[2, 3]]])})
    with mock.patch.object(_concat, "_concat", wraps=_concat._concat) as walk:
        assert_same(compute.combine_chunks(to_device(host)), host.combine_chunks())
    assert walk.call_count >= 3


def test_dictionary_parts_of_different_dictionaries_take_the_walk(ctx):
    host = pa.chunked_array([pa.array(["a", "b"]).dictionary_encode(),
                             pa.array(["c"]).dictionary_encode()])
    with mock.patch.object(_concat, "_concat", wraps=_concat._concat) as walk:
        got = to_host(compute.combine_chunks(to_device(host)))
    assert walk.call_count >= 1
    assert got.to_pylist() == ["a", "b", "c"]


def test_strings_past_32_bit_offsets_are_an_overflow_error(ctx):
    # Offsets that claim more bytes than int32 addresses: refused once read, before any
    # byte is copied (so the parts need not hold them).
    offsets = ctx.buffer_from_data(np.array([0, 2**30 + 2**29], np.int32).tobytes())
    data = ctx.new_buffer(1)
    part = pa.Array.from_buffers(pa.string(), 1, [None, offsets, data], null_count=0)
    with pytest.raises(OverflowError, match="more than 32-bit offsets can address"):
        compute.combine_chunks(pa.chunked_array([part, part]))
    with pytest.raises(OverflowError, match="more than 32-bit offsets can address"):
        compute.concat([part, part])


@pytest.mark.skipif(not arrow_gpu.using_simulator(), reason="counts the simulator's calls")
def test_the_native_plan_waits_on_its_stream_only_and_reads_back_once_at_most(ctx):
    # Null counts the parts know are summed: a table of strings reads back only where its
    # parts' items start and end; unknown counts come back with the copies, in one read.
    host = flat_table(ROWS, True)
    parts = chunked(to_device(host))
    stream = arrow_gpu.Stream(ctx, non_blocking=True)
    synchronizations = _cuda._simulated_context_synchronizations()
    reads = _cuda._simulated_device_reads()
    with native_only():
        combined = compute.combine_chunks(parts, stream=stream)
        assert _cuda._simulated_device_reads() - reads == 1
        numbers = compute.combine_chunks(parts.select(["int32", "bool"]), stream=stream)
        assert _cuda._simulated_device_reads() - reads == 1
    assert _cuda._simulated_context_synchronizations() == synchronizations
    assert_same(combined, host.combine_chunks())
    assert_same(numbers, host.select(["int32", "bool"]).combine_chunks())


def test_running_out_of_memory_while_the_bounds_are_read_frees_what_was_planned():
    # The strings' bounds are read while the other columns are planned: an allocation that
    # fails then (the int64 column's, 2 MiB on a simulated device of 7 MiB) raises once the
    # read is in, with every buffer of the plan given back, and the device stays usable.
    code = textwrap.dedent("""
        import numpy as np, pyarrow as pa, arrow_gpu
        from arrow_gpu import compute, to_device, to_host
        ctx = arrow_gpu.Context(0)
        n = 1 << 18
        host = pa.table({"x": np.arange(n, dtype=np.int64), "s": pa.array(["a"] * n)})
        parts = to_device(pa.Table.from_batches(host.to_batches(max_chunksize=n // 2)))
        held = ctx.memory_stats()["bytes_allocated"]
        try:
            compute.combine_chunks(parts)
        except MemoryError as error:
            print(error)
        stats = ctx.memory_stats()
        print(stats["bytes_allocated"] - held, stats["live_allocations"])
        del parts
        arrow_gpu.trim()
        small = host.slice(0, 1000)
        chunks = to_device(pa.Table.from_batches(small.to_batches(max_chunksize=300)))
        print(to_host(compute.combine_chunks(chunks)).equals(small))
        """)
    env = dict(os.environ, ARROW_GPU_SIMULATOR="1", ARROW_GPU_SIMULATOR_MEMORY=str(7 << 20))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    error, leaked, usable = result.stdout.strip().splitlines()
    assert "could not allocate 2097152 bytes" in error
    assert leaked == "0 1"
    assert usable == "True"
