"""Two builds of arrow_gpu side by side: the same workloads in alternating fresh processes.

One machine's speed drifts from minute to minute, so comparing a change means running the old
and the new build in the same run, one fresh process each in turn, several rounds:

    python bench/ab_compare.py --build before=/path/to/old/tree --build after=. [--rounds 4]
    python bench/ab_compare.py --build before=... --build after=. --loading 2GB  # + files
    python bench/ab_compare.py --build before=... --build after=. --compute  # + compute
    ARROW_GPU_SIMULATOR=1 python bench/ab_compare.py --build a=. --build b=. --rounds 1 --quick

Each path is a source tree with the extension built in place; a worker process imports
arrow_gpu from it and times the public API as users call it (``to_device`` / ``to_host``,
the capsule round trip of the C Device Data Interface), frees included. With ``--loading``,
it also reads load_bench's data (written once, in the page cache) onto the device from an
uncompressed Feather file (``read_ipc``) and a Parquet dataset (``read_parquet``, with the
host memory it held, in row groups). With ``--compute``, it times ``compute_bench``'s
concatenation of 100 chunks and 50 % filter, and a filter and a take of longer strings,
beside the device copy. Each cell is the median over the rounds of each process's best /
median run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MiB = 1 << 20
RUNS = 15  # per large workload and process
CALLS = 2000  # per small call and process


def _times(call, runs: int) -> list[float]:
    call()  # warm-up: the first call's cost is transfer_bench's "cold" figure
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return samples


def loading(data: str) -> dict[str, list[float]]:
    """read_ipc and read_parquet of the files in ``data`` (see ``write_loading_data``)."""
    import arrow_gpu
    from arrow_gpu.loading import read_ipc, read_parquet
    from load_bench import HostPeak

    size = int(Path(data, "bytes").read_text())
    feather, dataset = str(Path(data, "uncompressed.arrow")), str(Path(data, "parquet"))
    results: dict[str, list[float]] = {}
    for label, call in (("uncompressed Feather file → device", lambda: read_ipc(feather)),
                        ("Parquet dataset → device", lambda: read_parquet(dataset))):
        samples = _times(call, 5)
        results[f"{label} (GB/s)"] = [size / min(samples) / 1e9,
                                      size / statistics.median(samples) / 1e9]
    with HostPeak() as held:
        read_parquet(dataset)
    row_groups = held.peak / (size / LOADING_ROW_GROUPS)
    results["Parquet: peak host memory held (row groups)"] = [row_groups, row_groups]
    arrow_gpu.trim()
    return results


def compute(quick: bool) -> dict[str, list[float]]:
    """compute_bench's workloads on the device: ``combine_chunks`` of the mixed table in 100
    chunks, a 50 % ``filter`` of it whole, and a 50 % ``filter`` and a random ``take`` of
    256 MiB of strings of 0-100 bytes (ms, the device synchronized after each); and the
    device copy of the table's bytes (GB/s, read + written)."""
    import numpy as np
    import pyarrow as pa

    import arrow_gpu
    from arrow_gpu import compute, to_device
    from compute_bench import string_column
    from transfer_bench import mixed_table

    ctx = arrow_gpu.Context(0)
    host = mixed_table(32 * MiB if quick else 1 << 30)
    chunked = to_device(pa.Table.from_batches(host.to_batches(
        max_chunksize=-(-host.num_rows // 100))))
    table = to_device(host)
    mask = to_device(pa.array(np.random.default_rng(1).random(host.num_rows) < 0.5))
    src, dst = ctx.new_buffer(host.nbytes), ctx.new_buffer(host.nbytes)
    results: dict[str, list[float]] = {}
    samples = _times(lambda: (dst.copy_from_device(src), ctx.synchronize()), RUNS)
    results["device copy (GB/s)"] = [2 * host.nbytes / min(samples) / 1e9,
                                     2 * host.nbytes / statistics.median(samples) / 1e9]
    strings = to_device(string_column(32 * MiB if quick else 256 * MiB, 100))
    string_mask = to_device(pa.array(np.random.default_rng(2).random(len(strings)) < 0.5))
    string_rows = to_device(pa.array(np.random.default_rng(3).integers(0, len(strings),
                                                                         len(strings))))
    for label, call in (("combine_chunks of 100 chunks", lambda: compute.combine_chunks(chunked)),
                        ("filter 50 %", lambda: compute.filter(table, mask)),
                        ("filter 50 % of 0-100-byte strings",
                         lambda: compute.filter(strings, string_mask)),
                        ("take of 0-100-byte strings", lambda: compute.take(strings, string_rows))):
        samples = _times(lambda: (call(), ctx.synchronize()), RUNS)
        results[f"{label} (ms)"] = [min(samples) * 1e3, statistics.median(samples) * 1e3]
    del chunked, table, mask, strings, string_mask, string_rows, src, dst
    arrow_gpu.trim()
    return results


LOADING_ROW_GROUPS = 64


def write_loading_data(data: str, size: int) -> None:
    """load_bench's mixed table of about ``size`` bytes, as an uncompressed Feather file and
    a Parquet dataset of 64 row groups, 8 per file."""
    sys.path.insert(0, str(HERE))
    import pyarrow.dataset as ds
    import pyarrow.feather as feather
    from transfer_bench import mixed_table

    table = mixed_table(size)
    rows = max(1024, table.num_rows // LOADING_ROW_GROUPS)
    ds.write_dataset(table, str(Path(data, "parquet")), format="parquet",
                     max_rows_per_group=rows, min_rows_per_group=rows,
                     max_rows_per_file=rows * 8)
    feather.write_feather(table, str(Path(data, "uncompressed.arrow")),
                          compression="uncompressed", chunksize=rows)
    Path(data, "bytes").write_text(str(table.nbytes))


def worker(quick: bool) -> dict[str, list[float]]:
    """Every workload once in this process: name -> [best, median] (GB/s, or µs / ms)."""
    sys.path.insert(0, str(HERE))
    import numpy as np
    import pyarrow as pa

    import arrow_gpu
    from arrow_gpu import DeviceData, import_record_batch, to_device, to_host
    from transfer_bench import mixed_table, string_column

    results: dict[str, list[float]] = {}

    def rate(name: str, table, runs: int = RUNS) -> None:
        size = sum(b.size for c in table.columns for chunk in c.chunks
                   for b in chunk.buffers() if b is not None)
        on_device = to_device(table)
        for label, call in ((f"{name} → device", lambda: to_device(table)),
                            (f"{name} → host", lambda: to_host(on_device))):
            samples = _times(call, runs)
            results[f"{label} (GB/s)"] = [size / min(samples) / 1e9,
                                          size / statistics.median(samples) / 1e9]

    def latency(name: str, call, unit: float, label: str) -> None:
        samples = _times(call, CALLS)
        results[f"{name} ({label})"] = [min(samples) / unit, statistics.median(samples) / unit]

    small = pa.table({"i": pa.array(np.arange(8, dtype=np.int64)), "f": pa.array(np.ones(8))})
    latency("8-row table to_device + to_host", lambda: to_host(to_device(small)), 1e-6, "µs")
    batch = to_device(pa.record_batch({f"c{i}": pa.array(np.arange(8, dtype=np.int64))
                                       for i in range(10)}))
    latency("capsule export + import, 10 cols", lambda: import_record_batch(DeviceData(batch)),
            1e-6, "µs")
    wide = pa.table({f"c{i}": pa.array(np.arange(1000, dtype=np.int64)) for i in range(1000)})
    wide_on_device = to_device(wide)
    for label, call in (("1000 × 1000 int64 → device", lambda: to_device(wide)),
                        ("1000 × 1000 int64 → host", lambda: to_host(wide_on_device))):
        samples = _times(call, RUNS)
        results[f"{label} (ms)"] = [min(samples) * 1e3, statistics.median(samples) * 1e3]
    for size in (4 * MiB, 32 * MiB):
        rate(f"{size // MiB} MiB mixed table", mixed_table(size))
    if not quick:
        rate("5 M-row string column", string_column(5_000_000))
        rate("1 GiB mixed table", mixed_table(1 << 30), runs=7)
    arrow_gpu.trim()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="append", required=True, metavar="NAME=TREE",
                        help="a source tree with the extension built in place (twice or more)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="small sizes (e.g. the simulator)")
    parser.add_argument("--loading", metavar="SIZE", default=None,
                        help="also read files of about SIZE onto the device (e.g. 2GB)")
    parser.add_argument("--compute", action="store_true",
                        help="also time compute_bench's concatenation and filter")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        results = worker(args.quick)
        if args.compute:
            results.update(compute(args.quick))
        if args.data is not None:
            results.update(loading(args.data))
        print(json.dumps(results))
        return
    with tempfile.TemporaryDirectory() as data:
        if args.loading is not None:
            sys.path.insert(0, str(HERE))
            from load_bench import parse_size

            write_loading_data(data, parse_size(args.loading))
        compare(args, data if args.loading is not None else None)


def compare(args: argparse.Namespace, data: str | None) -> None:
    """Run the builds' workers alternately, ``args.rounds`` rounds, and print the table."""
    builds = dict(spec.split("=", 1) for spec in args.build)
    runs: dict[str, list[dict[str, list[float]]]] = {name: [] for name in builds}
    for round_number in range(args.rounds):
        for name, tree in builds.items():
            path = [str(Path(tree).resolve()), *filter(None, [os.environ.get("PYTHONPATH")])]
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
            out = subprocess.run([sys.executable, __file__, "--build", f"{name}={tree}",
                                  "--worker", *(["--quick"] if args.quick else []),
                                  *(["--compute"] if args.compute else []),
                                  *(["--data", data] if data is not None else [])],
                                 env=env, check=True, capture_output=True, text=True)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"round {round_number + 1}: {name} done", file=sys.stderr)
    names = list(builds)
    print(f"{args.rounds} rounds, builds run alternately; each cell: the median over the rounds "
          "of each process's best / median\n")
    print("| workload | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for workload in runs[names[0]][0]:
        cells = []
        for name in names:
            best = statistics.median(r[workload][0] for r in runs[name])
            median = statistics.median(r[workload][1] for r in runs[name])
            cells.append(f"{best:.2f} / {median:.2f}")
        print(f"| {workload} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
