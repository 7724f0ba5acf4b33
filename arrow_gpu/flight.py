"""Arrow Flight to and from device memory: ``do_get`` onto the device, ``do_put`` from it,
and ``DeviceTableServer``, a Flight server of device-resident tables.

Flight itself moves host batches; these helpers copy each batch between host and device as
it passes, while the next one is on the network.

>>> import pyarrow as pa
>>> import pyarrow.flight as flight
>>> from arrow_gpu import to_device, to_host
>>> table = pa.table({"x": [1, 2, 3], "s": ["a", None, "c"]})
>>> with DeviceTableServer() as server:
...     client = flight.connect(f"grpc://127.0.0.1:{server.port}")
...     do_put(client, "numbers", to_device(table))  # device batches, sent from the host
...     on_device = do_get(client, "numbers")         # and back, batch by batch, to the device
...     client.close()
>>> on_device.is_cpu, to_host(on_device).equals(table)
(False, True)
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from typing import Any, Optional, Union

import pyarrow as pa
import pyarrow.flight as flight

from arrow_gpu._util.arrow_data import Kind, kind_of
from arrow_gpu.device import Context, DeviceLike, as_context
from arrow_gpu.transfer import to_device, to_host

__all__ = ["DeviceTableServer", "do_get", "do_put", "iter_get"]

_log = logging.getLogger(__name__)

#: A table's name on the wire: a Ticket for do_get, a FlightDescriptor for do_put, or the
#: name itself (``str`` or ``bytes``: the ticket, or a one-element descriptor path).
Name = Union[str, bytes]


def _ticket(ticket: Union[flight.Ticket, Name]) -> flight.Ticket:
    if isinstance(ticket, flight.Ticket):
        return ticket
    if isinstance(ticket, (str, bytes)):
        return flight.Ticket(ticket)
    raise TypeError(f"ticket must be a pyarrow.flight.Ticket, str or bytes, got "
                    f"'{type(ticket).__name__}'")


def _descriptor(descriptor: Union[flight.FlightDescriptor, Name]) -> flight.FlightDescriptor:
    if isinstance(descriptor, flight.FlightDescriptor):
        return descriptor
    if isinstance(descriptor, (str, bytes)):
        return flight.FlightDescriptor.for_path(descriptor)
    raise TypeError(f"descriptor must be a pyarrow.flight.FlightDescriptor, str or bytes, got "
                    f"'{type(descriptor).__name__}'")


def _check_client(client: Any) -> None:
    if not isinstance(client, flight.FlightClient):
        raise TypeError(f"client must be a pyarrow.flight.FlightClient (flight.connect(...)), "
                        f"got '{type(client).__name__}'")


_END = object()


def _device_batches(reader: Any, device: Context) -> Iterator[pa.RecordBatch]:
    """The reader's batches, copied to ``device``: a thread receives batch n + 1 (the
    network) while batch n is copied to the device."""
    arrived: queue.Queue[Any] = queue.Queue(maxsize=2)
    stop = threading.Event()

    def hand_over(item: Any) -> bool:
        while not stop.is_set():
            try:
                arrived.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def receive() -> None:
        try:
            while True:
                try:
                    chunk = reader.read_chunk()
                except StopIteration:
                    break
                if not hand_over(chunk.data):
                    return
            hand_over(_END)
        except BaseException as error:  # noqa: B036 - handed to the consumer, raised there
            hand_over(error)

    receiver = threading.Thread(target=receive, name="arrow_gpu-flight-get", daemon=True)
    receiver.start()
    finished = False
    try:
        while True:
            item = arrived.get()
            if item is _END:
                finished = True
                return
            if isinstance(item, BaseException):
                finished = True
                raise item
            yield to_device(item, device)
    finally:
        stop.set()
        if not finished:
            reader.cancel()  # the consumer stopped early: unblock a read in progress
        receiver.join()


def _open(client: Any, ticket: Union[flight.Ticket, Name],
          options: Optional[flight.FlightCallOptions]) -> Any:
    _check_client(client)
    return client.do_get(_ticket(ticket), options)


def iter_get(client: flight.FlightClient, ticket: Union[flight.Ticket, Name],
             device: DeviceLike = 0, *,
             options: Optional[flight.FlightCallOptions] = None) -> Iterator[pa.RecordBatch]:
    """The record batches of a Flight ``do_get`` stream, each copied to ``device`` as it
    arrives (the next one is received meanwhile).

    Stopping early cancels the stream.

    Parameters
    ----------
    client : pyarrow.flight.FlightClient
        A connected client.
    ticket : pyarrow.flight.Ticket, str or bytes
        What to get; a str or bytes is the ticket's content.
    device : DeviceLike, default 0
        Where the batches go, in any spelling ``arrow_gpu.device.as_context`` accepts.
    options : pyarrow.flight.FlightCallOptions, optional
        Options of the call.

    Yields
    ------
    pyarrow.RecordBatch
        Each batch of the stream, on the device.

    Raises
    ------
    TypeError
        If ``client``, ``ticket`` or ``device`` is of the wrong type (on the first
        ``next``: this is a generator).
    pyarrow.ArrowException
        What the call raises: a server's error comes as the matching pyarrow error
        (``pyarrow.flight.FlightError`` subclasses among them).

    Examples
    --------
    >>> import pyarrow as pa, pyarrow.flight as flight
    >>> with DeviceTableServer() as server:
    ...     server.tables[b"t"] = pa.table({"x": list(range(10))})
    ...     client = flight.connect(f"grpc://127.0.0.1:{server.port}")
    ...     print([batch.is_cpu for batch in iter_get(client, "t")])
    ...     client.close()
    [False]
    """
    context = as_context(device)
    reader = _open(client, ticket, options)
    yield from _device_batches(reader, context)


def do_get(client: flight.FlightClient, ticket: Union[flight.Ticket, Name],
           device: DeviceLike = 0, *,
           options: Optional[flight.FlightCallOptions] = None) -> pa.Table:
    """A Flight ``do_get`` stream as a device Table: ``iter_get``'s batches, collected.

    Parameters
    ----------
    client : pyarrow.flight.FlightClient
        A connected client.
    ticket : pyarrow.flight.Ticket, str or bytes
        What to get; a str or bytes is the ticket's content.
    device : DeviceLike, default 0
        Where the table goes, in any spelling ``arrow_gpu.device.as_context`` accepts.
    options : pyarrow.flight.FlightCallOptions, optional
        Options of the call.

    Returns
    -------
    pyarrow.Table
        The stream's batches, one chunk each, on the device.

    Raises
    ------
    TypeError
        If ``client``, ``ticket`` or ``device`` is of the wrong type.
    pyarrow.ArrowException
        What Flight raises for the call (``pyarrow.flight.FlightError`` subclasses); a
        server's own error comes as the matching pyarrow error, e.g. a table that
        ``DeviceTableServer`` lacks as ``pyarrow.ArrowKeyError`` (a ``KeyError``).

    Examples
    --------
    >>> import pyarrow as pa, pyarrow.flight as flight
    >>> with DeviceTableServer() as server:
    ...     server.tables[b"t"] = pa.table({"x": [1, 2, 3]})
    ...     client = flight.connect(f"grpc://127.0.0.1:{server.port}")
    ...     table = do_get(client, b"t", device=0)
    ...     client.close()
    >>> table.num_rows, table.column(0).chunk(0).is_cpu
    (3, False)
    """
    context = as_context(device)
    reader = _open(client, ticket, options)
    return pa.Table.from_batches(list(_device_batches(reader, context)), schema=reader.schema)


def do_put(client: flight.FlightClient,
           descriptor: Union[flight.FlightDescriptor, Name],
           data: Union[pa.Table, pa.RecordBatch], *,
           max_chunksize: Optional[int] = None,
           options: Optional[flight.FlightCallOptions] = None) -> None:
    """Send a Table or RecordBatch (on the device or the host) with Flight ``do_put``.

    Each batch (of at most ``max_chunksize`` rows, if given) is copied to the host and
    written before the next is copied, so host memory holds one batch at a time.

    Parameters
    ----------
    client : pyarrow.flight.FlightClient
        A connected client.
    descriptor : pyarrow.flight.FlightDescriptor, str or bytes
        Where to put the data; a str or bytes is a one-element path.
    data : pyarrow.Table or pyarrow.RecordBatch
        The data, on the device or on the host.
    max_chunksize : int, optional
        The most rows per batch sent (a Table's batches are split); no limit if omitted.
    options : pyarrow.flight.FlightCallOptions, optional
        Options of the call.

    Raises
    ------
    TypeError
        If ``client``, ``descriptor`` or ``data`` is of the wrong type.
    pyarrow.ArrowException
        What Flight raises for the call (``pyarrow.flight.FlightError`` subclasses); a
        server's own error comes as the matching pyarrow error.

    Examples
    --------
    >>> import pyarrow as pa, pyarrow.flight as flight
    >>> from arrow_gpu import to_device
    >>> with DeviceTableServer() as server:
    ...     client = flight.connect(f"grpc://127.0.0.1:{server.port}")
    ...     do_put(client, "t", to_device(pa.table({"x": [1, 2, 3]})), max_chunksize=2)
    ...     client.close()
    ...     [batch.num_rows for batch in server.tables[b"t"].to_batches()]
    [2, 1]
    """
    _check_client(client)
    kind = kind_of(data)
    if kind is Kind.RECORD_BATCH:
        batches = [data]
    elif kind is Kind.TABLE:
        batches = data.to_batches(max_chunksize)
    else:
        raise TypeError(f"data must be a pyarrow Table or RecordBatch, got "
                        f"'{type(data).__name__}'")
    writer, _ = client.do_put(_descriptor(descriptor), data.schema, options)
    with writer:
        for batch in batches:
            writer.write_batch(to_host(batch))


class DeviceTableServer(flight.FlightServerBase):
    """A Flight server of device-resident tables, by name.

    ``do_get`` with a table's name as ticket streams it, each batch copied to the host as it
    is sent; ``do_put`` to a one-element path descriptor stores the received table on
    ``device``. ``tables`` maps names (bytes) to tables; add device tables to serve them.
    ``max_chunksize`` (rows) splits large batches, so that clients can overlap receiving
    and copying; other keyword arguments go to ``pyarrow.flight.FlightServerBase``.
    Use it as a context manager, or call ``shutdown()``; either drops the tables.

    Parameters
    ----------
    location : str, default "grpc://127.0.0.1:0"
        Where to listen; port 0 picks a free port (see ``port``).
    device : DeviceLike, default 0
        Where put tables are stored, in any spelling ``arrow_gpu.device.as_context``
        accepts.
    max_chunksize : int, optional
        The most rows per batch sent by ``do_get``; no limit if omitted.
    **kwargs
        Passed to ``pyarrow.flight.FlightServerBase``.

    Attributes
    ----------
    device : Context
        Where put tables are stored.
    tables : dict of bytes to pyarrow.Table
        The tables served, by name.

    Raises
    ------
    TypeError
        If ``device`` is not a spelling of a device.
    ValueError
        If ``device`` is a pyarrow MemoryManager or Device that is not CUDA's, or no
        device has that number (``pyarrow.ArrowInvalid``).

    Examples
    --------
    >>> import pyarrow as pa, pyarrow.flight as flight
    >>> from arrow_gpu import to_device
    >>> with DeviceTableServer("grpc://127.0.0.1:0", device=0) as server:
    ...     server.tables[b"t"] = to_device(pa.table({"x": [1, 2]}))
    ...     client = flight.connect(f"grpc://127.0.0.1:{server.port}")
    ...     print(client.do_get(flight.Ticket(b"t")).read_all().to_pydict())  # a host client
    ...     client.close()
    {'x': [1, 2]}
    """

    def __init__(self, location: str = "grpc://127.0.0.1:0", device: DeviceLike = 0, *,
                 max_chunksize: Optional[int] = None, **kwargs: Any) -> None:
        self.device = as_context(device)  # a bad device fails here, not on every put
        super().__init__(location, **kwargs)
        self.max_chunksize = max_chunksize
        self.tables: dict[bytes, pa.Table] = {}

    # A stopped server drops its tables, freeing their device memory: pyarrow may keep the
    # server object alive after it stops (pyarrow 23 does), and its __exit__ does not go
    # through a subclass's shutdown().
    def shutdown(self) -> None:
        """Stop serving (in-flight calls finish first) and drop the tables.

        Examples
        --------
        >>> import pyarrow as pa
        >>> server = DeviceTableServer()
        >>> server.tables[b"t"] = pa.table({"x": [1]})
        >>> server.shutdown()
        >>> server.tables
        {}
        """
        super().shutdown()
        self.tables.clear()

    def __exit__(self, *exc_info: Any) -> None:
        super().__exit__(*exc_info)
        self.tables.clear()

    # Clients see only errors that name what they asked for: pyarrow sends any exception
    # other than a FlightError with the server's traceback, and a list of the tables would
    # tell any client every name on the server. The details go to this module's logger.

    @staticmethod
    def _asked(name: bytes) -> str:
        """What a client asked for, as its errors name it (long names cut)."""
        shown = repr(name)
        return shown if len(shown) <= 200 else shown[:200] + "..."

    def _table(self, name: bytes) -> pa.Table:
        try:
            return self.tables[name]
        except KeyError:
            raise flight.FlightServerError(f"no table named {self._asked(name)}") from None

    def _sent(self, name: bytes, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        try:
            for batch in batches:
                yield to_host(batch)
        except Exception as error:
            _log.exception("sending table %s failed", self._asked(name))
            raise flight.FlightInternalError(
                f"the server failed to send table {self._asked(name)}") from error

    def do_get(self, context: flight.ServerCallContext,
               ticket: flight.Ticket) -> flight.FlightDataStream:
        """Stream the table named by the ticket; Flight calls it for a client's ``do_get``.

        Parameters
        ----------
        context : pyarrow.flight.ServerCallContext
            The call.
        ticket : pyarrow.flight.Ticket
            The table's name.

        Returns
        -------
        pyarrow.flight.FlightDataStream
            The table's batches (of at most ``max_chunksize`` rows), each copied to the host
            as it is sent.

        Raises
        ------
        pyarrow.flight.FlightServerError
            If no table has that name; the message names the ticket and nothing else.
        pyarrow.flight.FlightInternalError
            If a batch cannot be sent (the details are logged on the server).
        """
        table = self._table(ticket.ticket)
        batches = table.to_batches(self.max_chunksize)
        return flight.GeneratorStream(table.schema, self._sent(ticket.ticket, iter(batches)))

    def do_put(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor,
               reader: flight.MetadataRecordBatchReader,
               writer: flight.FlightMetadataWriter) -> None:
        """Store the table a client puts on ``device``; Flight calls it for ``do_put``.

        A table of the same name is replaced.

        Parameters
        ----------
        context : pyarrow.flight.ServerCallContext
            The call.
        descriptor : pyarrow.flight.FlightDescriptor
            A one-element path: the table's name.
        reader : pyarrow.flight.MetadataRecordBatchReader
            The batches sent.
        writer : pyarrow.flight.FlightMetadataWriter
            Unused.

        Raises
        ------
        pyarrow.flight.FlightServerError
            If ``descriptor`` is not a one-element path.
        pyarrow.flight.FlightInternalError
            If the table cannot be stored (the details are logged on the server).
        """
        if descriptor.descriptor_type != flight.DescriptorType.PATH or len(descriptor.path) != 1:
            raise flight.FlightServerError("put a table with a one-element path descriptor "
                                           "(its name)")
        name = descriptor.path[0]
        try:
            batches = [to_device(chunk.data, self.device) for chunk in reader]
        except Exception as error:
            _log.exception("storing table %s failed", self._asked(name))
            raise flight.FlightInternalError(
                f"the server failed to store table {self._asked(name)}") from error
        self.tables[name] = pa.Table.from_batches(batches, schema=reader.schema)
