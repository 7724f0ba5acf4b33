"""Dask and Flight benchmark: a markdown table of each hand-off against its target.

    python bench/dask_flight_bench.py                 # on one or two GPUs: 1 GiB tables
    ARROW_GPU_SIMULATOR=1 ARROW_GPU_SIMULATOR_DEVICES=2 python bench/dask_flight_bench.py --quick

- Device copy: one device buffer copied within device 0 (``copy_from_device``), the
  bandwidth the one-GPU Dask hand-off is measured against; peer copy: the same from device
  0 to device 1 (with two devices), for the two-GPU hand-off.
- Dask: a table made by a worker is handed to a task on another worker (``LocalCluster``,
  one process per worker): both on device 0 (``PinDevice({0: 0, 1: 0})``), and, with two
  devices, on devices 0 and 1 (``PinDevice()``). Two times: the hand-off itself, as the
  receiving worker records it (``transfer_incoming_log``: from asking the sender for the
  value to holding it, deserialized, on its device); and the whole task, from submitting the
  consumer to its result, so Dask's scheduling is included. Target: the hand-off >= 0.5x
  the device (or peer) copy.
- Dask, small: a 1,000-row table handed between the two workers of device 0, against the
  same table in host memory (Dask's own serialization). Target: <= 1.5x its time.
- Host memory traffic of the same-host path: arrow_gpu has no host-transfer counters; the
  bytes that do cross host memory are the payload Dask sends (IPC metadata and handles,
  no data), reported per hand-off.
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


def device_copy(nbytes: int, repeat: int, target_device: int) -> float:
    """Seconds to copy ``nbytes`` from device 0 to ``target_device`` (0: within device 0)."""
    source = arrow_gpu.Context(0).buffer_from_data(np.ones(nbytes, np.uint8))
    target = arrow_gpu.Context(target_device).new_buffer(nbytes)

    def copy() -> None:
        target.copy_from_device(source)
        target.context.synchronize()

    seconds = best(copy, repeat)
    assert target.copy_to_host().equals(source.copy_to_host())
    return seconds


def produce(nbytes: int, on_device: bool) -> pa.Table:
    table = host_table(nbytes)
    return arrow_gpu.to_device(table, worker_device()) if on_device else table


def consume(table: pa.Table) -> tuple[int, int]:
    """The receiving device (-1: host) and the last column's last value."""
    last = table.column(COLUMNS - 1).slice(table.num_rows - 1)
    values = table.column(0).chunk(0).buffers()[1]
    device = -1 if values.is_cpu else values.device.device_id
    return device, (last if values.is_cpu else arrow_gpu.to_host(last))[0].as_py()


def payload_bytes(nbytes: int) -> int:
    """The bytes Dask sends between two processes of this host for a device table."""
    from distributed.protocol import serialize
    same_host = {"sender": {"address": "tcp://127.0.0.1:1"},
                 "recipient": {"address": "tcp://127.0.0.1:2"}}
    _, frames = serialize(produce(nbytes, True), context=same_host)
    return sum(len(frame) for frame in frames)


def _transfer_seconds(dask_worker) -> float:  # run on the receiving worker
    """Seconds of the worker's last transfer in, unclamped (Dask's own "duration" is at
    least a millisecond)."""
    last = dask_worker.transfer_incoming_log[-1]
    return last["stop"] - last["start"]


def dask_handoffs(pin: PinDevice, receiving_device: int, sizes: list[tuple[int, bool]],
                  repeat: int) -> list[tuple[float, float]]:
    """Best (whole task, hand-off alone) seconds per (nbytes, on_device) to hand a table
    from worker 0 to a task on worker 1."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.register_plugin(pin)
        by_name = {info["name"]: address
                   for address, info in client.scheduler_info()["workers"].items()}
        best_times = []
        for nbytes, on_device in sizes:
            rows = nbytes // (8 * COLUMNS)
            expected = (receiving_device if on_device else -1, rows - 1 + COLUMNS - 1)
            times, transfers = [], []
            for _ in range(repeat + 1):  # the first is a warm-up
                made = client.submit(produce, nbytes, on_device, workers=[by_name[0]],
                                     pure=False)
                wait(made)
                start = time.perf_counter()
                got = client.submit(consume, made, workers=[by_name[1]]).result()
                times.append(time.perf_counter() - start)
                assert got == expected, (got, expected)
                transfers.append(client.run(_transfer_seconds,
                                            workers=[by_name[1]])[by_name[1]])
                del made
            best_times.append((min(times[1:]), min(transfers[1:])))
        return best_times


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
    two_devices = arrow_gpu.device_count() >= 2
    nbytes = (16 if args.quick else 1024) * MiB
    small = 1000 * 8 * COLUMNS  # 1,000 rows
    repeat = 2 if args.quick else 5
    small_repeat = 5 if args.quick else 20
    chunk_rows = (1 if args.quick else 16) * MiB // (8 * COLUMNS)  # 1 / 16 MiB batches

    local = device_copy(nbytes, repeat, 0)
    (one_gpu_task, one_gpu), = dask_handoffs(PinDevice({0: 0, 1: 0}), 0, [(nbytes, True)],
                                             repeat)
    (small_device, small_device_transfer), (small_host, small_host_transfer) = dask_handoffs(PinDevice({0: 0, 1: 0}), 0,
                                             [(small, True), (small, False)], small_repeat)
    if two_devices:
        peer = device_copy(nbytes, repeat, 1)
        (handoff_task, handoff), = dask_handoffs(PinDevice(), 1, [(nbytes, True)], repeat)
    host_get, device_get = flight_get(nbytes, chunk_rows, repeat)
    sent = payload_bytes(nbytes)

    def gbs(seconds: float) -> str:
        return f"{nbytes / seconds / 1e9:.2f}"

    devices = [line.strip() for line in report().splitlines() if re.match(r"\s+\d+: ", line)]
    print(f"# arrow_gpu Dask and Flight benchmark{' (--quick)' if args.quick else ''}\n")
    print(f"{datetime.date.today()} · Python {platform.python_version()} · pyarrow "
          f"{pa.__version__} · {'; '.join(devices)}\n")
    print(f"Table: {COLUMNS} int64 columns, {nbytes / MiB:.0f} MiB; best of {repeat} runs.\n")
    print("| hand-off | time (ms) | GB/s | against | ratio | target |")
    print("|---|---|---|---|---|---|")
    print(f"| device copy, within device 0 | {local * 1e3:.1f} | {gbs(local)} | | | |")
    ratio = local / one_gpu
    print(f"| Dask hand-off: worker → worker, both on device 0 | {one_gpu * 1e3:.1f} | "
          f"{gbs(one_gpu)} | device copy | {ratio:.2f}× | "
          f"≥ 0.5× {'✓' if ratio >= 0.5 else '✗'} |")
    print(f"| the same, whole task (scheduling included) | {one_gpu_task * 1e3:.1f} | "
          f"{gbs(one_gpu_task)} | device copy | {local / one_gpu_task:.2f}× | |")
    print(f"| Dask, 1,000 rows in host memory: whole task (hand-off) | {small_host * 1e3:.2f} "
          f"({small_host_transfer * 1e3:.2f}) | | | | |")
    ratio = small_device / small_host
    print(f"| Dask, 1,000 rows on device 0: whole task (hand-off) | {small_device * 1e3:.2f} "
          f"({small_device_transfer * 1e3:.2f}) | | host table | {ratio:.2f}× time | "
          f"≤ 1.5× {'✓' if ratio <= 1.5 else '✗'} |")
    if two_devices:
        print(f"| peer copy, device 0 → device 1 | {peer * 1e3:.1f} | {gbs(peer)} | | | |")
        ratio = peer / handoff
        print(f"| Dask hand-off: worker on device 0 → worker on device 1 | "
              f"{handoff * 1e3:.1f} | {gbs(handoff)} | peer copy | {ratio:.2f}× | "
              f"≥ 0.5× {'✓' if ratio >= 0.5 else '✗'} |")
        print(f"| the same, whole task (scheduling included) | {handoff_task * 1e3:.1f} | "
              f"{gbs(handoff_task)} | peer copy | {peer / handoff_task:.2f}× | |")
    print(f"| Flight loopback do_get into host | {host_get * 1e3:.1f} | {gbs(host_get)} "
          "| | | |")
    ratio = host_get / device_get
    print(f"| Flight loopback do_get into device | {device_get * 1e3:.1f} | {gbs(device_get)} | "
          f"into host | {ratio:.2f}× | ≥ 0.8× {'✓' if ratio >= 0.8 else '✗'} |")
    print(f"\nHost memory traffic of a same-host Dask hand-off of the {nbytes / MiB:.0f} MiB "
          f"table: {sent} bytes of payload (IPC metadata and handles); arrow_gpu has no "
          "host-transfer counters, and its same-host path makes no host copy of the data.")


if __name__ == "__main__":
    main()
