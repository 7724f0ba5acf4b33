"""Parquet decoded into pinned memory: column chunks decoded by many threads, each piece
copied to the device as it is decoded, with the decoders' output in Arrow's default pool
(copies staged) or in arrow_gpu's pinned pool (copies by DMA alone), whole or in pieces,
against ``read_parquet`` (its Table, and its reader's ``read_all()``) and the dataset's own
host scan.

    python bench/parquet_pool_bench.py --size 2GB      # on a GPU
    ARROW_GPU_SIMULATOR=1 python bench/parquet_pool_bench.py --size 8MB   # smoke run

Same data as load_bench (a mixed table written as a dataset of 64 row groups, 8 per file, in
the page cache). Ways are timed in rounds, alternating, best of ``--runs`` each, against the
dataset's host ``to_table()`` of the same round; host memory held (Arrow's default pool plus
the pinned pool, sampled, as load_bench samples it) is given in row groups.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import tempfile
import threading

import pyarrow as pa
import pyarrow.dataset as ds
from pyarrow._parquet import ParquetReader

import arrow_gpu
from arrow_gpu import pinned_memory_pool, to_device
from arrow_gpu.loading import read_parquet

from _timing import best  # bench/_timing.py, beside this script
from load_bench import HostPeak, parse_size, write_parquet_dataset
from transfer_bench import mixed_table

ROW_GROUPS = 64
PIECE_ROWS = 131_072


def by_hand(path: str, decoders: int, pieces: int | None, pool: pa.MemoryPool | None) -> int:
    """Every (row group, column) decoded by ``decoders`` threads, each piece (of ``pieces``
    rows, or the whole column chunk) copied to the device at once, by pyarrow.parquet's
    reader opened with ``pool``."""
    dataset = ds.dataset(path, format="parquet")
    names = dataset.schema.names
    tasks = []
    for fragment in dataset.get_fragments():
        for index in range(fragment.num_row_groups):
            tasks += [(fragment, index, name) for name in names]
    local = threading.local()

    def reader_of(fragment_path: str):
        readers = getattr(local, "readers", None)
        if readers is None:
            readers = local.readers = {}
        if fragment_path not in readers:
            reader = ParquetReader(memory_pool=pool)
            reader.open(fragment_path, use_memory_map=True)
            readers[fragment_path] = reader
        return readers[fragment_path]

    def run(task):
        fragment, index, name = task
        copied = []
        reader = reader_of(fragment.path)
        column = [reader.column_name_idx(name)]
        if pieces:
            for batch in reader.iter_batches(pieces, [index], column_indices=column,
                                             use_threads=False):
                copied.append(to_device(batch.column(0)))
        else:
            table = reader.read_row_group(index, column_indices=column, use_threads=False)
            copied.extend(to_device(chunk) for chunk in table.column(0).chunks)
        return sum(len(a) for a in copied)

    with concurrent.futures.ThreadPoolExecutor(decoders) as executor:
        return sum(executor.map(run, tasks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("2GB"))
    parser.add_argument("--decoders", type=int, default=min(16, os.cpu_count() or 4))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    table = mixed_table(args.size)
    size, rows = table.nbytes, max(1024, table.num_rows // ROW_GROUPS)
    pinned = pinned_memory_pool(0)
    with tempfile.TemporaryDirectory() as directory:
        path = write_parquet_dataset(directory, table, rows)
        del table
        arrow_gpu.Context(0)
        row_group_bytes = size / ROW_GROUPS
        def through_reader() -> pa.Table:  # the Table gathered by a DeviceReader's thread
            with read_parquet(path, stream=True, decoders=args.decoders) as reader:
                return reader.read_all()

        ways = {
            "read_parquet": lambda: read_parquet(path, decoders=args.decoders),
            "read_parquet(stream=True).read_all()": through_reader,
            "read_parquet, ordinary memory": lambda: read_parquet(
                path, decoders=args.decoders, memory_pool=pa.default_memory_pool()),
        }
        for pieces in (None, PIECE_ROWS, PIECE_ROWS // 2):
            for pool_name, pool in (("default pool", None), ("pinned pool", pinned)):
                if pieces == PIECE_ROWS // 2 and pool is None:
                    continue
                ways[f"by hand, {f'pieces of {pieces:,} rows' if pieces else 'whole'}, "
                     f"{pool_name}"] = (lambda pieces=pieces, pool=pool:
                                        by_hand(path, args.decoders, pieces, pool))
        print(f"{'simulator' if arrow_gpu.using_simulator() else 'GPU'} · {os.cpu_count()} cores "
              f"· {size / 1e9:.2f} GB in {ROW_GROUPS} row groups · {args.decoders} decoders\n")
        print("| round | way | GB/s | against to_table() | peak row groups held |")
        print("|---|---|---|---|---|")
        for round_ in range(args.rounds):
            scan = best(lambda: ds.dataset(path, format="parquet").to_table(), args.runs)
            print(f"| {round_ + 1} | to_table() | {size / scan / 1e9:.2f} | 1.00 × | |",
                  flush=True)
            order = list(ways.items())
            for name, way in (order if round_ % 2 == 0 else order[::-1]):
                seconds = best(way, args.runs)
                with HostPeak() as held:
                    way()
                print(f"| {round_ + 1} | {name} | {size / seconds / 1e9:.2f} | "
                      f"{scan / seconds:.2f} × | {held.peak / row_group_bytes:.1f} |", flush=True)
        print(f"\npinned pool: {arrow_gpu.pinned_pool_stats(0)}")


if __name__ == "__main__":
    main()
