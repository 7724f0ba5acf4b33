"""Dask distributed: device data between workers on their own devices, host data untouched.

The in-process tests call distributed's serialize/deserialize with the comm context a TCP
comm passes; the cluster tests run one LocalCluster (two worker processes, worker i on
device i) for the whole module.
"""

import gc
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("distributed")

from distributed import Client, LocalCluster, wait  # noqa: E402
from distributed.protocol import deserialize, serialize  # noqa: E402

import arrow_gpu  # noqa: E402
import arrow_gpu.dask as agd  # noqa: E402
from arrow_gpu import to_device, to_host  # noqa: E402

SAME_HOST = {"sender": {"address": "tcp://127.0.0.1:40001"},
             "recipient": {"address": "tcp://127.0.0.1:40002"}}
OTHER_HOST = {"sender": {"address": "tcp://10.1.0.1:40001"},
              "recipient": {"address": "tcp://10.1.0.2:40002"}}

TABLE = pa.table({"x": pa.array([1, None, 3], pa.int64()), "s": ["a", None, "ccc"],
                  "l": pa.array([[1], [], None], pa.list_(pa.int32()))})
VALUES = {
    "table": TABLE,
    "batch": TABLE.to_batches()[0],
    "array": TABLE.column("s").chunk(0),
    "chunked": pa.chunked_array([[1, 2], [3]], pa.int16()),
}


def host_copy(value):
    if isinstance(value, arrow_gpu.CudaBuffer):
        return value.copy_to_host().to_pybytes()
    return to_host(value)


def device_of(value):
    """The device number of a device value's (first data) buffer."""
    if isinstance(value, arrow_gpu.CudaBuffer):
        return value.context.device_number
    if isinstance(value, pa.Table):
        value = value.column(0)
    if isinstance(value, pa.RecordBatch):
        value = value.column(0)
    if isinstance(value, pa.ChunkedArray):
        value = value.chunk(0)
    return next(b for b in value.buffers() if b is not None).device.device_id


@pytest.fixture
def device_restored():
    yield
    agd.set_worker_device(0)


# --- in this process -------------------------------------------------------------------------


def test_importing_arrow_gpu_registers_nothing_with_dask():
    code = textwrap.dedent("""
        import sys
        import pyarrow as pa
        import arrow_gpu
        from distributed.protocol.arrow import serialize_table
        from distributed.protocol.serialize import dask_serialize
        assert "arrow_gpu.dask" not in sys.modules
        assert dask_serialize.dispatch(pa.Table) is serialize_table
        try:
            dask_serialize.dispatch(pa.Array)
        except TypeError:
            print("unregistered")
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "unregistered"


@pytest.mark.parametrize("name", ["table", "batch"])
def test_host_tables_serialize_as_distributed_does(name):
    from distributed.protocol import arrow as distributed_arrow
    value = VALUES[name]
    own = getattr(distributed_arrow, f"serialize_{name}")(value)
    header, frames = serialize(value, context=SAME_HOST)
    assert header["serializer"] == "dask"
    assert header["sub-header"] == own[0]
    assert [bytes(frame) for frame in frames] == [bytes(frame) for frame in own[1]]
    back = deserialize(header, frames)
    assert back.is_cpu and back.equals(value)


@pytest.mark.parametrize("value", [VALUES["array"], VALUES["chunked"], pa.py_buffer(b"xyz")],
                         ids=["array", "chunked", "buffer"])
def test_host_arrays_are_left_to_pickle(value):
    header, frames = serialize(value, context=SAME_HOST)
    assert header["serializer"] == "pickle"
    assert deserialize(header, frames).equals(value)


@pytest.mark.parametrize("name", [*VALUES, "cuda_buffer"])
@pytest.mark.parametrize("context", [SAME_HOST, OTHER_HOST, None], ids=["same", "other", "none"])
def test_device_values_round_trip(ctx, name, context):
    if name == "cuda_buffer":
        original = bytes(range(200))
        value = ctx.buffer_from_data(original)
    else:
        original = VALUES[name]
        value = to_device(original, ctx)
    header, frames = serialize(value, context=context)
    assert header["serializer"] == "dask"
    via = header["sub-header"]["arrow_gpu"]["via"]
    assert via == ("ipc" if context is SAME_HOST else "host")
    if via == "ipc":
        # Handles and IPC metadata, not the data.
        assert len(frames) == 1 and len(frames[0]) < 2000
        assert name != "cuda_buffer" or original not in bytes(frames[0])
    back = deserialize(header, frames)
    assert type(back) is type(value)
    assert device_of(back) == agd.worker_device()
    if name == "cuda_buffer":
        assert host_copy(back) == original
    else:
        assert host_copy(back).equals(original)
    del value, back, header, frames


def test_received_data_lands_on_the_worker_device(device_restored):
    if arrow_gpu.device_count() < 2:
        pytest.skip("needs two devices")
    agd.set_worker_device(1)
    value = to_device(TABLE, 0)
    for context in (SAME_HOST, OTHER_HOST):
        back = deserialize(*serialize(value, context=context))
        assert device_of(back) == 1
        assert to_host(back).equals(TABLE)


def test_an_export_lives_as_long_as_the_sent_value(ctx):
    gc.collect()
    empty = ctx.bytes_allocated
    value = to_device(TABLE, ctx)
    with_value = ctx.bytes_allocated
    first = serialize(value, context=SAME_HOST)
    assert ctx.bytes_allocated == with_value  # exported where it lives: no staging copy
    second = serialize(value, context=SAME_HOST)  # a second receiver: the same export
    assert bytes(second[1][0]) == bytes(first[1][0])
    received = deserialize(*first)
    copied = ctx.bytes_allocated - with_value
    assert copied > 0  # the receiver's own copy
    del value
    gc.collect()  # the value goes, and its export with it (which held it no longer)
    assert ctx.bytes_allocated == empty + copied
    assert to_host(received).equals(TABLE)
    with pytest.raises(ValueError, match="closed by its exporter"):
        deserialize(*second)


def test_ipc_from_another_host_is_refused(ctx):
    value = to_device(TABLE, ctx)
    header, frames = serialize(value, context=SAME_HOST)
    header["sub-header"]["arrow_gpu"]["host"] = "elsewhere/0"
    with pytest.raises(ValueError, match="from host 'elsewhere/0'"):
        deserialize(header, frames)


FORGERIES = {
    "kind array on a table": lambda sent, frames: sent.update(kind="array"),
    "unknown kind": lambda sent, frames: sent.update(kind="matrix"),
    "no version": lambda sent, frames: sent.pop("version"),
    "another version": lambda sent, frames: sent.update(version=99),
    "unknown way": lambda sent, frames: sent.update(via="pigeon"),
    "extra key": lambda sent, frames: sent.update(extra=1),
    "extra frame": lambda sent, frames: frames.append(b"more"),
    "no frame": lambda sent, frames: frames.clear(),
}


@pytest.mark.parametrize("context", [SAME_HOST, OTHER_HOST], ids=["ipc", "host"])
@pytest.mark.parametrize("forgery", FORGERIES)
def test_a_forged_header_is_refused(ctx, context, forgery):
    # Defect 6: any kind was believed; "array" turned a table into its first column.
    value = to_device(TABLE, ctx)
    header, frames = serialize(value, context=context)
    frames = list(frames)
    FORGERIES[forgery](header["sub-header"]["arrow_gpu"], frames)
    with pytest.raises(ValueError, match="cannot deserialize device data: .* not written by"):
        deserialize(header, frames)
    del value
    gc.collect()


@pytest.mark.parametrize("context", [SAME_HOST, OTHER_HOST], ids=["ipc", "host"])
@pytest.mark.parametrize("announced, sent", [("array", "batch"), ("cuda_buffer", "array"),
                                             ("chunked", "table")])
def test_frames_of_another_value_are_refused(ctx, context, announced, sent):
    # A header of one value on the frames of another: the frames must hold what it says.
    values = {name: to_device(value, ctx) for name, value in VALUES.items()}
    values["cuda_buffer"] = ctx.buffer_from_data(b"bytes")
    header, _ = serialize(values[announced], context=context)
    _, frames = serialize(values[sent], context=context)
    with pytest.raises(ValueError, match="cannot deserialize device data: .*"):
        deserialize(header, frames)
    del values
    gc.collect()


# A worker that deserializes a pickled (header, frames), then a genuine value's.
_WORKER = textwrap.dedent(
    """
    import pickle, sys
    from distributed.protocol import deserialize
    import arrow_gpu, arrow_gpu.dask
    forged, genuine = pickle.loads(sys.stdin.buffer.read())
    try:
        deserialize(*forged)
    except ValueError as error:
        print("refused:", error)
    print("then:", arrow_gpu.to_host(deserialize(*genuine)).num_rows)
    """
)


def test_a_forged_frame_of_delta_dictionaries_is_refused_by_the_worker(ctx):
    # Issue 47: one such frame from a same-host peer killed the worker (SIGSEGV).
    import pickle

    import _sharing_fuzz
    value = to_device(TABLE, ctx)
    header, frames = serialize(value, context=SAME_HOST)
    payload, allocation = _sharing_fuzz.payload_of_stream(
        ctx, _sharing_fuzz.dictionary_stream(deltas=True))
    worker = subprocess.run([sys.executable, "-c", _WORKER],
                            input=pickle.dumps(((header, [payload]), (header, frames))),
                            capture_output=True, timeout=120)
    assert worker.returncode == 0, worker.stderr.decode()
    out = worker.stdout.decode()
    assert "refused: an arrow_gpu shared batch payload holds a delta dictionary batch" in out
    assert f"then: {TABLE.num_rows}" in out
    del value, allocation
    gc.collect()


def test_pin_device_maps_worker_names(monkeypatch, tmp_path):
    assert agd.PinDevice({"a": 1, 7: 0}).device_for(7) == 0
    with pytest.raises(ValueError, match="worker 'b' is not in PinDevice's devices"):
        agd.PinDevice({"a": 1}).device_for("b")
    monkeypatch.setattr(agd, "device_count", lambda: 2)
    assert [agd.PinDevice().device_for(name) for name in (0, 1, 2)] == [0, 1, 0]
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # the claims of this test only
    monkeypatch.setattr(agd, "_claim", None)
    claimed = agd.PinDevice().device_for("tcp://10.0.0.1:1234")  # claims one for good
    assert claimed in (0, 1) and agd.PinDevice().device_for("tcp://10.0.0.1:1") == claimed
    monkeypatch.setattr(agd, "device_count", lambda: 1)
    assert agd.PinDevice().device_for("any name") == 0


def test_workers_named_by_address_spread_over_the_devices(tmp_path):
    # dask worker --nworkers 4 names its workers by address: each process claims the
    # device the fewest hold, so four workers on two devices go two and two.
    code = f"""
import os, sys
os.environ["XDG_RUNTIME_DIR"] = {str(tmp_path)!r}
import arrow_gpu.dask as agd
agd.device_count = lambda: 2
print(agd.PinDevice().device_for("tcp://127.0.0.1:" + sys.argv[1]), flush=True)
sys.stdin.read()  # hold the claim until told to go
"""
    workers = [subprocess.Popen([sys.executable, "-c", code, str(port)], text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
               for port in range(4)]
    try:
        devices = sorted(int(worker.stdout.readline()) for worker in workers)
    finally:
        for worker in workers:
            worker.communicate("", timeout=60)
    assert devices == [0, 0, 1, 1]


def test_set_worker_device_refuses_bad_devices():
    with pytest.raises(TypeError, match="device must be an int"):
        agd.set_worker_device("1")
    with pytest.raises(ValueError, match="device 64 does not exist"):
        agd.set_worker_device(64)
    with pytest.raises(ValueError, match="must be a CUDA device"):
        agd.set_worker_device(pa.default_cpu_memory_manager())
    assert agd.worker_device() == 0


def test_set_worker_device_takes_any_spelling_of_a_device(ctx):
    for device in (ctx, ctx.memory_manager, ctx.device, np.int64(0), 0):
        agd.set_worker_device(device)
        assert agd.worker_device() == 0


# --- two worker processes, worker i on device i -----------------------------------------------


@pytest.fixture(scope="module")
def running_cluster():
    """A client of two worker processes pinned to devices 0 and 1, their addresses, and
    the device memory each has allocated when idle."""
    # The workers' own environment; the simulator gives them two devices.
    env = ({"ARROW_GPU_SIMULATOR": "1", "ARROW_GPU_SIMULATOR_DEVICES": "2"}
           if arrow_gpu.using_simulator() else {})
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, env=env) as local, Client(local) as client:
        client.register_plugin(agd.PinDevice())
        by_name = {info["name"]: address
                   for address, info in client.scheduler_info()["workers"].items()}
        yield client, [by_name[0], by_name[1]], client.run(_allocated)


@pytest.fixture
def cluster(running_cluster):
    """The module's cluster; every worker must give back the device memory the test used."""
    client, workers, idle = running_cluster
    _wait_for(lambda: client.run(_allocated) == idle, "the previous test's data to go")
    yield client, workers, idle
    _wait_for(lambda: client.run(_allocated) == idle, "device memory back to baseline")


def _allocated():
    gc.collect()
    return [arrow_gpu.Context(i).bytes_allocated for i in range(arrow_gpu.device_count())]


def _wait_for(condition, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _make(name):
    """A device value made on this worker's device."""
    if name == "cuda_buffer":
        return arrow_gpu.Context(agd.worker_device()).buffer_from_data(bytes(range(200)))
    return to_device(VALUES[name], agd.worker_device())


def _inspect(value):
    """Where a received value lives, and its host copy."""
    return device_of(value), agd.worker_device(), host_copy(value)


def _refuse_host_staging():
    def refuse(_):
        raise AssertionError("device data was staged through host memory")
    agd.to_host = refuse


def _allow_host_staging():
    agd.to_host = to_host


@pytest.mark.multi_gpu
@pytest.mark.parametrize("name", [*VALUES, "cuda_buffer"])
def test_a_device_value_moves_to_the_other_workers_device(cluster, name):
    client, (first, second), _ = cluster
    client.run(_refuse_host_staging, workers=[first])
    try:
        made = client.submit(_make, name, workers=[first], pure=False)
        device, pinned, host = client.submit(_inspect, made, workers=[second]).result(timeout=60)
    finally:
        client.run(_allow_host_staging, workers=[first])
    assert (device, pinned) == (1, 1)
    if name == "cuda_buffer":
        assert host == bytes(range(200))
    else:
        assert host.equals(VALUES[name])
    assert client.submit(_inspect, made, workers=[first]).result(timeout=60)[:2] == (0, 0)


@pytest.mark.multi_gpu
def test_the_receiver_owns_its_copy_once_the_sender_frees(cluster):
    client, (first, second), idle = cluster
    made = client.submit(_make, "table", workers=[first], pure=False)
    moved = client.submit(lambda table: table, made, workers=[second], pure=False)
    wait(moved, timeout=60)
    del made
    _wait_for(lambda: client.run(_allocated, workers=[first])[first] == idle[first],
              "the sender to free the table and its export")
    device, _, host = client.submit(_inspect, moved, workers=[second]).result(timeout=60)
    assert device == 1 and host.equals(TABLE)


@pytest.mark.multi_gpu
def test_the_client_receives_onto_its_own_device(cluster, ctx):
    client, (first, _), _ = cluster
    made = client.submit(_make, "table", workers=[first], pure=False)
    received = made.result(timeout=60)
    assert device_of(received) == agd.worker_device() == ctx.device_number
    assert to_host(received).equals(TABLE)
    del received, made


@pytest.mark.multi_gpu
def test_the_example_runs(monkeypatch):
    if arrow_gpu.using_simulator():
        monkeypatch.setenv("ARROW_GPU_SIMULATOR_DEVICES", "2")  # inherited by the example
    example = Path(__file__).resolve().parent.parent / "examples" / "dask_two_workers.py"
    result = subprocess.run([sys.executable, str(example)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("'device': 1, 'worker_device': 1") == 4
    assert result.stdout.endswith("consumed on device 1: ok\n")
