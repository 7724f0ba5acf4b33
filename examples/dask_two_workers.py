"""A two-worker Dask job: worker 0 makes device tables on its GPU, worker 1 consumes them
on its GPU. The tables move device to device (CUDA IPC, then a peer copy).

    python examples/dask_two_workers.py
    # without a GPU: ARROW_GPU_SIMULATOR=1 ARROW_GPU_SIMULATOR_DEVICES=2 python examples/...
"""

import sys

import pyarrow as pa
import pyarrow.compute as pc
from distributed import Client, LocalCluster

import arrow_gpu
from arrow_gpu.dask import PinDevice, worker_device


def produce(part: int, rows: int) -> pa.Table:
    """A table made on this worker's GPU."""
    host = pa.table({"part": pa.array([part] * rows, pa.int32()),
                     "value": pa.array(range(rows), pa.int64())})
    return arrow_gpu.to_device(host, worker_device())


def consume(table: pa.Table) -> dict[str, int]:
    """What the consumer got: where it lives, and a sum computed from it."""
    values = arrow_gpu.to_host(table.column("value"))
    device = table.column("value").chunk(0).buffers()[1].device.device_id
    return {"device": device, "worker_device": worker_device(),
            "rows": table.num_rows, "sum": pc.sum(values).as_py()}


def main() -> None:
    if arrow_gpu.device_count() < 2:
        sys.exit("this example needs two devices (on the simulator: "
                 "ARROW_GPU_SIMULATOR_DEVICES=2)")
    # processes=True: one process per worker, so each has its own GPU (and CUDA context).
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.register_plugin(PinDevice())  # worker i on device i; imports arrow_gpu.dask
        by_name = {info["name"]: address
                   for address, info in client.scheduler_info()["workers"].items()}
        tables = [client.submit(produce, part, 100_000, workers=[by_name[0]], pure=False)
                  for part in range(4)]
        results = client.gather([client.submit(consume, table, workers=[by_name[1]])
                                 for table in tables])
        for part, result in enumerate(results):
            print(f"part {part}: {result}")
            assert result["device"] == result["worker_device"] == 1, result
        print("made on device 0, consumed on device 1: ok")


if __name__ == "__main__":
    main()
