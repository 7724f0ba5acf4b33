"""A Flight server of device-resident tables and a client, on one machine.

The client puts a device table (copied to the host batch by batch), then gets it back
into device memory (each batch copied to the device while the next is on the network).

    python examples/flight_device.py
    # without a GPU: ARROW_GPU_SIMULATOR=1 python examples/flight_device.py
"""

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight

import arrow_gpu
from arrow_gpu.flight import DeviceTableServer, do_get, do_put


def main() -> None:
    rows = 1_000_000
    table = pa.table({"id": pa.array(range(rows), pa.int64()),
                      "score": pc.multiply(pa.array(range(rows), pa.float64()), 0.5)})
    with DeviceTableServer("grpc://127.0.0.1:0", device=0, max_chunksize=100_000) as server:
        # The server serves tables that live on its GPU.
        server.tables[b"scores"] = arrow_gpu.to_device(table, 0)
        client = flight.connect(f"grpc://127.0.0.1:{server.port}")
        try:
            received = do_get(client, "scores")  # straight into device memory
            print(f"do_get: {received.num_rows} rows in {received.column(0).num_chunks} "
                  f"batches, on the device: {not received.is_cpu}")
            assert arrow_gpu.to_host(received).equals(table)

            do_put(client, "copy", received, max_chunksize=250_000)  # from device memory
            stored = server.tables[b"copy"]
            print(f"do_put: the server holds {stored.num_rows} rows on the device: "
                  f"{not stored.is_cpu}")
            assert arrow_gpu.to_host(stored).equals(table)
        finally:
            client.close()
    print("ok")


if __name__ == "__main__":
    main()
