"""Device compute benchmark: arrow_gpu.compute against its targets.

    python bench/compute_bench.py            # on a GPU: a 1 GiB mixed table
    ARROW_GPU_SIMULATOR=1 python bench/compute_bench.py --quick   # a smoke run anywhere

On one mixed table (int64, float64, nullable int32, bool, strings with nulls, dictionary),
in the same run: ``filter`` at 50 % selectivity and ``take`` of random indices, as GB/s of
bytes read plus written against the device's D2D copy bandwidth (a ``copy_from_device`` of
as many bytes, also counted read plus written) and against pyarrow's host ``filter`` /
``take`` of the same table; the same for string columns of longer rows (up to 100, 400 and
3,000 bytes each); ``combine_chunks`` of 100 chunks; ``null_count`` of 10^8 rows;
``filter`` and ``take`` of the fixed-width columns (validity included) against CuPy's
boolean and fancy indexing and PyTorch's ``masked_select`` of their values (where
installed); and the first call's compile cost, cold (empty kernel and driver caches)
and cached, each in a fresh process. Every result is checked against pyarrow on the host.

Small calls, on a 1,000-row table (int64, float64, nullable int32), result ready: ``filter``,
``take``, ``concat`` of 10 chunks and ``null_count`` of one column, in microseconds, beside
CuPy's fancy-index take and PyTorch's ``masked_select`` of the same columns; and one
``filter`` on its own non-blocking stream while another library's stream has a second of
work queued (a call that waited for it would take that second).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

import arrow_gpu
from arrow_gpu import compute, to_device, to_host
from arrow_gpu.interop import as_cuda_array

from _timing import best  # bench/_timing.py, beside this script
from transfer_bench import random_strings

GiB = 1 << 30

try:
    import cupy
except ImportError:
    cupy = None


def nbytes(data) -> int:
    columns = data.columns if isinstance(data, (pa.Table, pa.RecordBatch)) else [data]
    total = 0
    for column in columns:
        for chunk in getattr(column, "chunks", [column]):
            total += sum(b.size for b in chunk.buffers() if b is not None)
    return total


def mixed_table(target_bytes: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    rows = max(64, target_bytes // 45)
    valid = rng.random(rows) > 0.1
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    strings = random_strings(rng, rows, 16, bitmap)
    ints = pa.Array.from_buffers(pa.int32(), rows, [bitmap, pa.py_buffer(
        rng.integers(-1000, 1000, rows, dtype=np.int32))])
    dictionary = pa.DictionaryArray.from_arrays(
        pa.array(rng.integers(0, 100, rows, dtype=np.int32)),
        pa.array([f"v{i}" for i in range(100)]))
    return pa.table({"i64": rng.integers(0, 1 << 40, rows, dtype=np.int64),
                     "f64": rng.random(rows), "i32": ints, "flag": pa.array(valid),
                     "s": strings, "dict": dictionary})


def string_column(target_bytes: int, longest: int, seed: int = 0) -> pa.Array:
    """Strings of 0 to ``longest`` bytes each, about ``target_bytes`` of them, a tenth null."""
    rng = np.random.default_rng(seed)
    rows = max(64, target_bytes // (longest // 2 + 4))
    bitmap = pa.py_buffer(np.packbits(rng.random(rows) > 0.1, bitorder="little"))
    return random_strings(rng, rows, longest, bitmap)


def copy_bandwidth(ctx, size: int, repeat: int) -> float:
    """D2D bytes read plus written per second, one ``copy_from_device`` of ``size`` bytes."""
    src, dst = ctx.new_buffer(size), ctx.new_buffer(size)

    def copy():
        dst.copy_from_device(src)
        ctx.synchronize()

    return 2 * size / best(copy, repeat)


COMPILE_PROBE = """
import time, pyarrow as pa
from arrow_gpu import compute, to_device
from arrow_gpu._compute import kernels
data, rows = to_device(pa.array([1, 2, 3])), to_device(pa.array([2, 0]))
start = time.perf_counter()
compute.take(data, rows)
report = kernels.last_compile()
print(time.perf_counter() - start, report.seconds if report else 0.0)
"""


def compile_cost() -> tuple[tuple[float, float], tuple[float, float]]:
    """The first call's seconds in a fresh process, with an empty cache, then a warm one:
    each as the whole call and the part of it that made or read the kernels' images (the
    rest is the driver's loading of them: of PTX, a compile its own cache may shorten)."""
    with tempfile.TemporaryDirectory() as cache:
        # Nor the driver's cache: a fresh machine's first call, whatever ran on this one.
        env = dict(os.environ, XDG_CACHE_HOME=cache, CUDA_CACHE_DISABLE="1")
        seconds = []
        for _ in range(2):
            out = subprocess.run([sys.executable, "-c", COMPILE_PROBE], env=env, check=True,
                                 capture_output=True, text=True).stdout.split()
            seconds.append((float(out[0]), float(out[1])))
    return seconds[0], seconds[1]


def fixed_width_peers(table, host_mask, mask, host_rows, rows, ctx, repeat: int) -> list[str]:
    """Rows for ``filter`` and ``take`` of the fixed-width columns (int64, float64, nullable
    int32) beside CuPy's and PyTorch's of the same values, each library's result ready."""
    names = ("i64", "f64", "i32")
    fixed = table.select(list(names))
    ours_filter = best(lambda: (compute.filter(fixed, mask), ctx.synchronize()), repeat)
    ours_take = best(lambda: (compute.take(fixed, rows), ctx.synchronize()), repeat)
    arrays = [as_cuda_array(table[name].chunk(0), ignore_validity=True) for name in names]
    lines = []
    if cupy is not None:
        columns = [cupy.asarray(array) for array in arrays]
        cupy_mask = cupy.asarray(np.asarray(host_mask))
        positions = cupy.asarray(np.asarray(host_rows))
        sync = cupy.cuda.get_current_stream().synchronize
        theirs = best(lambda: ([c[cupy_mask] for c in columns], sync()), repeat)
        lines.append(row("filter of fixed-width columns vs CuPy boolean indexing",
                         f"{theirs / ours_filter:.2f}x", "> 1x", theirs > ours_filter))
        theirs = best(lambda: ([c[positions] for c in columns], sync()), repeat)
        lines.append(row("take of fixed-width columns (validity too) vs CuPy fancy indexing",
                         f"{theirs / ours_take:.2f}x", ">= 1x", theirs >= ours_take))
    try:
        import torch
    except ImportError:
        return lines
    tensors = [torch.from_dlpack(array) for array in arrays]
    torch_mask = torch.tensor(np.asarray(host_mask), device="cuda")
    theirs = best(lambda: ([torch.masked_select(t, torch_mask) for t in tensors],
                           torch.cuda.synchronize()), repeat)
    lines.append(row("filter of fixed-width columns vs PyTorch masked_select",
                     f"{theirs / ours_filter:.2f}x", ">= 1.5x", theirs >= 1.5 * ours_filter))
    return lines


def small_calls(ctx, repeat: int, kernels: bool) -> list[str]:
    """Rows for calls on a 1,000-row table, in microseconds, beside CuPy's and PyTorch's."""
    rng = np.random.default_rng(2)
    rows = 1000
    host = pa.table({"i64": rng.integers(0, 1 << 40, rows), "f64": rng.random(rows),
                     "i32": pa.array(rng.integers(0, 100, rows, dtype=np.int32),
                                     mask=rng.random(rows) < 0.1)})
    table = to_device(host)
    host_mask = pa.array(rng.random(rows) < 0.5)
    host_rows = pa.array(rng.integers(0, rows, rows))
    mask, indices = to_device(host_mask), to_device(host_rows)
    chunks = to_device(pa.Table.from_batches(host.to_batches(max_chunksize=rows // 10)))
    column = table["i32"]
    # The same column with its null count unknown, as a foreign producer may hand it over:
    # counted on the device at each call, where the column above holds its count.
    # (An Array: a ChunkedArray counts its chunks' nulls when it is made.)
    uncounted = pa.Array.from_buffers(pa.int32(), rows, column.chunk(0).buffers(),
                                      offset=column.chunk(0).offset)
    host_strings = string_column(rows * 54, 100)  # 1,000 strings of 0-100 bytes
    host_string_mask = pa.array(rng.random(len(host_strings)) < 0.5)
    strings, string_mask = to_device(host_strings), to_device(host_string_mask)
    assert to_host(compute.filter(table, mask)).equals(host.filter(host_mask))
    assert to_host(compute.take(table, indices)).equals(host.take(host_rows))
    assert to_host(compute.combine_chunks(chunks)).equals(host)
    assert compute.null_count(column) == host["i32"].null_count
    assert compute.null_count(uncounted) == host["i32"].null_count
    assert to_host(compute.filter(strings, string_mask)).equals(
        host_strings.filter(host_string_mask))
    lines = []
    for name, op, target in (("filter", lambda: compute.filter(table, mask), 60),
                             ("take", lambda: compute.take(table, indices), 60),
                             ("concat of 10 chunks", lambda: compute.combine_chunks(chunks), 100),
                             ("null_count of one column", lambda: compute.null_count(column), 20),
                             ("null_count of one column, its count unknown",
                              lambda: compute.null_count(uncounted), 20),
                             ("filter of strings of 0-100 bytes",
                              lambda: compute.filter(strings, string_mask), None)):
        seconds = best(op, repeat)  # each call's result is ready when it returns
        lines.append(row(f"1,000 rows: {name}", f"{seconds * 1e6:.0f} us",
                         f"<= {target} us" if target else "reported",
                         seconds <= target * 1e-6 if kernels and target else None))
    if not kernels:
        return lines
    if cupy is not None:
        columns = [cupy.asarray(as_cuda_array(table[name].chunk(0), ignore_validity=True))
                   for name in ("i64", "f64", "i32")]
        positions = cupy.asarray(np.asarray(host_rows))
        seconds = best(lambda: ([c[positions] for c in columns],
                                cupy.cuda.get_current_stream().synchronize()), repeat)
        lines.append(row("1,000 rows: CuPy fancy-index take, 3 columns",
                         f"{seconds * 1e6:.0f} us", "peer", None))
    try:
        import torch
    except ImportError:
        return lines
    tensors = [torch.from_dlpack(as_cuda_array(table[name].chunk(0), ignore_validity=True))
               for name in ("i64", "f64", "i32")]
    torch_mask = torch.tensor(np.asarray(host_mask), device="cuda")
    seconds = best(lambda: ([torch.masked_select(t, torch_mask) for t in tensors],
                            torch.cuda.synchronize()), repeat)
    lines.append(row("1,000 rows: PyTorch masked_select, 3 columns", f"{seconds * 1e6:.0f} us",
                     "peer", None))
    mine = arrow_gpu.Stream(ctx, non_blocking=True)
    compute.filter(table, mask, stream=mine)

    def busy_torch() -> Callable[[], bool]:
        busy = torch.cuda.Stream()
        with torch.cuda.stream(busy):
            torch.cuda._sleep(int(2e9))  # about a second of another library's work
        return busy.query

    busy_streams = [("another stream busy 1 s", busy_torch)]
    if cupy is not None:
        spin = cupy.RawKernel(SPIN, "spin")

        def busy_cupy() -> Callable[[], bool]:
            busy = cupy.cuda.Stream()  # blocking: the legacy default stream waits for it
            with busy:
                spin((1,), (1,), (cupy.int64(2_000_000_000),))
            return lambda: bool(busy.done)

        busy_streams.append(("a blocking CuPy stream busy 1 s", busy_cupy))
    for label, make_busy in busy_streams:
        done = make_busy()
        start = time.perf_counter()
        compute.filter(table, mask, stream=mine)
        seconds = time.perf_counter() - start
        waited = done()
        ctx.synchronize()
        lines.append(row(f"1,000 rows: filter on its own stream, {label}",
                         f"{seconds * 1e3:.2f} ms", "<= 1 ms", seconds <= 1e-3 and not waited))
    return lines


SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}
"""


def row(name: str, value: str, target: str, met: bool | None) -> str:
    verdict = "" if met is None else ("met" if met else "**missed**")
    return f"| {name} | {value} | {target} | {verdict} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    args = parser.parse_args()
    size = (1 << 20) if args.quick else GiB
    null_rows = 10_000 if args.quick else 10**8
    repeat = 1 if args.quick else 5
    ctx = arrow_gpu.Context(0)
    kernels = not arrow_gpu.using_simulator()

    host = mixed_table(size)
    table = to_device(host)
    table_bytes = nbytes(host)
    rng = np.random.default_rng(1)
    host_mask = pa.array(rng.random(host.num_rows) < 0.5)
    host_rows = pa.array(rng.integers(0, host.num_rows, host.num_rows))
    mask, rows = to_device(host_mask), to_device(host_rows)

    peak = copy_bandwidth(ctx, table_bytes, repeat)
    lines = ["| workload | arrow_gpu | target | |", "|---|---|---|---|",
             row("D2D copy (read + written)", f"{peak / 1e9:.1f} GB/s", "", None)]

    for name, device_op, host_op in (
            ("filter 50 %", lambda: compute.filter(table, mask), lambda: host.filter(host_mask)),
            ("take random", lambda: compute.take(table, rows), lambda: host.take(host_rows))):
        result = device_op()
        expected = host_op()
        assert to_host(result).equals(expected.combine_chunks()), name
        moved = table_bytes + nbytes(expected)  # read + written
        seconds = best(lambda: (device_op(), ctx.synchronize()), repeat)
        host_seconds = best(host_op, 1 if args.quick else 3)
        rate = moved / seconds
        wanted = 0.5 if name.startswith("filter") else None  # a random take: reported
        lines.append(row(f"{name}: vs copy", f"{rate / 1e9:.1f} GB/s ({rate / peak:.2f}x)",
                         f">= {wanted}x copy" if wanted else "reported",
                         rate >= wanted * peak if kernels and wanted else None))
        lines.append(row(f"{name}: vs pyarrow host", f"{host_seconds / seconds:.1f}x",
                         ">= 20x", host_seconds / seconds >= 20 if kernels else None))

    for longest in (100, 400, 3000):
        strings = string_column(size // 4, longest)
        selections = (("filter 50 %", compute.filter, pa.array(rng.random(len(strings)) < 0.5),
                       strings.filter),
                      ("take random", compute.take,
                       pa.array(rng.integers(0, len(strings), len(strings))), strings.take))
        on_device = to_device(strings)
        for name, device_op, selection, host_op in selections:
            expected = host_op(selection)
            selection = to_device(selection)
            assert to_host(device_op(on_device, selection)).equals(expected), (name, longest)
            seconds = best(lambda: (device_op(on_device, selection), ctx.synchronize()), repeat)
            rate = (nbytes(strings) + nbytes(expected)) / seconds
            lines.append(row(f"{name}, strings of 0-{longest} bytes",
                             f"{rate / 1e9:.1f} GB/s ({rate / peak:.2f}x)", ">= 0.3x copy",
                             rate >= 0.3 * peak if kernels else None))
        del on_device

    chunked = to_device(pa.Table.from_batches(host.to_batches(
        max_chunksize=-(-host.num_rows // 100))))
    combined = compute.combine_chunks(chunked)
    assert to_host(combined).equals(host)
    seconds = best(lambda: (compute.combine_chunks(chunked), ctx.synchronize()), repeat)
    rate = 2 * table_bytes / seconds
    lines.append(row("concat 100 chunks", f"{rate / 1e9:.1f} GB/s ({rate / peak:.2f}x)",
                     ">= 0.6x copy", rate >= 0.6 * peak if kernels else None))

    counted = to_device(pa.array(np.zeros(null_rows, np.int8),
                                 mask=rng.random(null_rows) < 0.1))
    # Its count unknown, so that the device counts it: a count an array holds is returned.
    flags = pa.Array.from_buffers(counted.type, len(counted), counted.buffers())
    expected_nulls = to_host(flags).null_count
    assert compute.null_count(flags) == expected_nulls
    seconds = best(lambda: compute.null_count(flags), repeat)
    lines.append(row(f"null_count of {null_rows:,} rows", f"{seconds * 1e3:.3f} ms",
                     "<= 1 ms", seconds <= 1e-3 if kernels else None))

    if kernels:
        lines += fixed_width_peers(table, host_mask, mask, host_rows, rows, ctx, repeat)

    lines += small_calls(ctx, 20 if args.quick else 2000, kernels)

    if kernels:
        cold, cached = compile_cost()
        lines.append(row("first call, empty kernel cache (NVRTC's compile)",
                         f"{cold[0] * 1e3:.0f} ms ({cold[1] * 1e3:.0f} ms)", "reported", None))
        lines.append(row("first call, cached kernels (their read)",
                         f"{cached[0] * 1e3:.0f} ms ({cached[1] * 1e3:.0f} ms)", "reported",
                         None))

    print(f"arrow_gpu {arrow_gpu.__version__}, pyarrow {pa.__version__}, "
          f"{'GPU kernels' if kernels else 'simulator (host twins of the kernels)'}, "
          f"table {table_bytes / 1e9:.3f} GB, {host.num_rows:,} rows")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
