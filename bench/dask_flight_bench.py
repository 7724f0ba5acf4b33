"""Dask and Flight benchmark: a markdown table of each hand-off against its target.

    python bench/dask_flight_bench.py                 # on two GPUs: 1 GiB tables
    ARROW_GPU_SIMULATOR=1 ARROW_GPU_SIMULATOR_DEVICES=2 python bench/dask_flight_bench.py --quick

- Peer copy: one device buffer copied from device 0 to device 1 (``copy_from_device``),
  the bandwidth the Dask hand-off is measured against.
- Dask: a table made by a worker on device 0 is handed to a task on a worker on device 1
  (``LocalCluster``, one process per worker, ``PinDevice``). Timed from submitting the
  consumer to its completion, so scheduling is included. Target: >= 0.5x the peer copy.
- Flight: a server process serves a device table over loopback; ``arrow_gpu.flight.do_get``
  into device memory against pyarrow's ``do_get(...).read_all()`` into host memory.
  Target: >= 0.8x.

Times are the best of several runs; every hand-off is checked for correctness.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import platform
import re
import time

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
from distributed import Client, LocalCluster, wait

import arrow_gpu
from arrow_gpu.dask import PinDevice, worker_device
from arrow_gpu.diagnostics import report
from arrow_gpu.flight import DeviceTableServer, do_get

from _timing import best  # bench/_timing.py, beside this script

COLUMNS = 8
MiB = 1 << 20


def host_table(nbytes: int) -> pa.Table:
    rows = nbytes // (8 * COLUMNS)
    return pa.table({f"c{i}": np.arange(rows, dtype=np.int64) + i for i in range(COLUMNS)})


def peer_copy(nbytes: int, repeat: int) -> float:
    source = arrow_gpu.Context(0).buffer_from_data(np.ones(nbytes, np.uint8))
    target = arrow_gpu.Context(1).new_buffer(nbytes)

    def copy() -> None:
        target.copy_from_device(source)
        target.context.synchronize()

    seconds = best(copy, repeat)
    assert target.copy_to_host().equals(source.copy_to_host())
    return seconds


def produce(nbytes: int) -> pa.Table:
    return arrow_gpu.to_device(host_table(nbytes), worker_device())


def consume(table: pa.Table) -> tuple[int, int]:
    """The receiving device and a checksum of the last column's last value."""
    last = table.column(COLUMNS - 1).slice(table.num_rows - 1)
    device = table.column(0).chunk(0).buffers()[1].device.device_id
    return device, arrow_gpu.to_host(last)[0].as_py()


def dask_handoff(nbytes: int, repeat: int) -> float:
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.register_plugin(PinDevice())
        by_name = {info["name"]: address
                   for address, info in client.scheduler_info()["workers"].items()}
        rows = nbytes // (8 * COLUMNS)
        times = []
        for _ in range(repeat + 1):  # the first is a warm-up
            made = client.submit(produce, nbytes, workers=[by_name[0]], pure=False)
            wait(made)
            start = time.perf_counter()
            device, last = client.submit(consume, made, workers=[by_name[1]]).result()
            times.append(time.perf_counter() - start)
            assert (device, last) == (1, rows - 1 + COLUMNS - 1), (device, last)
            del made
        return min(times[1:])


def serve(nbytes: int, chunk_rows: int, ports: multiprocessing.Queue) -> None:
    with DeviceTableServer(device=0, max_chunksize=chunk_rows) as server:
        server.tables[b"t"] = arrow_gpu.to_device(host_table(nbytes), 0)
        ports.put(server.port)
        server.serve()


def flight_get(nbytes: int, chunk_rows: int, repeat: int) -> tuple[float, float]:
    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    server = context.Process(target=serve, args=(nbytes, chunk_rows, ports), daemon=True)
    server.start()
    try:
        client = flight.connect(f"grpc://127.0.0.1:{ports.get(timeout=120)}")
        expected = host_table(nbytes)
        assert client.do_get(flight.Ticket(b"t")).read_all().equals(expected)
        assert arrow_gpu.to_host(do_get(client, "t")).equals(expected)
        host = best(lambda: client.do_get(flight.Ticket(b"t")).read_all(), repeat)
        device = best(lambda: do_get(client, "t"), repeat)
        client.close()
        return host, device
    finally:
        server.terminate()
        server.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (e.g. the simulator)")
    args = parser.parse_args()
    if arrow_gpu.device_count() < 2:
        raise SystemExit("needs two devices (on the simulator: ARROW_GPU_SIMULATOR_DEVICES=2)")
    nbytes = (16 if args.quick else 1024) * MiB
    repeat = 2 if args.quick else 5
    chunk_rows = (1 if args.quick else 16) * MiB // (8 * COLUMNS)  # 1 / 16 MiB batches

    peer = peer_copy(nbytes, repeat)
    handoff = dask_handoff(nbytes, repeat)
    host_get, device_get = flight_get(nbytes, chunk_rows, repeat)

    def gbs(seconds: float) -> str:
        return f"{nbytes / seconds / 1e9:.2f}"

    devices = [line.strip() for line in report().splitlines() if re.match(r"\s+\d+: ", line)]
    print(f"# arrow_gpu Dask and Flight benchmark{' (--quick)' if args.quick else ''}\n")
    print(f"{datetime.date.today()} · Python {platform.python_version()} · pyarrow "
          f"{pa.__version__} · {'; '.join(devices)}\n")
    print(f"Table: {COLUMNS} int64 columns, {nbytes / MiB:.0f} MiB; best of {repeat} runs.\n")
    print("| hand-off | time (ms) | GB/s | against | ratio | target |")
    print("|---|---|---|---|---|---|")
    print(f"| peer copy, device 0 → device 1 | {peer * 1e3:.1f} | {gbs(peer)} | | | |")
    ratio = peer / handoff
    print(f"| Dask: worker on device 0 → worker on device 1 | {handoff * 1e3:.1f} | "
          f"{gbs(handoff)} | peer copy | {ratio:.2f}× | ≥ 0.5× {'✓' if ratio >= 0.5 else '✗'} |")
    print(f"| Flight loopback do_get into host | {host_get * 1e3:.1f} | {gbs(host_get)} "
          "| | | |")
    ratio = host_get / device_get
    print(f"| Flight loopback do_get into device | {device_get * 1e3:.1f} | {gbs(device_get)} | "
          f"into host | {ratio:.2f}× | ≥ 0.8× {'✓' if ratio >= 0.8 else '✗'} |")


if __name__ == "__main__":
    main()
