"""Parquet decoders benchmark: ``read_parquet(path, decoders=k)`` against the dataset's scan.

    python bench/parquet_decoders_bench.py --size 2GB      # on a GPU
    ARROW_GPU_SIMULATOR=1 python bench/parquet_decoders_bench.py --size 8MB   # smoke run

The data is load_bench's: a mixed table of about ``--size`` bytes written as a Parquet
dataset of 64 row groups, 8 per file, in the page cache. For each ``k`` it times
``read_parquet`` onto the device (best of ``--runs``) against the dataset's own host scan
``to_table()`` (timed before and after the sweep, in the same process), and samples the
host memory Arrow's allocator held while one read ran, in row groups.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import pyarrow.dataset as ds

import arrow_gpu
from arrow_gpu.loading import read_parquet

from _timing import best  # bench/_timing.py, beside this script
from load_bench import HostPeak, parse_size, write_parquet_dataset
from transfer_bench import mixed_table

ROW_GROUPS = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("2GB"))
    parser.add_argument("--decoders", type=int, nargs="+", default=[4, 8, 12, 16])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    table = mixed_table(args.size)
    size, rows = table.nbytes, max(1024, table.num_rows // ROW_GROUPS)
    with tempfile.TemporaryDirectory() as directory:
        path = write_parquet_dataset(directory, table, rows)
        del table
        arrow_gpu.Context(0)
        row_group_bytes = size / ROW_GROUPS

        def scan() -> float:
            return best(lambda: ds.dataset(path, format="parquet").to_table(), args.runs)

        before = scan()
        lines = []
        for decoders in args.decoders:
            seconds = best(lambda: read_parquet(path, decoders=decoders), args.runs)
            with HostPeak() as held:
                read_parquet(path, decoders=decoders)
            lines.append(f"| {decoders} | {size / seconds / 1e9:.2f} | {before / seconds:.2f} × "
                         f"| {held.peak / row_group_bytes:.1f} |")
        after = scan()
    print(f"{'simulator' if arrow_gpu.using_simulator() else 'GPU'} · {os.cpu_count()} cores · "
          f"{size / 1e9:.2f} GB in {ROW_GROUPS} row groups · the dataset's host to_table() "
          f"{size / before / 1e9:.2f} GB/s before, {size / after / 1e9:.2f} after\n")
    print("| decoders | GB/s onto the device | against to_table() | peak row groups held |")
    print("|---|---|---|---|")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
