"""Loading benchmark: files and streams onto the device, against the targets each row names.

    python bench/load_bench.py --size 2GB     # on a GPU (a few minutes)
    ARROW_GPU_SIMULATOR=1 NUMBA_ENABLE_CUDASIM=1 python bench/load_bench.py   # smoke run

The benchmark writes its own data (a mixed-type table of about ``--size`` bytes) as a Parquet
dataset and as uncompressed, LZ4 and ZSTD Feather files in a temporary directory, and reads
each once before timing so the page cache is warm. For each it times, best of ``--runs``
rounds that run the three in turn (so that the host's drift moves all three alike): reading
into host memory alone; today's way (the whole table read, then ``to_device``); the
streamed way (``arrow_gpu.loading.read_parquet``/``read_ipc``, decode and copy overlapped); the
time to the first device batch against the time to read one batch; and the peak host bytes
held by Arrow's allocator and the pinned pool while streaming (sampled), in batches. The
Parquet dataset is also read with its decoders' output in ordinary memory, which the copy
engine must stage. The pinned memcpy peak is measured in the same run, as
``transfer_bench.py`` measures it. Last, 1,000 small batches through a DeviceReader against
1,000 ``to_device`` calls.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import tempfile
import threading
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.feather as feather

import arrow_gpu
from arrow_gpu import to_device
from arrow_gpu.loading import read_ipc, read_parquet
from arrow_gpu.streaming import DEFAULT_PREFETCH
from arrow_gpu.transfer_options import get_transfer_options

from _timing import best, best_alternating  # bench/_timing.py, beside this script
from transfer_bench import mixed_table, peaks  # the same data and the same bus peaks

MiB = 1 << 20
UNITS = {"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KIB": 1 << 10, "MIB": 1 << 20,
         "GIB": 1 << 30}


def parse_size(text: str) -> int:
    match = re.fullmatch(r"\s*([\d.]+)\s*([A-Za-z]*)\s*", text)
    if match is None or match.group(2).upper() not in UNITS:
        raise argparse.ArgumentTypeError(f"a size such as 64MB or 2GB, not {text!r}")
    return int(float(match.group(1)) * UNITS[match.group(2).upper()])


def host_allocated(pinned: pa.MemoryPool) -> int:
    """Bytes Arrow's default allocator and arrow_gpu's pinned pool hold now."""
    return pa.total_allocated_bytes() + pinned.bytes_allocated()


class HostPeak:
    """The most bytes Arrow's default allocator and the pinned pool held above where they
    started, sampled every half millisecond while the block runs (memory-mapped file pages
    are not allocations)."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._pinned = arrow_gpu.pinned_memory_pool(0)

    def _sample(self, start: int) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, host_allocated(self._pinned) - start)
            time.sleep(0.0005)

    def __enter__(self) -> HostPeak:
        self._thread = threading.Thread(target=self._sample,
                                        args=(host_allocated(self._pinned),))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def drain(reader) -> int:
    """Reads a reader to its end, dropping every batch; the rows read."""
    rows = 0
    for batch in reader:
        rows += batch.num_rows
    return rows


def fmt_time(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} µs"


def verdict(ok: bool) -> str:
    return "✓" if ok else "✗"


def write_parquet_dataset(directory: str, table: pa.Table, batch_rows: int) -> str:
    """``table`` as a Parquet dataset in ``directory``/parquet: row groups of ``batch_rows``
    rows, 8 per file. Returns its path."""
    dataset = os.path.join(directory, "parquet")
    ds.write_dataset(table, dataset, format="parquet", max_rows_per_group=batch_rows,
                     min_rows_per_group=batch_rows, max_rows_per_file=batch_rows * 8)
    return dataset


def write_data(directory: str, table: pa.Table, batch_rows: int) -> dict[str, str]:
    paths = {}
    dataset = write_parquet_dataset(directory, table, batch_rows)
    paths["Parquet dataset"] = dataset
    paths["Parquet dataset, decoded into ordinary memory"] = dataset
    for compression in ("uncompressed", "lz4", "zstd"):
        path = os.path.join(directory, f"{compression}.arrow")
        feather.write_feather(table, path, compression=compression, chunksize=batch_rows)
        paths[f"{compression} Feather" if compression == "uncompressed"
              else f"{compression.upper()} Feather"] = path
    return paths


def page_cache_peak(path: str, threads: int, runs: int, slot: int = 8 * MiB) -> float:
    """GB/s of ``threads`` threads reading the file (in the page cache) with pread into
    pinned memory, ``slot`` bytes per call, no DMA: the rate a file's bytes can reach the
    staging memory on this host, the limit of an uncompressed file's path to the device."""
    size = os.path.getsize(path)
    pinned = memoryview(arrow_gpu.new_host_buffer(threads * slot)).cast("B")
    fd = os.open(path, os.O_RDONLY)

    def read(first: int) -> None:
        own = pinned[first * slot:(first + 1) * slot]
        for offset in range(first * slot, size, threads * slot):
            os.preadv(fd, [own], offset)

    def all_threads() -> None:
        workers = [threading.Thread(target=read, args=(k,)) for k in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    try:
        return size / best(all_threads, runs) / 1e9
    finally:
        os.close(fd)


def host_read(name: str, path: str) -> Callable[[], pa.Table]:
    if name.startswith("Parquet dataset"):
        return lambda: ds.dataset(path, format="parquet").to_table()
    return lambda: feather.read_table(path)


def host_first_batch(name: str, path: str) -> Callable[[], object]:
    if name.startswith("Parquet dataset"):
        return lambda: ds.dataset(path, format="parquet").scanner().to_reader().read_next_batch()
    return lambda: pa.ipc.open_file(pa.memory_map(path)).get_batch(0)


def streamed(name: str, path: str, stream: bool = False):
    if name.startswith("Parquet dataset"):  # the decoders' output staged, for comparison
        options = {"memory_pool": pa.default_memory_pool()} if "ordinary" in name else {}
        return read_parquet(path, stream=stream, **options)
    return read_ipc(path, stream=stream)


def first_device_batch(name: str, path: str, runs: int) -> tuple[float, float]:
    """Best times, over ``runs`` after a warm-up, from opening a streamed read to its first
    device batch in hand, and of closing it then (the readers' read-ahead winding down)."""
    firsts, closes = [], []
    for run in range(runs + 1):
        start = time.perf_counter()
        reader = streamed(name, path, stream=True)
        next(reader)
        opened = time.perf_counter()
        reader.close()
        if run:
            firsts.append(opened - start)
            closes.append(time.perf_counter() - opened)
    return min(firsts), min(closes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("32MB"),
                        help="bytes of data to make (default 32MB, a smoke run; ≥ 1GB to "
                             "compare with the targets)")
    parser.add_argument("--batch-rows", type=int, default=None,
                        help="rows per batch / row group (default: about 64 batches)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each (best kept)")
    parser.add_argument("--dir", default=None, help="where to write the data (default: a "
                        "temporary directory, removed at the end)")
    args = parser.parse_args()
    ctx = arrow_gpu.Context(0)
    table = mixed_table(args.size)
    size = table.nbytes
    batch_rows = args.batch_rows or max(1024, table.num_rows // 64)
    batch_bytes = size * batch_rows / table.num_rows
    peak = peaks(ctx, min(256 * MiB, max(4 * MiB, size // 4)), max(args.runs, 3))["pinned H→D"]

    print(f"# arrow_gpu load benchmark\n\n{datetime.date.today()} · "
          f"{'simulator' if arrow_gpu.using_simulator() else 'GPU'} · Python "
          f"{platform.python_version()} · pyarrow {pa.__version__} · {os.cpu_count()} cores · "
          f"{size / MiB:.0f} MiB in {table.num_rows // batch_rows} batches of {batch_rows} rows "
          f"· prefetch {DEFAULT_PREFETCH} · engine options {get_transfer_options()} · pinned "
          f"H→D peak {peak:.1f} GB/s\n")
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        paths = write_data(directory, table, batch_rows)
        del table
        for name, path in paths.items():
            assert host_read(name, path)().num_rows == streamed(name, path).num_rows  # warm
            host, today, ours = best_alternating(
                [host_read(name, path), lambda: to_device(host_read(name, path)()),
                 lambda: streamed(name, path)], args.runs)
            first_host = best(host_first_batch(name, path), args.runs)

            first, close = first_device_batch(name, path, args.runs)
            with HostPeak() as held:
                drain(streamed(name, path, stream=True))
            gbps = size / ours / 1e9
            first_ok = ""  # the first-batch target is for Parquet
            if name.startswith("Parquet dataset"):
                target, ok = "≥ 0.97 × host-only scan", host / ours >= 0.97
                first_ok = " " + verdict(first <= 2 * first_host)
                result = f"{host / ours:.2f} × host"
            elif name == "uncompressed Feather":
                target, ok = "≥ 0.8 × pinned peak", gbps / peak >= 0.8
                reads = page_cache_peak(path, get_transfer_options()["threads"] or 12, args.runs)
                result = f"{gbps / peak:.2f} × peak (pread alone {reads / peak:.2f} ×)"
            else:
                target, ok = "≥ 1.5 × read_table + to_device", today / ours >= 1.5
                result = f"{today / ours:.2f} × today"
            rows.append([name, f"{size / host / 1e9:.2f}", f"{size / today / 1e9:.2f}",
                         f"{gbps:.2f}", target, f"{result} {verdict(ok)}",
                         f"{fmt_time(first)} vs {fmt_time(first_host)}{first_ok}",
                         fmt_time(close),
                         f"{held.peak / batch_bytes:.1f} "
                         f"{verdict(held.peak <= (DEFAULT_PREFETCH + 1) * batch_bytes)}"])

    print("## Files onto the device (GB/s of Arrow data, best of runs)\n")
    print("| source | host read only | today: read all, then `to_device` | streamed | target "
          "| result | first device batch in hand vs one host batch (Parquet: ≤ 2×) "
          "| closing the reader then | peak host batches held, pyarrow's read-ahead "
          f"included (≤ {DEFAULT_PREFETCH + 1}) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")

    small = [pa.record_batch({"i": np.arange(8, dtype=np.int64) + n, "f": np.ones(8)})
             for n in range(1000)]
    calls = best(lambda: [to_device(batch) for batch in small], args.runs)
    reader = best(lambda: drain(to_device(iter(small))), args.runs)
    print("\n## 1,000 small batches (8 rows of int64 and float64)\n")
    print("| way | time | per batch | target | result |\n|---|---|---|---|---|")
    print(f"| 1,000 `to_device` calls | {fmt_time(calls)} | {fmt_time(calls / 1000)} |  |  |")
    print(f"| one DeviceReader | {fmt_time(reader)} | {fmt_time(reader / 1000)} | ≤ 2 × calls | "
          f"{reader / calls:.2f} × {verdict(reader <= 2 * calls)} |")
    if arrow_gpu.using_simulator():
        print("\n(simulator: the numbers say nothing about a GPU)")


if __name__ == "__main__":
    main()
