"""Arrow Flight to and from device memory, against a DeviceTableServer on loopback."""

import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest

flight = pytest.importorskip("pyarrow.flight")

from arrow_gpu import to_device, to_host  # noqa: E402
from arrow_gpu.flight import DeviceTableServer, do_get, do_put, iter_get  # noqa: E402

TABLE = pa.Table.from_batches([
    pa.record_batch({"x": pa.array(range(start, start + 100), pa.int64()),
                     "s": [None if i % 7 == 0 else f"v{i}" for i in range(100)]})
    for start in range(0, 500, 100)])


@pytest.fixture
def server(ctx):
    """A server holding TABLE on device 0 as "t" (device memory checked by ``ctx``)."""
    with DeviceTableServer(device=0) as running:
        running.tables[b"t"] = to_device(TABLE, ctx)
        yield running
        running.tables.clear()


@pytest.fixture
def client(server):
    connection = flight.connect(f"grpc://127.0.0.1:{server.port}")
    yield connection
    connection.close()


def device_of(table):
    return table.column(0).chunk(0).buffers()[1].device.device_id


def flight_threads():
    return [t for t in threading.enumerate() if t.name == "arrow_gpu-flight-get"]


def test_do_get_lands_on_the_device(client):
    received = do_get(client, "t")
    assert not received.is_cpu and device_of(received) == 0
    assert received.num_rows == TABLE.num_rows and received.column(0).num_chunks == 5
    assert to_host(received).equals(TABLE)
    assert flight_threads() == []


@pytest.mark.multi_gpu
def test_do_get_onto_another_device(client, ctx1):
    received = do_get(client, flight.Ticket(b"t"), device=ctx1)
    assert device_of(received) == 1
    assert to_host(received).equals(TABLE)


def test_iter_get_yields_each_batch_as_it_arrives(client):
    batches = list(iter_get(client, b"t"))
    assert [batch.num_rows for batch in batches] == [100] * 5
    assert all(not batch.is_cpu for batch in batches)
    assert pa.Table.from_batches([to_host(b) for b in batches]).equals(TABLE)


def test_stopping_iter_get_early_cancels_the_stream(client):
    stream = iter_get(client, "t")
    first = next(stream)
    stream.close()
    assert flight_threads() == []
    assert to_host(first).equals(TABLE.to_batches()[0])
    assert do_get(client, "t").num_rows == TABLE.num_rows  # the client still works


def test_do_put_from_the_device(server, client, ctx):
    do_put(client, "up", to_device(TABLE, ctx), max_chunksize=64)
    stored = server.tables[b"up"]
    assert not stored.is_cpu and device_of(stored) == 0
    assert [batch.num_rows for batch in stored.to_batches()] == [64, 36] * 5
    assert to_host(stored).equals(TABLE)
    do_put(client, flight.FlightDescriptor.for_path("one"), TABLE.to_batches()[1])  # host data
    assert to_host(server.tables[b"one"]).equals(pa.Table.from_batches([TABLE.to_batches()[1]]))


def test_an_error_in_the_stream_reaches_the_caller(server, client):
    def broken(context, ticket):
        def batches():
            yield TABLE.to_batches()[0]
            raise ValueError("the source broke")
        return flight.GeneratorStream(TABLE.schema, batches())

    server.do_get = broken
    # The server's exception arrives as the matching Arrow error, after the first batch.
    stream = iter_get(client, "t")
    assert to_host(next(stream)).equals(TABLE.to_batches()[0])
    with pytest.raises(pa.ArrowInvalid, match="the source broke"):
        next(stream)
    assert flight_threads() == []


def test_bad_input_is_refused_clearly(server, client):
    with pytest.raises(flight.FlightServerError, match="no table named b'missing'"):
        do_get(client, "missing")
    with pytest.raises(TypeError, match="client must be a pyarrow.flight.FlightClient"):
        do_get("grpc://127.0.0.1:1", "t")
    with pytest.raises(TypeError, match="ticket must be"):
        do_get(client, 42)
    with pytest.raises(TypeError, match="data must be a pyarrow Table or RecordBatch"):
        do_put(client, "x", [1, 2, 3])
    with pytest.raises(TypeError, match="descriptor must be"):
        do_put(client, 7, TABLE)
    with pytest.raises(flight.FlightServerError, match="one-element path descriptor"):
        do_put(client, flight.FlightDescriptor.for_command(b"x"), TABLE)
    with pytest.raises(TypeError, match="device must be an int.*got 'str'"):
        do_get(client, "t", device="cuda:0")
    with pytest.raises(ValueError, match="must be a CUDA device"):
        next(iter_get(client, "t", device=pa.default_cpu_memory_manager()))
    with pytest.raises(ValueError, match="must be a CUDA device"):
        DeviceTableServer(device=pa.default_cpu_memory_manager())
    assert set(server.tables) == {b"t"}


def test_devices_are_taken_in_any_spelling(client, ctx):
    received = do_get(client, "t", device=ctx.memory_manager)
    assert device_of(received) == 0 and to_host(received).equals(TABLE)
    with DeviceTableServer(device=ctx.device) as running:
        assert running.device == ctx


@pytest.mark.parametrize("ticket", [b"missing", b"\xff\x00" * 4, b"x" * 10_000])
def test_an_error_names_what_was_asked_for_and_nothing_else(server, client, ticket):
    # Defect 7: a bad ticket's error listed every table on the server and its traceback.
    server.tables[b"payroll"] = server.tables[b"t"]
    with pytest.raises(flight.FlightServerError) as raised:
        client.do_get(flight.Ticket(ticket)).read_all()
    message = str(raised.value)
    assert f"no table named {repr(ticket)[:200]}" in message
    for leak in ("payroll", "b't'", "Traceback", "flight.py", "File "):
        assert leak not in message
    assert len(message) < 1000


def test_a_bad_descriptor_error_tells_nothing_of_the_server(server, client):
    with pytest.raises(flight.FlightServerError) as raised:
        do_put(client, flight.FlightDescriptor.for_path("a", "b"), TABLE)
    assert "Traceback" not in str(raised.value) and "flight.py" not in str(raised.value)



def test_a_server_splits_large_batches(ctx):
    with DeviceTableServer(max_chunksize=30) as small:
        small.tables[b"t"] = to_device(TABLE, ctx)
        connection = flight.connect(f"grpc://127.0.0.1:{small.port}")
        received = do_get(connection, "t")
        connection.close()
        small.tables.clear()
    assert [len(chunk) for chunk in received.column(0).chunks] == [30, 30, 30, 10] * 5
    assert to_host(received).equals(TABLE)
    del received


def test_the_example_runs():
    example = Path(__file__).resolve().parent.parent / "examples" / "flight_device.py"
    result = subprocess.run([sys.executable, str(example)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "in 10 batches, on the device: True" in result.stdout
    assert result.stdout.endswith("ok\n")


@pytest.mark.parametrize("stop", ["with", "shutdown"])
def test_a_stopped_server_frees_the_tables_it_held(ctx, stop):
    # pyarrow 23 keeps a stopped server object alive: its tables must not keep device memory.
    baseline = ctx.bytes_allocated
    server = DeviceTableServer()
    with flight.connect(f"grpc://127.0.0.1:{server.port}") as client:
        do_put(client, "t", pa.table({"x": [1, 2, 3]}))
    assert not server.tables[b"t"].column(0).chunk(0).is_cpu
    assert ctx.bytes_allocated > baseline
    if stop == "with":
        with server:
            pass
    else:
        server.shutdown()
    assert server.tables == {} and ctx.bytes_allocated == baseline
