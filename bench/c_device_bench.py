"""C Device Data Interface: arrow_gpu's capsule export+import against pyarrow's own, on the GPU.

Each figure comes from fresh processes at default settings: ``first`` is the first call
after setup, ``median`` the median of many calls (objects freed each time), each the median
over ``--processes`` processes. The peer is
pyarrow's own capsule round trip of the same device batch, measured in the same run:
``pa.RecordBatch._import_from_c_device_capsule(*batch.__arrow_c_device_array__())``.

    python bench/c_device_bench.py [--calls 2000] [--processes 5] [--simulator]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

COLUMNS = 10
ROWS = (8, 1_000_000)  # import cost must not grow with the buffers
STREAM_BATCHES = 1000


def _device_batch(rows: int):
    import numpy as np
    import pyarrow as pa
    import arrow_gpu

    host = pa.record_batch({f"c{i}": pa.array(np.arange(rows, dtype=np.int64)) for i in range(COLUMNS)})
    return arrow_gpu.to_device(host)


def _timed(call, calls: int) -> dict[str, float]:
    start = time.perf_counter()
    call()
    first = time.perf_counter() - start
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return {"first_us": first * 1e6, "median_us": statistics.median(samples) * 1e6}


def worker(case: str, rows: int, calls: int) -> dict[str, float]:
    import pyarrow as pa
    import arrow_gpu
    from arrow_gpu import DeviceData, import_record_batch
    from arrow_gpu.c_device_interface import iter_stream

    batch = _device_batch(rows)
    if case == "pyarrow":
        return _timed(lambda: pa.RecordBatch._import_from_c_device_capsule(
            *batch.__arrow_c_device_array__()), calls)
    if case == "arrow_gpu":
        return _timed(lambda: import_record_batch(DeviceData(batch)), calls)
    if case == "stream":
        table = pa.Table.from_batches([batch] * STREAM_BATCHES)

        def consume() -> None:
            for _ in iter_stream(DeviceData(table))[1]:
                pass

        result = _timed(consume, max(calls // STREAM_BATCHES, 5))
        return {key: value / STREAM_BATCHES for key, value in result.items()}
    raise ValueError(case)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--processes", type=int, default=5,
                        help="fresh processes per figure (their median is reported)")
    parser.add_argument("--simulator", action="store_true", help="run on the host simulator")
    parser.add_argument("--worker", nargs=2, metavar=("CASE", "ROWS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], int(args.worker[1]), args.calls)))
        return
    env = dict(os.environ)
    if args.simulator:
        env["ARROW_GPU_SIMULATOR"] = "1"

    def run_once(case: str, rows: int) -> dict[str, float]:
        out = subprocess.run([sys.executable, __file__, "--calls", str(args.calls),
                              "--worker", case, str(rows)], env=env, check=True,
                             capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    def run(case: str, rows: int) -> dict[str, float]:
        # The median over several fresh processes: one process's figure varies by tens of
        # percent from the next on a shared machine.
        runs = [run_once(case, rows) for _ in range(args.processes)]
        return {key: statistics.median(r[key] for r in runs) for key in runs[0]}

    print(f"{COLUMNS}-column int64 device batch, export+import through capsules "
          f"(median of {args.processes} fresh processes; µs per call)")
    print(f"| rows | pyarrow first | pyarrow median | arrow_gpu first | arrow_gpu median | ratio |")
    print("|---|---|---|---|---|---|")
    per_batch = {}
    for rows in ROWS:
        peer, ours = run("pyarrow", rows), run("arrow_gpu", rows)
        per_batch[rows] = ours["median_us"]
        print(f"| {rows:,} | {peer['first_us']:.1f} | {peer['median_us']:.1f} | "
              f"{ours['first_us']:.1f} | {ours['median_us']:.1f} | "
              f"{ours['median_us'] / peer['median_us']:.2f}× (target ≤ 1.2×) |")
    stream = run("stream", ROWS[0])
    print(f"\nArrowDeviceArrayStream of {STREAM_BATCHES} batches of {ROWS[0]} rows, consumed "
          f"with iter_stream: {stream['median_us']:.1f} µs per batch = "
          f"{stream['median_us'] / per_batch[ROWS[0]]:.2f}× the single round trip (target ≤ 2×)")


if __name__ == "__main__":
    main()
