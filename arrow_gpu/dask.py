"""Dask distributed: device-resident Arrow data crosses workers and stays on the device.

Importing this module (``pip install "arrow_gpu[dask]"``) registers serializers with
distributed for pyarrow Arrays, ChunkedArrays, RecordBatches and Tables whose buffers are
on a CUDA device, and for ``CudaBuffer``s. Data on the host is left to distributed exactly
as before. Importing ``arrow_gpu`` alone registers nothing.

How the bytes travel, decided from the comm's sender and recipient addresses:

- Same host (another process, the same GPU or another): the sender exports the driver
  allocations the data already lives in through CUDA IPC (``arrow_gpu.io.export_batch``,
  no copy); the receiver copies every buffer once, straight from them, into one
  allocation of its own device (a device-to-device or peer copy), so it owns what it
  got. The bytes never pass through host memory, and the receiver keeps the sender's
  allocations open for the next hand-offs.
- Another host, or no addresses known (e.g. spilling to disk): the data is copied to the
  host, sent as distributed sends host Arrow data, and copied onto the receiver's device.

Received data lands on this process's device, ``worker_device()``: each worker is pinned
to one GPU either by ``CUDA_VISIBLE_DEVICES`` (then every worker sees its GPU as device 0,
the default) or by the ``PinDevice`` worker plugin, which also imports this module on the
workers (so does ``dask worker --preload arrow_gpu.dask``).

>>> import pyarrow as pa
>>> from distributed.protocol import deserialize, serialize
>>> from arrow_gpu import to_device, to_host
>>> table = to_device(pa.table({"x": [1, 2, 3]}))
>>> back = deserialize(*serialize(table))  # no comm: staged through the host
>>> to_host(back).equals(to_host(table)), back.is_cpu
(True, False)
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import weakref
from collections.abc import Mapping
from typing import Any, Callable, NoReturn, Optional, Union

import pyarrow as pa
from dask.sizeof import sizeof
from distributed import Worker
from distributed.comm.addressing import get_address_host
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol.serialize import dask_deserialize, dask_serialize

from arrow_gpu._cuda import CudaBuffer
from arrow_gpu._util.arrow_data import Kind, kind_of
from arrow_gpu._util.device_claims import Claim, claim_device
from arrow_gpu.device import Context, DeviceLike, as_context, device_count
from arrow_gpu.io import SharedBatch, export_batch, import_batch
from arrow_gpu.transfer import to_device, to_host

__all__ = ["PinDevice", "dask_setup", "set_worker_device", "worker_device"]

Header = dict[str, Any]
Frames = list[Any]
Sendable = Union[pa.Array, pa.ChunkedArray, pa.RecordBatch, pa.Table, CudaBuffer]

_device = 0


def worker_device() -> int:
    """The device number where data this process receives through Dask lands.

    0 unless ``set_worker_device`` (or the ``PinDevice`` plugin on a worker) chose another.
    Tasks use it to put their own results on the worker's GPU.

    Returns
    -------
    int
        The device number.

    Examples
    --------
    >>> worker_device()
    0
    """
    return _device


def set_worker_device(device: DeviceLike) -> None:
    """Make ``device`` the device where data this process receives through Dask lands.

    Parameters
    ----------
    device : DeviceLike
        A device this process sees, in any spelling ``arrow_gpu.device.as_context``
        accepts (a device number, a Context, ...); data lands in its primary context.

    Raises
    ------
    TypeError
        If ``device`` is not a spelling of a device (a bool is not a device number).
    ValueError
        If this process sees no device with that number (``pyarrow.ArrowInvalid``), or
        ``device`` is a pyarrow MemoryManager or Device that is not CUDA's.

    Examples
    --------
    >>> set_worker_device(0)
    >>> set_worker_device(99)
    Traceback (most recent call last):
    ...
    pyarrow.lib.ArrowInvalid: device 99 does not exist: this process sees ... device(s), ...
    """
    global _device
    _device = as_context(device).device_number


class PinDevice(WorkerPlugin):
    """A worker plugin that puts each worker on its own device.

    A worker whose process sees one device (pinned by ``CUDA_VISIBLE_DEVICES``) uses it.
    Otherwise ``devices`` maps worker names to device numbers; without it, a worker named
    by an int (as ``LocalCluster`` names them: 0, 1, ...) gets device ``name % count``, and
    a worker named otherwise (``dask worker --nworkers N`` names them by address) claims
    the device the fewest workers of this user on this host hold, for its process's life.
    Registering the plugin also imports this module on every worker.

    Parameters
    ----------
    devices : mapping of str or int to int, optional
        The device number of each worker, by worker name.

    Examples
    --------
    >>> plugin = PinDevice({"loader": 0, "trainer": 1})
    >>> plugin.device_for("loader")
    0
    >>> # client.register_plugin(PinDevice())
    """

    name = "arrow_gpu-pin-device"
    idempotent = False  # a new mapping replaces the old one

    def __init__(self, devices: Optional[Mapping[Union[str, int], int]] = None) -> None:
        self.devices = dict(devices) if devices is not None else None

    def device_for(self, worker_name: Union[str, int]) -> int:
        """The device number of the worker called ``worker_name``.

        Parameters
        ----------
        worker_name : str or int
            The worker's name (``Worker.name``).

        Returns
        -------
        int
            The device the worker uses.

        Raises
        ------
        ValueError
            If ``devices`` was given and lacks the worker.
        OSError
            If a device cannot be claimed (the claims' directory cannot be written).

        Examples
        --------
        >>> PinDevice({"loader": 0}).device_for("trainer")
        Traceback (most recent call last):
        ...
        ValueError: worker 'trainer' is not in PinDevice's devices (['loader']); add it
        """
        if self.devices is not None:
            if worker_name not in self.devices:
                raise ValueError(f"worker {worker_name!r} is not in PinDevice's devices "
                                 f"({sorted(map(str, self.devices))}); add it")
            return self.devices[worker_name]
        count = device_count()
        if count == 1:
            return 0
        if isinstance(worker_name, int):
            return worker_name % count
        return _claimed_device(count)

    def setup(self, worker: Worker) -> None:
        """Pin the process of ``worker`` to its device; distributed calls it on each worker.

        Parameters
        ----------
        worker : distributed.Worker
            The worker starting the plugin.

        Raises
        ------
        ValueError
            If ``device_for`` cannot tell the worker's device, or the process does not
            see that device.
        """
        set_worker_device(self.device_for(worker.name))


def dask_setup(worker: Worker) -> None:
    """Pin a worker started with ``--preload arrow_gpu.dask`` as ``PinDevice()`` does.

    distributed calls it when the worker starts.

    Parameters
    ----------
    worker : distributed.Worker
        The worker starting.

    Raises
    ------
    OSError
        If the process sees several devices and cannot claim one of them.
    """
    PinDevice().setup(worker)


_claim: Optional[Claim] = None
_claim_lock = threading.Lock()


def _claimed_device(count: int) -> int:
    """The device this process claimed among ``count``, claimed on first use and held for
    the process's life."""
    global _claim
    with _claim_lock:
        if _claim is None:
            _claim = claim_device(count)
        return _claim.device


def _host_identity() -> str:
    """This machine: its name and its boot (a reused name is caught too)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as file:
            boot = file.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


_HOST = _host_identity()


def _same_host(context: Optional[Mapping[str, Any]]) -> bool:
    """Whether the comm distributed is writing to ends on this host.

    TCP and TLS comms pass ``{"sender": {"address": ...}, "recipient": {"address": ...}}``;
    without both addresses (e.g. spilling to disk) the answer is no.
    """
    try:
        ends = [get_address_host(context[end]["address"])  # type: ignore[index]
                for end in ("sender", "recipient")]
    except (KeyError, TypeError, ValueError):
        return False
    if ends[0] == ends[1]:
        return True
    for host in ends:
        try:
            if ipaddress.ip_address(host).is_loopback:
                return True
        except ValueError:
            continue  # a name, not an address
    return False


# The exports of values this process has sent to another process on this host, by the id
# of the value. The receiver copies the data out while distributed's transfer handshake
# runs: the sender holds the value until the receiver has deserialized it and answered
# (worker to worker, and worker to client alike), and the value holds its export here,
# released when the value is (the scheduler keeps the key on the sender while dependents
# fetch it). A value sent to several receivers is exported once.
_exports: dict[int, SharedBatch] = {}
_exports_lock = threading.Lock()


def _export(value: Sendable, data: Union[pa.RecordBatch, pa.Table]) -> SharedBatch:
    key = id(value)
    with _exports_lock:
        shared = _exports.get(key)
        if shared is None:
            shared = export_batch(data)
            _exports[key] = shared
            weakref.finalize(value, _release, key)
    return shared


def _release(key: int) -> None:
    with _exports_lock:
        shared = _exports.pop(key, None)
    if shared is not None:
        shared.close()


# What a value of each registered class travels as, and what that kind is sent as.
_ARROW_KINDS = {Kind.ARRAY: "array", Kind.CHUNKED_ARRAY: "chunked", Kind.RECORD_BATCH: "batch",
                Kind.TABLE: "table"}
_KINDS: dict[type, str] = {**{kind.value: name for kind, name in _ARROW_KINDS.items()},
                           CudaBuffer: "buffer"}
_TABULAR = {"array": pa.RecordBatch, "buffer": pa.RecordBatch, "batch": pa.RecordBatch,
            "chunked": pa.Table, "table": pa.Table}
# The version of the headers this module writes, and the keys each way of sending has.
_VERSION = 1
_HEADER_KEYS = {"ipc": {"version", "kind", "via", "host"},
                "host": {"version", "kind", "via", "header"}}


def _kind(value: Sendable) -> str:
    kind = kind_of(value)
    return "buffer" if kind is None else _ARROW_KINDS[kind]


def _as_tabular(value: Sendable, kind: str) -> Union[pa.RecordBatch, pa.Table]:
    """The value as the batch or table that travels."""
    if kind == "buffer":
        value = pa.Array.from_buffers(pa.uint8(), value.size, [None, value])
        kind = "array"
    if kind == "array":
        return pa.RecordBatch.from_arrays([value], names=["values"])
    if kind == "chunked":
        return pa.Table.from_arrays([value], names=["values"])
    return value


def _refuse(problem: str) -> NoReturn:
    raise ValueError(f"cannot deserialize device data: {problem}; it was not written by "
                     "this version of arrow_gpu.dask (use the same arrow_gpu on every "
                     "process) or was altered")


def _checked_header(sent: Any, cls: type, frames: Frames) -> Header:
    """The arrow_gpu part of a header, if this module wrote it for a ``cls`` value."""
    if not isinstance(sent, dict) or sent.get("version") != _VERSION:
        _refuse(f"its header is not a version {_VERSION} arrow_gpu header")
    if sent.get("via") not in _HEADER_KEYS or set(sent) != _HEADER_KEYS[sent["via"]]:
        _refuse(f"its header has keys {sorted(map(str, sent))}")
    if sent["kind"] != _KINDS[cls]:
        _refuse(f"its header says {sent['kind']!r} but a {cls.__name__} is expected, "
                f"which is sent as {_KINDS[cls]!r}")
    if len(frames) != 1:
        _refuse(f"{len(frames)} frames came where 1 was sent")
    if sent["via"] == "host" and not isinstance(sent["header"], Mapping):
        _refuse("its header's host header is not a mapping")
    return sent


def _from_tabular(data: Union[pa.RecordBatch, pa.Table], kind: str) -> Sendable:
    """The value a batch or table that ``_as_tabular`` made for ``kind`` stands for."""
    if not isinstance(data, _TABULAR[kind]):
        _refuse(f"its frames hold a {type(data).__name__} where a {kind} travels as a "
                f"{_TABULAR[kind].__name__}")
    if kind in ("batch", "table"):
        return data
    if data.schema.names != ["values"]:
        _refuse(f"its frames hold columns {data.schema.names} where a {kind} travels as "
                "one column named 'values'")
    column = data.column(0)
    if kind == "buffer":
        if column.type != pa.uint8() or column.buffers()[0] is not None:
            _refuse(f"its frames hold {column.type} values where a buffer travels as "
                    "uint8 values without nulls")
        return CudaBuffer.from_buffer(column.buffers()[1])
    return column


# distributed's own serializers of host RecordBatches and Tables, used for host values.
_host_dumps: dict[type, Callable[[Any], tuple[Header, Frames]]] = {}
_host_loads: dict[type, Callable[[Header, Frames], Any]] = {}


def _dumps(value: Sendable, context: Optional[Mapping[str, Any]] = None
           ) -> tuple[Header, Frames]:
    kind = _kind(value)
    if value.is_cpu:
        if kind in ("batch", "table"):
            return _host_dumps[_TABULAR[kind]](value)
        raise NotImplementedError("host data: left to distributed's pickle serializer")
    data = _as_tabular(value, kind)
    if _same_host(context):
        shared = _export(value, data)
        return ({"arrow_gpu": {"version": _VERSION, "kind": kind, "via": "ipc", "host": _HOST}},
                [shared.payload])
    header, frames = _host_dumps[_TABULAR[kind]](to_host(data))
    return ({"arrow_gpu": {"version": _VERSION, "kind": kind, "via": "host", "header": header}},
            frames)


def _loader(cls: type) -> Callable[[Header, Frames], Any]:
    tabular_type = _TABULAR[_KINDS[cls]]

    def loads(header: Header, frames: Frames) -> Any:
        sent = header.get("arrow_gpu")
        if sent is None:
            if cls not in _host_loads:
                raise ValueError(f"cannot deserialize a {cls.__name__}: it was not sent by "
                                 "arrow_gpu.dask; import arrow_gpu.dask on the sender too")
            return _host_loads[cls](header, frames)
        sent = _checked_header(sent, cls, frames)
        ctx = Context(worker_device())
        if sent["via"] == "ipc":
            if sent["host"] != _HOST:
                raise ValueError(
                    f"device data was sent through CUDA IPC from host {sent['host']!r}, but "
                    f"this is {_HOST!r}: the two ends' addresses looked like one host; give "
                    "the processes addresses that tell the hosts apart")
            # Our own copy: the sender may free its export once we have answered.
            data = import_batch(frames[0], ctx, copy=True)
        else:
            data = to_device(_host_loads[tabular_type](sent["header"], frames), ctx)
        return _from_tabular(data, sent["kind"])

    return loads


def _register() -> None:
    # distributed registers its pyarrow serializers on the first lookup; look them up now,
    # so that they do not later replace these, and keep them for host data.
    for cls in (pa.RecordBatch, pa.Table):
        _host_dumps[cls] = dask_serialize.dispatch(cls)
        _host_loads[cls] = dask_deserialize.dispatch(cls)
    for cls in _KINDS:
        dask_serialize.register(cls, _dumps)
        dask_deserialize.register(cls, _loader(cls))
    # Dask's default size of an Array or RecordBatch reads its data, which device data
    # refuses: count the device buffers as dask counts a Table's.
    default_sizeof = sizeof.dispatch(pa.Array)

    @sizeof.register(pa.Array)
    def _sizeof_array(array: pa.Array) -> int:
        if array.is_cpu:
            return int(default_sizeof(array))
        return int(sizeof(pa.chunked_array([array], type=array.type)))

    @sizeof.register(pa.RecordBatch)
    def _sizeof_batch(batch: pa.RecordBatch) -> int:
        if batch.is_cpu:
            return int(default_sizeof(batch))
        return int(sizeof(pa.Table.from_batches([batch])))


_register()
